"""Kubernetes' CEL IP and CIDR libraries, called through their FUNCTIONS/METHODS tables.

Cases come from k8s.io/apiserver/pkg/cel/library/ip_test.go and cidr_test.go (error
texts included), the examples in ip.go and cidr.go, kubernetes#130450 (containsCIDR),
and Go's net/netip parsing rules that Kubernetes relies on.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.cel.ext import network as lib
from engine.cel.errors import EvalError, NoSuchOverloadError
from engine.cel.types.values import type_name


def ip(text: str) -> lib.IP:
    result = lib.FUNCTIONS["ip"](text)
    assert isinstance(result, lib.IP)
    return result


def cidr(text: str) -> lib.CIDR:
    result = lib.FUNCTIONS["cidr"](text)
    assert isinstance(result, lib.CIDR)
    return result


def call(name: str, recv: Any, *args: Any) -> Any:
    return lib.METHODS[name][type(recv)](recv, *args)


# --- ip_test.go ---------------------------------------------------------------------------


def test_ip_parses_ipv4_and_ipv6() -> None:
    assert ip("192.168.0.1").cel_string() == "192.168.0.1"
    assert ip("2001:db8::68").cel_string() == "2001:db8::68"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "192.168.0.1.0",
            'IP Address "192.168.0.1.0" parse error during conversion from string: '
            'ParseAddr("192.168.0.1.0"): IPv4 address too long',
        ),
        (
            "2001:db8:::68",
            'IP Address "2001:db8:::68" parse error during conversion from string: '
            'ParseAddr("2001:db8:::68"): each colon-separated field must have at least one digit (at ":68")',
        ),
        ("fe80::1%eth0", 'IP address "fe80::1%eth0" with zone value is not allowed'),
        ("::ffff:1.2.3.4", 'IPv4-mapped IPv6 address "::ffff:1.2.3.4" is not allowed'),
        (
            "127.0.0.256",
            'IP Address "127.0.0.256" parse error during conversion from string: '
            'ParseAddr("127.0.0.256"): IPv4 field has value >255',
        ),
        (
            "01.2.3.4",
            'IP Address "01.2.3.4" parse error during conversion from string: '
            'ParseAddr("01.2.3.4"): IPv4 field has octet with leading zero',
        ),
    ],
)
def test_ip_rejects_bad_addresses_with_kubernetes_messages(text: str, message: str) -> None:
    with pytest.raises(EvalError) as info:
        ip(text)
    assert info.value.message == message
    assert lib.FUNCTIONS["isIP"](text) is False


@pytest.mark.parametrize(
    "text", ["192.168.0.1", "2001:db8::68", "::1", "::", "0.0.0.0", "1::1.2.3.4", "fe80::1"]
)
def test_is_ip_accepts_addresses(text: str) -> None:
    assert lib.FUNCTIONS["isIP"](text) is True


@pytest.mark.parametrize("text", [":::1", "1.2.3", "", "abc", "1.2.3.4/32", " 1.2.3.4", "1::2::3"])
def test_is_ip_rejects_non_addresses(text: str) -> None:
    assert lib.FUNCTIONS["isIP"](text) is False


def test_is_ip_of_a_cidr_is_no_such_overload() -> None:
    with pytest.raises(NoSuchOverloadError):
        lib.FUNCTIONS["isIP"](cidr("192.168.0.0/24"))


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("127.0.0.1", True),
        ("2001:db8::68", True),
        ("2001:db8::abcd", True),
        ("2001:DB8::68", False),
        ("2001:DB8::ABCD", False),
        ("2001:db8::0:0:0:abcd", False),
    ],
)
def test_ip_is_canonical_compares_with_the_canonical_text(text: str, canonical: bool) -> None:
    assert lib.FUNCTIONS["ip.isCanonical"](text) is canonical


@pytest.mark.parametrize("text", ["127.0.0.1.0", "2001:db8:::68"])
def test_ip_is_canonical_of_an_invalid_address_is_an_error(text: str) -> None:
    with pytest.raises(EvalError, match="parse error during conversion from string"):
        lib.FUNCTIONS["ip.isCanonical"](text)


@pytest.mark.parametrize(
    ("method", "text", "expected"),
    [
        ("family", "192.168.0.1", 4),
        ("family", "2001:db8::68", 6),
        ("isUnspecified", "0.0.0.0", True),
        ("isUnspecified", "127.0.0.1", False),
        ("isUnspecified", "::", True),
        ("isUnspecified", "::1", False),
        ("isLoopback", "127.0.0.1", True),
        ("isLoopback", "1.2.3.4", False),
        ("isLoopback", "192.168.0.1", False),
        ("isLoopback", "::1", True),
        ("isLoopback", "2001:db8::abcd", False),
        ("isLinkLocalMulticast", "224.0.0.1", True),
        ("isLinkLocalMulticast", "224.0.1.1", False),
        ("isLinkLocalMulticast", "ff02::1", True),
        ("isLinkLocalMulticast", "fd00::1", False),
        ("isLinkLocalUnicast", "169.254.169.254", True),
        ("isLinkLocalUnicast", "192.168.0.1", False),
        ("isLinkLocalUnicast", "fe80::1", True),
        ("isLinkLocalUnicast", "fd80::1", False),
        ("isGlobalUnicast", "192.168.0.1", True),
        ("isGlobalUnicast", "255.255.255.255", False),
        ("isGlobalUnicast", "0.0.0.0", False),
        ("isGlobalUnicast", "2001:db8::abcd", True),
        ("isGlobalUnicast", "ff00::1", False),
        ("isGlobalUnicast", "fe80::1", False),
        ("isGlobalUnicast", "fd00::1", True),  # unique-local still counts, as in Go
    ],
)
def test_ip_methods_classify_addresses(method: str, text: str, expected: Any) -> None:
    assert call(method, ip(text)) == expected


@pytest.mark.parametrize(
    ("text", "string"),
    [
        ("192.168.0.1", "192.168.0.1"),
        ("2001:DB8:0:0:0:0:0:1", "2001:db8::1"),
        ("1:0:0:1:0:0:0:1", "1:0:0:1::1"),  # the longest run of zeros is elided
        ("1:0:0:1:0:0:1:1", "1::1:0:0:1:1"),  # the first of equally long runs
        ("1:0:1:1:1:1:1:1", "1:0:1:1:1:1:1:1"),  # a single zero group stays
        ("::1.2.3.4", "::102:304"),
    ],
)
def test_string_of_an_ip_is_its_canonical_form(text: str, string: str) -> None:
    assert ip(text).cel_string() == string


def test_ips_are_equal_by_address() -> None:
    assert ip("2001:DB8::1") == ip("2001:db8::1")
    assert ip("1.2.3.4") != ip("1.2.3.5")
    assert ip("::") != ip("0.0.0.0")
    assert hash(ip("2001:DB8::1")) == hash(ip("2001:db8::1"))


def test_the_cel_types_are_net_ip_and_net_cidr() -> None:
    assert type_name(ip("192.168.0.1")) == "net.IP"
    assert type_name(cidr("192.168.0.0/24")) == "net.CIDR"


# --- cidr_test.go ---------------------------------------------------------------------------


def test_cidr_of_an_int_is_no_such_overload() -> None:
    with pytest.raises(NoSuchOverloadError):
        lib.FUNCTIONS["cidr"](192168)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "192.168.0.0/",
            "network address parse error during conversion from string: network address parse error "
            'during conversion from string: netip.ParsePrefix("192.168.0.0/"): bad bits after slash: ""',
        ),
        (
            "2001:db8::/",
            "network address parse error during conversion from string: network address parse error "
            'during conversion from string: netip.ParsePrefix("2001:db8::/"): bad bits after slash: ""',
        ),
        (
            "::ffff:1.2.3.4/24",
            'network address parse error during conversion from string: IPv4-mapped IPv6 address "::ffff:1.2.3.4/24" '
            "is not allowed",
        ),
    ],
)
def test_cidr_rejects_bad_prefixes_with_kubernetes_messages(text: str, message: str) -> None:
    with pytest.raises(EvalError) as info:
        cidr(text)
    assert info.value.message == message


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("192.168.0.0/33", "prefix length out of range"),
        ("::1/129", "prefix length out of range"),
        ("192.168.0.0", "no '/'"),
        ("192.168.0.0/+8", "bad bits after slash"),
        ("192.168.0.0/08", "bad bits after slash"),
        ("fe80::1%eth0/64", "IPv6 zones cannot be present in a prefix"),
    ],
)
def test_cidr_rejects_what_netip_parse_prefix_rejects(text: str, reason: str) -> None:
    with pytest.raises(EvalError, match=reason):
        cidr(text)
    assert lib.FUNCTIONS["isCIDR"](text) is False


@pytest.mark.parametrize("text", ["192.168.0.0/16", "::1/128", "0.0.0.0/0", "192.168.0.1/24"])
def test_is_cidr_accepts_prefixes_including_host_bits(text: str) -> None:
    assert lib.FUNCTIONS["isCIDR"](text) is True


@pytest.mark.parametrize(
    ("net", "method", "arg", "expected"),
    [
        ("192.168.0.0/24", "containsIP", "192.168.0.1", True),
        ("192.168.0.0/24", "containsIP", "192.168.1.1", False),
        ("192.168.0.0/24", "containsCIDR", "192.168.0.0/25", True),
        ("192.168.0.0/24", "containsCIDR", "192.168.0.0/23", False),
        ("2001:db8::/32", "containsIP", "2001:db8::1", True),
        ("2001:db8::/32", "containsIP", "2001:dc8::1", False),
        ("2001:db8::/32", "containsCIDR", "2001:db8::/33", True),
        ("2001:db8::/32", "containsCIDR", "2001:db8::/31", False),
        # cidr.go's examples, and kubernetes#130450: the inner address need not be the
        # outer network address (fixed in 1.33, cherry-picked to 1.31 and 1.32).
        ("192.168.0.0/16", "containsCIDR", "192.168.10.0/24", True),
        ("192.168.1.0/24", "containsCIDR", "192.168.2.0/24", False),
        ("192.168.0.0/16", "containsCIDR", "192.168.0.1/32", True),
        # families never mix
        ("0.0.0.0/0", "containsIP", "::1", False),
        ("::/0", "containsIP", "1.2.3.4", False),
        ("::/0", "containsCIDR", "1.2.3.0/24", False),
    ],
)
def test_cidr_containment_with_ip_cidr_or_string_arguments(net: str, method: str, arg: str, expected: bool) -> None:
    parsed_arg: Any = ip(arg) if method == "containsIP" else cidr(arg)
    assert call(method, cidr(net), parsed_arg) is expected
    assert call(method, cidr(net), arg) is expected


def test_contains_ip_with_an_invalid_string_is_an_error() -> None:
    with pytest.raises(EvalError, match="parse error during conversion from string"):
        call("containsIP", cidr("10.0.0.0/8"), "10.0.0.256")


def test_contains_ip_with_an_int_is_no_such_overload() -> None:
    with pytest.raises(NoSuchOverloadError):
        call("containsIP", cidr("10.0.0.0/8"), 10)


@pytest.mark.parametrize(
    ("net", "address", "masked", "prefix", "family"),
    [
        ("192.168.0.0/24", "192.168.0.0", "192.168.0.0/24", 24, 4),
        ("192.168.0.1/24", "192.168.0.1", "192.168.0.0/24", 24, 4),
        ("2001:db8::/32", "2001:db8::", "2001:db8::/32", 32, 6),
        ("2001:db8:1::/32", "2001:db8:1::", "2001:db8::/32", 32, 6),
        ("::1/128", "::1", "::1/128", 128, 6),
    ],
)
def test_cidr_ip_masked_and_prefix_length(net: str, address: str, masked: str, prefix: int, family: int) -> None:
    c = cidr(net)
    assert call("ip", c) == ip(address)
    assert call("family", call("ip", c)) == family
    assert call("masked", c) == cidr(masked)
    assert call("masked", c).cel_string() == masked
    assert call("prefixLength", c) == prefix


def test_cidrs_are_equal_only_with_the_same_host_bits() -> None:
    assert cidr("192.168.0.0/24") == call("masked", cidr("192.168.0.0/24"))
    assert cidr("192.168.0.1/24") != call("masked", cidr("192.168.0.1/24"))
    assert hash(cidr("10.0.0.0/8")) == hash(cidr("10.0.0.0/8"))


def test_string_of_a_cidr() -> None:
    assert cidr("192.168.0.0/24").cel_string() == "192.168.0.0/24"
    assert cidr("2001:DB8::/32").cel_string() == "2001:db8::/32"
