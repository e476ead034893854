"""CEL's matches and Kubernetes' regex library (find, findAll), through FUNCTIONS/METHODS.

Cases come from the "stdlib regex functions" and "unicode strings" cases of Kubernetes'
apiextensions-apiserver/pkg/apiserver/schema/cel/validation_test.go, regex.go's docs,
and Go's regexp/find_test.go (findTests), which pins Go's match semantics.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.cel.ext import regex as lib
from engine.cel.errors import EvalError, NoSuchOverloadError
from engine.cel.types.values import UInt

STR = "this is a 123 string 456"


def method(name: str, recv: str, *args: Any) -> Any:
    return lib.METHODS[name][str](recv, *args)


@pytest.mark.parametrize(
    ("text", "pattern", "expected"),
    [
        ("abc", "b", True),  # a search, not a full match
        ("abc", "^b", False),
        ("abc", "^abc$", True),
        ("Rook takes 👑", "^[^0-9]*$", True),
        ("Rook takes 👑", "^[0-9]*$", False),
        ("Rook takes 👑", "👑$", True),
        ("日本語", "^.{3}$", True),  # . is one code point, not one byte
        ("line1\nline2", "^line2", False),  # ^ is the start of the text unless (?m)
        ("line1\nline2", "(?m)^line2", True),
        ("a.b", r"a\.b", True),
        ("HELLO", "(?i)hello", True),
        ("", "", True),
    ],
)
def test_matches_searches_with_go_regexp_semantics(text: str, pattern: str, expected: bool) -> None:
    assert lib.FUNCTIONS["matches"](text, pattern) is expected
    assert method("matches", text, pattern) is expected


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (")", "error parsing regexp: unexpected ): `)`"),
        ("(", "error parsing regexp: missing closing ): `(`"),
        ("[a", "error parsing regexp: missing closing ]: `[a`"),
        ("x++", "error parsing regexp: invalid nested repetition operator: `++` in pattern `x++`"),
        ("*", "error parsing regexp: missing argument to repetition operator: `*`"),
        ("a{1001}", "error parsing regexp: invalid repeat count: `{1001}` in pattern `a{1001}`"),
        ("\\", "error parsing regexp: trailing backslash at end of expression: `` in pattern `\\`"),
        ("(?=a)", "error parsing regexp: invalid or unsupported Perl syntax: `(?=` in pattern `(?=a)`"),
        ("(a)\\1", "error parsing regexp: invalid escape sequence: `\\1` in pattern `(a)\\1`"),
        ("\\C", "error parsing regexp: invalid escape sequence: `\\C`"),  # RE2 has \C, Go does not
    ],
)
def test_invalid_patterns_raise_go_regexp_errors(pattern: str, message: str) -> None:
    with pytest.raises(EvalError) as info:
        lib.FUNCTIONS["matches"]("text", pattern)
    assert info.value.message == message
    with pytest.raises(EvalError) as info:
        lib.compile_pattern(pattern)
    assert info.value.message == message


def test_matches_with_a_non_string_pattern_is_no_such_overload() -> None:
    with pytest.raises(NoSuchOverloadError):
        lib.FUNCTIONS["matches"]("abc", 1)
    with pytest.raises(NoSuchOverloadError):
        lib.FUNCTIONS["matches"](None, "a")


def test_compile_pattern_caches_compiled_patterns() -> None:
    assert lib.compile_pattern("[0-9]+") is lib.compile_pattern("[0-9]+")
    assert lib.matches_compiled(lib.compile_pattern("[0-9]+"), "a1") is True


@pytest.mark.parametrize(
    ("pattern", "expected"),
    [("[0-9]+", "123"), ("xyz", ""), ("s[a-z]+", "string"), ("i[a-z]", "is"), ("[0-9]+ s", "123 s")],
)
def test_find_returns_the_first_match_or_empty(pattern: str, expected: str) -> None:
    assert method("find", STR, pattern) == expected


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("[0-9]+",), ["123", "456"]),
        (("[0-9]+", 0), []),
        (("[0-9]+", 1), ["123"]),
        (("[0-9]+", 2), ["123", "456"]),
        (("[0-9]+", 3), ["123", "456"]),
        (("[0-9]+", -1), ["123", "456"]),
        (("xyz",), []),
        (("xyz", 1), []),
    ],
)
def test_find_all_returns_matches_up_to_the_limit(args: tuple[Any, ...], expected: list[str]) -> None:
    assert method("findAll", STR, *args) == expected


@pytest.mark.parametrize("name", ["find", "findAll"])
def test_find_with_an_invalid_pattern_is_an_illegal_regex_error(name: str) -> None:
    with pytest.raises(EvalError) as info:
        method(name, STR, ")")
    assert info.value.message == "Illegal regex: error parsing regexp: unexpected ): `)`"


def test_find_all_with_a_uint_or_double_limit_is_no_such_overload() -> None:
    with pytest.raises(NoSuchOverloadError):
        method("findAll", STR, "[0-9]+", UInt(1))
    with pytest.raises(NoSuchOverloadError):
        method("findAll", STR, "[0-9]+", 1.0)


# Go's regexp/find_test.go findTests: (pattern, text, every match of FindAllString).
@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        ("", "", [""]),
        ("a+", "baaab", ["aaa"]),
        ("a*", "baaab", ["", "aaa", ""]),  # no empty match right after a match
        ("[a-z]+", "abcd", ["abcd"]),
        ("[^a-z]+", "ab1234cd", ["1234"]),
        (r"[a\-\]z]+", "az]-bcz", ["az]-", "z"]),
        ("[日本語]+", "日本語日本語", ["日本語日本語"]),
        ("日本語+", "日本語語語語", ["日本語語語語"]),
        ("$", "abcde", [""]),
        ("^abcd$", "abcde", []),
        (".", "abc", ["a", "b", "c"]),
        (".(.)", "abcd", ["ab", "cd"]),
        ("ab*", "abbaab", ["abb", "a", "ab"]),
        ("ab$", "cab", ["ab"]),
        ("(aa)*$", "a", [""]),
        (r"\b", "x y", ["", "", "", ""]),
        (r"\B", "xx yy", ["", ""]),
        ("(|a)*", "aa", ["", "", ""]),
        (r"\a\f\n\r\t\v", "\a\f\n\r\t\v", ["\a\f\n\r\t\v"]),
        ("(?s)(?:(?:^).)", "\n", ["\n"]),
        ("(?:(?:^).)", "\n", []),
    ],
)
def test_find_all_follows_go_find_all_string(pattern: str, text: str, matches: list[str]) -> None:
    assert method("findAll", text, pattern) == matches
    assert method("find", text, pattern) == (matches[0] if matches else "")


def test_find_all_skips_empty_matches_that_touch_the_previous_match() -> None:
    # regex.go's docs claim ['123', '456'] here; Go's FindAllString (which Kubernetes
    # calls) also reports the empty matches between them, as the a* case above shows.
    assert method("findAll", "123 abc 456", "[0-9]*") == ["123", "", "", "", "", "456"]
    assert method("find", "abc 123", "[0-9]*") == ""  # the leftmost match is empty
