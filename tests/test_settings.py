"""Settings: one dataclass, KPE_* variables and CLI flags that map 1:1."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass, field, fields

import pytest

from server.settings import Settings, add_arguments, env_name, grouped_fields, load_settings
from server.telemetry.logs import configure


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args(argv)


def test_every_field_has_a_flag_an_environment_variable_and_help() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    flags = {a.dest: a for a in parser._actions if a.dest != "help"}
    for f in fields(Settings):
        assert f.name in flags
        assert f.metadata["help"]
        assert env_name(f.name) in (flags[f.name].help or "")


def test_flags_win_over_environment_and_environment_over_defaults() -> None:
    env = {"KPE_PORT": "9000", "KPE_PREFIX": "/ext", "KPE_LOG_DECISIONS": "true"}
    settings = load_settings(parse(["--port", "9100"]), environ=env)
    assert (settings.port, settings.prefix, settings.log_decisions) == (9100, "/ext", True)
    assert load_settings(parse([]), environ={}).port == Settings().port


def test_bad_values_say_which_setting_is_wrong() -> None:
    with pytest.raises(ValueError, match="KPE_LOG_DECISIONS: expected true or false"):
        load_settings(parse([]), environ={"KPE_LOG_DECISIONS": "maybe"})
    with pytest.raises(ValueError, match="--port: expected a number, got 'eighty'"):
        load_settings(parse(["--port", "eighty"]), environ={})
    assert Settings(policies="policies", cluster="sometimes").validate() == ["--cluster must be auto, on or off, not 'sometimes'"]


def test_settings_with_a_fixed_set_of_values_refuse_others_naming_the_allowed_ones() -> None:
    settings = Settings(policies="policies", cluster="sometimes", webhook_on_error="ignore", log_level="verbose")
    assert settings.validate() == [
        "--cluster must be auto, on or off, not 'sometimes'",
        "--log-level must be debug, info, warning or error, not 'verbose'",
        "--webhook-on-error must be allow or deny, not 'ignore'",
    ]


def test_a_setting_without_a_group_is_listed_with_the_one_above_it() -> None:
    @dataclass(frozen=True)
    class Example:
        first: str = field(default="", metadata={"help": "no group, and nothing above"})
        port: int = field(default=0, metadata={"group": "listening and TLS", "help": "a port"})
        added: int = field(default=0, metadata={"help": "added later, without a group"})
        custom: int = field(default=0, metadata={"group": "something new", "help": "a group kpe does not list"})

    names = [(group, [f.name for f in members]) for group, members in grouped_fields(Example)]
    assert names == [("policies", ["first"]), ("listening and TLS", ["port", "added"]), ("something new", ["custom"])]
    listed = [f.name for _, members in grouped_fields() for f in members]
    assert sorted(listed) == sorted(f.name for f in fields(Settings))


@contextlib.contextmanager
def logging_restored() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    levels = {name: logging.getLogger(name).level for name in ("httpx", "watchfiles", "uvicorn.access")}
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, saved in levels.items():
            logging.getLogger(name).setLevel(saved)


def test_api_calls_and_file_events_are_logged_only_at_debug_level(capsys: pytest.CaptureFixture[str]) -> None:
    def logged() -> list[str]:
        logging.getLogger("httpx").info('HTTP Request: GET https://10.0.0.1/api/v1/nodes "HTTP/1.1 200 OK"')
        logging.getLogger("watchfiles.main").info("3 changes detected")
        logging.getLogger("kpe.server").info("kpe serving")
        return [json.loads(line)["msg"] for line in capsys.readouterr().err.splitlines()]

    with logging_restored():
        configure("info")
        assert logged() == ["kpe serving"]
        configure("debug")
        assert logged() == ['HTTP Request: GET https://10.0.0.1/api/v1/nodes "HTTP/1.1 200 OK"', "3 changes detected", "kpe serving"]
