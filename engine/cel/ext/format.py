"""Kubernetes' CEL format library (k8s.io/apiserver/pkg/cel/library/format.go, in the
base environment since 1.31): named string formats and their validation.

    format.dns1123Label().validate("my-name")        -> optional.none()
    format.named("dns1123Label").value().validate("a b")
        -> optional.of(["a lowercase RFC 1123 label must consist of ..."])

``format.named(name)`` is the format of that name, or ``optional.none()``;
``format.<name>()`` the format itself; ``<format>.validate(s)`` is ``optional.none()``
when ``s`` is valid, else the list of error texts, the same texts (and the same checks)
as Kubernetes' API validation (k8s.io/apimachinery ``IsDNS1123Label``,
``IsQualifiedName``, ``IsValidLabelValue``...) and OpenAPI formats (kube-openapi's
``strfmt``: ``uuid``, ``byte``, ``date``, ``datetime``; Go's ``url.ParseRequestURI``
for ``uri``). Two formats are equal when they have the same name.

Run-time cost, as Kubernetes charges ``validate``: the string scanned once per
``REGEX_CHARS_PER_FACTOR`` characters of the format's (estimated) regular expression,
kpe's unit for regular expressions (limits.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from engine.cel.errors import no_such_overload
from engine.cel.ext import urls
from engine.cel.limits import regex_factor, scan_units
from engine.cel.types.values import Optional, register_type

# -- Kubernetes' name validation (k8s.io/apimachinery/pkg/api/validate/content) --------------

_DNS1123_LABEL: Final = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN: Final = _DNS1123_LABEL + "(\\." + _DNS1123_LABEL + ")*"
_DNS1035_LABEL: Final = "[a-z]([-a-z0-9]*[a-z0-9])?"
_LABEL_KEY: Final = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE: Final = "(" + _LABEL_KEY + ")?"

_DNS1123_LABEL_MSG: Final = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG: Final = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS1035_LABEL_MSG: Final = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an "
    "alphabetic character, and end with an alphanumeric character"
)
_LABEL_KEY_MSG: Final = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character"
_LABEL_VALUE_MSG: Final = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)


def _full(pattern: str) -> Callable[[str], bool]:
    """Go's ``^pattern$`` (``$`` is the end of the text: a trailing newline does not match)."""
    compiled = re.compile(pattern)
    return lambda s: compiled.fullmatch(s) is not None


_is_label, _is_subdomain, _is_1035 = _full(_DNS1123_LABEL), _full(_DNS1123_SUBDOMAIN), _full(_DNS1035_LABEL)
_is_label_key, _is_label_value = _full(_LABEL_KEY), _full(_LABEL_VALUE)


def _max_len(n: int) -> str:
    return f"must be no more than {n} characters"


def _regex_error(msg: str, pattern: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{pattern}')"
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{pattern}')"


def _go_len(s: str) -> int:
    """Go's ``len`` of a string: its UTF-8 bytes."""
    return len(s.encode("utf-8", "surrogatepass"))


def dns1123_label(s: str) -> list[str]:
    errs = []
    if _go_len(s) > 63:
        errs.append(_max_len(63))
    if not _is_label(s):
        if _is_subdomain(s):
            errs.append("must not contain dots")
        else:
            errs.append(_regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL, "my-name", "123-abc"))
    return errs


def dns1123_subdomain(s: str) -> list[str]:
    errs = []
    if _go_len(s) > 253:
        errs.append(_max_len(253))
    if not _is_subdomain(s):
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN, "example.com"))
    return errs


def dns1035_label(s: str) -> list[str]:
    errs = []
    if _go_len(s) > 63:
        errs.append(_max_len(63))
    if not _is_1035(s):
        errs.append(_regex_error(_DNS1035_LABEL_MSG, _DNS1035_LABEL, "my-name", "abc-123"))
    return errs


def qualified_name(s: str) -> list[str]:
    errs: list[str] = []
    parts = s.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in dns1123_subdomain(prefix))
    else:
        return [
            "a valid label key " + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif _go_len(name) > 63:
        errs.append("name part " + _max_len(63))
    if not _is_label_key(name):
        errs.append("name part " + _regex_error(_LABEL_KEY_MSG, _LABEL_KEY, "MyName", "my.name", "123-abc"))
    return errs


def label_value(s: str) -> list[str]:
    errs = []
    if _go_len(s) > 63:
        errs.append(_max_len(63))
    if not _is_label_value(s):
        errs.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE, "MyValue", "my_value", "12345"))
    return errs


def _mask_trailing_dash(s: str) -> str:
    """apimachinery's maskTrailingDash, as it is: a name ending in '-' loses its last
    *two* bytes for an 'a' ("ab-" is checked as "aa")."""
    if _go_len(s) > 1 and s.endswith("-"):
        raw = s.encode("utf-8", "surrogatepass")
        return raw[:-2].decode("utf-8", "surrogateescape") + "a"
    return s


def _prefix(check: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    return lambda s: check(_mask_trailing_dash(s))


# -- OpenAPI formats (kube-openapi strfmt; Go's net/url) -------------------------------------

_is_uuid = _full("(?i)[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}")
_is_base64 = _full("(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})")
_FULL_DATE: Final = re.compile("([0-9]{4})-([0-9]{2})-([0-9]{2})")
_TIME: Final = re.compile("([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))")


def _is_date(s: str) -> bool:
    """Go's ``time.Parse("2006-01-02", s)`` succeeds (years 0000 to 9999, real days)."""
    m = _FULL_DATE.fullmatch(s)
    if m is None:
        return False
    year, month, day = (int(g) for g in m.groups())
    if not 1 <= month <= 12:
        return False
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[month - 1]
    return 1 <= day <= days


def _is_datetime(s: str) -> bool:
    """strfmt's IsDateTime: a date, a 't' (any case), a time; what follows a second 't' is not read."""
    if len(s) < 4:
        return False
    parts = s.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = _TIME.fullmatch(parts[1])
    return m is not None and m.group(1) <= "23" and m.group(2) <= "59" and m.group(3) <= "59"


def _uri(s: str) -> list[str]:
    raw = s.encode("utf-8", "surrogatepass")
    try:
        urls._parse(raw, via_request=True)  # Go's url.ParseRequestURI, as the URL library has it
    except ValueError as exc:
        return [f"parse {urls._q(raw)}: {exc}"]
    return []


def _only(valid: Callable[[str], bool], message: str) -> Callable[[str], list[str]]:
    return lambda s: [] if valid(s) else [message]


# -- the library ----------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class NamedFormat:
    """A named format (``kubernetes.NamedFormat``); equal to another of the same name."""

    name: str
    check: Callable[[str], list[str]]
    max_regex_size: int

    def __eq__(self, other: object) -> bool:
        return type(other) is NamedFormat and other.name == self.name

    def __hash__(self) -> int:
        return hash(("NamedFormat", self.name))

    def __repr__(self) -> str:
        return f"format.{self.name}()"


FORMATS: Final[dict[str, NamedFormat]] = {
    f.name: f
    for f in (
        NamedFormat("dns1123Label", dns1123_label, 30),
        NamedFormat("dns1123Subdomain", dns1123_subdomain, 60),
        NamedFormat("dns1035Label", dns1035_label, 30),
        NamedFormat("qualifiedName", qualified_name, 60),
        NamedFormat("dns1123LabelPrefix", _prefix(dns1123_label), 30),
        NamedFormat("dns1123SubdomainPrefix", _prefix(dns1123_subdomain), 60),
        NamedFormat("dns1035LabelPrefix", _prefix(dns1035_label), 30),
        NamedFormat("labelValue", label_value, 40),
        NamedFormat("uri", _uri, 1103),
        NamedFormat("uuid", _only(_is_uuid, "does not match the UUID format"), 70),
        NamedFormat("byte", _only(_is_base64, "invalid base64"), 84),
        NamedFormat("date", _only(_is_date, "invalid date"), 71),
        NamedFormat("datetime", _only(_is_datetime, "invalid datetime"), 71),
    )
}
"""By name; the regex sizes are Kubernetes' cost estimates of each check."""


def named(name: Any) -> Optional:
    if type(name) is not str:
        raise no_such_overload("format.named", name)
    found = FORMATS.get(name)
    return Optional(found) if found is not None else Optional(None, False)


def validate(fmt: Any, s: Any = None) -> Optional:
    if type(fmt) is not NamedFormat or type(s) is not str:
        raise no_such_overload("validate", fmt, s)
    errors = fmt.check(s)
    return Optional(errors) if errors else Optional(None, False)


def _validate_cost(fmt: Any = None, s: Any = None, *_: Any) -> int:
    if type(fmt) is not NamedFormat or type(s) is not str:
        return 0
    return scan_units(len(s) + 1) * regex_factor(fmt.max_regex_size)


def _constant(fmt: NamedFormat) -> Callable[[], NamedFormat]:
    def get() -> NamedFormat:
        return fmt

    get.__name__ = f"format_{fmt.name}"
    return get


register_type(NamedFormat, "kubernetes.NamedFormat")

FUNCTIONS: dict[str, Callable[..., Any]] = {"format.named": named} | {f"format.{n}": _constant(f) for n, f in FORMATS.items()}

METHODS: dict[str, dict[type, Callable[..., Any]]] = {"validate": {NamedFormat: validate}}

RESULT_TYPES: dict[str, str] = {"format.named": "optional", "validate": "optional"} | {f"format.{n}": "kubernetes.NamedFormat" for n in FORMATS}

COSTS: dict[str, Callable[..., int]] = {"validate": _validate_cost}
