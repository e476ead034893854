"""CEL's ``matches`` and Kubernetes' regex library (``find``, ``findAll``;
k8s.io/apiserver/pkg/cel/library/regex.go).

Patterns run on RE2 (the ``re2`` module, google-re2), whose syntax and leftmost-first
semantics are those of Go's regexp. ``matches`` is a search, not a full match:
``'abc'.matches('b')`` is true. Errors are worded as Go's regexp words them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Final

import re2

from engine.cel.errors import EvalError, no_such_overload
from engine.cel.limits import FIND_RESULT_UNITS, FREE_SCAN_CHARS, MAX_LIST_SIZE, check_list, regex_factor, scan_units

Pattern = Any  # re2._Regexp, which the module does not export under a public name

_OPTIONS: Final = re2.Options()
_OPTIONS.log_errors = False  # RE2 would otherwise print every bad pattern to stderr

# RE2's error codes, as Go's regexp/syntax names the same errors.
_GO_CODES: Final = {
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
}


def _go_error(pattern: str, raw: str) -> EvalError:
    code, _, fragment = raw.partition(": ")
    if code.startswith("pattern too large"):
        code, fragment = "expression too large", pattern
    if code == "trailing \\":
        fragment = ""
    message = f"error parsing regexp: {_GO_CODES.get(code, code)}: `{fragment}`"
    if fragment != pattern:
        message += f" in pattern `{pattern}`"
    return EvalError(message)


def _go_only_rejects(pattern: str) -> None:
    # RE2 accepts \C (any byte); Go's regexp does not.
    i = 0
    while i < len(pattern) - 1:
        if pattern[i] == "\\":
            if pattern[i + 1] == "C":
                raise _go_error(pattern, "invalid escape sequence: \\C")
            i += 2
        else:
            i += 1


@lru_cache(maxsize=512)
def compile_pattern(pattern: str) -> Pattern:
    """A compiled RE2 pattern, cached; EvalError (Go's wording) for an invalid one.

    The compiler may call this at compile time for a literal pattern and pass the
    result to ``matches_compiled``/``find_compiled``/``find_all_compiled``."""
    _go_only_rejects(pattern)
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        raw = exc.args[0] if exc.args else b"unexpected error"
        text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
        raise _go_error(pattern, text) from None


def _utf8(s: str) -> bytes:
    # Searching bytes gives byte offsets (cheap to resume from) and tolerates the lone
    # surrogates a JSON string can carry, which the str API cannot encode.
    return s.encode("utf-8", "surrogatepass")


def matches_compiled(regex: Pattern, s: str) -> bool:
    return regex.search(_utf8(s)) is not None


def find_compiled(regex: Pattern, s: str) -> str:
    """Go's Regexp.FindString: the leftmost match, or '' when there is none."""
    m = regex.search(_utf8(s))
    return "" if m is None else bytes(m.group(0)).decode("utf-8", "surrogatepass")


def find_all_compiled(regex: Pattern, s: str, limit: int = -1, budget: list[int] | None = None, exceeded: Any = None) -> list[str]:
    """Go's Regexp.FindAllString: successive non-overlapping matches, at most ``limit``
    when it is >= 0. An empty match right after a previous match is skipped, as Go does
    (Python's re keeps it), so '123 abc'.findAll('[0-9]*') is ['123', '', '', '', '']."""
    data = _utf8(s)
    end = len(data)
    wanted = limit if limit >= 0 else end + 1
    found: list[str] = []
    pos, prev_end = 0, -1
    while len(found) < wanted and pos <= end:
        m = regex.search(data, pos)
        if m is None:
            break
        start, stop = m.span()
        accept = True
        if stop == pos:  # an empty match at pos
            accept = start != prev_end
            pos += _rune_width(data, pos) if pos < end else 1
        else:
            pos = stop
        prev_end = stop
        if accept:
            if budget is not None:
                budget[0] -= FIND_RESULT_UNITS
                if budget[0] < 0:
                    exceeded("findAll")
            found.append(data[start:stop].decode("utf-8", "surrogatepass"))
            if len(found) > MAX_LIST_SIZE:
                break  # the list is already too large: building the rest would only cost time
    check_list("findAll", len(found))
    return found


def _rune_width(data: bytes, pos: int) -> int:
    lead = data[pos]
    return 1 if lead < 0xC0 else 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4


_MEMO_LIMIT: Final = 4096


def literal_matcher(pattern: str, exceeded: Any = None, limit: int = 0) -> Any:
    """``s.matches(pattern)`` for a pattern known at compile time, remembering recent
    answers: policies test the same label values (zones, instance types) on thousands
    of nodes, and a dict lookup is far cheaper than a call into RE2.

    A string longer than ``FREE_SCAN_CHARS`` that is not remembered is charged to
    ``budget`` (the evaluation's, or one of ``limit`` units for this call) before
    it is scanned; ``exceeded`` raises the cost error."""
    regex = compile_pattern(pattern)
    memo: dict[str, bool] = {}
    factor = regex_factor(len(pattern))

    def match(s: str, budget: list[int] | None = None) -> bool:
        found = memo.get(s)
        if found is None:
            if len(s) > FREE_SCAN_CHARS and exceeded is not None:
                left = (budget[0] if budget is not None else limit) - scan_units(len(s)) * factor
                if budget is not None:
                    budget[0] = left
                if left < 0:
                    exceeded("matches")
            found = regex.search(_utf8(s)) is not None
            if len(memo) >= _MEMO_LIMIT:
                memo.clear()
            memo[s] = found
        return found

    return match


def matches(s: Any, pattern: Any) -> bool:
    if type(s) is not str or type(pattern) is not str:
        raise no_such_overload("matches", s, pattern)
    return matches_compiled(compile_pattern(pattern), s)


def _compile_for(name: str, s: Any, pattern: Any, *rest: Any) -> Pattern:
    if type(s) is not str or type(pattern) is not str:
        raise no_such_overload(name, s, pattern, *rest)
    try:
        return compile_pattern(pattern)
    except EvalError as exc:
        raise EvalError(f"Illegal regex: {exc.message}") from None


def find(s: Any, pattern: Any) -> str:
    return find_compiled(_compile_for("find", s, pattern), s)


def find_all(s: Any, pattern: Any, *limit: Any) -> list[str]:
    if len(limit) > 1 or limit and type(limit[0]) is not int:
        raise no_such_overload("findAll", s, pattern, *limit)
    regex = _compile_for("findAll", s, pattern, *limit)
    return find_all_compiled(regex, s, limit[0] if limit else -1)


def _regex_cost(s: Any, pattern: Any, *rest: Any) -> int:
    """cel-go's regex cost: the string's traversal cost times a factor of the pattern's length."""
    if type(s) is not str or type(pattern) is not str:
        return 0
    return scan_units(len(s)) * regex_factor(len(pattern))


def find_all_budgeted(budget: list[int], exceeded: Any, s: Any, pattern: Any, *limit: Any) -> list[str]:
    """``findAll`` charging the scan up front and each result as it is found, so a
    string with a million matches fails fast instead of building them all."""
    if len(limit) > 1 or limit and type(limit[0]) is not int:
        raise no_such_overload("findAll", s, pattern, *limit)
    regex = _compile_for("findAll", s, pattern, *limit)
    budget[0] -= _regex_cost(s, pattern)
    if budget[0] < 0:
        exceeded("findAll")
    return find_all_compiled(regex, s, limit[0] if limit else -1, budget, exceeded)


FUNCTIONS: dict[str, Any] = {"matches": matches}
COSTS: dict[str, Any] = {"matches": _regex_cost, "find": _regex_cost}
BUDGETED: dict[str, Any] = {"findAll": find_all_budgeted}

METHODS: dict[str, dict[type, Any]] = {
    "matches": {str: matches},
    "find": {str: find},
    "findAll": {str: find_all},
}

RESULT_TYPES: dict[str, str] = {"matches": "bool", "find": "string", "findAll": "list"}
