"""``kpe completion bash|zsh``: a shell completion script made from kpe's own argument parser
(its commands, their options and the values an option allows), so it offers exactly what this
kpe accepts and cannot fall behind a new command or flag.

Written here rather than taken from a library: the parser is one level of commands whose
options take at most one kind of value, and the settings' allowed values (``kpe serve
--log-level``) are not argparse ``choices`` (the ``KPE_*`` variables need the same check, so
``Settings.validate`` makes it) but show as ``{a,b}`` in the help, which is read here too.
"""

from __future__ import annotations

import argparse
import functools
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TextIO

from server.settings import EXIT_OK, exit_codes

SHELLS = ("bash", "zsh")
EXIT_CODES = exit_codes("the script was printed", None, "usage errors (a shell other than bash or zsh)")
# What compgen -W and zsh's (a b) lists take without quoting; compgen expands its word list again.
_PLAIN_WORD = re.compile(r"[A-Za-z0-9_.,:/+@%=-]+")


@dataclass(frozen=True)
class Option:
    names: tuple[str, ...]
    takes_value: bool
    choices: tuple[str, ...]
    repeatable: bool
    help: str
    metavar: str


@dataclass(frozen=True)
class Command:
    name: str
    help: str
    options: tuple[Option, ...]
    positional: Option | None  # the first positional argument (every kpe command has at most one kind)


def _choices(action: argparse.Action) -> tuple[str, ...]:
    if action.choices is not None:
        return tuple(str(c) for c in action.choices)
    metavar = action.metavar if isinstance(action.metavar, str) else ""
    shown = re.fullmatch(r"\{([^{}]+)\}", metavar)  # argparse's own way of showing choices
    return tuple(shown.group(1).split(",")) if shown else ()


def _option(action: argparse.Action) -> Option:
    metavar = action.metavar if isinstance(action.metavar, str) else (action.dest.upper() if action.option_strings else action.dest)
    return Option(
        names=tuple(action.option_strings),
        takes_value=action.nargs != 0,
        choices=_choices(action),
        repeatable=isinstance(action, argparse._AppendAction) or action.nargs in ("+", "*"),
        help=" ".join(str(action.help or "").replace("%%", "%").split()),
        metavar=metavar,
    )


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))


def read_parser(parser: argparse.ArgumentParser) -> tuple[tuple[Option, ...], list[Command]]:
    """kpe's own options, and each command's."""
    sub = _subparsers(parser)
    helps = {choice.dest: str(choice.help or "") for choice in sub._choices_actions}
    commands = []
    for name, command in sub.choices.items():
        options = tuple(_option(a) for a in command._actions if a.option_strings)
        positionals = [_option(a) for a in command._actions if not a.option_strings]
        commands.append(Command(name, helps.get(name, ""), options, positionals[0] if positionals else None))
    return tuple(_option(a) for a in parser._actions if a.option_strings and a is not sub), commands


def _words(words: Iterable[str]) -> str:
    listed = list(words)
    odd = [w for w in listed if not _PLAIN_WORD.fullmatch(w)]
    if odd:
        raise ValueError(f"completion cannot offer {odd!r}: only plain words")
    return " ".join(listed)


# -- bash --------------------------------------------------------------------------------


BASH_HEAD = """\
# bash completion for kpe, made by `kpe completion bash` from kpe's own options.
# Load it in ~/.bashrc with: eval "$(kpe completion bash)"
# or save it as ~/.local/share/bash-completion/completions/kpe
_kpe() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} command="" i
    # bash splits --option=value at the "=": complete the value of the option before it.
    if [[ $cur == "=" ]]; then
        cur=""
    elif [[ $prev == "=" && $COMP_CWORD -ge 2 ]]; then
        prev=${COMP_WORDS[COMP_CWORD-2]}
    fi
    # kpe's own options take no value, so the first other word is the command.
    for ((i = 1; i < COMP_CWORD; i++)); do
        if [[ ${COMP_WORDS[i]} != -* ]]; then
            command=${COMP_WORDS[i]}
            break
        fi
    done
    COMPREPLY=()
    case $command in
"""

BASH_TAIL = """\
    esac
}
# -o default: where kpe offers nothing (a file, a number, a URL), bash completes file names.
complete -o default -F _kpe kpe
"""


def _compgen(words: Iterable[str]) -> str:
    return f'COMPREPLY=($(compgen -W {shlex.quote(_words(words))} -- "$cur"))'


def _bash_command(pattern: str, options: tuple[Option, ...], positional: Option | None, *, commands: list[str] | None = None) -> list[str]:
    lines = [f"        {pattern})"]
    listed = [o for o in options if o.takes_value and o.choices]
    unlisted = [n for o in options if o.takes_value and not o.choices for n in o.names]
    if listed or unlisted:
        lines.append('            case $prev in')
        for option in listed:
            lines.append(f"                {'|'.join(option.names)}) {_compgen(option.choices)}; return ;;")
        if unlisted:  # a file, a number, a URL: nothing kpe can list, so bash's own file names
            lines.append(f"                {'|'.join(unlisted)}) return ;;")
        lines.append("            esac")
    names = [n for o in options for n in o.names]
    lines.append(f'            if [[ $cur == -* ]]; then {_compgen(names)}; return; fi')
    if commands is not None:
        lines.append(f"            {_compgen(commands)}")
    elif positional is not None and positional.choices:
        lines.append(f"            {_compgen(positional.choices)}")
    lines.append("            ;;")
    return lines


def bash_script(parser: argparse.ArgumentParser) -> str:
    own, commands = read_parser(parser)
    lines = _bash_command('""', own, None, commands=[c.name for c in commands])
    for command in commands:
        lines += _bash_command(shlex.quote(command.name), command.options, command.positional)
    return BASH_HEAD + "\n".join(lines) + "\n" + BASH_TAIL


# -- zsh ---------------------------------------------------------------------------------


def _zsh_quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def _zsh_help(text: str) -> str:
    """The first clause of a help text, short enough for one line of zsh's menu, escaped for
    the [...] of an _arguments spec."""
    first = re.split(r"; |: | \[env ", re.sub(r"\s*\([^()]*\)", "", text), maxsplit=1)[0]
    first = first if len(first) <= 70 else first[:67].rsplit(" ", 1)[0] + "..."
    return first.replace("\\", "\\\\").replace("[", "\\[").replace("]", "\\]")


def _zsh_value(option: Option) -> str:
    # A settings flag shows its choices as its metavar ({a,b}): name the value after the flag.
    message = option.names[-1].lstrip("-") if option.metavar.startswith("{") else option.metavar
    # No list of values: the shell's file names, as bash's -o default gives them.
    return f":{message}:({_words(option.choices)})" if option.choices else f":{message}:_files"


def _zsh_option(option: Option) -> str:
    value = _zsh_value(option) if option.takes_value else ""
    described = (f"[{_zsh_help(option.help)}]" if option.help else "") + value
    repeat = "*" if option.repeatable and option.takes_value else ""
    if len(option.names) == 1:
        return _zsh_quote(f"{repeat}{option.names[0]}{described}")
    exclusive = f"({' '.join(option.names)})" if not repeat else ""
    return _zsh_quote(f"{exclusive}{repeat}") + "{" + ",".join(option.names) + "}" + _zsh_quote(described)


def _zsh_positional(option: Option) -> str:
    many = "*" if option.repeatable else ""
    message = option.metavar.replace(":", " ")
    if option.choices:
        return _zsh_quote(f"{many}:{message}:({_words(option.choices)})")
    if option.metavar in ("PATH", "FILE"):
        return _zsh_quote(f"{many}:{message}:_files")
    return _zsh_quote(f"{many}:{message}: ")


def zsh_script(parser: argparse.ArgumentParser) -> str:
    own, commands = read_parser(parser)
    lines = [
        "#compdef kpe",
        "# zsh completion for kpe, made by `kpe completion zsh` from kpe's own options.",
        "# Save it as _kpe in a folder on $fpath before compinit runs, e.g. in ~/.zshrc:",
        "#   fpath=(~/.zfunc $fpath); autoload -Uz compinit; compinit",
        "# after: kpe completion zsh > ~/.zfunc/_kpe",
        "# Or load it in a running shell (after compinit): source <(kpe completion zsh)",
        "",
        "_kpe() {",
        "  local curcontext=$curcontext state line",
        "  typeset -A opt_args",
        "  _arguments -C \\",
    ]
    for option in own:  # --help and --version: nothing else goes with them
        names = option.names[0] if len(option.names) == 1 else "{" + ",".join(option.names) + "}"
        lines.append(f"    {_zsh_quote('(- : *)')}{names}{_zsh_quote(f'[{_zsh_help(option.help)}]')} \\")
    lines += [
        "    ': :->command' \\",
        "    '*:: :->argument'",
        "  case $state in",
        "    command)",
        "      local -a commands",
        "      commands=(",
        *(f"        {_zsh_quote(c.name + ':' + _zsh_help(c.help).replace(':', ' '))}" for c in commands),
        "      )",
        "      _describe -t commands 'kpe command' commands",
        "      ;;",
        "    argument)",
        "      curcontext=${curcontext%:*:*}:kpe-$words[1]:",
        "      case $words[1] in",
    ]
    for command in commands:
        specs = [_zsh_option(o) for o in command.options]
        if command.positional is not None:
            specs.append(_zsh_positional(command.positional))
        lines.append(f"        {shlex.quote(command.name)})")
        lines.append("          _arguments \\")
        lines += [f"            {spec} \\" for spec in specs[:-1]]
        lines.append(f"            {specs[-1]}")
        lines.append("          ;;")
    lines += [
        "      esac",
        "      ;;",
        "  esac",
        "}",
        "",
        "# Autoloaded from $fpath, this file is _kpe itself, called to complete; sourced, it registers _kpe.",
        'if [[ $funcstack[1] == _kpe ]]; then',
        '  _kpe "$@"',
        "else",
        "  compdef _kpe kpe",
        "fi",
    ]
    return "\n".join(lines) + "\n"


# -- the command -------------------------------------------------------------------------


def cmd_completion(parser: argparse.ArgumentParser, args: argparse.Namespace, out: TextIO) -> int:
    out.write(bash_script(parser) if args.shell == "bash" else zsh_script(parser))
    return EXIT_OK


def add_completion_command(sub: argparse._SubParsersAction[argparse.ArgumentParser], parser: argparse.ArgumentParser) -> None:
    """``parser``: kpe's whole parser, complete by the time the command runs."""
    completion = sub.add_parser(
        "completion",
        help="print a shell completion script for kpe",
        description="Print a completion script for bash or zsh, made from kpe's own commands and options: "
        'eval "$(kpe completion bash)" in ~/.bashrc; for zsh, save kpe completion zsh as _kpe in a folder on $fpath.',
        epilog=EXIT_CODES,
    )
    completion.add_argument("shell", choices=SHELLS, help="the shell to complete kpe in")
    completion.set_defaults(run=functools.partial(cmd_completion, parser))
