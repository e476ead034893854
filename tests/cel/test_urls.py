"""Kubernetes' CEL URL library, called through its FUNCTIONS/METHODS tables.

Cases come from urls.go's docs and the "URL parsing" cases of Kubernetes'
apiextensions-apiserver/pkg/apiserver/schema/cel/validation_test.go; parse errors are
Go net/url's (as of Go 1.25) wrapped the way urls.go wraps them.
"""

from __future__ import annotations

from typing import Any

import pytest

from engine.cel.ext import urls as lib
from engine.cel.errors import EvalError, NoSuchOverloadError
from engine.cel.ext.network import go_quote
from engine.cel.types.values import type_name


def url(text: str) -> lib.URL:
    result = lib.FUNCTIONS["url"](text)
    assert isinstance(result, lib.URL)
    return result


def call(name: str, recv: Any) -> Any:
    return lib.METHODS[name][type(recv)](recv)


@pytest.mark.parametrize(
    ("text", "method", "expected"),
    [
        ("/path", "getScheme", ""),
        ("https://example.com/", "getScheme", "https"),
        ("https://example.com:80/", "getHost", "example.com:80"),
        ("https://example.com/", "getHost", "example.com"),
        ("https://[::1]:80/", "getHost", "[::1]:80"),
        ("https://[::1]/", "getHost", "[::1]"),
        ("/path", "getHost", ""),
        ("https://example.com:80/", "getHostname", "example.com"),
        ("https://127.0.0.1:80/", "getHostname", "127.0.0.1"),
        ("https://127.0.0.1/", "getHostname", "127.0.0.1"),
        ("https://[::1]:80/", "getHostname", "::1"),
        ("https://[::1]/", "getHostname", "::1"),
        ("/path", "getHostname", ""),
        ("https://example.com:80/", "getPort", "80"),
        ("https://example.com/", "getPort", ""),
        ("/path", "getPort", ""),
        ("https://example.com/path", "getEscapedPath", "/path"),
        ("https://example.com/path with spaces/", "getEscapedPath", "/path%20with%20spaces/"),
        ("https://example.com/with space/", "getEscapedPath", "/with%20space/"),
        ("https://example.com", "getEscapedPath", ""),
        # a valid escaping in the input is kept as written (Go's RawPath)
        ("https://example.com/a%2Fb", "getEscapedPath", "/a%2Fb"),
        ("https://example.com/caf%C3%A9", "getEscapedPath", "/caf%C3%A9"),
        ("https://example.com/café", "getEscapedPath", "/caf%C3%A9"),
        ("HTTPS://example.com/", "getScheme", "https"),  # schemes are lower-cased
    ],
)
def test_url_getters_return_the_parsed_components(text: str, method: str, expected: str) -> None:
    assert call(method, url(text)) == expected


@pytest.mark.parametrize(
    ("text", "query"),
    [
        ("https://example.com/path?k1=a&k2=b&k2=c", {"k1": ["a"], "k2": ["b", "c"]}),
        ("https://example.com/path?key with spaces=value with spaces", {"key with spaces": ["value with spaces"]}),
        ("https://example.com/path?", {}),
        ("https://example.com/path", {}),
        ("https://example.com/?a=1%202&b=x+y&c", {"a": ["1 2"], "b": ["x y"], "c": [""]}),
        # Go drops pairs with a bare semicolon or a bad escape rather than failing
        ("https://example.com/?a=1;b=2&c=3&d=%zz", {"c": ["3"]}),
    ],
)
def test_get_query_returns_every_value_of_every_key(text: str, query: dict[str, list[str]]) -> None:
    assert call("getQuery", url(text)) == query


def test_the_fragment_is_not_part_of_path_or_query() -> None:
    u = url("https://user:pass@kubernetes.io:80/docs/home?k1=a&k2=b&k2=c#anchor")
    assert call("getScheme", u) == "https"
    assert call("getHost", u) == "kubernetes.io:80"
    assert call("getHostname", u) == "kubernetes.io"
    assert call("getPort", u) == "80"
    assert call("getEscapedPath", u) == "/docs/home"
    assert call("getQuery", u) == {"k1": ["a"], "k2": ["b", "c"]}


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("https://user:pass@example.com:80/path?query=val#fragment", True),
        ("/absolute-path", True),
        ("/path", True),
        ("https://a:b:c/", False),
        ("../relative-path", False),
        ("relative", False),
        ("", False),
        ("mailto:someone@example.com", True),  # an absolute URI with an opaque part
        ("*", True),
    ],
)
def test_is_url_accepts_absolute_uris_and_absolute_paths(text: str, valid: bool) -> None:
    assert lib.FUNCTIONS["isURL"](text) is valid


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("https://a:b:c/", 'invalid port ":b:c" after host'),
        ("../relative-path", "invalid URI for request"),
        ("", "empty url"),
        ("://x", "missing protocol scheme"),
        ("https://example.com:abc/x", 'invalid port ":abc" after host'),
        ("https://ü@example.com/", "net/url: invalid userinfo"),
        ("https://example.com/%zz", 'invalid URL escape "%zz"'),
        ("https://a{b}/", 'invalid character "{" in host name'),
        ("https://[1.2.3.4]/", "invalid IP-literal"),
        ("https://[v1.x]/", 'invalid host: ParseAddr("v1.x"): unexpected character (at "v1.x")'),
        ("https://[::1/", "missing ']' in host"),
        ("https://example.com/\x7f", "net/url: invalid control character in URL"),
    ],
)
def test_url_rejects_what_parse_request_uri_rejects(text: str, reason: str) -> None:
    with pytest.raises(EvalError) as info:
        url(text)
    assert info.value.message == f"URL parse error during conversion from string: parse {go_quote(text)}: {reason}"
    assert lib.FUNCTIONS["isURL"](text) is False


def test_non_http_schemes_may_list_several_hosts() -> None:
    # Go keeps accepting colons in non-http(s) hosts (golang/go#75223), e.g. database URLs.
    assert call("getHost", url("postgres://h1:5432,h2:5433/db")) == "h1:5432,h2:5433"


def test_bracketed_ipv6_hosts_may_carry_a_zone() -> None:
    u = url("https://[fe80::1%25en0]:8080/")
    assert call("getHost", u) == "[fe80::1%en0]:8080"
    assert call("getHostname", u) == "fe80::1%en0"
    assert call("getPort", u) == "8080"


def test_urls_are_equal_when_go_prints_them_the_same() -> None:
    assert url("https://example.com/a?b=c#d") == url("https://example.com/a?b=c#d")
    assert url("HTTPS://example.com/a") == url("https://example.com/a")
    assert url("https://example.com/a") != url("https://example.com/b")
    assert url("https://example.com/a") != url("https://example.com/a#x")
    assert hash(url("HTTPS://example.com/a")) == hash(url("https://example.com/a"))


def test_url_of_a_non_string_is_no_such_overload() -> None:
    with pytest.raises(NoSuchOverloadError):
        lib.FUNCTIONS["url"](42)
    with pytest.raises(NoSuchOverloadError):
        lib.FUNCTIONS["isURL"](None)


def test_the_cel_type_is_named_kubernetes_url() -> None:
    assert type_name(url("/")) == "kubernetes.URL"
