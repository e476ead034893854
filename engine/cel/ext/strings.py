"""CEL's string functions: the core ones (``size``, ``contains``, ``startsWith``,
``endsWith``) and the strings extension as cel-go's ``ext.Strings()`` has it
(``charAt``, ``indexOf``, ``lastIndexOf``, ``lowerAscii``, ``upperAscii``,
``replace``, ``split``, ``substring``, ``trim``, ``join``, ``reverse``,
``strings.quote`` and ``format``, the last in ``formatting``).

Every index is in code points, which is what a Python ``str`` indexes by, so
cel-go's ``[]rune`` conversions have no counterpart here. Argument types are
checked by exact ``type()``: ``bool`` and ``UInt`` are subclasses of ``int``
but CEL's ``int`` parameters accept neither.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, Final

from engine.cel.errors import EvalError, no_such_overload
from engine.cel.ext.formatting import format_method
from engine.cel.limits import check_list, check_string, scan_units

# Go's unicode.IsSpace, which strings.TrimSpace uses: Python's str.strip() would
# also remove U+001C..U+001F, which Go keeps.
_GO_SPACE: Final = (
    "\t\n\v\f\r \u0085\u00a0\u1680"
    "\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000"
)

# str.lower()/upper() would also map non-ASCII letters ('Æ' -> 'æ'), which the
# *Ascii functions must leave alone.
_TO_LOWER: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_TO_UPPER: Final = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")

_SURROGATE: Final = re.compile("[\ud800-\udfff]")

_QUOTE_ESCAPES: Final = str.maketrans(
    {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v", "\\": "\\\\", '"': '\\"'}
)


def _expect(name: str, recv: Any, args: tuple[Any, ...], *kinds: type) -> None:
    """Raise no_such_overload unless ``args`` are exactly of ``kinds``."""
    if len(args) != len(kinds) or any(type(a) is not k for a, k in zip(args, kinds)):
        raise no_such_overload(name, recv, *args)


def _out_of_range(index: int) -> EvalError:
    return EvalError(f"index out of range: {index}")


# -- core ------------------------------------------------------------------


def size(*args: Any) -> int:
    """``size(s)`` for strings (code points) and bytes; lists and maps are the compiler's."""
    if len(args) == 1 and type(args[0]) in (str, bytes):
        return len(args[0])
    raise no_such_overload("size", *args)


def size_method(recv: str | bytes, *args: Any) -> int:
    if args:
        raise no_such_overload("size", recv, *args)
    return len(recv)


def contains(s: str, *args: Any) -> bool:
    _expect("contains", s, args, str)
    return args[0] in s


def starts_with(s: str, *args: Any) -> bool:
    _expect("startsWith", s, args, str)
    return s.startswith(args[0])


def ends_with(s: str, *args: Any) -> bool:
    _expect("endsWith", s, args, str)
    return s.endswith(args[0])


# -- strings extension ----------------------------------------------------


def char_at(s: str, *args: Any) -> str:
    _expect("charAt", s, args, int)
    i: int = args[0]
    # The index just past the end is allowed and gives '' (as in cel-go).
    if i < 0 or i > len(s):
        raise _out_of_range(i)
    return s[i] if i < len(s) else ""


def index_of(s: str, *args: Any) -> int:
    if len(args) == 1:
        _expect("indexOf", s, args, str)
        return s.find(args[0])
    _expect("indexOf", s, args, str, int)
    sub: str = args[0]
    offset: int = args[1]
    # cel-go answers an empty search string with the offset before checking it.
    if sub == "":
        return offset
    if offset < 0:
        raise _out_of_range(offset)
    # cel-go >= 0.22 (Kubernetes 1.32+): an offset at or past the end finds nothing,
    # where the conformance suite still expects an error.
    return s.find(sub, offset) if offset < len(s) else -1


def last_index_of(s: str, *args: Any) -> int:
    if len(args) == 1:
        _expect("lastIndexOf", s, args, str)
        # Plain search, so that ''.lastIndexOf('x') is -1 as the conformance suite says
        # (cel-go's "offset len-1" formulation makes it an index error).
        return s.rfind(args[0])
    _expect("lastIndexOf", s, args, str, int)
    sub: str = args[0]
    offset: int = args[1]
    if sub == "":
        return offset
    if offset < 0:
        raise _out_of_range(offset)
    if offset >= len(s):
        # cel-go >= 0.22, as indexOf: -1, not the error the conformance suite expects.
        return -1
    # offset is the last position a match may start at.
    return s.rfind(sub, 0, offset + len(sub))


def lower_ascii(s: str, *args: Any) -> str:
    _expect("lowerAscii", s, args)
    return s.translate(_TO_LOWER)


def upper_ascii(s: str, *args: Any) -> str:
    _expect("upperAscii", s, args)
    return s.translate(_TO_UPPER)


def replace(s: str, *args: Any) -> str:
    if len(args) == 2:
        _expect("replace", s, args, str, str)
        _check_replace(s, args[0], args[1], -1)
        return s.replace(args[0], args[1])
    _expect("replace", s, args, str, str, int)
    # Go's strings.Replace: a negative limit means all, 0 means none. Python's
    # str.replace agrees, including the empty search string matching between runes.
    limit: int = args[2]
    _check_replace(s, args[0], args[1], limit)
    return s.replace(args[0], args[1], -1 if limit < 0 else limit)


def _check_replace(s: str, old: str, new: str, limit: int) -> None:
    """Refuse a replacement whose result would be over the size limit, before building it."""
    if len(new) <= len(old):
        return
    count = len(s) + 1 if old == "" else s.count(old)
    if limit >= 0:
        count = min(count, limit)
    check_string("replace", len(s) + count * (len(new) - len(old)))


def split(s: str, *args: Any) -> list[str]:
    if len(args) == 1:
        _expect("split", s, args, str)
        return _split_n(s, args[0], -1)
    _expect("split", s, args, str, int)
    return _split_n(s, args[0], args[1])


def _split_n(s: str, sep: str, n: int) -> list[str]:
    """Go's strings.SplitN: at most n parts (all when n < 0, none when n == 0); an
    empty separator splits into code points."""
    if n == 0:
        return []
    if sep == "":
        check_list("split", len(s) if n < 0 else min(n, len(s)))
        chars = list(s)
        if n < 0 or n >= len(chars):
            return chars
        return chars[: n - 1] + ["".join(chars[n - 1 :])]
    return s.split(sep) if n < 0 else s.split(sep, n - 1)


def substring(s: str, *args: Any) -> str:
    if len(args) == 1:
        _expect("substring", s, args, int)
        start: int = args[0]
        if start < 0 or start > len(s):
            raise _out_of_range(start)
        return s[start:]
    _expect("substring", s, args, int, int)
    start, end = args
    # cel-go's order of checks decides which message an input gets.
    if start > end:
        raise EvalError(f"invalid substring range. start: {start}, end: {end}")
    if start < 0 or start > len(s):
        raise _out_of_range(start)
    if end < 0 or end > len(s):
        raise _out_of_range(end)
    return s[start:end]


def trim(s: str, *args: Any) -> str:
    _expect("trim", s, args)
    return s.strip(_GO_SPACE)


def reverse(s: str, *args: Any) -> str:
    _expect("reverse", s, args)
    return s[::-1]


def join(items: list[Any] | tuple[Any, ...], *args: Any) -> str:
    if args:
        _expect("join", items, args, str)
    separator: str = args[0] if args else ""
    for item in items:
        if type(item) is not str:
            raise EvalError(f"join: invalid input: {item}")
    if items:
        check_string("join", sum(map(len, items)) + len(separator) * (len(items) - 1))
    return separator.join(items)


def quote(*args: Any) -> str:
    """``strings.quote(s)``: s in double quotes with CEL's escapes, so it reads back as itself."""
    if len(args) != 1 or type(args[0]) is not str:
        raise no_such_overload("strings.quote", *args)
    s: str = args[0]
    # cel-go replaces invalid UTF-8 with U+FFFD; a Python str can only be invalid
    # by holding lone surrogates (from JSON's "\ud800" escapes).
    if not s.isascii():
        s = _SURROGATE.sub("\ufffd", s)
    out = '"' + s.translate(_QUOTE_ESCAPES) + '"'
    check_string("strings.quote", len(out))  # after: at most twice a string already bounded
    return out


def _scan_cost(recv: Any, *args: Any) -> int:
    """Budget units of a call that scans its receiver string (and its string arguments)."""
    if type(recv) is not str:
        return 0
    chars = len(recv)
    for arg in args:
        if type(arg) is str:
            chars += len(arg)
    return scan_units(chars)


def _join_cost(items: Any, *args: Any) -> int:
    return scan_units(sum(len(i) for i in items if type(i) is str)) if type(items) in (list, tuple) else 0


def _format_cost(fmt: Any, *args: Any) -> int:
    return scan_units(len(fmt)) + (len(args[0]) if len(args) == 1 and type(args[0]) in (list, tuple) else 0) if type(fmt) is str else 0


# Run-time budget of the functions whose work grows with the strings they read
# (limits.py): charged before the call.
COSTS: dict[str, Callable[..., int]] = {
    name: _scan_cost
    for name in ("contains", "indexOf", "lastIndexOf", "lowerAscii", "upperAscii", "replace", "split", "trim", "reverse")
}
COSTS["join"] = _join_cost
COSTS["format"] = _format_cost
COSTS["strings.quote"] = _scan_cost

_Method = Callable[..., Any]

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "size": size,
    "strings.quote": quote,
}

METHODS: dict[str, dict[type, _Method]] = {
    "size": {str: size_method, bytes: size_method},
    "contains": {str: contains},
    "startsWith": {str: starts_with},
    "endsWith": {str: ends_with},
    "charAt": {str: char_at},
    "indexOf": {str: index_of},
    "lastIndexOf": {str: last_index_of},
    "lowerAscii": {str: lower_ascii},
    "upperAscii": {str: upper_ascii},
    "replace": {str: replace},
    "split": {str: split},
    "substring": {str: substring},
    "trim": {str: trim},
    "reverse": {str: reverse},
    "join": {list: join, tuple: join},
    "format": {str: format_method},
}

# "reverse" is left out: the lists extension has a list-valued reverse() too.
RESULT_TYPES: dict[str, str] = {
    "size": "int",
    "strings.quote": "string",
    "contains": "bool",
    "startsWith": "bool",
    "endsWith": "bool",
    "charAt": "string",
    "indexOf": "int",
    "lastIndexOf": "int",
    "lowerAscii": "string",
    "upperAscii": "string",
    "replace": "string",
    "split": "list",
    "substring": "string",
    "trim": "string",
    "join": "string",
    "format": "string",
}
