"""The static signatures of kpe's CEL functions: argument and result types, for the
typed check (``engine.cel.checker.types``; the types are ``typemodel``'s).

One line per overload, as docs/cel-functions.md writes them:
``receiver.name(arguments) -> result`` for a method, ``name(arguments) -> result``
for a global function (namespaced ones included: ``kube.podRequests``). Single
capital letters (``A``, ``K``, ``V``) are type parameters; ``dyn`` takes anything.
A function that is not listed here is typed ``dyn`` and its arguments are not
checked, so the table only has to be right, not complete.

Arguments are checked leniently, as what kpe's run time accepts: a Kubernetes
object is a ``map``, ``null`` and ``dyn`` fit any parameter.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from engine.cel.checker.typemodel import Type, list_of, map_of, named, optional_of

_SIGNATURES = """
size(string) -> int
size(bytes) -> int
size(list(A)) -> int
size(map(K, V)) -> int
string.size() -> int
bytes.size() -> int
list(A).size() -> int
map(K, V).size() -> int
string.contains(string) -> bool
string.startsWith(string) -> bool
string.endsWith(string) -> bool
type(A) -> type

int(dyn) -> int
uint(dyn) -> uint
double(dyn) -> double
string(dyn) -> string
bytes(dyn) -> bytes
bool(dyn) -> bool
timestamp(dyn) -> timestamp
duration(dyn) -> duration

string.charAt(int) -> string
string.indexOf(string) -> int
string.indexOf(string, int) -> int
string.lastIndexOf(string) -> int
string.lastIndexOf(string, int) -> int
list(A).indexOf(A) -> int
list(A).lastIndexOf(A) -> int
string.lowerAscii() -> string
string.upperAscii() -> string
string.replace(string, string) -> string
string.replace(string, string, int) -> string
string.split(string) -> list(string)
string.split(string, int) -> list(string)
string.substring(int) -> string
string.substring(int, int) -> string
string.trim() -> string
string.reverse() -> string
list(string).join() -> string
list(string).join(string) -> string
string.format(list(dyn)) -> string
strings.quote(string) -> string

string.matches(string) -> bool
matches(string, string) -> bool
string.find(string) -> string
string.findAll(string) -> list(string)
string.findAll(string, int) -> list(string)

list(A).sum() -> A
list(A).min() -> A
list(A).max() -> A
list(A).isSorted() -> bool

lists.range(int) -> list(int)
list(A).reverse() -> list(A)
list(A).slice(int, int) -> list(A)
list(dyn).flatten() -> list(dyn)
list(dyn).flatten(int) -> list(dyn)
list(A).distinct() -> list(A)
list(A).sort() -> list(A)
list(dyn).sortBy() -> list(dyn)
list(dyn).transformMapEntry() -> map(dyn, dyn)

sets.contains(list(A), list(A)) -> bool
sets.equivalent(list(A), list(A)) -> bool
sets.intersects(list(A), list(A)) -> bool

format.named(string) -> optional(kubernetes.NamedFormat)
format.dns1123Label() -> kubernetes.NamedFormat
format.dns1123Subdomain() -> kubernetes.NamedFormat
format.dns1035Label() -> kubernetes.NamedFormat
format.qualifiedName() -> kubernetes.NamedFormat
format.dns1123LabelPrefix() -> kubernetes.NamedFormat
format.dns1123SubdomainPrefix() -> kubernetes.NamedFormat
format.dns1035LabelPrefix() -> kubernetes.NamedFormat
format.labelValue() -> kubernetes.NamedFormat
format.uri() -> kubernetes.NamedFormat
format.uuid() -> kubernetes.NamedFormat
format.byte() -> kubernetes.NamedFormat
format.date() -> kubernetes.NamedFormat
format.datetime() -> kubernetes.NamedFormat
kubernetes.NamedFormat.validate(string) -> optional(list(string))

quantity(string) -> kubernetes.Quantity
isQuantity(string) -> bool
kubernetes.Quantity.add(kubernetes.Quantity) -> kubernetes.Quantity
kubernetes.Quantity.add(int) -> kubernetes.Quantity
kubernetes.Quantity.sub(kubernetes.Quantity) -> kubernetes.Quantity
kubernetes.Quantity.sub(int) -> kubernetes.Quantity
kubernetes.Quantity.asInteger() -> int
kubernetes.Quantity.isInteger() -> bool
kubernetes.Quantity.asApproximateFloat() -> double
kubernetes.Quantity.compareTo(kubernetes.Quantity) -> int
kubernetes.Quantity.isGreaterThan(kubernetes.Quantity) -> bool
kubernetes.Quantity.isLessThan(kubernetes.Quantity) -> bool
kubernetes.Quantity.sign() -> int
sign(kubernetes.Quantity) -> int

semver(string) -> kubernetes.Semver
semver(string, bool) -> kubernetes.Semver
isSemver(string) -> bool
isSemver(string, bool) -> bool
kubernetes.Semver.major() -> int
kubernetes.Semver.minor() -> int
kubernetes.Semver.patch() -> int
kubernetes.Semver.compareTo(kubernetes.Semver) -> int
kubernetes.Semver.isGreaterThan(kubernetes.Semver) -> bool
kubernetes.Semver.isLessThan(kubernetes.Semver) -> bool

ip(string) -> net.IP
isIP(string) -> bool
ip.isCanonical(string) -> bool
net.IP.family() -> int
net.IP.isUnspecified() -> bool
net.IP.isLoopback() -> bool
net.IP.isLinkLocalMulticast() -> bool
net.IP.isLinkLocalUnicast() -> bool
net.IP.isGlobalUnicast() -> bool
cidr(string) -> net.CIDR
isCIDR(string) -> bool
net.CIDR.containsIP(net.IP) -> bool
net.CIDR.containsIP(string) -> bool
net.CIDR.containsCIDR(net.CIDR) -> bool
net.CIDR.containsCIDR(string) -> bool
net.CIDR.ip() -> net.IP
net.CIDR.masked() -> net.CIDR
net.CIDR.prefixLength() -> int

url(string) -> kubernetes.URL
isURL(string) -> bool
kubernetes.URL.getScheme() -> string
kubernetes.URL.getHost() -> string
kubernetes.URL.getHostname() -> string
kubernetes.URL.getPort() -> string
kubernetes.URL.getEscapedPath() -> string
kubernetes.URL.getQuery() -> map(string, list(string))

optional.of(A) -> optional(A)
optional.none() -> optional(dyn)
optional.ofNonZeroValue(A) -> optional(A)
optional(A).hasValue() -> bool
optional(A).value() -> A
optional(A).orValue(A) -> A
optional(A).or(optional(A)) -> optional(A)

timestamp.getFullYear() -> int
timestamp.getFullYear(string) -> int
timestamp.getMonth() -> int
timestamp.getMonth(string) -> int
timestamp.getDate() -> int
timestamp.getDate(string) -> int
timestamp.getDayOfMonth() -> int
timestamp.getDayOfMonth(string) -> int
timestamp.getDayOfWeek() -> int
timestamp.getDayOfWeek(string) -> int
timestamp.getDayOfYear() -> int
timestamp.getDayOfYear(string) -> int
timestamp.getHours() -> int
timestamp.getHours(string) -> int
timestamp.getMinutes() -> int
timestamp.getMinutes(string) -> int
timestamp.getSeconds() -> int
timestamp.getSeconds(string) -> int
timestamp.getMilliseconds() -> int
timestamp.getMilliseconds(string) -> int
duration.getHours() -> int
duration.getMinutes() -> int
duration.getSeconds() -> int
duration.getMilliseconds() -> int

kube.podRequests(map(string, dyn)) -> map(string, kubernetes.Quantity)
kube.podRequests(map(string, dyn), string) -> kubernetes.Quantity
kube.toleratesTaint(map(string, dyn), map(string, dyn)) -> bool
kube.podToleratesTaint(map(string, dyn), map(string, dyn)) -> bool
kube.untoleratedTaints(map(string, dyn), map(string, dyn)) -> list(dyn)
kube.podToleratesNodeTaints(map(string, dyn), map(string, dyn)) -> bool
kube.nodeSelectorMatches(map(string, dyn), map(string, dyn)) -> bool
kube.podNodeAffinityMatches(map(string, dyn), map(string, dyn)) -> bool
kube.nodeFree(map(string, dyn), map(string, dyn), string) -> kubernetes.Quantity
kube.podDevices(map(string, dyn), map(string, dyn), string) -> int
kube.nodeDevices(map(string, dyn), map(string, dyn), string) -> map(string, int)
kube.nodeFreeDevices(map(string, dyn), map(string, dyn), map(string, dyn), string) -> int

kpe.Counts.inDomain(map(string, dyn), string, map(string, string)) -> int
kpe.Counts.domains(string, map(string, string)) -> int
kpe.Counts.cluster(map(string, string)) -> int
"""

# Qualifiers of namespaced global functions (not receivers): ``kube.nodeFree(...)``.
_NAMESPACES = ("kube.", "strings.", "optional.", "ip.", "lists.", "sets.", "format.")


@dataclass(frozen=True)
class Overload:
    """One signature: ``receiver`` is ``None`` for a global function."""

    name: str
    receiver: Type | None
    args: tuple[Type, ...]
    result: Type

    def render(self) -> str:
        args = ", ".join(str(a) for a in self.args)
        head = f"{self.receiver}." if self.receiver is not None else ""
        return f"{head}{self.name}({args}) -> {self.result}"


def parse_type(text: str) -> Type:
    """``list(map(string, A))`` as a ``Type`` (type parameters are named ``A``, ``K``...)."""
    text = text.strip()
    if "(" not in text:
        return named(text)
    head, _, rest = text.partition("(")
    inner = rest[: rest.rindex(")")]
    params = [parse_type(p) for p in _split_top(inner)]
    if head == "list":
        return list_of(params[0])
    if head == "map":
        return map_of(params[0], params[1])
    if head == "optional":
        return optional_of(params[0])
    raise ValueError(f"unknown type constructor {head!r}")


def _split_top(text: str) -> list[str]:
    """Split at the commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:])
    return parts


def _parse_line(line: str) -> Overload:
    call, _, result = line.partition(" -> ")
    open_at = _call_paren(call)
    head, args = call[:open_at], call[open_at + 1 : -1]
    receiver: Type | None = None
    name = head
    if not head.startswith(_NAMESPACES) and "." in head:
        cut = _receiver_end(head)
        if cut > 0:
            receiver, name = parse_type(head[:cut]), head[cut + 1 :]
    return Overload(name, receiver, tuple(parse_type(a) for a in _split_top(args)), parse_type(result))


def _call_paren(call: str) -> int:
    """The index of the parenthesis that opens the argument list (the last top-level one)."""
    depth, found = 0, -1
    for i, ch in enumerate(call):
        if ch == "(":
            if depth == 0:
                found = i
            depth += 1
        elif ch == ")":
            depth -= 1
    return found


def _receiver_end(head: str) -> int:
    """The index of the dot between a receiver type and a method name (-1: none)."""
    depth = 0
    for i in range(len(head) - 1, -1, -1):
        ch = head[i]
        if ch == ")":
            depth += 1
        elif ch == "(":
            depth -= 1
        elif ch == "." and depth == 0:
            return i
    return -1


@lru_cache(maxsize=1)
def overloads() -> dict[tuple[str, bool], tuple[Overload, ...]]:
    """Overloads by (name, is-a-method)."""
    table: dict[tuple[str, bool], list[Overload]] = {}
    for raw in _SIGNATURES.strip().splitlines():
        line = raw.strip()
        if line:
            o = _parse_line(line)
            table.setdefault((o.name, o.receiver is not None), []).append(o)
    return {k: tuple(v) for k, v in table.items()}

