"""Kubernetes' CEL IP and CIDR libraries (k8s.io/apiserver/pkg/cel/library/ip.go, cidr.go).

Addresses are parsed by a port of Go's net/netip rather than Python's ipaddress, which
accepts and rejects different strings (leading zeros, zones) and words its errors
differently; the messages here are the ones Kubernetes shows.
"""

from __future__ import annotations

from typing import Any, Final

from engine.cel.errors import EvalError, no_such_overload
from engine.cel.types.values import register_type

_HEX: Final = {c: int(c, 16) for c in "0123456789abcdefABCDEF"}
_ESCAPES: Final = {"\a": "\\a", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\v": "\\v"}


def go_quote(s: str) -> str:
    """Go's strconv.Quote (the %q verb), which Kubernetes' error messages use. Bytes
    that were not UTF-8, decoded with surrogateescape, come out as \\xNN as in Go."""
    out = ['"']
    for ch in s:
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            out.append(f"\\x{ord(ch) - 0xDC00:02x}")
        elif ch in '"\\':
            out.append("\\" + ch)
        elif ch.isprintable():
            out.append(ch)
        elif ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        elif ord(ch) < 0x10000:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(f"\\U{ord(ch):08x}")
    out.append('"')
    return "".join(out)


def _addr_error(text: str, msg: str, at: str = "") -> ValueError:
    where = f" (at {go_quote(at)})" if at else ""
    return ValueError(f"ParseAddr({go_quote(text)}): {msg}{where}")


def _parse_ipv4(s: str) -> int:
    fields: list[int] = []
    val = digits = 0
    for i, c in enumerate(s):
        if "0" <= c <= "9":
            if digits == 1 and val == 0:
                raise _addr_error(s, "IPv4 field has octet with leading zero")
            val, digits = val * 10 + ord(c) - 48, digits + 1
            if val > 255:
                raise _addr_error(s, "IPv4 field has value >255")
        elif c == ".":
            if i == 0 or i == len(s) - 1 or s[i - 1] == ".":
                raise _addr_error(s, "IPv4 field must have at least one digit", s[i:])
            if len(fields) == 3:
                raise _addr_error(s, "IPv4 address too long")
            fields.append(val)
            val = digits = 0
        else:
            raise _addr_error(s, "unexpected character", s[i:])
    if len(fields) < 3:
        raise _addr_error(s, "IPv4 address too short")
    a, b, c2 = fields
    return a << 24 | b << 16 | c2 << 8 | val


def _parse_ipv6(text: str) -> tuple[int, str]:
    s, zone = text, ""
    if "%" in s:
        s, zone = s.split("%", 1)
        if not zone:
            raise _addr_error(text, "zone must be a non-empty string")
    ip = [0] * 16
    ellipsis = -1
    if s.startswith("::"):
        ellipsis, s = 0, s[2:]
        if not s:
            return 0, zone
    i = 0
    while i < 16:
        off = acc = 0
        while off < len(s) and s[off] in _HEX:
            acc = acc * 16 + _HEX[s[off]]
            if acc > 0xFFFF:
                raise _addr_error(text, "IPv6 field has value >=2^16", s)
            off += 1
        if off == 0:
            raise _addr_error(text, "each colon-separated field must have at least one digit", s)
        if off < len(s) and s[off] == ".":
            if ellipsis < 0 and i != 12:
                raise _addr_error(text, "embedded IPv4 address must replace the final 2 fields of the address", s)
            if i + 4 > 16:
                raise _addr_error(text, "too many hex fields to fit an embedded IPv4 at the end of the address", s)
            try:
                v4 = _parse_ipv4(s)
            except ValueError as exc:
                raise _addr_error(text, str(exc), s) from None
            ip[i : i + 4] = list(v4.to_bytes(4, "big"))
            s, i = "", i + 4
            break
        ip[i], ip[i + 1] = acc >> 8, acc & 0xFF
        i += 2
        s = s[off:]
        if not s:
            break
        if s[0] != ":":
            raise _addr_error(text, "unexpected character, want colon", s)
        if len(s) == 1:
            raise _addr_error(text, "colon must be followed by more characters", s)
        s = s[1:]
        if s[0] == ":":
            if ellipsis >= 0:
                raise _addr_error(text, "multiple :: in address", s)
            ellipsis, s = i, s[1:]
            if not s:
                break
    if s:
        raise _addr_error(text, "trailing garbage after address", s)
    if i < 16:
        if ellipsis < 0:
            raise _addr_error(text, "address string too short")
        n = 16 - i
        ip = ip[:ellipsis] + [0] * n + ip[ellipsis:i]
    elif ellipsis >= 0:
        raise _addr_error(text, "the :: must expand to at least one field of zeros")
    return int.from_bytes(bytes(ip), "big"), zone


def parse_addr(s: str) -> tuple[int, int, str]:
    """netip.ParseAddr: (value, bit length, zone); ValueError with Go's message."""
    for c in s:
        if c == ".":
            return _parse_ipv4(s), 32, ""
        if c == ":":
            value, zone = _parse_ipv6(s)
            return value, 128, zone
        if c == "%":
            raise _addr_error(s, "missing IPv6 address")
    raise _addr_error(s, "unable to parse IP")


def _is_4in6(value: int, bits: int) -> bool:
    return bits == 128 and value >> 32 == 0xFFFF


class IP:
    """A net.IP: an IPv4 or IPv6 address without zone (Kubernetes rejects zones)."""

    __slots__ = ("value", "bits")

    def __init__(self, value: int, bits: int) -> None:
        self.value = value
        self.bits = bits

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IP):
            return NotImplemented
        return self.bits == other.bits and self.value == other.value

    def __hash__(self) -> int:
        return hash(("IP", self.bits, self.value))

    def __repr__(self) -> str:
        return f"ip({self.cel_string()!r})"

    def cel_string(self) -> str:
        """netip.Addr.String(): dotted quad, or RFC 5952 IPv6 (the longest zero run as ::)."""
        if self.bits == 32:
            return ".".join(str(b) for b in self.value.to_bytes(4, "big"))
        if _is_4in6(self.value, self.bits):
            return "::ffff:" + IP(self.value & 0xFFFFFFFF, 32).cel_string()
        groups = [(self.value >> (112 - 16 * k)) & 0xFFFF for k in range(8)]
        best_start, best_len = -1, 1
        k = 0
        while k < 8:
            j = k
            while j < 8 and groups[j] == 0:
                j += 1
            if j - k > best_len:
                best_start, best_len = k, j - k
            k = max(j, k + 1)
        if best_start < 0:
            return ":".join(f"{g:x}" for g in groups)
        head = ":".join(f"{g:x}" for g in groups[:best_start])
        tail = ":".join(f"{g:x}" for g in groups[best_start + best_len :])
        return f"{head}::{tail}"

    def _top(self, nbits: int) -> int:
        return self.value >> (self.bits - nbits)

    def is_loopback(self) -> bool:
        return self._top(8) == 127 if self.bits == 32 else self.value == 1

    def is_multicast(self) -> bool:
        return self._top(4) == 0xE if self.bits == 32 else self._top(8) == 0xFF

    def is_link_local_unicast(self) -> bool:
        return self._top(16) == 0xA9FE if self.bits == 32 else self._top(16) & 0xFFC0 == 0xFE80

    def is_link_local_multicast(self) -> bool:
        return self._top(24) == 0xE00000 if self.bits == 32 else self._top(16) & 0xFF0F == 0xFF02

    def is_global_unicast(self) -> bool:
        # Go's rule: private IPv4 and unique-local IPv6 still count as global unicast.
        if self.bits == 32 and self.value in (0, 0xFFFFFFFF):
            return False
        return self.value != 0 and not (self.is_loopback() or self.is_multicast() or self.is_link_local_unicast())


def _parse_ip(s: str) -> IP:
    """Kubernetes' parseIPAddr: netip.ParseAddr minus zones and IPv4-mapped IPv6."""
    try:
        value, bits, zone = parse_addr(s)
    except ValueError as exc:
        raise EvalError(f"IP Address {go_quote(s)} parse error during conversion from string: {exc}") from None
    if zone:
        raise EvalError(f"IP address {go_quote(s)} with zone value is not allowed")
    if _is_4in6(value, bits):
        raise EvalError(f"IPv4-mapped IPv6 address {go_quote(s)} is not allowed")
    return IP(value, bits)


class CIDR:
    """A net.CIDR: an address and a prefix length. The address keeps its host bits
    (cidr('10.0.0.1/8') != cidr('10.0.0.0/8')); ``masked()`` clears them."""

    __slots__ = ("addr", "prefix")

    def __init__(self, addr: IP, prefix: int) -> None:
        self.addr = addr
        self.prefix = prefix

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CIDR):
            return NotImplemented
        return self.addr == other.addr and self.prefix == other.prefix

    def __hash__(self) -> int:
        return hash(("CIDR", self.addr, self.prefix))

    def __repr__(self) -> str:
        return f"cidr({self.cel_string()!r})"

    def cel_string(self) -> str:
        return f"{self.addr.cel_string()}/{self.prefix}"

    def masked(self) -> CIDR:
        host = self.addr.bits - self.prefix
        return CIDR(IP(self.addr.value >> host << host, self.addr.bits), self.prefix)

    def contains_ip(self, ip: IP) -> bool:
        host = self.addr.bits - self.prefix
        return ip.bits == self.addr.bits and ip.value >> host == self.addr.value >> host

    def contains_cidr(self, other: CIDR) -> bool:
        # As fixed in Kubernetes 1.33 (kubernetes#130450): compare both sides masked.
        if other.addr.bits != self.addr.bits or other.prefix < self.prefix:
            return False
        return self.contains_ip(other.addr)


def parse_prefix(s: str) -> CIDR:
    """netip.ParsePrefix; ValueError with Go's message."""
    where = f"netip.ParsePrefix({go_quote(s)})"
    i = s.rfind("/")
    if i < 0:
        raise ValueError(f"{where}: no '/'")
    try:
        value, bits, zone = parse_addr(s[:i])
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None
    if zone:
        raise ValueError(f"{where}: IPv6 zones cannot be present in a prefix")
    text = s[i + 1 :]
    # Go 1.22+ rejects a sign or leading zeros that strconv.Atoi alone would accept.
    if not text.isascii() or not text.isdigit() or len(text) > 1 and text[0] == "0":
        raise ValueError(f"{where}: bad bits after slash: {go_quote(text)}")
    if len(text) > 19 or int(text) > 2**63 - 1:  # beyond strconv.Atoi
        raise ValueError(f"{where}: bad bits after slash: {go_quote(text)}")
    if int(text) > bits:
        raise ValueError(f"{where}: prefix length out of range")
    return CIDR(IP(value, bits), int(text))


def _parse_cidr(s: str) -> CIDR:
    # Kubernetes wraps the netip message twice; the repetition is theirs.
    prefix = "network address parse error during conversion from string"
    try:
        result = parse_prefix(s)
    except ValueError as exc:
        raise EvalError(f"{prefix}: {prefix}: {exc}") from None
    if _is_4in6(result.addr.value, result.addr.bits):
        raise EvalError(f"{prefix}: IPv4-mapped IPv6 address {go_quote(s)} is not allowed")
    return result


def _string_arg(name: str, s: Any) -> str:
    if type(s) is not str:
        raise no_such_overload(name, s)
    return s


def ip(s: Any) -> IP:
    return _parse_ip(_string_arg("ip", s))


def is_ip(s: Any) -> bool:
    text = _string_arg("isIP", s)  # a wrong type is an error, not "false"
    try:
        _parse_ip(text)
    except EvalError:
        return False
    return True


def ip_is_canonical(s: Any) -> bool:
    text = _string_arg("ip.isCanonical", s)
    return _parse_ip(text).cel_string() == text


def cidr(s: Any) -> CIDR:
    return _parse_cidr(_string_arg("cidr", s))


def is_cidr(s: Any) -> bool:
    text = _string_arg("isCIDR", s)
    try:
        _parse_cidr(text)
    except EvalError:
        return False
    return True


def _contains_ip(c: CIDR, other: Any) -> bool:
    if type(other) is str:
        other = _parse_ip(other)
    if type(other) is not IP:
        raise no_such_overload("containsIP", c, other)
    return c.contains_ip(other)


def _contains_cidr(c: CIDR, other: Any) -> bool:
    if type(other) is str:
        other = _parse_cidr(other)
    if type(other) is not CIDR:
        raise no_such_overload("containsCIDR", c, other)
    return c.contains_cidr(other)


register_type(IP, "net.IP")
register_type(CIDR, "net.CIDR")

FUNCTIONS: dict[str, Any] = {
    "ip": ip,
    "isIP": is_ip,
    "ip.isCanonical": ip_is_canonical,
    "cidr": cidr,
    "isCIDR": is_cidr,
}

METHODS: dict[str, dict[type, Any]] = {
    "family": {IP: lambda a: 4 if a.bits == 32 else 6},
    "isUnspecified": {IP: lambda a: a.value == 0},
    "isLoopback": {IP: IP.is_loopback},
    "isLinkLocalMulticast": {IP: IP.is_link_local_multicast},
    "isLinkLocalUnicast": {IP: IP.is_link_local_unicast},
    "isGlobalUnicast": {IP: IP.is_global_unicast},
    "containsIP": {CIDR: _contains_ip},
    "containsCIDR": {CIDR: _contains_cidr},
    "ip": {CIDR: lambda c: c.addr},
    "masked": {CIDR: CIDR.masked},
    "prefixLength": {CIDR: lambda c: c.prefix},
}

RESULT_TYPES: dict[str, str] = {
    "ip": "net.IP",
    "isIP": "bool",
    "ip.isCanonical": "bool",
    "cidr": "net.CIDR",
    "isCIDR": "bool",
    "family": "int",
    "isUnspecified": "bool",
    "isLoopback": "bool",
    "isLinkLocalMulticast": "bool",
    "isLinkLocalUnicast": "bool",
    "isGlobalUnicast": "bool",
    "containsIP": "bool",
    "containsCIDR": "bool",
    "masked": "net.CIDR",
    "prefixLength": "int",
}
