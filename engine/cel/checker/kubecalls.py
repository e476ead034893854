"""What each call costs in Kubernetes' units (``kubecost.py``): cel-go's own functions
(``checker/cost.go``), Kubernetes' libraries (``apiserver/pkg/cel/library/cost.go``),
cel-go's sets and lists extensions, and kpe's ``kube.*`` helpers (one unit per item they
visit, as their run-time costs charge; Kubernetes has no such functions).
"""

from __future__ import annotations

from collections.abc import Mapping

from engine.cel.parser import ast

from engine.cel.checker.kubeunits import (
    DYN, FIXED, MAX, MAX_FORMAT_SIZE, MAX_NAME_FORMAT_REGEX, ONE, REGEX_FACTOR, SCALAR, STRING_FACTOR,
    Cost, Part, Size, Sizes, Value, join, product, sat_add, sat_factor, sat_mul,
)

_STRING_RESULTS = frozenset(("string", "getScheme", "getHost", "getHostname", "getPort", "getEscapedPath", "format", "charAt", "strings.quote"))
_LIBRARY_TYPES = {"ip": "ip", "cidr": "cidr", "quantity": "quantity", "url": "url", "semver": "semver", "format.named": "format"}
# Kubernetes' library functions of nominal cost (accessors, comparisons of parsed values).
_NOMINAL = frozenset(
    "masked prefixLength family isUnspecified isLoopback isLinkLocalMulticast isLinkLocalUnicast isGlobalUnicast "
    "sign asInteger isInteger asApproximateFloat isGreaterThan isLessThan compareTo add sub major minor patch "
    "getScheme getHostname getHost getPort getEscapedPath getQuery format.named".split()
)
_LIST_SCANS = frozenset(("isSorted", "sum", "max", "min", "indexOf", "lastIndexOf", "includes"))
_PARSES = frozenset(("cidr", "isIP", "isCIDR", "quantity", "isQuantity", "semver", "isSemver", "url", "isURL"))
_KUBE_HELPERS = frozenset(
    ("kube.podRequests", "kube.podToleratesTaint", "kube.untoleratedTaints", "kube.podToleratesNodeTaints", "kube.nodeSelectorMatches", "kube.podNodeAffinityMatches")
)
_LIST_CALLS = frozenset(("lists.range", "slice", "flatten", "distinct", "sort", "sortBy", "reverse"))
OPAQUE_EQUAL = frozenset(("ip", "cidr", "quantity", "semver"))


class CallCosts:
    """The call costs of ``kubecost.Estimator``."""

    sizes: Sizes
    roots: Mapping[str, Value]

    def size(self, value: Value) -> Size:
        raise NotImplementedError

    def call(self, name: str, node: ast.Call, target: Part | None, args: list[Part]) -> tuple[Cost, Value]:
        """The cost of the call itself (its arguments aside) and what it gives."""
        t = target.value if target is not None else None
        a = [p.value for p in args]
        string = Value("string")
        if name in ("startsWith", "endsWith") and t is not None and a:
            return self.size(a[0]).factor(STRING_FACTOR), SCALAR
        if name == "contains" and t is not None and a and t.kind != "list":
            return product(self.size(t).factor(STRING_FACTOR), self.size(a[0]).factor(STRING_FACTOR)), SCALAR
        if name in ("matches", "find", "findAll") and len(a) + (t is not None) >= 2:
            s, pattern = (t, a[0]) if t is not None else (a[0], a[1])
            scan = self.size(s).add(Size(1, 1)).factor(STRING_FACTOR)
            cost = product(scan, self.size(pattern).factor(REGEX_FACTOR))
            if name == "findAll":
                return cost, Value("list", Size(0, self.size(s).hi), string)
            return cost, (SCALAR if name == "matches" else string)
        if name in _LIST_SCANS and t is not None:
            if name == "includes" and t.kind != "list":
                return Cost(self.size(t).lo, self.size(t).hi), SCALAR  # one comparison per character
            if t.kind == "list":
                per = ONE
                item = t.element().kind
                if item in ("string", "bytes"):
                    per = per + self.sizes.of(item).factor(STRING_FACTOR)
                return per.times(self.size(t)), SCALAR if name not in ("max", "min") else t.element()
            return self.size(t).factor(STRING_FACTOR), SCALAR
        if name in ("lowerAscii", "upperAscii", "substring", "trim") and t is not None:
            return self.size(t).factor(STRING_FACTOR), Value("string", self.size(t))
        if name in ("url", "jsonpatch.escapeKey") and a:
            return self.size(a[0]).factor(STRING_FACTOR), Value("url" if name == "url" else "string", self.size(a[0]))
        if name == "replace" and t is not None and len(a) >= 2:
            return self.size(t).factor(2 * STRING_FACTOR), Value("string", _replaced(self.size(t), self.size(a[0]), self.size(a[1])))
        if name == "split" and t is not None:
            limit = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Literal) and type(node.args[1].value) is int else None
            most = self.size(t).hi if limit is None else max(limit, 0)
            return self.size(t).factor(2 * STRING_FACTOR), Value("list", Size(0, most), string)
        if name == "join" and t is not None:
            n = self.size(t)
            chars = Size(0, 0)
            if t.kind == "list":
                each = self.sizes.of(t.element().kind) if t.element().kind != "scalar" else Size(1, 1)
                chars = Size(sat_mul(n.lo, each.lo), sat_mul(n.hi, each.hi))
            if a:
                sep = self.size(a[0])
                chars = chars.add(Size(sat_mul(sep.lo, max(n.lo - 1, 0)), sat_mul(sep.hi, max(n.hi - 1, 0))))
            return chars.factor(STRING_FACTOR), Value("string", chars)
        if name == "ip" and t is not None:
            return ONE, Value("ip")
        if name in _PARSES or (name == "ip" and a):
            return self.size(a[0]).factor(STRING_FACTOR) if a else ONE, Value(_LIBRARY_TYPES.get(name, "scalar"))
        if name == "ip.isCanonical" and a:
            return self.size(a[0]).factor(2 * STRING_FACTOR), SCALAR
        if name in _NOMINAL:
            return ONE, Value(_LIBRARY_TYPES.get(name, "scalar")) if name == "format.named" else (string if name.startswith("get") else SCALAR)
        if name in ("containsIP", "containsCIDR") and a:
            cost = Size(8, 32).factor(STRING_FACTOR)
            if name == "containsCIDR":
                cost = cost + Size(4, 16).factor(STRING_FACTOR) + ONE
            if a[0].kind == "string":
                cost = cost + self.size(a[0]).factor(STRING_FACTOR)
            return cost, SCALAR
        if name == "validate" and a:
            scan = self.size(a[0]).factor(STRING_FACTOR)
            regex = MAX_NAME_FORMAT_REGEX * REGEX_FACTOR
            return Cost(sat_factor(scan.lo, regex), sat_factor(scan.hi, regex)), Value("list", item=string)
        if name in ("sets.contains", "sets.intersects", "sets.equivalent") and len(a) == 2:
            n, m = self.size(a[0]), self.size(a[1])
            f = 2 if name == "sets.equivalent" else 1
            return ONE + Cost(sat_mul(sat_mul(n.lo, m.lo), f), sat_mul(sat_mul(n.hi, m.hi), f)), SCALAR
        if name == "format" and t is not None:
            return self.size(t).factor(STRING_FACTOR), string
        if name == "strings.quote" and a:
            quoted = self.size(a[0])
            return quoted.factor(STRING_FACTOR), Value("string", Size(sat_add(quoted.lo, 2), sat_add(sat_mul(quoted.hi, 2), 2)))
        if name in ("bytes", "string") and a and a[0].kind in ("string", "bytes") and a[0].kind != name:
            given = self.size(a[0])
            size = Size(given.lo, sat_mul(given.hi, 4)) if name == "bytes" else Size(given.lo // 4, given.hi)
            return given.factor(STRING_FACTOR), Value(name, size)
        if name in _LIST_CALLS and (t is None or t.kind in ("list", "dyn")):
            return self.list_call(name, node, t)
        if name in _KUBE_HELPERS:
            return ONE + self.kube_items(name, a), DYN
        if name == "dyn" and a:
            return ONE, a[0]
        if name in ("orValue", "or", "optional.of", "optional.ofNonZeroValue", "value"):
            parts = ([t] if t is not None else []) + a
            joined = parts[0] if parts else DYN
            for p in parts[1:]:
                joined = join(joined, p)
            return ONE, joined
        if name == "size":
            return ONE, SCALAR
        if name in _STRING_RESULTS:
            return ONE, string
        if name in _LIBRARY_TYPES:
            return ONE, Value(_LIBRARY_TYPES[name])
        return ONE, DYN

    def kube_items(self, name: str, a: list[Value]) -> Cost:
        """kpe's Kubernetes helpers (not in Kubernetes' CEL): one unit per item they visit,
        as their run-time costs charge."""

        def items(v: Value) -> Cost:
            # A field the shapes say nothing of (an affinity's terms) is a list here: its items, not its characters.
            n = self.sizes.of("list") if v.kind == "dyn" else self.size(v)
            return Cost(n.lo, n.hi)

        def arg(i: int) -> Value:
            return a[i] if i < len(a) else DYN

        def terms(selector: Value) -> Cost:
            term = selector.field("nodeSelectorTerms")
            each = ONE + items(term.element().field("matchExpressions")) + items(term.element().field("matchFields"))
            return product(items(term), each)

        spec = arg(0).field("spec")
        if name == "kube.podRequests":
            return items(spec.field("containers")) + items(spec.field("initContainers"))
        if name == "kube.podToleratesTaint":
            return items(spec.field("tolerations"))
        if name in ("kube.untoleratedTaints", "kube.podToleratesNodeTaints"):
            return product(items(spec.field("tolerations")), items(arg(1).field("spec").field("taints")))
        if name == "kube.nodeSelectorMatches":
            return terms(arg(0))
        required = spec.field("affinity").field("nodeAffinity").field("requiredDuringSchedulingIgnoredDuringExecution")
        return items(spec.field("nodeSelector")) + terms(required)

    def list_call(self, name: str, node: ast.Call, t: Value | None) -> tuple[Cost, Value]:
        """cel-go's lists extension: one unit for the call and 10 for the new list, plus a
        factor per item (per pair of items for the quadratic ones)."""
        if name == "lists.range":
            arg = node.args[0] if node.args else None
            n = Size(arg.value, arg.value) if isinstance(arg, ast.Literal) and type(arg.value) is int and arg.value >= 0 else self.sizes.list
            if self.sizes is FIXED:
                n = Size(0, 0)  # charged by its length at run time
            return Cost(11, 11) + n.factor(1), Value("list", n, SCALAR)
        assert t is not None
        n = self.size(t)
        if name in ("distinct", "sort", "sortBy"):
            pairs = Size(sat_mul(n.lo, n.lo), sat_mul(n.hi, n.hi))
            strings = name == "sort" and t.element().kind in ("string", "bytes")
            return Cost(11, 11) + pairs.factor(2.1 if strings else 2.0), t
        depth = 1
        if name == "flatten":
            arg = node.args[0] if node.args else None
            if arg is not None:
                depth = arg.value if isinstance(arg, ast.Literal) and type(arg.value) is int else MAX
                depth = max(depth, 0)
        cost = Cost(sat_mul(n.lo, depth), sat_mul(n.hi, depth))
        return Cost(11, 11) + cost, Value("list", n, t.element().element() if name == "flatten" else t.element())


def _replaced(s: Size, old: Size, new: Size) -> Size:
    """The size of ``s.replace(old, new)`` (Kubernetes' estimate)."""
    if old.lo == 0:
        count_hi, kept_hi = (s.hi + 1 if s.hi < MAX else s.hi), s.hi
    elif new.hi <= old.lo:
        count_hi, kept_hi = 0, s.hi
    else:
        count_hi, kept_hi = -(-s.hi // old.lo), 0
    if old.hi == 0:
        count_lo, kept_lo = (s.lo + 1 if s.lo < MAX else s.lo), s.lo
    elif old.hi <= new.lo:
        count_lo, kept_lo = 0, s.lo
    else:
        count_lo, kept_lo = -(-s.lo // old.hi), 0
    return Size(sat_add(sat_mul(count_lo, new.lo), kept_lo), sat_add(sat_mul(count_hi, new.hi), kept_hi))
