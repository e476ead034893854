"""CEL's string functions, called through the library tables as generated code calls them.

Expected values come from the conformance suite (string.json, string_ext.json) and
from cel-go's ext/strings_test.go and ext/formatting_v2_test.go.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.cel.ext import strings
from engine.cel.errors import EvalError, NoSuchOverloadError
from engine.cel.library import Library
from engine.cel.types.values import UInt, register_type

LIBRARY = Library([strings])


def call(name: str, recv: Any, *args: Any) -> Any:
    """``recv.name(args...)`` the way generated code dispatches it."""
    return LIBRARY.method(name)(recv, *args)


class FakeTimestamp:
    """Stands in for the timestamps module's class: format's %s only needs cel_string()."""

    def __init__(self, text: str) -> None:
        self.text = text

    def cel_string(self) -> str:
        return self.text


class FakeDuration(FakeTimestamp):
    pass


class Opaque:
    """A library object of a type format's %s does not know."""


register_type(FakeTimestamp, "google.protobuf.Timestamp")
register_type(FakeDuration, "google.protobuf.Duration")
register_type(Opaque, "kpe.test.Opaque")


METHOD_CASES = [
    # size
    ("size", "", (), 0),
    ("size", "A", (), 1),
    ("size", "ÿ", (), 1),
    ("size", "πέντε", (), 5),
    ("size", "🐱😀", (), 2),
    ("size", b"abc", (), 3),
    ("size", "\xff".encode("latin-1"), (), 1),
    # startsWith / endsWith / contains
    ("startsWith", "foobar", ("foo",), True),
    ("startsWith", "foobar", ("bar",), False),
    ("startsWith", "", ("foo",), False),
    ("startsWith", "foobar", ("",), True),
    ("startsWith", "завтра", ("за",), True),
    ("startsWith", "🐱😀😛", ("🐱",), True),
    ("endsWith", "foobar", ("bar",), True),
    ("endsWith", "foobar", ("foo",), False),
    ("endsWith", "", ("",), True),
    ("endsWith", "forté", ("té",), True),
    ("endsWith", "🐱😀😛", ("😛",), True),
    ("contains", "hello", ("he",), True),
    ("contains", "hello", ("",), True),
    ("contains", "hello", ("ol",), False),
    ("contains", "abababc", ("ababc",), True),
    ("contains", "Straße", ("aß",), True),
    ("contains", "", ("something",), False),
    # charAt
    ("charAt", "tacocat", (3,), "o"),
    ("charAt", "tacocat", (7,), ""),
    ("charAt", "©αT", (0,), "©"),
    ("charAt", "©αT", (1,), "α"),
    ("charAt", "©αT", (2,), "T"),
    # indexOf
    ("indexOf", "tacocat", ("",), 0),
    ("indexOf", "tacocat", ("ac",), 1),
    ("indexOf", "tacocat", ("none",), -1),
    ("indexOf", "tacocat", ("", 3), 3),
    ("indexOf", "tacocat", ("a", 3), 5),
    ("indexOf", "tacocat", ("at", 3), 5),
    ("indexOf", "ta©o©αT", ("©",), 2),
    ("indexOf", "ta©o©αT", ("©", 3), 4),
    ("indexOf", "ta©o©αT", ("©αT", 3), 4),
    ("indexOf", "ta©o©αT", ("©α", 5), -1),
    ("indexOf", "ijk", ("k",), 2),
    ("indexOf", "hello wello", ("hello wello",), 0),
    ("indexOf", "hello wello", ("ello", 6), 7),
    ("indexOf", "hello wello", ("elbo room!!",), -1),
    ("indexOf", "hello wello", ("elbo room!!!",), -1),
    ("indexOf", "", ("a",), -1),
    # lastIndexOf
    ("lastIndexOf", "", ("@@",), -1),
    ("lastIndexOf", "tacocat", ("",), 7),
    ("lastIndexOf", "tacocat", ("at",), 5),
    ("lastIndexOf", "tacocat", ("none",), -1),
    ("lastIndexOf", "tacocat", ("", 3), 3),
    ("lastIndexOf", "tacocat", ("a", 3), 1),
    ("lastIndexOf", "ta©o©αT", ("©",), 4),
    ("lastIndexOf", "ta©o©αT", ("©", 3), 2),
    ("lastIndexOf", "ta©o©αT", ("©α", 4), 4),
    ("lastIndexOf", "hello wello", ("ello", 6), 1),
    ("lastIndexOf", "hello wello", ("low",), -1),
    ("lastIndexOf", "hello wello", ("elbo room!!",), -1),
    ("lastIndexOf", "hello wello", ("hello wello",), 0),
    ("lastIndexOf", "bananananana", ("nana", 7), 6),
    ("lastIndexOf", "ab", ("abc", 1), -1),
    # lowerAscii / upperAscii
    ("lowerAscii", "TacoCat", (), "tacocat"),
    ("lowerAscii", "TacoCÆt", (), "tacocÆt"),
    ("lowerAscii", "TacoCÆt Xii", (), "tacocÆt xii"),
    ("upperAscii", "tacoCat", (), "TACOCAT"),
    ("upperAscii", "tacoCαt", (), "TACOCαT"),
    ("upperAscii", "TacoCÆt Xii", (), "TACOCÆT XII"),
    ("upperAscii", "straße", (), "STRAßE"),
    # replace
    ("replace", "12 days 12 hours", ("{0}", "2"), "12 days 12 hours"),
    ("replace", "{0} days {0} hours", ("{0}", "2"), "2 days 2 hours"),
    ("replace", "{0} days {0} hours", ("{0}", "2", 1), "2 days {0} hours"),
    ("replace", "1 ©αT taco", ("αT", "o©α"), "1 ©o©α taco"),
    ("replace", "hello hello", ("he", "we", -1), "wello wello"),
    ("replace", "hello hello", ("he", "we", -7), "wello wello"),
    ("replace", "hello hello", ("he", "we", 0), "hello hello"),
    ("replace", "abc", ("", "-"), "-a-b-c-"),
    ("replace", "abc", ("", "-", 2), "-a-bc"),
    # split
    ("split", "hello world", (" ",), ["hello", "world"]),
    ("split", "hello world events!", (" ", 0), []),
    ("split", "hello world events!", (" ", 1), ["hello world events!"]),
    ("split", "hello hello hello", (" ", 2), ["hello", "hello hello"]),
    ("split", "o©o©o©o", ("©", -1), ["o", "o", "o", "o"]),
    ("split", "", (",",), [""]),
    ("split", "a©c", ("",), ["a", "©", "c"]),
    ("split", "abcd", ("", 2), ["a", "bcd"]),
    ("split", "ab", ("", 5), ["a", "b"]),
    ("split", "", ("",), []),
    # substring
    ("substring", "tacocat", (4,), "cat"),
    ("substring", "tacocat", (7,), ""),
    ("substring", "tacocat", (0, 4), "taco"),
    ("substring", "tacocat", (4, 4), ""),
    ("substring", "ta©o©αT", (2, 6), "©o©α"),
    ("substring", "ta©o©αT", (7, 7), ""),
    # trim: Go's unicode.IsSpace, no zero-width spaces
    ("trim", " \f\n\r\t\vtext  ", (), "text"),
    ("trim", "\u0085\u00a0\u1680text", (), "text"),
    ("trim", "text\u2000\u2001\u2002\u2003\u2004\u2004\u2006\u2007\u2008\u2009", (), "text"),
    ("trim", "\u200atext\u2028\u2029\u202F\u205F\u3000", (), "text"),
    ("trim", "\u180etext\u200b\u200c\u200d\u2060\ufeff", (), "\u180etext\u200b\u200c\u200d\u2060\ufeff"),
    ("trim", "\x1ctext\x1f", (), "\x1ctext\x1f"),
    # join
    ("join", ["x", "y"], (), "xy"),
    ("join", ["x", "y"], ("-",), "x-y"),
    ("join", [], (), ""),
    ("join", [], ("-",), ""),
    ("join", ("a", "b"), (", ",), "a, b"),
    # reverse
    ("reverse", "", (), ""),
    ("reverse", "☺", (), "☺"),
    ("reverse", "Ta©oCαt", (), "tαCo©aT"),
    ("reverse", "gums", (), "smug"),
]


@pytest.mark.parametrize(("name", "recv", "args", "expected"), METHOD_CASES)
def test_string_method_gives_the_cel_result(name: str, recv: Any, args: tuple[Any, ...], expected: Any) -> None:
    result = call(name, recv, *args)
    assert type(result) is type(expected)
    assert result == expected


def test_size_function_counts_code_points_and_bytes() -> None:
    assert strings.FUNCTIONS["size"]("πέντε") == 5
    assert strings.FUNCTIONS["size"](b"\xc3\xbf") == 2


@pytest.mark.parametrize("value", [[1, 2], {"a": 1}, 3, None])
def test_size_function_leaves_other_types_to_the_compiler(value: Any) -> None:
    with pytest.raises(NoSuchOverloadError):
        strings.FUNCTIONS["size"](value)


INDEX_ERROR_CASES = [
    ("charAt", "tacocat", (30,), "index out of range: 30"),
    ("charAt", "tacocat", (-1,), "index out of range: -1"),
    ("indexOf", "tacocat", ("a", -1), "index out of range: -1"),
    ("lastIndexOf", "tacocat", ("a", -1), "index out of range: -1"),
    ("substring", "tacocat", (40,), "index out of range: 40"),
    ("substring", "tacocat", (-1,), "index out of range: -1"),
    ("substring", "tacocat", (1, 50), "index out of range: 50"),
    ("substring", "tacocat", (49, 50), "index out of range: 49"),
    ("substring", "tacocat", (-2, 3), "index out of range: -2"),
    ("substring", "tacocat", (4, 3), "invalid substring range. start: 4, end: 3"),
    ("join", ["a", 1], (), "join: invalid input: 1"),
]


@pytest.mark.parametrize(
    ("name", "args"), [("indexOf", ("a", 30)), ("indexOf", ("a", 7)), ("lastIndexOf", ("a", 30)), ("lastIndexOf", ("a", 7))]
)
def test_index_of_offsets_at_or_past_the_end_find_nothing_as_in_cel_go_0_22(name: str, args: tuple[Any, ...]) -> None:
    assert strings.METHODS[name][str]("tacocat", *args) == -1


@pytest.mark.parametrize(("name", "recv", "args", "message"), INDEX_ERROR_CASES)
def test_string_method_reports_bad_indices_like_cel_go(name: str, recv: Any, args: tuple[Any, ...], message: str) -> None:
    with pytest.raises(EvalError) as info:
        call(name, recv, *args)
    assert not isinstance(info.value, NoSuchOverloadError)
    assert info.value.message == message


OVERLOAD_ERROR_CASES = [
    ("charAt", 42, (2,)),
    ("charAt", "hello", (True,)),
    ("charAt", "hello", (UInt(1),)),
    ("indexOf", 24, ("2",)),
    ("indexOf", "hello", (True,)),
    ("indexOf", 42, ("4", 0)),
    ("indexOf", "42", (4, 0)),
    ("indexOf", "42", ("4", "0")),
    ("indexOf", "42", ("4", 0, 1)),
    ("lastIndexOf", "42", ("4", False)),
    ("split", 42, ("2",)),
    ("split", 42, ("",)),
    ("split", "42", (2,)),
    ("split", 42, ("2", "1")),
    ("split", "42", (2, 1)),
    ("split", "42", ("2", "1")),
    ("split", "42", ("2", 1, 1)),
    ("replace", 42, (2, 1)),
    ("replace", "42", (2, 1)),
    ("replace", "42", ("2", 1)),
    ("replace", 42, ("2", "1", 1)),
    ("replace", "42", (2, "1", 1)),
    ("replace", "42", ("2", 1, 1)),
    ("replace", "42", ("2", "1", "1")),
    ("replace", "42", ("2", "1", 1, False)),
    ("substring", "hello", (1, 2, 3)),
    ("substring", 30, (True, 3)),
    ("substring", "tacocat", (True, 3)),
    ("substring", "tacocat", (0, False)),
    ("contains", "hello", (1,)),
    ("startsWith", b"hello", (b"he",)),
    ("endsWith", "hello", ()),
    ("lowerAscii", "a", ("b",)),
    ("trim", ["a"], ()),
    ("join", ["a"], (1,)),
    ("join", "ab", ()),
    ("reverse", b"ab", ()),
    ("size", "ab", (1,)),
    ("format", "%s", ("x",)),
    ("format", ["%s"], (["x"],)),
]


@pytest.mark.parametrize(("name", "recv", "args"), OVERLOAD_ERROR_CASES)
def test_string_method_rejects_wrong_argument_types_as_no_such_overload(
    name: str, recv: Any, args: tuple[Any, ...]
) -> None:
    with pytest.raises(NoSuchOverloadError, match="no such overload"):
        call(name, recv, *args)


QUOTE_CASES = [
    ("first\nsecond", '"first\\nsecond"'),
    ("bell\a", '"bell\\a"'),
    ("\bbackspace", '"\\bbackspace"'),
    ("\fform feed", '"\\fform feed"'),
    ("carriage \r return", '"carriage \\r return"'),
    ("horizontal tab\t", '"horizontal tab\\t"'),
    ("vertical \v tab", '"vertical \\v tab"'),
    ("double \\\\ slash", '"double \\\\\\\\ slash"'),
    ("two escape sequences \\a\\n", '"two escape sequences \\\\a\\\\n"'),
    ("verbatim", '"verbatim"'),
    ("ends with \\", '"ends with \\\\"'),
    ("\\ starts with", '"\\\\ starts with"'),
    ("printable unicode😀", '"printable unicode😀"'),
    ('mid string " quote', '"mid string \\" quote"'),
    ('single-quote with "double quote"', '"single-quote with \\"double quote\\""'),
    ("size('ÿ')", "\"size('ÿ')\""),
    ("завтра", '"завтра"'),
    ("\U0001F431\U0001F600\U0001F61B", '"🐱😀😛"'),
    ("ta©o©αT", '"ta©o©αT"'),
    ("", '""'),
    ("nul\x00kept", '"nul\x00kept"'),
    ("lone \ud800 surrogate", '"lone \ufffd surrogate"'),
]


@pytest.mark.parametrize(("text", "expected"), QUOTE_CASES)
def test_strings_quote_escapes_what_cel_string_literals_escape(text: str, expected: str) -> None:
    assert strings.FUNCTIONS["strings.quote"](text) == expected


@pytest.mark.parametrize("args", [(), (1,), ("a", "b"), (b"a",)])
def test_strings_quote_takes_exactly_one_string(args: tuple[Any, ...]) -> None:
    with pytest.raises(NoSuchOverloadError):
        strings.FUNCTIONS["strings.quote"](*args)


# What cel-go's formatter gives is checked against cel-go itself in
# test_format_against_kubernetes.py (tests/data/kubernetes-format); these are the cases
# its data cannot spell: values only kpe's own types make, and kpe's precision cap.
FORMAT_CASES = [
    ("%s", [FakeTimestamp("2023-02-03T23:31:20Z")], "2023-02-03T23:31:20Z"),
    ("%s", [[FakeTimestamp("2023-02-03T23:31:20Z"), FakeDuration("7200s")]], '[timestamp("2023-02-03T23:31:20Z"), duration("7200s")]'),
    ("%s", [{"k": FakeDuration("422s"), 6: "\ud800"}], '{"k":duration("422s"), 6:"\ufffd"}'),
    ("%s", [("a", UInt(1))], '["a", 1]'),
    ("%.100f", [0.5], "0." + "5" + "0" * 99),
]


@pytest.mark.parametrize(("fmt", "args", "expected"), FORMAT_CASES)
def test_format_substitutes_arguments_like_cel_go(fmt: str, args: list[Any], expected: str) -> None:
    assert call("format", fmt, args) == expected


FORMAT_ERROR_CASES = [
    (
        "%.9999999f",
        [3.14],
        "could not parse formatting clause: error while parsing precision: precision 9999999 exceeds maximum "
        "allowed precision 100",
    ),
    (
        "object is %s",
        [Opaque()],
        "error during formatting: string clause can only be used on strings, bools, bytes, ints, doubles, maps, "
        "lists, types, durations, and timestamps, was given kpe.test.Opaque",
    ),
    ("%s", [[1, 2, Opaque()]], "error during formatting: no formatting function for kpe.test.Opaque"),
    ("%s", [{1: "a", 2: Opaque()}], "error during formatting: no formatting function for kpe.test.Opaque"),
    ("%s", [{1.5: "a"}], "error during formatting: no formatting function for map key of type double"),
    ("%x", [Opaque()], "error during formatting: only integers, byte buffers, and strings can be formatted as hex, was given kpe.test.Opaque"),
]


@pytest.mark.parametrize(("fmt", "args", "message"), FORMAT_ERROR_CASES)
def test_format_reports_bad_clauses_and_arguments_with_cel_go_messages(fmt: str, args: list[Any], message: str) -> None:
    with pytest.raises(EvalError) as info:
        call("format", fmt, args)
    assert info.value.message == message


def test_every_method_declares_a_result_type_except_the_shared_reverse() -> None:
    assert set(strings.RESULT_TYPES) == (set(strings.METHODS) | set(strings.FUNCTIONS)) - {"reverse"}
