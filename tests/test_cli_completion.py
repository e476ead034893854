"""``kpe completion bash|zsh``: the scripts are valid, and bash, sourcing the one kpe prints,
completes what kpe's parser has, no more and no less."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from server.cli.main import build_parser

ROOT = Path(__file__).resolve().parent.parent


def printed(shell: str) -> str:
    done = subprocess.run([sys.executable, "-m", "server.cli", "completion", shell], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("completion") / "kpe.bash"
    path.write_text(printed("bash"))
    return path


def complete(script: Path, *lines: list[str]) -> list[list[str]]:
    """COMPREPLY for each command line (its last word the one being completed), from one bash
    that sourced ``script`` as a user's shell does."""
    calls = []
    for words in lines:
        quoted = " ".join("'" + w.replace("'", "'\\''") + "'" for w in words)
        calls.append(f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; _kpe; printf '%s\\n' \"${{COMPREPLY[*]}}\"")
    done = subprocess.run(["bash", "--norc", "--noprofile", "-c", f"source {script}\n" + "\n".join(calls)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return [line.split() for line in done.stdout.split("\n")[: len(lines)]]


def test_the_bash_script_is_valid_bash(bash_script: Path) -> None:
    done = subprocess.run(["bash", "-n", str(bash_script)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")


def test_bash_completes_a_command_an_option_and_an_allowed_value(bash_script: Path) -> None:
    assert complete(
        bash_script,
        ["kpe", "ch"],
        ["kpe", "check", "--o"],
        ["kpe", "check", "--output", "j"],
        ["kpe", "explain", "--output", ""],
        ["kpe", "serve", "--log-level", "w"],  # a setting's values, shown as {debug,...} in its help
        ["kpe", "serve", "--log-level", "=", "d"],  # --log-level=d, as bash splits it
        ["kpe", "completion", ""],
        ["kpe", "--v"],
        ["kpe", "check", "policies", "--st"],
    ) == [["check"], ["--output"], ["json"], ["table", "json", "markdown"], ["warning"], ["debug"], ["bash", "zsh"], ["--version"], ["--strict"]]


def test_bash_leaves_files_and_free_values_to_its_own_file_name_completion(bash_script: Path) -> None:
    assert complete(bash_script, ["kpe", "explain", "--pod", ""], ["kpe", "check", ""], ["kpe", "diff", "--sample", ""]) == [[], [], []]
    done = subprocess.run(["bash", "--norc", "-c", f"source {bash_script}; complete -p kpe"], capture_output=True, text=True, timeout=60)
    assert done.stdout == "complete -o default -F _kpe kpe\n"


def parser_commands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_bash_offers_every_command_and_every_option_of_each_and_nothing_else(bash_script: Path) -> None:
    commands = parser_commands()
    lines = [["kpe", ""], ["kpe", "-"], *(["kpe", name, "-"] for name in commands)]
    offered = complete(bash_script, *lines)
    assert offered[0] == list(commands)
    assert sorted(offered[1]) == ["--help", "--version", "-h"]
    for name, words in zip(commands, offered[2:]):
        options = sorted(o for action in commands[name]._actions for o in action.option_strings)
        assert sorted(words) == options, name


def test_the_zsh_script_is_valid_zsh_and_registers_itself_for_kpe(tmp_path: Path) -> None:
    if shutil.which("zsh") is None:
        pytest.skip("zsh is not installed")
    script = printed("zsh")
    assert script.startswith("#compdef kpe\n")
    (tmp_path / "_kpe").write_text(script)
    done = subprocess.run(["zsh", "-n", str(tmp_path / "_kpe")], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stderr) == (0, "")
    # Both ways the script says to load it: from $fpath by compinit, or sourced after it.
    for load in (f"fpath=({tmp_path} $fpath); autoload -Uz compinit; compinit -u -D", f"autoload -Uz compinit; compinit -u -D; source {tmp_path / '_kpe'}"):
        done = subprocess.run(["zsh", "-f", "-c", f"{load}; print -r -- $_comps[kpe]"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert (done.stdout, done.stderr) == ("_kpe\n", ""), load


def test_the_zsh_script_names_each_command_and_the_values_it_allows() -> None:
    script = printed("zsh")
    for name in parser_commands():
        assert f"\n        {name})\n          _arguments \\\n" in script
    assert "'--log-level[the least severe level logged]:log-level:(debug info warning error)'" in script
    assert "'--output:OUTPUT:(text json)'" in script and "':shell:(bash zsh)'" in script
