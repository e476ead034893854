"""Kubernetes' CEL semver library (k8s.io/apiserver/pkg/cel/library/semverlib.go), over a
port of blang/semver v4's strict parser and ordering, error messages included."""

from __future__ import annotations

from typing import Any, Final

from engine.cel.errors import EvalError, no_such_overload
from engine.cel.ext.network import go_quote as _go_quote
from engine.cel.types.values import register_type

_NUMBERS: Final = frozenset("0123456789")
_ALPHANUM: Final = frozenset("-abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_UINT64_MAX: Final = 2**64 - 1

# A prerelease identifier: (is_numeric, number, text); numeric ones sort first.
_Pre = tuple[bool, int, str]


def _parse_uint(s: str) -> int:
    # strconv.ParseUint's errors, which blang/semver passes through.
    if not s or not set(s) <= _NUMBERS:
        raise EvalError(f"strconv.ParseUint: parsing {_go_quote(s)}: invalid syntax")
    value = int(s)
    if value > _UINT64_MAX:
        raise EvalError(f"strconv.ParseUint: parsing {_go_quote(s)}: value out of range")
    return value


def _number(part: str, what: str) -> int:
    if not set(part) <= _NUMBERS:
        raise EvalError(f"Invalid character(s) found in {what} number {_go_quote(part)}")
    if len(part) > 1 and part[0] == "0":
        raise EvalError(f"{what.capitalize()} number must not contain leading zeroes {_go_quote(part)}")
    return _parse_uint(part)


def _prerelease(s: str) -> _Pre:
    if not s:
        raise EvalError("Prerelease is empty")
    if set(s) <= _NUMBERS:
        if len(s) > 1 and s[0] == "0":
            raise EvalError(f"Numeric PreRelease version must not contain leading zeroes {_go_quote(s)}")
        return True, _parse_uint(s), ""
    if set(s) <= _ALPHANUM:
        return False, 0, s
    raise EvalError(f"Invalid character(s) found in prerelease {_go_quote(s)}")


class Semver:
    """A semantic version. Equality is ordering equality: build metadata is ignored."""

    __slots__ = ("major", "minor", "patch", "pre", "build")

    def __init__(self, major: int, minor: int, patch: int, pre: tuple[_Pre, ...], build: tuple[str, ...]) -> None:
        self.major = major
        self.minor = minor
        self.patch = patch
        self.pre = pre
        self.build = build

    def compare(self, other: Semver) -> int:
        for a, b in ((self.major, other.major), (self.minor, other.minor), (self.patch, other.patch)):
            if a != b:
                return 1 if a > b else -1
        if not self.pre or not other.pre:
            # A release sorts after any of its prereleases.
            return (not self.pre) - (not other.pre)
        for (num_a, n_a, s_a), (num_b, n_b, s_b) in zip(self.pre, other.pre):
            if num_a != num_b:
                return -1 if num_a else 1
            if n_a != n_b:
                return 1 if n_a > n_b else -1
            if s_a != s_b:
                return 1 if s_a > s_b else -1
        return (len(self.pre) > len(other.pre)) - (len(self.pre) < len(other.pre))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.compare(other) == 0

    def __hash__(self) -> int:
        return hash((self.major, self.minor, self.patch, self.pre))

    def __str__(self) -> str:
        text = f"{self.major}.{self.minor}.{self.patch}"
        if self.pre:
            text += "-" + ".".join(str(n) if is_num else s for is_num, n, s in self.pre)
        if self.build:
            text += "+" + ".".join(self.build)
        return text

    def __repr__(self) -> str:
        return f"semver({str(self)!r})"


def parse_semver(s: str) -> Semver:
    """blang/semver v4 Parse: strict MAJOR.MINOR.PATCH[-PRERELEASE][+BUILD]."""
    if not s:
        raise EvalError("Version string empty")
    parts = s.split(".", 2)
    if len(parts) != 3:
        raise EvalError("No Major.Minor.Patch elements found")
    major = _number(parts[0], "major")
    minor = _number(parts[1], "minor")
    patch_text, build_text, pre_text = parts[2], None, None
    if "+" in patch_text:
        patch_text, build_text = patch_text.split("+", 1)
    if "-" in patch_text:
        patch_text, pre_text = patch_text.split("-", 1)
    patch = _number(patch_text, "patch")
    pre = tuple(_prerelease(p) for p in pre_text.split(".")) if pre_text is not None else ()
    build: list[str] = []
    for b in build_text.split(".") if build_text is not None else ():
        if not b:
            raise EvalError("Build meta data is empty")
        if not set(b) <= _ALPHANUM:
            raise EvalError(f"Invalid character(s) found in build meta data {_go_quote(b)}")
        build.append(b)
    return Semver(major, minor, patch, pre, tuple(build))


def normalize_and_parse(s: str) -> Semver:
    """Kubernetes' normalizeAndParse: drop a leading 'v', leading zeros, fill in .0 parts."""
    s = s.removeprefix("v")
    parts = s.split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or p[0] not in _NUMBERS:
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if "+" in parts[-1] or "-" in parts[-1]:
            raise EvalError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return parse_semver(".".join(parts))


_NOT_GIVEN: Any = object()


def _parse(name: str, s: Any, normalize: Any) -> Semver:
    if type(s) is not str or (normalize is not _NOT_GIVEN and type(normalize) is not bool):
        # Name only the arguments the expression gave: isSemver([1]) is isSemver(list).
        raise no_such_overload(name, *((s,) if normalize is _NOT_GIVEN else (s, normalize)))
    return normalize_and_parse(s) if normalize is True else parse_semver(s)


def semver(s: Any, normalize: Any = _NOT_GIVEN) -> Semver:
    return _parse("semver", s, normalize)


def is_semver(s: Any, normalize: Any = _NOT_GIVEN) -> bool:
    if type(s) is not str or (normalize is not _NOT_GIVEN and type(normalize) is not bool):
        raise no_such_overload("isSemver", *((s,) if normalize is _NOT_GIVEN else (s, normalize)))
    try:
        _parse("isSemver", s, normalize)
    except EvalError:
        return False
    return True


def _int64(v: int) -> int:
    # types.Int(v.Major) converts a uint64 to int64 in Go, wrapping past 2^63 - 1.
    return v - 2**64 if v >= 2**63 else v


def _other(name: str, v: Semver, other: Any) -> Semver:
    if type(other) is not Semver:
        raise no_such_overload(name, v, other)
    return other


register_type(Semver, "kubernetes.Semver")

FUNCTIONS: dict[str, Any] = {"semver": semver, "isSemver": is_semver}

METHODS: dict[str, dict[type, Any]] = {
    "major": {Semver: lambda v: _int64(v.major)},
    "minor": {Semver: lambda v: _int64(v.minor)},
    "patch": {Semver: lambda v: _int64(v.patch)},
    "isGreaterThan": {Semver: lambda v, o: v.compare(_other("isGreaterThan", v, o)) == 1},
    "isLessThan": {Semver: lambda v, o: v.compare(_other("isLessThan", v, o)) == -1},
    "compareTo": {Semver: lambda v, o: v.compare(_other("compareTo", v, o))},
}

RESULT_TYPES: dict[str, str] = {
    "semver": "kubernetes.Semver",
    "isSemver": "bool",
    "major": "int",
    "minor": "int",
    "patch": "int",
    "isGreaterThan": "bool",
    "isLessThan": "bool",
    "compareTo": "int",
}
