"""Reading the official CEL conformance suite (JSON form, see tests/data/cel-conformance/README.md)."""

from __future__ import annotations

import base64
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.cel.types.values import CelType, UInt, map_key, plain_key

FILES = (
    "basic comparisons conversions fields fp_math integer_math lists logic macros macros2 "
    "string string_ext optionals parse timestamps"
).split()


def suite_dir() -> Path:
    configured = os.environ.get("KPE_CEL_CONFORMANCE_DIR")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[1] / "data" / "cel-conformance"


@dataclass(frozen=True)
class Case:
    file: str
    section: str
    name: str
    expr: str
    bindings: dict[str, Any]
    declared: tuple[str, ...]
    expect_error: bool
    expected: Any

    @property
    def id(self) -> str:
        return f"{self.file}/{self.section}/{self.name}"


def load_cases() -> list[Case]:
    root = suite_dir()
    cases: list[Case] = []
    for file in FILES:
        path = root / f"{file}.json"
        if not path.exists():
            continue
        for t in json.loads(path.read_text())["tests"]:
            if t.get("uses_protobuf"):
                continue
            bindings = {k: decode(v) for k, v in (t.get("bindings") or {}).items()}
            declared = tuple(dict.fromkeys([*bindings, *(name for name, _ in t.get("type_env") or [])]))
            cases.append(
                Case(
                    file=file,
                    section=t["section"],
                    name=t["name"],
                    expr=t["expr"],
                    bindings=bindings,
                    declared=declared,
                    expect_error="error" in t,
                    expected=decode(t["value"]) if "value" in t else (None if "error" in t else True),
                )
            )
    return cases


def decode(tagged: list[Any]) -> Any:
    """A tagged conformance VALUE as kpe's run-time value."""
    kind = tagged[0]
    if kind == "null":
        return None
    if kind in ("bool", "string"):
        return tagged[1]
    if kind == "int":
        return int(tagged[1])
    if kind == "uint":
        return UInt(int(tagged[1]))
    if kind == "double":
        return float(tagged[1]) if not isinstance(tagged[1], str) else float(tagged[1].replace("Infinity", "inf"))
    if kind == "bytes":
        return base64.b64decode(tagged[1])
    if kind == "list":
        return [decode(v) for v in tagged[1]]
    if kind == "map":
        return {map_key(decode(k)): decode(v) for k, v in tagged[1]}
    if kind == "type":
        return CelType(tagged[1])
    if kind == "timestamp":
        from engine.cel.ext.timestamps import Timestamp

        return Timestamp(int(tagged[1]), int(tagged[2]))
    if kind == "duration":
        from engine.cel.ext.timestamps import Duration

        return Duration(int(tagged[1]) * 1_000_000_000 + int(tagged[2]))
    raise ValueError(f"unknown conformance value kind {kind!r}")


def same(actual: Any, expected: Any) -> bool:
    """Strict equality: same CEL type, NaN equal to NaN, containers element by element."""
    if type(actual) is not type(expected):
        return False
    if type(expected) is float:
        return (math.isnan(actual) and math.isnan(expected)) or actual == expected
    if type(expected) is list:
        return len(actual) == len(expected) and all(same(a, e) for a, e in zip(actual, expected))
    if type(expected) is dict:
        if len(actual) != len(expected):
            return False
        for k, v in expected.items():
            match = [ak for ak in actual if same(plain_key(ak), plain_key(k))]
            if not match or not same(actual[match[0]], v):
                return False
        return True
    return bool(actual == expected)
