"""Settings: one dataclass, KPE_* variables and CLI flags that map 1:1."""

from __future__ import annotations

import argparse
from dataclasses import fields

import pytest

from server.settings import Settings, add_arguments, env_name, load_settings


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
    assert Settings(cluster="sometimes").validate() == ["--cluster must be auto, on or off, not 'sometimes'"]
