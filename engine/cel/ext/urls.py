"""Kubernetes' CEL URL library (k8s.io/apiserver/pkg/cel/library/urls.go).

``url()`` accepts what Go's url.ParseRequestURI accepts (an absolute URI or an absolute
path) and keeps what url.Parse makes of it, so this is a port of Go's net/url parser
(as of Go 1.25: bracketed hosts must be IPv6 literals, http(s) hosts have one colon).
Go works on bytes, and so does this port: percent-escapes may decode to any byte.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from engine.cel.errors import EvalError, no_such_overload
from engine.cel.ext.network import go_quote, parse_addr
from engine.cel.types.values import register_type

_PATH, _PATH_SEGMENT, _HOST, _ZONE, _USER_PASSWORD, _QUERY_COMPONENT, _FRAGMENT = range(1, 8)
_ALPHA: Final = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_DIGITS: Final = frozenset(b"0123456789")
_ALNUM: Final = _ALPHA | _DIGITS
_HEX: Final = frozenset(b"0123456789abcdefABCDEF")
_USERINFO: Final = _ALNUM | frozenset(b"-._:~!$&'()*+,;=%@")


def _q(b: bytes) -> str:
    return go_quote(b.decode("utf-8", "surrogateescape"))


def _should_escape(c: int, mode: int) -> bool:
    """Go's shouldEscape: whether byte c must be %-escaped in this part of a URL."""
    if c in _ALNUM:
        return False
    if mode in (_HOST, _ZONE) and c in b"!$&'()*+,;=:[]<>\"":
        return False
    if c in b"-_.~":
        return False
    if c in b"$&+,/:;=?@":
        if mode == _PATH:
            return c == ord("?")
        if mode == _PATH_SEGMENT:
            return c in b"/;,?"
        if mode == _USER_PASSWORD:
            return c in b"@/?:"
        if mode == _QUERY_COMPONENT:
            return True
        if mode == _FRAGMENT:
            return False
    return not (mode == _FRAGMENT and c in b"!()*")


def _unescape(s: bytes, mode: int) -> bytes:
    """Go's unescape, errors included; '+' means space only in query components."""
    i = 0
    while i < len(s):
        c = s[i]
        if c == 0x25:  # '%'
            if i + 2 >= len(s) or s[i + 1] not in _HEX or s[i + 2] not in _HEX:
                raise ValueError(f"invalid URL escape {_q(s[i : i + 3])}")
            # A host may %-escape only non-ASCII bytes, and %25 (for IPv6 zones).
            if mode == _HOST and int(s[i + 1 : i + 2], 16) < 8 and s[i : i + 3] != b"%25":
                raise ValueError(f"invalid URL escape {_q(s[i : i + 3])}")
            if mode == _ZONE:
                v = int(s[i + 1 : i + 3], 16)
                if s[i : i + 3] != b"%25" and v != 0x20 and _should_escape(v, _HOST):
                    raise ValueError(f"invalid URL escape {_q(s[i : i + 3])}")
            i += 3
        else:
            if mode in (_HOST, _ZONE) and c < 0x80 and _should_escape(c, mode):
                raise ValueError(f"invalid character {_q(s[i : i + 1])} in host name")
            i += 1
    out = bytearray()
    i = 0
    while i < len(s):
        if s[i] == 0x25:
            out.append(int(s[i + 1 : i + 3], 16))
            i += 3
            continue
        out.append(0x20 if s[i] == 0x2B and mode == _QUERY_COMPONENT else s[i])
        i += 1
    return bytes(out)


def _escape(s: bytes, mode: int) -> bytes:
    out = bytearray()
    for c in s:
        if c == 0x20 and mode == _QUERY_COMPONENT:
            out.append(0x2B)
        elif _should_escape(c, mode):
            out += b"%%%02X" % c
        else:
            out.append(c)
    return bytes(out)


def _valid_encoded(s: bytes, mode: int) -> bool:
    return all(c in b"!$&'()*+,;=:@[]%" or not _should_escape(c, mode) for c in s)


def _valid_port(colon_port: bytes) -> bool:
    """Go's validOptionalPort: empty, or ':' and digits (possibly none)."""
    return not colon_port or colon_port[:1] == b":" and all(c in _DIGITS for c in colon_port[1:])


@dataclass
class _Parsed:
    scheme: bytes = b""
    opaque: bytes = b""
    user: tuple[bytes, bytes | None] | None = None
    host: bytes = b""
    path: bytes = b""
    raw_path: bytes = b""
    omit_host: bool = False
    force_query: bool = False
    raw_query: bytes = b""
    fragment: bytes = b""
    raw_fragment: bytes = b""

    def escaped_path(self) -> bytes:
        if self.raw_path and _valid_encoded(self.raw_path, _PATH) and _unescape(self.raw_path, _PATH) == self.path:
            return self.raw_path
        return b"*" if self.path == b"*" else _escape(self.path, _PATH)

    def escaped_fragment(self) -> bytes:
        raw = self.raw_fragment
        if raw and _valid_encoded(raw, _FRAGMENT) and _unescape(raw, _FRAGMENT) == self.fragment:
            return raw
        return _escape(self.fragment, _FRAGMENT)

    def string(self) -> bytes:
        """Go's URL.String(), which Kubernetes compares for URL equality."""
        buf = bytearray(self.scheme + b":" if self.scheme else b"")
        if self.opaque:
            buf += self.opaque
        else:
            if (self.scheme or self.host or self.user) and not (self.omit_host and not self.host and not self.user):
                if self.host or self.path or self.user:
                    buf += b"//"
                if self.user:
                    name, password = self.user
                    buf += _escape(name, _USER_PASSWORD)
                    if password is not None:
                        buf += b":" + _escape(password, _USER_PASSWORD)
                    buf += b"@"
                buf += _escape(self.host, _HOST)
            path = self.escaped_path()
            if path and path[:1] != b"/" and self.host:
                buf += b"/"
            if not buf and b":" in path.partition(b"/")[0]:
                buf += b"./"
            buf += path
        if self.force_query or self.raw_query:
            buf += b"?" + self.raw_query
        if self.fragment:
            buf += b"#" + self.escaped_fragment()
        return bytes(buf)


def _parse_host(scheme: bytes, host: bytes) -> bytes:
    open_at = host.rfind(b"[")
    if open_at > 0:
        raise ValueError("invalid IP-literal")
    if open_at == 0:
        close_at = host.rfind(b"]")
        if close_at < 0:
            raise ValueError("missing ']' in host")
        colon_port = host[close_at + 1 :]
        if not _valid_port(colon_port):
            raise ValueError(f"invalid port {_q(colon_port)} after host")
        name = host[1:close_at]
        zone = name.find(b"%25")
        if zone >= 0:
            literal = _unescape(name[:zone], _HOST) + _unescape(name[zone:], _ZONE)
        else:
            literal = _unescape(name, _HOST)
        # Only an IPv6 address may be bracketed (Go 1.25, CVE-2025-47912).
        try:
            bits = parse_addr(literal.decode("utf-8", "surrogateescape"))[1]
        except ValueError as exc:
            raise ValueError(f"invalid host: {exc}") from None
        if bits == 32:
            raise ValueError("invalid IP-literal")
        return b"[" + literal + b"]" + _unescape(colon_port, _HOST)
    if b":" in host:
        i = host.find(b":")
        if scheme not in (b"http", b"https"):
            i = host.rfind(b":")  # other schemes may list several host:port pairs
        if not _valid_port(host[i:]):
            raise ValueError(f"invalid port {_q(host[i:])} after host")
    return _unescape(host, _HOST)


def _parse_authority(u: _Parsed, authority: bytes) -> None:
    at = authority.rfind(b"@")
    u.host = _parse_host(u.scheme, authority[at + 1 :])
    if at < 0:
        return
    userinfo = authority[:at]
    if not all(c in _USERINFO for c in userinfo):
        raise ValueError("net/url: invalid userinfo")
    name, colon, password = userinfo.partition(b":")
    u.user = (_unescape(name, _USER_PASSWORD), _unescape(password, _USER_PASSWORD) if colon else None)


def _parse(raw: bytes, via_request: bool) -> _Parsed:
    """Go's url.parse; via_request is ParseRequestURI's stricter mode."""
    if any(c < 0x20 or c == 0x7F for c in raw):
        raise ValueError("net/url: invalid control character in URL")
    if not raw and via_request:
        raise ValueError("empty url")
    u = _Parsed()
    if raw == b"*":
        u.path = b"*"
        return u
    rest = raw
    for i, c in enumerate(raw):  # a scheme is [a-zA-Z][a-zA-Z0-9+-.]* before a ':'
        if c in _ALPHA or i > 0 and (c in _DIGITS or c in b"+-."):
            continue
        if c == 0x3A:  # ':'
            if i == 0:
                raise ValueError("missing protocol scheme")
            u.scheme, rest = raw[:i].lower(), raw[i + 1 :]
        break
    if rest.endswith(b"?") and rest.count(b"?") == 1:
        u.force_query, rest = True, rest[:-1]
    else:
        rest, _, u.raw_query = rest.partition(b"?")
    if not rest.startswith(b"/"):
        if u.scheme:
            u.opaque = rest  # a rootless path, like mailto:someone
            return u
        if via_request:
            raise ValueError("invalid URI for request")
        if b":" in rest.partition(b"/")[0]:
            raise ValueError("first path segment in URL cannot contain colon")
    if (u.scheme or not via_request and not rest.startswith(b"///")) and rest.startswith(b"//"):
        authority, slash, path = rest[2:].partition(b"/")
        _parse_authority(u, authority)
        rest = slash + path
    elif u.scheme and rest.startswith(b"/"):
        u.omit_host = True
    u.path = _unescape(rest, _PATH)
    u.raw_path = b"" if _escape(u.path, _PATH) == rest else rest
    return u


def _split_host_port(host: bytes) -> tuple[bytes, bytes]:
    name, port = host, b""
    colon = name.rfind(b":")
    if colon != -1 and _valid_port(name[colon:]):
        name, port = name[:colon], name[colon + 1 :]
    if name.startswith(b"[") and name.endswith(b"]"):
        name = name[1:-1]
    return name, port


def _text(b: bytes) -> str:
    return b.decode("utf-8", "replace")


class URL:
    """A kubernetes.URL. Two URLs are equal when Go would print them the same."""

    __slots__ = ("parsed", "_string")

    def __init__(self, parsed: _Parsed) -> None:
        self.parsed = parsed
        self._string = parsed.string()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, URL):
            return NotImplemented
        return self._string == other._string

    def __hash__(self) -> int:
        return hash(("URL", self._string))

    def __repr__(self) -> str:
        return f"url({_text(self._string)!r})"

    def query(self) -> dict[str, list[str]]:
        """Go's URL.Query(): repeated keys collect values; malformed pairs are dropped."""
        values: dict[str, list[str]] = {}
        for pair in self.parsed.raw_query.split(b"&"):
            if not pair or b";" in pair:
                continue
            key, _, value = pair.partition(b"=")
            try:
                k, v = _unescape(key, _QUERY_COMPONENT), _unescape(value, _QUERY_COMPONENT)
            except ValueError:
                continue
            values.setdefault(_text(k), []).append(_text(v))
        return values


def _error(text: bytes, exc: ValueError) -> EvalError:
    return EvalError(f"URL parse error during conversion from string: parse {_q(text)}: {exc}")


def parse_url(s: str) -> URL:
    raw = s.encode("utf-8", "surrogatepass")
    try:
        _parse(raw, via_request=True)
    except ValueError as exc:
        raise _error(raw, exc) from None
    # ParseRequestURI would fold a #fragment into the path or query; url.Parse cuts it off.
    before, _, fragment = raw.partition(b"#")
    try:
        parsed = _parse(before, via_request=False)
    except ValueError as exc:
        raise _error(before, exc) from None
    if fragment:
        try:
            parsed.fragment = _unescape(fragment, _FRAGMENT)
        except ValueError as exc:
            raise _error(raw, exc) from None
        parsed.raw_fragment = b"" if _escape(parsed.fragment, _FRAGMENT) == fragment else fragment
    return URL(parsed)


def url(s: Any) -> URL:
    if type(s) is not str:
        raise no_such_overload("url", s)
    return parse_url(s)


def is_url(s: Any) -> bool:
    if type(s) is not str:
        raise no_such_overload("isURL", s)
    try:
        _parse(s.encode("utf-8", "surrogatepass"), via_request=True)
    except ValueError:
        return False
    return True


register_type(URL, "kubernetes.URL")

FUNCTIONS: dict[str, Any] = {"url": url, "isURL": is_url}

METHODS: dict[str, dict[type, Any]] = {
    "getScheme": {URL: lambda u: _text(u.parsed.scheme)},
    "getHost": {URL: lambda u: _text(u.parsed.host)},
    "getHostname": {URL: lambda u: _text(_split_host_port(u.parsed.host)[0])},
    "getPort": {URL: lambda u: _text(_split_host_port(u.parsed.host)[1])},
    "getEscapedPath": {URL: lambda u: _text(u.parsed.escaped_path())},
    "getQuery": {URL: URL.query},
}

RESULT_TYPES: dict[str, str] = {
    "url": "kubernetes.URL",
    "isURL": "bool",
    "getScheme": "string",
    "getHost": "string",
    "getHostname": "string",
    "getPort": "string",
    "getEscapedPath": "string",
    "getQuery": "map",
}
