#!/usr/bin/env python3
"""Generate the reference pages from their sources, so they cannot drift:

- docs/reference/policy.md   from schemas/schedulingpolicy-v1alpha1.json
- docs/reference/reservation.md from schemas/reservation-v1alpha1.json
- docs/reference/settings.md from server/settings.py (the Settings dataclass)
- docs/reference/cli.md      from server/cli/main.py (the ``kpe`` command's argument parser)

    python docs/gen_reference.py          # rewrite them
    python docs/gen_reference.py --check  # exit 1 if one is out of date (CI)

tests/test_docs.py runs the same rendering and fails when a file differs.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from dataclasses import MISSING, Field, dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

SCHEMA = ROOT / "schemas" / "schedulingpolicy-v1alpha1.json"
POLICY_MD = ROOT / "docs" / "reference" / "policy.md"
RESERVATION_SCHEMA = ROOT / "schemas" / "reservation-v1alpha1.json"
RESERVATION_MD = ROOT / "docs" / "reference" / "reservation.md"
SETTINGS_MD = ROOT / "docs" / "reference" / "settings.md"
CLI_MD = ROOT / "docs" / "reference" / "cli.md"

Schema = dict[str, Any]


# -- policy schema ------------------------------------------------------------------


@dataclass(frozen=True)
class FieldDoc:
    path: str  # spec.filters[].expression
    type: str
    required: bool
    default: str
    allowed: str
    description: str


def resolve(node: Schema, root: Schema) -> Schema:
    """``node`` with its ``$ref`` merged in; the node's own keys win (a field's
    description is more specific than its definition's)."""
    ref = node.get("$ref")
    if not ref:
        return node
    target: Any = root
    for part in ref.removeprefix("#/").split("/"):
        target = target[part]
    merged = dict(resolve(target, root))
    merged.update({k: v for k, v in node.items() if k != "$ref"})
    merged["$defName"] = ref.rsplit("/", 1)[-1]
    return merged


def type_of(node: Schema, root: Schema) -> str:
    if node.get("$defName") == "expression":
        return "string (CEL)"
    if "const" in node:
        return "string"
    if "enum" in node:
        kinds = sorted({type(v).__name__.replace("str", "string") for v in node["enum"]})
        return " or ".join(kinds)
    kind = node.get("type", "any")
    if kind == "array":
        items = resolve(node.get("items", {}), root)
        return f"array of {type_of(items, root)}"
    if kind == "object" and isinstance(node.get("additionalProperties"), dict) and "properties" not in node:
        values = resolve(node["additionalProperties"], root)
        return f"map of string to {type_of(values, root)}"
    return str(kind)


def allowed_values(node: Schema) -> str:
    """Enum and const values, and the constraints the schema enforces, in words."""
    parts: list[str] = []
    if "const" in node:
        parts.append(f"`{node['const']}`")
    if "enum" in node:
        parts.append(", ".join(f"`{v}`" for v in node["enum"]))
    if "pattern" in node:
        parts.append(f"matches `{node['pattern']}`")
    for key, words in (("minLength", "at least {} characters"), ("maxLength", "at most {} characters"), ("minimum", "≥ {}"), ("maximum", "≤ {}"), ("minItems", "at least {} item(s)"), ("minProperties", "at least {} field(s)")):
        if key in node:
            parts.append(words.format(node[key]))
    return "; ".join(parts)


def describe(node: Schema) -> str:
    text = str(node.get("description", ""))
    choices = node.get("anyOf")
    if choices and all(set(c) == {"required"} for c in choices):
        names = ", ".join(f"`{c['required'][0]}`" for c in choices)
        text = (text + " " if text else "") + f"Needs at least one of {names}."
    return text


def walk(node: Schema, root: Schema, path: str, required: bool) -> Iterator[FieldDoc]:
    node = resolve(node, root)
    if path:
        default = node.get("default")
        yield FieldDoc(
            path=path,
            type=type_of(node, root),
            required=required,
            default="" if default is None else f"`{json.dumps(default)}`",
            allowed=allowed_values(node),
            description=describe(node),
        )
    needed = set(node.get("required", []))
    for name, child in node.get("properties", {}).items():
        yield from walk(child, root, f"{path}.{name}" if path else name, name in needed)
    if node.get("type") == "array" and "items" in node:
        items = resolve(node["items"], root)
        for name, child in items.get("properties", {}).items():
            yield from walk(child, root, f"{path}[].{name}", name in set(items.get("required", [])))


def policy_fields(schema: Schema | None = None) -> list[FieldDoc]:
    schema = schema if schema is not None else json.loads(SCHEMA.read_text())
    return list(walk(schema, schema, "", True))


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_policy_reference(schema: Schema | None = None, *, source: Path = SCHEMA, see: str = "See [the policy format](../policy-format.md) for how policies combine.") -> str:
    schema = schema if schema is not None else json.loads(source.read_text())
    rows = policy_fields(schema)
    out = [
        f"# {schema.get('title', 'SchedulingPolicy')} reference (`{schema['properties']['apiVersion']['const']}`)",
        "",
        f"<!-- Generated by docs/gen_reference.py from schemas/{source.name}; do not edit. -->",
        "",
        cell(schema.get("description", "")),
        "",
        "Every field the schema allows; anything else is an error (`KPE200`). "
        f"`[]` marks the elements of a list. {see}",
        "",
        "| field | type | required | default | allowed values | description |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        out.append(
            f"| `{row.path}` | {cell(row.type)} | {'yes' if row.required else 'no'} | {cell(row.default)} | {cell(row.allowed)} | {cell(row.description)} |"
        )
    return "\n".join(out) + "\n"


# -- server settings ------------------------------------------------------------------


# Settings annotations are strings (``from __future__ import annotations``); say them in words.
TYPE_WORDS = {"str": "string", "int": "integer", "float": "number", "bool": "boolean"}


def default_text(f: Field[Any]) -> str:
    if f.default is not MISSING:
        value = f.default
        if isinstance(value, bool):
            return f"`{str(value).lower()}`"
        if value == "":
            return "(empty)"
        return f"`{value}`"
    # Computed at start-up (policies: ./policies or the ones beside the code), so the
    # help text says what it is instead of printing this machine's path.
    return "computed (see description)"


def render_settings_reference() -> str:
    from server.settings import env_name, grouped_fields

    out = [
        "# `kpe serve` settings reference",
        "",
        "<!-- Generated by docs/gen_reference.py from server/settings.py; do not edit. -->",
        "",
        "Every setting is a flag of `kpe serve` and an environment variable; the flag wins over the "
        "variable, the variable over the default. Booleans take `--flag` / `--no-flag`, and in the "
        "environment `1`, `true`, `yes`, `on` or `0`, `false`, `no`, `off`. The settings are in the "
        "groups, and the order, of `kpe serve --help`.",
        "",
        "| setting | group | flag | environment variable | type | default | description |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for group, members in grouped_fields():
        for f in members:
            kind = TYPE_WORDS.get(f.type if isinstance(f.type, str) else f.type.__name__, str(f.type))
            flag = "--" + f.name.replace("_", "-")
            if kind == "boolean":
                flag = f"{flag}, --no-{flag[2:]}"
            if f.metadata.get("choices"):
                kind += ": " + ", ".join(f"`{c}`" for c in f.metadata["choices"])
            out.append(
                f"| `{f.name}` | {cell(group)} | `{flag}` | `{env_name(f.name)}` | {kind} | {cell(default_text(f))} | {cell(str(f.metadata.get('help', '')))} |"
            )
    return "\n".join(out) + "\n"


# -- the kpe command ------------------------------------------------------------------------


def _option_row(action: Any) -> str:
    import argparse

    if action.option_strings:
        names = ", ".join(f"`{o}`" for o in action.option_strings)
    else:
        names = f"`{action.metavar or action.dest}` (positional)"
    if action.nargs == 0:  # a switch: --strict, --no-bind, --version
        value = ""
    elif action.choices:
        value = " \\| ".join(f"`{c}`" for c in action.choices)
    else:
        value = f"`{action.metavar or action.dest.upper()}`" + (" ..." if action.nargs in ("+", "*") else "")
    default = "" if action.default in (None, False, "", argparse.SUPPRESS) or not action.option_strings else f"`{action.default}`"
    if action.required and action.nargs not in ("?", "*"):
        default = "required"
    return f"| {names} | {value} | {default} | {cell(str(action.help or ''))} |"


def render_cli_reference() -> str:
    import argparse

    from server.cli.main import build_parser

    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {choice.dest: choice.help for choice in sub._choices_actions}
    out = [
        "# `kpe` command reference",
        "",
        "<!-- Generated by docs/gen_reference.py from server/cli/main.py's argument parser; do not edit. -->",
        "",
        "Every command and its options, as `kpe COMMAND --help` prints them. "
        "`kpe serve`'s settings are in [the settings reference](settings.md).",
        "",
        "Options of `kpe` itself, before any command:",
        "",
        "| option | value | default | description |",
        "| --- | --- | --- | --- |",
        *[_option_row(a) for a in parser._actions if a.option_strings and not isinstance(a, argparse._HelpAction)],
    ]
    for name, command in sub.choices.items():
        out += ["", f"## `kpe {name}`", "", cell(str(helps.get(name) or "")) + "."]
        if command.description and name != "serve":
            out += ["", cell(command.description)]
        if command.epilog:  # what each exit code means, as the end of `kpe COMMAND --help` says it
            out += ["", cell(command.epilog)]
        if name == "serve":
            out += ["", "Every option is a setting: see [the settings reference](settings.md)."]
            continue
        rows = [_option_row(a) for a in command._actions if not isinstance(a, argparse._HelpAction)]
        out += ["", "| option | value | default | description |", "| --- | --- | --- | --- |", *rows]
    return "\n".join(out) + "\n"


# -- main ---------------------------------------------------------------------------------


def outputs() -> dict[Path, str]:
    reservation = render_policy_reference(source=RESERVATION_SCHEMA, see="See [the reservations guide](../guides/reservations.md) for how slots are kept and used.")
    return {POLICY_MD: render_policy_reference(), RESERVATION_MD: reservation, SETTINGS_MD: render_settings_reference(), CLI_MD: render_cli_reference()}


def stale() -> list[Path]:
    return [path for path, text in outputs().items() if not path.exists() or path.read_text(encoding="utf-8") != text]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Generate docs/reference/ from the schema, the server settings and the kpe command.")
    parser.add_argument("--check", action="store_true", help="only report files that are out of date")
    args = parser.parse_args(argv)
    if args.check:
        for path in stale():
            print(f"out of date: {path.relative_to(ROOT)} (run: python docs/gen_reference.py)", file=sys.stderr)
        return 1 if stale() else 0
    for path, text in outputs().items():
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
