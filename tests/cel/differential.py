"""Differential testing of kpe's CEL against an independent engine.

``cel-expr-python`` (Google's C++ CEL, cel-cpp) evaluates the same generated
expressions over the same generated Kubernetes-shaped pods and nodes. Both
results are brought to one canonical, type-tagged form (int, uint and double
kept apart; both-error is agreement) and compared. Disagreements that a known
difference explains (``differential_known_differences.yaml``: each one with the
reason kpe is the one that follows CEL and cel-go) are counted by category;
any other one is a failure.

The grammar (``Grammar``) covers what scheduling policies write: field
selection, ``has()``, optionals (``.?``, ``[?]``, ``orValue``, ``or``,
``hasValue``, ``value``), the macros over containers, taints, tolerations and
labels, ``in``, indexing, the strings extension, int/uint/double arithmetic
with overflow and division by zero, conversions, cross-type comparisons,
ternaries, ``&&``/``||`` with errors on either side, list and map literals,
``size`` and ``type``. Optional values never reach a result or a container:
cel-expr-python cannot hand them to Python (it even crashes on a map holding
one), so the grammar consumes every optional it makes.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import yaml
from hypothesis import strategies as st

import engine.cel as cel
from engine.cel.types.values import CelType, MapBoolKey, UInt

KNOWN_DIFFERENCES_FILE = Path(__file__).parent / "differential_known_differences.yaml"

# -- canonical values ---------------------------------------------------------------

ERROR = ("error",)


def _double(x: float) -> tuple[Any, ...]:
    if math.isnan(x):
        return ("double", "nan")
    return ("double", x, math.copysign(1.0, x) if x == 0.0 else 0)


def _type_name(name: str) -> str:
    base = name.split("<", 1)[0].strip()
    return {"NULL": "null_type", "NULL_TYPE": "null_type"}.get(base, base.lower() if base.isupper() else base)


def kpe_canon(value: Any, *, exact_keys: bool = True) -> Any:
    """kpe's run-time value as a canonical, hashable, type-tagged form."""
    t = type(value)
    if t is bool:
        return ("bool", value)
    if t is int:
        return ("int", value)
    if t is UInt:
        return ("uint", int(value))
    if t is float:
        return _double(value)
    if t is str:
        return ("string", value)
    if t is bytes:
        return ("bytes", value)
    if value is None:
        return ("null",)
    if t is list or t is tuple:
        return ("list", tuple(kpe_canon(v, exact_keys=False) for v in value))
    if t is dict:
        if exact_keys:
            return ("map", frozenset((kpe_canon(k.value if type(k) is MapBoolKey else k), kpe_canon(v, exact_keys=False)) for k, v in value.items()))
        return ("map~", _lossy_map({_lossy_key(k): v for k, v in value.items()}, lambda v: kpe_canon(v, exact_keys=False)))
    if t is CelType:
        return ("type", value.name)
    return ("other", type(value).__name__, repr(value))


def _lossy_key(key: Any) -> Any:
    """A map key as cel-expr-python hands it to Python: uint and int alike, true and 1 one key."""
    if type(key) is MapBoolKey:
        return key.value
    if type(key) is UInt:
        return int(key)
    return key


def _lossy_map(plain: dict[Any, Any], canon: Callable[[Any], Any]) -> Any:
    # Maps inside a result are compared with keys as cel-expr-python's conversion
    # leaves them: true and 1 one key, uint and int alike. Top-level maps are exact.
    # Under keys 0 and 1 the value is left out: when a map holds true and 1, which
    # value Python kept depends on iteration order, which the engines do not share.
    return frozenset(
        (("num", int(k)), "?" if k in (0, 1) else canon(v)) if type(k) in (bool, int) else ((type(k).__name__, k), canon(v))
        for k, v in plain.items()
    )


class Unconvertible(Exception):
    """cel-expr-python gave a value the harness cannot read (a bug in the grammar)."""


def cpp_canon(value: Any, *, exact_keys: bool = False) -> Any:
    """A cel-expr-python ``Value`` (or a plain Python value inside a map) as the same canonical form."""
    if not hasattr(value, "type") or not callable(getattr(value, "type")):
        return _plain_canon(value)
    name = value.type().name()
    base = name.split("<", 1)[0]
    if base == "ERROR":
        return ERROR
    v = value.value()
    if base == "BOOL":
        return ("bool", bool(v))
    if base == "INT":
        return ("int", int(v))
    if base == "UINT":
        return ("uint", int(v))
    if base == "DOUBLE":
        return _double(float(v))
    if base == "STRING":
        return ("string", v)
    if base == "BYTES":
        return ("bytes", bytes(v))
    if base == "NULL_TYPE" or base == "NULL":
        return ("null",)
    if base == "LIST":
        return ("list", tuple(cpp_canon(x) for x in v))
    if base == "MAP":
        return ("map~", _lossy_map({_lossy_key(k): x for k, x in v.items()}, cpp_canon))
    if base == "TYPE":
        return ("type", _type_name(v.name()))
    raise Unconvertible(name)


def _plain_canon(value: Any) -> Any:
    t = type(value)
    if t is bool:
        return ("bool", value)
    if t is int:
        return ("int", value)
    if t is float:
        return _double(value)
    if t is str:
        return ("string", value)
    if t in (bytes, bytearray):
        return ("bytes", bytes(value))
    if value is None:
        return ("null",)
    if t is list:
        return ("list", tuple(cpp_canon(x) for x in value))
    if t is dict:
        return ("map~", _lossy_map({_lossy_key(k): x for k, x in value.items()}, cpp_canon))
    raise Unconvertible(t.__name__)


def show(canon: Any) -> str:
    return "error" if canon == ERROR else repr(canon)


def show_cpp(result: Any) -> str:
    if result.abort is not None:
        return f"aborted: {result.abort.splitlines()[0][:100]}"
    return show(result.canon)


# -- the two engines ------------------------------------------------------------------


@dataclass(frozen=True)
class CppResult:
    """cel-cpp's answer: the canonical value (ERROR for an error), and the message when
    the error was not a CEL error value but an aborted evaluation (eval() raised)."""

    canon: Any
    abort: str | None = None


class CelCpp:
    """cel-expr-python with the extensions Kubernetes' policies use (optionals, strings)."""

    def __init__(self) -> None:
        from cel_expr_python import cel as cpp
        from cel_expr_python.ext import ext_optional, ext_strings

        self.env = cpp.NewEnv(
            variables={"pod": cpp.Type.DYN, "node": cpp.Type.DYN},
            extensions=[ext_optional.ExtOptional(), ext_strings.ExtStrings()],
        )

    def _eval(self, text: str, data: dict[str, Any]) -> Any:
        """A Value, ERROR for a compile error, or CppResult(ERROR, message) when eval() raised."""
        try:
            program = self.env.compile(text, disable_check=True)
        except Exception:  # noqa: BLE001 - a compile error is an error result
            return ERROR
        try:
            return program.eval(data=data)
        except Exception as exc:  # noqa: BLE001 - cel-cpp aborts some evaluations instead of giving an error value
            return CppResult(ERROR, str(exc) or type(exc).__name__)

    def run(self, text: str, data: dict[str, Any]) -> CppResult:
        value = self._eval(text, data)
        if value is ERROR:
            return CppResult(ERROR)
        if type(value) is CppResult:
            return value
        canon = cpp_canon(value)
        if canon[0] == "map~":
            # A map result is read again as its [key, value] pairs, which keep each
            # key's CEL type (true and 1, 1 and 1u stay apart).
            pairs = self._eval(f"({text}).map(__k, [__k, ({text})[__k]])", data)
            if type(pairs) is not CppResult and pairs is not ERROR and cpp_canon(pairs)[0] == "list":
                return CppResult(("map", frozenset((cpp_canon(p.value()[0]), cpp_canon(p.value()[1])) for p in pairs.value())))
        return CppResult(canon)


def kpe_run(text: str, pod: Any, node: Any) -> tuple[Any, Any]:
    """kpe's answer through evaluate(), and the one answer bind() gives, or a note
    of how the ways differ: bind(pod=...) then node (the server's path), and
    bind(pod=..., node=...) (everything computed ahead)."""
    try:
        program = cel.compile(text, variables=["pod", "node"], check=False)
    except cel.CelError:
        return ERROR, ERROR
    out = []
    runs = (
        lambda: program.evaluate({"pod": pod, "node": node}),
        lambda: program.bind(pod=pod)(node=node),
        lambda: program.bind(pod=pod, node=node)(),
    )
    for run in runs:
        try:
            out.append(kpe_canon(run()))
        except cel.CelError:
            out.append(ERROR)
    if out[1] != out[2]:
        return out[0], ("bind(pod) and bind(pod, node) differ", out[1], out[2])
    return out[0], out[1]


# -- known differences ----------------------------------------------------------------


def unordered(canon: Any) -> Any:
    """The canonical form with every list taken as a multiset."""
    if type(canon) is tuple and canon and canon[0] == "list":
        return ("list*", tuple(sorted((unordered(x) for x in canon[1]), key=repr)))
    if type(canon) is tuple and canon and canon[0] in ("map", "map~"):
        return (canon[0], frozenset((k, unordered(v)) for k, v in canon[1]))
    return canon


@dataclass(frozen=True)
class Disagreement:
    """Where two answers differ: the smallest generated sub-expression (without loop
    variables) on which the engines already disagree, and the two answers there."""

    culprit: str
    kpe: Any
    cel_cpp: CppResult


def locate(text: str, parts: tuple[str, ...], kpe: Any, other: CppResult, cpp: CelCpp, pod: Any, node: Any) -> Disagreement:
    best = Disagreement(text, kpe, other)
    data = {"pod": pod, "node": node}
    for part in sorted(set(parts), key=len):
        if len(part) >= len(best.culprit):
            break
        mine = kpe_run(part, pod, node)[0]
        theirs = cpp.run(part, data)
        if mine != theirs.canon:
            return Disagreement(part, mine, theirs)
    return best


@dataclass
class KnownDifference:
    """One entry of differential_known_differences.yaml."""

    id: str
    reason: str
    expression: re.Pattern[str]  # searched in the culprit sub-expression
    kpe: str  # what kpe gives there: "error", "value" or "any"
    cel_cpp: str  # the same for cel-cpp, or "abort" (eval() raised instead of an error value)
    abort_message: re.Pattern[str] | None  # for "abort": the message cel-cpp aborts with
    equal_when: str | None  # "lists_unordered": the answers agree once lists are multisets
    examples: list[str]

    def explains(self, d: Disagreement) -> bool:
        def fits(want: str, got: Any) -> bool:
            return want == "any" or (want == "error") == (got == ERROR)

        if not self.expression.search(d.culprit) or not fits(self.kpe, d.kpe):
            return False
        if self.cel_cpp == "abort":
            if d.cel_cpp.abort is None or (self.abort_message is not None and not self.abort_message.search(d.cel_cpp.abort)):
                return False
        elif not fits(self.cel_cpp, d.cel_cpp.canon):
            return False
        if self.equal_when == "lists_unordered":
            return bool(unordered(d.kpe) == unordered(d.cel_cpp.canon))
        return True


def load_known_differences() -> list[KnownDifference]:
    entries = yaml.safe_load(KNOWN_DIFFERENCES_FILE.read_text()) or []
    return [
        KnownDifference(
            e["id"], e["reason"], re.compile(e["expression"]), e.get("kpe", "any"), e.get("cel_cpp", "any"),
            re.compile(e["abort_message"]) if e.get("abort_message") else None,
            e.get("equal_when"), list(e.get("examples", [])),
        )
        for e in entries
    ]


def explain(known: list[KnownDifference], d: Disagreement) -> str | None:
    """The id of the first known difference that explains a disagreement, if any."""
    for entry in known:
        if entry.explains(d):
            return entry.id
    return None


@dataclass
class Tally:
    agreements: int = 0
    both_errors: int = 0
    known: Counter[str] = field(default_factory=Counter)
    unexplained: list[str] = field(default_factory=list)
    samples: dict[str, list[str]] = field(default_factory=dict)

    def add_known(self, known_id: str, d: Disagreement) -> None:
        self.known[known_id] += 1
        shown = self.samples.setdefault(known_id, [])
        if len(shown) < 3 and not any(x.startswith(d.culprit + "  →") for x in shown):
            shown.append(f"{d.culprit}  →  kpe {show(d.kpe)[:80]}, cel-cpp {show_cpp(d.cel_cpp)[:80]}")

    def summary(self) -> str:
        total = self.agreements + sum(self.known.values()) + len(self.unexplained)
        lines = [
            f"differential: {total} expressions, {self.agreements} agreements ({self.both_errors} both errors), "
            f"{sum(self.known.values())} known differences, {len(self.unexplained)} unexplained"
        ]
        for k, n in sorted(self.known.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {n:6d}  {k}")
            lines += [f"            e.g. {sample[:300]}" for sample in self.samples.get(k, [])]
        return "\n".join(lines)


# -- generated pods and nodes -----------------------------------------------------------

LABEL_KEYS = ["team", "zone", "app", "tier", "topology.kubernetes.io/zone", "kubernetes.io/hostname", "nvidia.com/gpu", "ünï", ""]
WORDS = ["", "a", "ml", "A", "abc", "gpu", "zone-a", "Ünïcødé", "日本", "🙂x", " pad ", "10", "-3", "1.5", "1e3", "0x1F", "true", "%s", "a,b", "NoSchedule", "Exists", "Equal", "a.b", " 1", "+1", "1 ", "-0", "0.5e1", "inf", "NaN", "18446744073709551615"]
INT_EDGES = [0, 1, -1, 2, 3, 7, 10, 100, 1000, 2**31, 2**32, 2**53 + 1, 2**62, 2**63 - 2, 2**63 - 1, -(2**63) + 1, -(2**63)]
UINT_EDGES = [0, 1, 2, 3, 10, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1]
DOUBLE_EDGES = [0.0, -0.0, 0.5, 1.0, -1.0, 2.5, -2.5, 3.0, 1e300, -1e300, 1e-300, 9.223372036854775807e18, 9.223372036854775e18, 1.8446744073709552e19, 4294967296.0, 1.5e15]

words = st.one_of(st.sampled_from(WORDS), st.text(alphabet="abAZ09-._/ éü日🙂", max_size=6))
small_ints = st.one_of(st.sampled_from(INT_EDGES), st.integers(-5, 20))
booleans = st.booleans()
_INDEX: dict[int, st.SearchStrategy[int]] = {}


def index_strategy(n: int) -> st.SearchStrategy[int]:
    """Drawing an index is much cheaper than building a sampled_from strategy per draw."""
    strategy = _INDEX.get(n)
    if strategy is None:
        strategy = _INDEX[n] = st.integers(0, n - 1)
    return strategy


def pick(draw: st.DrawFn, options: list[Any]) -> Any:
    return options[draw(index_strategy(len(options)))]


def _maybe(d: dict[str, Any], key: str, value: Any, present: bool) -> None:
    if present:
        d[key] = value


_COMMON_LABELS = ["team", "app", "zone", "topology.kubernetes.io/zone"]


@st.composite
def _label_maps(draw: st.DrawFn) -> dict[str, str]:
    # The keys expressions ask for are there more often than not; others at random.
    out = {key: draw(words) for key in _COMMON_LABELS if draw(index_strategy(10)) < 6}
    out.update(draw(st.dictionaries(st.sampled_from(LABEL_KEYS), words, max_size=2)))
    return out


_labels = _label_maps()
_quantities = st.dictionaries(
    st.sampled_from(["cpu", "memory", "nvidia.com/gpu", "pods"]), st.sampled_from(["0", "1", "100m", "2", "4Gi", "1.5", "110"]), max_size=3
)


def labels() -> st.SearchStrategy[dict[str, str]]:
    return _labels


def quantities() -> st.SearchStrategy[dict[str, str]]:
    return _quantities


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    flags = [draw(index_strategy(5)) != 0 for _ in range(12)]  # a field is present 4 times in 5
    metadata: dict[str, Any] = {}
    _maybe(metadata, "name", draw(words), flags[0] or True)
    _maybe(metadata, "namespace", draw(words), flags[1])
    _maybe(metadata, "labels", draw(labels()), flags[2])
    _maybe(metadata, "annotations", draw(labels()), flags[3])
    spec: dict[str, Any] = {}
    _maybe(spec, "priority", draw(small_ints), flags[4])
    containers = []
    for _ in range(pick(draw, [0, 1, 1, 2])):
        c: dict[str, Any] = {"name": draw(words)}
        if draw(booleans):
            res: dict[str, Any] = {}
            _maybe(res, "requests", draw(quantities()), draw(booleans))
            _maybe(res, "limits", draw(quantities()), draw(booleans))
            c["resources"] = res
        containers.append(c)
    _maybe(spec, "containers", containers, flags[5] or True)
    tolerations = []
    for _ in range(pick(draw, [0, 1, 1, 2])):
        tol: dict[str, Any] = {}
        _maybe(tol, "key", pick(draw, LABEL_KEYS), draw(booleans))
        _maybe(tol, "operator", pick(draw, ["Equal", "Exists"]), draw(booleans))
        _maybe(tol, "value", draw(words), draw(booleans))
        _maybe(tol, "effect", pick(draw, ["NoSchedule", "PreferNoSchedule", "NoExecute", ""]), draw(booleans))
        _maybe(tol, "tolerationSeconds", draw(small_ints), draw(booleans))
        tolerations.append(tol)
    _maybe(spec, "tolerations", tolerations, flags[6])
    _maybe(spec, "nodeSelector", draw(labels()), flags[7])
    _maybe(spec, "overhead", pick(draw, DOUBLE_EDGES), flags[8])
    pod: dict[str, Any] = {"metadata": metadata}
    _maybe(pod, "spec", spec, flags[10] or flags[11])
    return pod


@st.composite
def nodes(draw: st.DrawFn) -> dict[str, Any]:
    flags = [draw(index_strategy(5)) != 0 for _ in range(6)]
    metadata: dict[str, Any] = {"name": draw(words)}
    _maybe(metadata, "labels", draw(labels()), flags[0] or flags[1])
    spec: dict[str, Any] = {}
    taints = []
    for _ in range(pick(draw, [0, 1, 1, 2])):
        taint: dict[str, Any] = {"key": pick(draw, LABEL_KEYS), "effect": pick(draw, ["NoSchedule", "PreferNoSchedule", "NoExecute"])}
        _maybe(taint, "value", draw(words), draw(booleans))
        taints.append(taint)
    _maybe(spec, "taints", taints, flags[2] or flags[3])
    _maybe(spec, "unschedulable", draw(booleans), flags[4])
    status = {"allocatable": draw(quantities()), "capacity": draw(quantities())}
    node: dict[str, Any] = {"metadata": metadata, "spec": spec}
    _maybe(node, "status", status, flags[5] or True)
    return node


# -- generated expressions ----------------------------------------------------------------


def quote(s: str) -> str:
    out = s.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n")
    return f"'{out}'"


def double_literal(x: float) -> str:
    text = repr(x)
    return text if any(c in text for c in ".en") else text + ".0"


PATHS_DYN = [
    "pod", "node", "pod.metadata", "pod.spec", "pod.metadata.labels", "pod.metadata.annotations", "pod.spec.containers",
    "pod.spec.tolerations", "pod.spec.nodeSelector", "node.metadata.labels", "node.spec.taints", "node.status.allocatable",
    "pod.spec.containers[0]", "pod.spec.containers[0].resources", "pod.spec.containers[0].resources.requests",
    "node.spec", "node.status", "pod.spec.overhead", "pod.spec.tolerations[0]", "node.spec.taints[0]",
]
PATHS_STRING = [
    "pod.metadata.name", "pod.metadata.namespace", "node.metadata.name", "pod.metadata.labels['team']",
    "node.metadata.labels['topology.kubernetes.io/zone']", "pod.spec.containers[0].name", "node.spec.taints[0].key",
    "pod.spec.tolerations[0].operator", "node.status.allocatable['cpu']", "pod.metadata.labels.app",
]
PATHS_INT = ["pod.spec.priority", "pod.spec.tolerations[0].tolerationSeconds"]
PATHS_LIST = ["pod.spec.containers", "pod.spec.tolerations", "node.spec.taints"]
PATHS_MAP = ["pod.metadata.labels", "node.metadata.labels", "pod.spec.nodeSelector", "node.status.allocatable", "pod.metadata.annotations"]
FIELDS = ["metadata", "spec", "labels", "name", "key", "value", "effect", "operator", "priority", "containers", "taints", "status", "zone", "team", "requests"]
TYPES = ["int", "uint", "double", "string", "bool", "list", "map", "null_type", "bytes", "type"]

KINDS = ["bool", "int", "uint", "double", "string", "list", "map", "dyn"]


class Grammar:
    """Draws expression text of a wanted kind; every compound part is parenthesized."""

    def __init__(self, draw: st.DrawFn) -> None:
        self.draw = draw
        self.vars: list[str] = []
        self.parts: list[str] = []  # generated sub-expressions without loop variables
        self.top = False

    def pick(self, options: list[Any]) -> Any:
        return pick(self.draw, options)

    def chance(self, p: float) -> bool:
        return self.draw(index_strategy(20)) < p * 20

    def expr(self, kind: str, depth: int) -> str:
        if kind == "any":
            kind = self.pick(KINDS)
        leaf = depth <= 0 or self.chance(0.25)
        method = getattr(self, f"{'leaf' if leaf else 'node'}_{kind}")
        text: str = method(depth - 1)
        if not leaf and not (self.vars and re.search(r"\b(" + "|".join(self.vars) + r")\b", text)):
            self.parts.append(text)  # closed: evaluable on its own
        return text

    # leaves -------------------------------------------------------------------
    def leaf_bool(self, d: int) -> str:
        return self.pick(["true", "false", f"has({self.pick(PATHS_DYN)}.{self.pick(FIELDS)})", "node.spec.unschedulable"])

    def leaf_int(self, d: int) -> str:
        if self.chance(0.2):
            return self.pick(PATHS_INT)
        if self.chance(0.25) and self.vars:
            return self.pick(self.vars)
        n = self.draw(small_ints)
        return str(n) if n >= 0 else f"-{-n}" if n != -(2**63) else "-9223372036854775808"

    def leaf_uint(self, d: int) -> str:
        return f"{self.pick(UINT_EDGES)}u"

    def leaf_double(self, d: int) -> str:
        return double_literal(self.pick(DOUBLE_EDGES))

    def leaf_string(self, d: int) -> str:
        if self.chance(0.35):
            return self.pick(PATHS_STRING)
        return quote(self.draw(words))

    def leaf_list(self, d: int) -> str:
        if self.chance(0.5):
            return self.pick(PATHS_LIST + ["[]", "[1, 2, 3]", "['a', 'b']", "[1, 2u, 3.0]", "[true, 1]"])
        return "[]"

    def leaf_map(self, d: int) -> str:
        if self.chance(0.6):
            return self.pick(PATHS_MAP)
        return self.pick(["{}", "{'team': 'ml'}", "{1: 'a', 2u: 'b'}", "{true: 1, 1: 2}", "{false: 1u, 0u: 'a'}"])

    def leaf_dyn(self, d: int) -> str:
        if self.vars and self.chance(0.5):
            return self.pick(self.vars)
        return self.pick(PATHS_DYN + PATHS_STRING + PATHS_INT)

    # compound nodes ---------------------------------------------------------------
    def node_bool(self, d: int) -> str:
        form = self.pick(["cmp", "eq", "in", "not", "logic", "logic", "ternary", "macro", "macro", "has", "opt", "strtest", "type", "optlogic"])
        if form == "cmp":
            a, b = self.pick([("int", "int"), ("int", "double"), ("uint", "double"), ("int", "uint"), ("string", "string"), ("dyn", "int"), ("double", "double"), ("dyn", "dyn")])
            return f"({self.expr(a, d)} {self.pick(['<', '<=', '>', '>='])} {self.expr(b, d)})"
        if form == "eq":
            a, b = self.pick([("int", "double"), ("uint", "double"), ("int", "uint"), ("any", "any"), ("string", "dyn"), ("list", "list"), ("map", "map")])
            return f"({self.expr(a, d)} {self.pick(['==', '!='])} {self.expr(b, d)})"
        if form == "in":
            if self.chance(0.5):
                return f"({self.expr('any', d)} in {self.expr('list', d)})"
            return f"({self.expr(self.pick(['int', 'uint', 'double', 'string', 'bool']), d)} in {self.expr('map', d)})"
        if form == "not":
            return f"!{self.expr('bool', d)}"
        if form == "logic":
            op = self.pick(["&&", "||"])
            return f"({self.expr('bool', d)} {op} {self.expr(self.pick(['bool', 'bool', 'dyn']), d)})"
        if form == "optlogic":
            return f"({self.expr('bool', d)} {self.pick(['&&', '||'])} ({self.expr('dyn', d)} == {self.expr('dyn', d)}))"
        if form == "ternary":
            return f"({self.expr('bool', d)} ? {self.expr('bool', d)} : {self.expr('bool', d)})"
        if form == "macro":
            return self.macro("bool", d)
        if form == "has":
            return f"has({self.expr('dyn', d)}.{self.pick(FIELDS)})"
        if form == "opt":
            return f"{self.opt(d)}.hasValue()"
        if form == "strtest":
            m = self.pick(["startsWith", "endsWith", "contains", "matches"])
            arg = self.pick(["'^a'", "'b$'", "'[0-9]+'", "'.*'", "'ü'"]) if m == "matches" else self.expr("string", d)
            return f"{self.expr('string', d)}.{m}({arg})"
        return f"(type({self.expr('any', d)}) == {self.pick(TYPES)})"

    def macro(self, kind: str, d: int) -> str:
        var = self.pick(["x", "y", "t", "c"])
        if var in self.vars:
            var = var + str(len(self.vars))
        # map() and filter() over a map give a list in the map's iteration order, which
        # CEL leaves open (kpe: insertion order, cel-cpp: hash order, varying by process);
        # they range over maps only at the top, where lists compare as multisets
        # (map-iteration-order), never where an order-dependent answer (l[0], join) follows.
        over_map = kind == "bool" or self.top
        self.top = False
        rng = self.expr("map", d) if over_map and self.chance(0.4) else self.expr("list", d)
        self.vars.append(var)
        try:
            if kind == "bool":
                m = self.pick(["all", "exists", "exists_one"])
                return f"{rng}.{m}({var}, {self.expr('bool', d)})"
            m = self.pick(["map", "filter", "map3"])
            if m == "filter":
                return f"{rng}.filter({var}, {self.expr('bool', d)})"
            if m == "map3":
                return f"{rng}.map({var}, {self.expr('bool', d)}, {self.expr('any', d)})"
            return f"{rng}.map({var}, {self.expr('any', d)})"
        finally:
            self.vars.pop()

    def node_int(self, d: int) -> str:
        form = self.pick(["arith", "arith", "neg", "size", "conv", "index", "ternary", "orvalue", "dyn", "listidx"])
        if form == "arith":
            return f"({self.expr('int', d)} {self.pick(['+', '-', '*', '/', '%'])} {self.expr(self.pick(['int', 'int', 'dyn']), d)})"
        if form == "neg":
            return f"-{self.expr('int', d)}"
        if form == "size":
            return self.pick([f"size({self.expr(self.pick(['string', 'list', 'map']), d)})", f"{self.expr(self.pick(['string', 'list', 'map']), d)}.size()"])
        if form == "conv":
            return f"int({self.expr(self.pick(['double', 'uint', 'string', 'int', 'dyn']), d)})"
        if form == "index":
            m = self.pick(["indexOf", "lastIndexOf"])
            if self.chance(0.5):
                return f"{self.expr('string', d)}.{m}({self.expr('string', d)}, {self.expr('int', d)})"
            return f"{self.expr('string', d)}.{m}({self.expr('string', d)})"
        if form == "ternary":
            return f"({self.expr('bool', d)} ? {self.expr('int', d)} : {self.expr('int', d)})"
        if form == "orvalue":
            return f"{self.opt(d)}.orValue({self.expr('int', d)})"
        if form == "dyn":
            return f"dyn({self.expr('int', d)})"
        return f"[{self.expr('int', d)}, {self.expr('int', d)}][{self.expr('int', d)}]"

    def node_uint(self, d: int) -> str:
        form = self.pick(["arith", "arith", "conv", "ternary"])
        if form == "arith":
            return f"({self.expr('uint', d)} {self.pick(['+', '-', '*', '/', '%'])} {self.expr('uint', d)})"
        if form == "conv":
            return f"uint({self.expr(self.pick(['double', 'int', 'string', 'uint']), d)})"
        return f"({self.expr('bool', d)} ? {self.expr('uint', d)} : {self.expr('uint', d)})"

    def node_double(self, d: int) -> str:
        form = self.pick(["arith", "arith", "conv", "ternary", "neg"])
        if form == "arith":
            return f"({self.expr('double', d)} {self.pick(['+', '-', '*', '/'])} {self.expr('double', d)})"
        if form == "conv":
            return f"double({self.expr(self.pick(['int', 'uint', 'string', 'double']), d)})"
        if form == "neg":
            return f"-{self.expr('double', d)}"
        return f"({self.expr('bool', d)} ? {self.expr('double', d)} : {self.expr('double', d)})"

    def node_string(self, d: int) -> str:
        form = self.pick(["concat", "conv", "method", "method", "substring", "join", "ternary", "orvalue", "label", "charAt", "format", "quote"])
        if form == "concat":
            return f"({self.expr('string', d)} + {self.expr('string', d)})"
        if form == "conv":
            return f"string({self.expr(self.pick(['int', 'uint', 'double', 'string', 'bool', 'dyn']), d)})"
        if form == "method":
            m = self.pick(["lowerAscii()", "upperAscii()", "trim()", "reverse()", f"replace({self.expr('string', d)}, {self.expr('string', d)})"])
            return f"{self.expr('string', d)}.{m}"
        if form == "substring":
            if self.chance(0.5):
                return f"{self.expr('string', d)}.substring({self.expr('int', d)})"
            return f"{self.expr('string', d)}.substring({self.expr('int', d)}, {self.expr('int', d)})"
        if form == "charAt":
            return f"{self.expr('string', d)}.charAt({self.expr('int', d)})"
        if form == "join":
            return f"{self.expr('list', d)}.join({self.expr('string', d)})" if self.chance(0.5) else f"{self.expr('list', d)}.join()"
        if form == "ternary":
            return f"({self.expr('bool', d)} ? {self.expr('string', d)} : {self.expr('string', d)})"
        if form == "orvalue":
            return f"{self.opt(d)}.orValue({self.expr('string', d)})"
        if form == "label":
            return f"{self.expr('map', d)}[{self.expr('string', d)}]"
        if form == "format":
            verb = self.pick(["%s", "%d", "%x", "%s-%s", "%o", "%b", "%X"])
            n = verb.count("%")
            return f"{quote(verb)}.format([{', '.join(self.expr('any', d) for _ in range(n))}])"
        return f"strings.quote({self.expr('string', d)})"

    def node_list(self, d: int) -> str:
        form = self.pick(["literal", "literal", "macro", "split", "concat", "optlist", "ternary"])
        if form == "literal":
            return "[" + ", ".join(self.expr("any", d) for _ in range(self.draw(index_strategy(4)))) + "]"
        if form == "macro":
            return self.macro("list", d)
        if form == "split":
            return f"{self.expr('string', d)}.split({self.expr('string', d)})"
        if form == "concat":
            return f"({self.expr('list', d)} + {self.expr('list', d)})"
        if form == "optlist":
            return f"[?{self.opt(d)}, {self.expr('any', d)}]"
        return f"({self.expr('bool', d)} ? {self.expr('list', d)} : {self.expr('list', d)})"

    def node_map(self, d: int) -> str:
        form = self.pick(["literal", "literal", "optmap", "ternary", "orvalue"])
        if form == "literal":
            keys = [self.expr(self.pick(["string", "int", "uint", "bool"]), 0) for _ in range(self.draw(index_strategy(4)))]
            return "{" + ", ".join(f"{k}: {self.expr('any', d)}" for k in keys) + "}"
        if form == "optmap":
            return f"{{?{self.expr('string', 0)}: {self.opt(d)}, {self.expr('string', 0)}: {self.expr('any', d)}}}"
        if form == "orvalue":
            return f"{self.opt(d)}.orValue({self.expr('map', d)})"
        return f"({self.expr('bool', d)} ? {self.expr('map', d)} : {self.expr('map', d)})"

    def node_dyn(self, d: int) -> str:
        form = self.pick(["select", "select", "index", "index", "orvalue", "value", "dyn", "ternary"])
        if form == "select":
            return f"{self.expr('dyn', d)}.{self.pick(FIELDS)}"
        if form == "index":
            base = self.expr(self.pick(["dyn", "list", "map"]), d)
            return f"{base}[{self.expr(self.pick(['string', 'int', 'uint', 'double', 'bool']), d)}]"
        if form == "orvalue":
            return f"{self.opt(d)}.orValue({self.expr('any', d)})"
        if form == "value":
            return f"{self.opt(d)}.value()"
        if form == "dyn":
            return f"dyn({self.expr('any', d)})"
        return f"({self.expr('bool', d)} ? {self.expr('any', d)} : {self.expr('any', d)})"

    def opt(self, d: int) -> str:
        """An optional-valued expression (always consumed by the caller)."""
        form = self.pick(["sel", "sel", "idx", "chain", "of", "none", "nonzero", "or", "listidx"])
        if form == "sel":
            return f"{self.expr('dyn', d)}.?{self.pick(FIELDS)}"
        if form == "idx":
            return f"{self.expr(self.pick(['map', 'dyn']), d)}[?{self.expr(self.pick(['string', 'int', 'bool', 'uint']), d)}]"
        if form == "chain":
            return f"{self.pick(PATHS_DYN)}.?{self.pick(FIELDS)}.{self.pick(FIELDS)}[?{quote(self.pick(LABEL_KEYS))}]"
        if form == "of":
            return f"optional.of({self.expr('any', d)})"
        if form == "none":
            return "optional.none()"
        if form == "nonzero":
            return f"optional.ofNonZeroValue({self.expr(self.pick(['int', 'uint', 'double', 'string', 'list', 'map', 'bool']), d)})"
        if form == "or":
            return f"{self.opt(d - 1)}.or({self.opt(d - 1)})"
        return f"{self.expr('list', d)}[?{self.expr('int', d)}]"


@st.composite
def expressions(draw: st.DrawFn) -> tuple[str, tuple[str, ...]]:
    """An expression and its generated sub-expressions that can be evaluated alone."""
    grammar = Grammar(draw)
    kind = pick(draw, KINDS + ["bool", "bool", "top-macro"])
    if kind == "top-macro":
        grammar.top = True
        text = grammar.macro("list", 1 + draw(index_strategy(3)))
    else:
        text = grammar.expr(kind, 1 + draw(index_strategy(4)))
    return text, tuple(grammar.parts)
