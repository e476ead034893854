"""CEL's string functions, called through the library tables as generated code calls them.

Expected values come from the conformance suite (string.json, string_ext.json) and
from cel-go's ext/strings_test.go and ext/formatting_v2_test.go.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from engine.cel.ext import strings
from engine.cel.errors import EvalError, NoSuchOverloadError
from engine.cel.library import Library
from engine.cel.types.values import CelType, UInt, register_type

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


FORMAT_CASES = [
    ("no substitution", [], "no substitution"),
    ("str is %s and some more", ["filler"], "str is filler and some more"),
    ("%% and also %%", [], "% and also %"),
    ("%%%s%%", ["text"], "%text%"),
    ("%s%%", ["percent on the right"], "percent on the right%"),
    ("%%%s", ["percent on the left"], "%percent on the left"),
    (
        "%d %d %d, %s %s %s, %d %d %d, %s %s %s",
        [1, 2, 3, "A", "B", "C", 4, 5, 6, "D", "E", "F"],
        "1 2 3, A B C, 4 5 6, D E F",
    ),
    ("%.3f", [1.2345], "1.234"),
    ("%.3f + %.2f", [1, UInt(1)], "1.000 + 1.00"),
    ("this is 5 in binary: %b", [5], "this is 5 in binary: 101"),
    ("this is -5 in binary: %b", [-5], "this is -5 in binary: -101"),
    ("unsigned 64 in binary: %b", [UInt(64)], "unsigned 64 in binary: 1000000"),
    ("bit set from bool: %b", [True], "bit set from bool: 1"),
    ("bit unset: %b", [False], "bit unset: 0"),
    ("%o", [11], "13"),
    ("%o", [-11], "-13"),
    ("this is an unsigned octal: %o", [UInt(65535)], "this is an unsigned octal: 177777"),
    ("%x is 20 in hexadecimal", [30], "1e is 20 in hexadecimal"),
    ("%X is 20 in hexadecimal", [30], "1E is 20 in hexadecimal"),
    ("%x is -30 in hexadecimal", [-30], "-1e is -30 in hexadecimal"),
    ("%X is 6000 in hexadecimal", [UInt(6000)], "1770 is 6000 in hexadecimal"),
    ("%x", ["Hello world!"], "48656c6c6f20776f726c6421"),
    ("%X", ["Hello world!"], "48656C6C6F20776F726C6421"),
    ("%x", ["ÿ"], "c3bf"),
    ("%x", [b"byte string"], "6279746520737472696e67"),
    ("%x", [b"\x00\x00byte string\x00"], "00006279746520737472696e6700"),
    ("%X", [b"byte string"], "6279746520737472696E67"),
    ("%.6e", [1052.032911275], "1.052033\u202f\u00d7\u202f10⁰³"),  # Kubernetes: x/text en-US printer
    ("%.4e", [UInt(1052)], "1.052000\u202f\u00d7\u202f10⁰³"),  # the precision is a width in Kubernetes
    ("%.5e", [1052], "1.052000\u202f\u00d7\u202f10⁰³"),
    ("%.1e", [-3.14], "-3.140000\u202f\u00d7\u202f10⁰⁰"),
    ("%e", [1e100], "1.000000\u202f\u00d7\u202f10¹⁰⁰"),
    ("%f", [2.71828], "2.718280"),
    ("%f", [2], "2.000000"),
    ("%f", [UInt(3)], "3.000000"),
    ("%f", [-0.0], "0.000000"),  # Kubernetes drops the sign of a zero
    ("%e", [2.71828], "2.718280\u202f\u00d7\u202f10⁰⁰"),
    ("%e", [2], "2.000000\u202f\u00d7\u202f10⁰⁰"),
    ("%e", [UInt(3)], "3.000000\u202f\u00d7\u202f10⁰⁰"),
    ("%e", [math.nan], "NaN"),
    ("%e", [math.inf], "Infinity"),
    ("%e", [-math.inf], "-Infinity"),
    ("%d", [math.nan], "NaN"),
    ("%d", [math.inf], "Infinity"),
    ("%d", [-math.inf], "-Infinity"),
    ("%d", [3.14], "3.14"),
    ("%f", [math.nan], "NaN"),
    ("%f", [math.inf], "Infinity"),
    ("%f", [-math.inf], "-Infinity"),
    ("%d", [UInt(64)], "64"),
    ("%d", [-9223372036854775808], "-9223372036854775808"),
    ("%s", [2.71], "2.71"),
    ("%s", [[2.71]], "[2.71]"),
    ("%s", [0.000000002], "0.000000002"),
    ("%s", [1e21], "1000000000000000000000"),
    ("%s", [[0.000000002]], "[0.000000002]"),
    ("%s", [math.nan], "NaN"),
    ("%s", [[math.nan, math.inf, -math.inf]], "[NaN, Infinity, -Infinity]"),
    ("null: %s", [None], "null: null"),
    ("%s", [999999999999], "999999999999"),
    ("%s", [UInt(18446744073709551615)], "18446744073709551615"),
    ("some bytes: %s", [b"xyz"], "some bytes: xyz"),
    ("%s", [b"a\xff\xfeb\xc3"], "a\ufffdb\ufffd"),
    ("type is %s", [CelType("string")], "type is string"),
    ("%s", [FakeTimestamp("2023-02-03T23:31:20Z")], "2023-02-03T23:31:20Z"),
    ("%s", [FakeDuration("6347s")], "6347s"),
    (
        "%s",
        [["abc", 3.14, None, [9, 8, 7, 6], FakeTimestamp("2023-02-03T23:31:20Z")]],
        "[abc, 3.14, null, [9, 8, 7, 6], 2023-02-03T23:31:20Z]",
    ),
    (
        "%s",
        [{"key1": b"xyz", "key5": None, "key2": FakeDuration("7200s"), "key4": True, "key3": 2.71828}],
        "{key1: xyz, key2: 7200s, key3: 2.71828, key4: true, key5: null}",
    ),
    ("%s", [{1: "value1", UInt(2): "value2", "k": math.nan}], "{1: value1, 2: value2, k: NaN}"),
    ("%s", [{"strKey": "x", 6: FakeDuration("422s"), True: 42}], "{6: 422s, strKey: x, true: 42}"),
    ("%s", [{1: "int one", "1": "string one"}], "{1: int one, 1: string one}"),
    ("true bool: %s, false bool: %s", [True, False], "true bool: true, false bool: false"),
    ("list: %s", [[[1, 2, [3.0, 4]]]], "list: [[1, 2, [3, 4]]]"),
    ("%s", [()], "[]"),
    ("%s", [{}], "{}"),
    ("%.0f", [123.000000], "123"),
    ("%.0f", [3.5001], "4"),
    ("%.0f", [3.4999], "3"),
    ("%.0f", [1.5], "2"),
    ("%.0f", [2.5], "2"),
    ("%.3f", [123.4999], "123.500"),
    ("%.3f", [123.4994], "123.499"),
    ("%.3f", [-123.4999], "-123.500"),
    ("%.3f", [-123.4994], "-123.499"),
    ("%.5f", [-1.2], "-1.20000"),
    ("%.1f", [3.14], "3.1"),
    ("%.3s|%.2d", ["abc", 7], "abc|7"),
    ("%s é %s", ["ü", "😀"], "ü é 😀"),
]


@pytest.mark.parametrize(("fmt", "args", "expected"), FORMAT_CASES)
def test_format_substitutes_arguments_like_cel_go(fmt: str, args: list[Any], expected: str) -> None:
    assert call("format", fmt, args) == expected


FORMAT_ERROR_CASES = [
    ("%a", [1], 'could not parse formatting clause: unrecognized formatting clause "a"'),
    ("double is %E", [0.5], 'could not parse formatting clause: unrecognized formatting clause "E"'),
    ("%d %d %d", [0, 1], "index 2 out of range"),
    ("%s %s", ["abc"], "index 1 out of range"),
    ("filler %", [], "index 0 out of range"),
    ("filler %", [1], "unexpected end of string"),
    (
        "double is %.34",
        [5.0],
        "could not parse formatting clause: error while parsing precision: could not find end of precision specifier",
    ),
    (
        "%.f",
        [5.0],
        "could not parse formatting clause: error while parsing precision: error while converting precision to "
        'integer: strconv.Atoi: parsing "": invalid syntax',
    ),
    (
        "%.9999999f",
        [3.14],
        "could not parse formatting clause: error while parsing precision: precision 9999999 exceeds maximum "
        "allowed precision 100",
    ),
    ("string is %b", ["abc"], "error during formatting: only ints, uints, and bools can be formatted as binary, was given string"),
    (
        "%d",
        [FakeDuration("1802s")],
        "error during formatting: decimal clause can only be used on ints, uints, and doubles, was given "
        "google.protobuf.Duration",
    ),
    ("octal: %o", ["a string"], "error during formatting: octal clause can only be used on ints and uints, was given string"),
    ("%o", [3.14], "error during formatting: octal clause can only be used on ints and uints, was given double"),
    (
        "double is %x",
        [0.5],
        "error during formatting: only ints, uints, bytes, and strings can be formatted as hex, was given double",
    ),
    ("%d", [True], "error during formatting: decimal clause can only be used on ints, uints, and doubles, was given bool"),
    ("null: %d", [None], "error during formatting: decimal clause can only be used on ints, uints, and doubles, was given null_type"),
    ("null: %e", [None], "error during formatting: scientific clause can only be used on ints, uints, and doubles, was given null_type"),
    ("null: %f", [None], "error during formatting: fixed-point clause can only be used on ints, uints, and doubles, was given null_type"),
    ("%f", ["NaN"], "error during formatting: fixed-point clause can only be used on ints, uints, and doubles, was given string"),
    ("null: %x", [None], "error during formatting: only ints, uints, bytes, and strings can be formatted as hex, was given null_type"),
    ("null: %X", [None], "error during formatting: only ints, uints, bytes, and strings can be formatted as hex, was given null_type"),
    ("null: %b", [None], "error during formatting: only ints, uints, and bools can be formatted as binary, was given null_type"),
    ("null: %o", [None], "error during formatting: octal clause can only be used on ints and uints, was given null_type"),
    (
        "object is %s",
        [Opaque()],
        "error during formatting: string clause can only be used on strings, bools, bytes, ints, doubles, maps, "
        "lists, types, durations, and timestamps, was given kpe.test.Opaque",
    ),
    (
        "%s",
        [[1, 2, Opaque()]],
        "error during formatting: string clause can only be used on strings, bools, bytes, ints, doubles, maps, "
        "lists, types, durations, and timestamps, was given kpe.test.Opaque",
    ),
    (
        "%s",
        [{1: "a", 2: Opaque()}],
        "error during formatting: string clause can only be used on strings, bools, bytes, ints, doubles, maps, "
        "lists, types, durations, and timestamps, was given kpe.test.Opaque",
    ),
]


@pytest.mark.parametrize(("fmt", "args", "message"), FORMAT_ERROR_CASES)
def test_format_reports_bad_clauses_and_arguments_with_cel_go_messages(fmt: str, args: list[Any], message: str) -> None:
    with pytest.raises(EvalError) as info:
        call("format", fmt, args)
    assert info.value.message == message


def test_every_method_declares_a_result_type_except_the_shared_reverse() -> None:
    assert set(strings.RESULT_TYPES) == (set(strings.METHODS) | set(strings.FUNCTIONS)) - {"reverse"}
