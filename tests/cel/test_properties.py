"""Property tests: kpe against cel-python's interpreter on generated expressions
over Kubernetes-shaped data, and kpe's own promises (``bind`` gives the same
answers as ``evaluate``; ``&&``/``||`` are commutative, errors included).

The cel-python comparisons keep to the parts of CEL where cel-python is right:
small-integer arithmetic (``/`` and ``%`` only by non-zero literals) and
comparisons, boolean logic without errors to absorb, ASCII string functions,
int-list literals and comprehensions, and label maps with ``has()`` and ``in``.
Where cel-python raises, the example is skipped (``assume``), except for label
maps, where nothing absorbs errors and kpe must raise too. Results are compared
after converting cel-python's values to plain Python, with bool and int told apart.

Known cel-python departures kept out of the grammar: ``has(a.b.c)`` with ``a.b``
missing (cel-python: false; CEL: no such key), errors absorbed by ``&&``/``||``,
``1 == 1u`` (cel-python: no overload), and ``.contains()`` on the result of a
string ``+`` (cel-python: AttributeError, so skipped).
"""

from __future__ import annotations

import functools
import os
from typing import Any

import celpy
import celpy.celtypes as ct
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import engine.cel as cel

# KPE_PROPERTY_EXAMPLES=5000 for a longer bug hunt; the default keeps the suite fast.
SETTINGS = settings(
    max_examples=int(os.environ.get("KPE_PROPERTY_EXAMPLES", "200")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

_ENV = celpy.Environment()


# --- comparing results ------------------------------------------------------------

def plain(value: Any) -> Any:
    """cel-python's value as the plain Python kpe uses (``BoolType`` subclasses ``int``)."""
    if isinstance(value, ct.BoolType):
        return bool(value)
    if isinstance(value, ct.UintType):
        return cel.UInt(int(value))
    if isinstance(value, ct.IntType):
        return int(value)
    if isinstance(value, ct.DoubleType):
        return float(value)
    if isinstance(value, ct.StringType):
        return str(value)
    if isinstance(value, (list, ct.ListType)):
        return [plain(v) for v in value]
    if isinstance(value, (dict, ct.MapType)):
        return {plain(k): plain(v) for k, v in value.items()}
    return value


def same(a: Any, b: Any) -> bool:
    """Equal values of the same types all the way down (so ``True`` is not ``1``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


_CELPY_FAILED = object()


def celpy_eval(text: str, activation: dict[str, Any]) -> Any:
    """cel-python's answer as plain Python, or ``_CELPY_FAILED``."""
    try:
        program = _ENV.program(_ENV.compile(text))
        result = program.evaluate({name: celpy.json_to_cel(v) for name, v in activation.items()})
    except Exception:  # noqa: BLE001 - cel-python's failures are not what is under test
        return _CELPY_FAILED
    return _CELPY_FAILED if isinstance(result, celpy.CELEvalError) else plain(result)


def assert_matches_cel_python(text: str, activation: dict[str, Any], *, errors_agree: bool = False) -> None:
    """kpe gives cel-python's answer. Where cel-python fails the example is skipped,
    unless ``errors_agree`` (no error absorption in play): then kpe must fail too."""
    expected = celpy_eval(text, activation)
    program = cel.compile(text, variables=list(activation))
    if expected is _CELPY_FAILED:
        assume(errors_agree)
        with pytest.raises(cel.EvalError):
            program.evaluate(activation)
        return
    actual = program.evaluate(activation)
    assert same(actual, expected), f"{text!r} with {activation!r}: kpe gave {actual!r}, cel-python {expected!r}"


# --- a small typed grammar ------------------------------------------------------------
# Every generated expression is well-typed, so kpe's static check accepts it. Binary
# operations are always parenthesised, so precedence is not under test here.

SMALL_INTS = st.integers(-50, 50)
VAR_INTS = st.integers(-100, 100)
NONZERO_DIVISORS = st.integers(-7, 7).filter(bool).map(str)


def _binary(left: st.SearchStrategy[str], ops: list[str], right: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.tuples(left, st.sampled_from(ops), right).map(lambda t: f"({t[0]} {t[1]} {t[2]})")


@functools.lru_cache(maxsize=None)
def int_exprs(depth: int, names: tuple[str, ...] = ("x", "y")) -> st.SearchStrategy[str]:
    """Integer expressions; with at most 8 leaves of |v| <= 100 they stay far from int64 overflow."""
    leaves = st.one_of(SMALL_INTS.map(str), st.sampled_from(names)) if names else SMALL_INTS.map(str)
    if depth == 0:
        return leaves
    sub = int_exprs(depth - 1, names)
    return st.one_of(
        leaves,
        _binary(sub, ["+", "-", "*"], sub),
        _binary(sub, ["/", "%"], NONZERO_DIVISORS),  # truncating, as in CEL; never by zero, so never an error
        sub.map(lambda e: f"-({e})"),
        st.tuples(bool_exprs(depth - 1, names), sub, sub).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
    )


@functools.lru_cache(maxsize=None)
def bool_exprs(depth: int, names: tuple[str, ...] = ("x", "y")) -> st.SearchStrategy[str]:
    """Boolean expressions over literals and integer comparisons: nothing in them can error."""
    comparisons = _binary(int_exprs(0, names), ["<", "<=", ">", ">=", "==", "!="], int_exprs(0, names))
    leaves = st.one_of(st.sampled_from(["true", "false"]), comparisons)
    if depth == 0:
        return leaves
    sub = bool_exprs(depth - 1, names)
    ints = int_exprs(depth - 1, names)
    return st.one_of(
        leaves,
        _binary(sub, ["&&", "||"], sub),
        sub.map(lambda e: f"!({e})"),
        st.tuples(sub, sub, sub).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
        _binary(ints, ["<", "<=", ">", ">=", "==", "!="], ints),
        _binary(sub, ["==", "!="], sub),
    )


ASCII = "abcXYZ019-./_ "
ASCII_TEXT = st.text(alphabet=ASCII, max_size=6)


def string_literal(s: str) -> st.SearchStrategy[str]:
    return st.sampled_from([f"'{s}'", f'"{s}"'])


@functools.lru_cache(maxsize=None)
def str_exprs(depth: int) -> st.SearchStrategy[str]:
    leaves = st.one_of(ASCII_TEXT.flatmap(string_literal), st.sampled_from(["s", "t"]))
    if depth == 0:
        return leaves
    sub = str_exprs(depth - 1)
    return st.one_of(
        leaves,
        _binary(sub, ["+"], sub),
        st.tuples(bool_exprs(0, ()), sub, sub).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
    )


def string_tests() -> st.SearchStrategy[str]:
    """Expressions of any type built from string functions."""
    s = str_exprs(2)
    predicates = st.one_of(
        st.tuples(s, st.sampled_from(["startsWith", "endsWith", "contains"]), s).map(lambda t: f"{t[0]}.{t[1]}({t[2]})"),
        _binary(s, ["==", "!=", "<", "<=", ">", ">="], s),
    )
    sizes = st.one_of(s.map(lambda e: f"size({e})"), s.map(lambda e: f"{e}.size()"))
    return st.one_of(
        s,
        predicates,
        sizes,
        _binary(predicates, ["&&", "||"], predicates),
        _binary(sizes, ["+", "-", "<", "==", ">="], sizes),
    )


@functools.lru_cache(maxsize=None)
def list_exprs(depth: int) -> st.SearchStrategy[str]:
    """Lists of ints: literals, the variable ``xs``, ``+``, ``map`` and ``filter``."""
    literal = st.lists(int_exprs(1, ("x",)), max_size=5).map(lambda items: f"[{', '.join(items)}]")
    leaves = st.one_of(literal, st.just("xs"))
    if depth == 0:
        return leaves
    sub = list_exprs(depth - 1)
    body_int = int_exprs(1, ("v", "x"))
    body_bool = bool_exprs(1, ("v", "x"))
    return st.one_of(
        leaves,
        _binary(sub, ["+"], sub),
        st.tuples(sub, body_int).map(lambda t: f"{t[0]}.map(v, {t[1]})"),
        st.tuples(sub, body_bool).map(lambda t: f"{t[0]}.filter(v, {t[1]})"),
    )


def list_tests() -> st.SearchStrategy[str]:
    lists = list_exprs(2)
    body_bool = bool_exprs(1, ("v", "x"))
    return st.one_of(
        lists,
        st.tuples(int_exprs(1, ("x",)), lists).map(lambda t: f"({t[0]} in {t[1]})"),
        lists.map(lambda e: f"size({e})"),
        lists.map(lambda e: f"{e}.size()"),
        st.tuples(lists, st.sampled_from(["all", "exists", "exists_one"]), body_bool).map(
            lambda t: f"{t[0]}.{t[1]}(v, {t[2]})"
        ),
        _binary(lists, ["==", "!="], lists),
    )


IDENT_KEYS = ["app", "team", "tier", "zone", "gpu"]
DOTTED_KEYS = ["app.kubernetes.io/name", "topology.kubernetes.io/zone", "nvidia.com/gpu.product", "kpe.dev/x_y"]
LABEL_VALUES = st.sampled_from(["", "a", "b", "ml", "us-east-1a", "p5.48xlarge", "true"])
LABELS = st.dictionaries(st.sampled_from(IDENT_KEYS + DOTTED_KEYS), LABEL_VALUES, max_size=6)


@st.composite
def label_tests(draw: st.DrawFn) -> str:
    labels = "pod.metadata.labels"
    ident = draw(st.sampled_from(IDENT_KEYS))
    key = draw(st.sampled_from(IDENT_KEYS + DOTTED_KEYS))
    value = draw(LABEL_VALUES)
    prefix = draw(st.sampled_from(["", "a", "t", "n", "k", "app."]))
    templates = [
        f"has({labels}.{ident})",
        f"has({labels}.{ident}) && {labels}.{ident} == '{value}'",
        f"!has({labels}.{ident}) || {labels}.{ident}.startsWith('{prefix}')",
        f"'{key}' in {labels}",
        f"'{key}' in {labels} ? {labels}['{key}'] : 'none'",
        f"{labels}['{key}']",
        f"{labels}.{ident}",
        f"{labels}['{key}'] == '{value}'",
        f"size({labels})",
        f"{labels}.size() > 2",
        f"{labels}.exists(k, k.startsWith('{prefix}'))",
        f"{labels}.all(k, {labels}[k] != '{value}')",
        f"{labels}.exists_one(k, k.contains('.'))",
        f"size({labels}.filter(k, k.endsWith('{prefix}')))",
        f"has(pod.metadata.labels) && has(pod.metadata.name)",
        f"has(pod.spec) || pod.metadata.name == 'p'",
        f"pod.metadata.labels == {{'{key}': '{value}'}}",
        f"{{'{key}': '{value}', 'team': 'ml'}}['{key}']",
        f"{{'{key}': '{value}'}}.{ident}",
    ]
    return draw(st.sampled_from(templates))


POD_NAMES = st.sampled_from(["p", "trainer-0", "gpu-job"])


# --- kpe against cel-python ---------------------------------------------------------------

@SETTINGS
@given(text=int_exprs(3), x=VAR_INTS, y=VAR_INTS)
def test_integer_arithmetic_matches_cel_python(text: str, x: int, y: int) -> None:
    assert_matches_cel_python(text, {"x": x, "y": y})


@SETTINGS
@given(text=bool_exprs(3), x=VAR_INTS, y=VAR_INTS)
def test_boolean_logic_and_comparisons_match_cel_python(text: str, x: int, y: int) -> None:
    assert_matches_cel_python(text, {"x": x, "y": y})


@SETTINGS
@given(text=string_tests(), s=ASCII_TEXT, t=ASCII_TEXT)
def test_string_functions_match_cel_python(text: str, s: str, t: str) -> None:
    assert_matches_cel_python(text, {"s": s, "t": t})


@SETTINGS
@given(text=list_tests(), xs=st.lists(SMALL_INTS, max_size=6), x=SMALL_INTS)
def test_int_lists_and_comprehensions_match_cel_python(text: str, xs: list[int], x: int) -> None:
    assert_matches_cel_python(text, {"xs": xs, "x": x})


@SETTINGS
@given(text=label_tests(), labels=LABELS, name=POD_NAMES, with_spec=st.booleans())
def test_label_maps_and_has_match_cel_python(text: str, labels: dict[str, str], name: str, with_spec: bool) -> None:
    # Labels are always present: for has(a.b.c) with a.b missing, CEL (and kpe) give
    # "no such key: b" while cel-python answers false.
    pod: dict[str, Any] = {"metadata": {"name": name, "labels": labels}}
    if with_spec:
        pod["spec"] = {}
    # A missing key or a repeated map-literal key fails in both.
    assert_matches_cel_python(text, {"pod": pod}, errors_agree=True)


# --- kpe's own promises ---------------------------------------------------------------------

def outcome(fn: Any, *args: Any, **kwargs: Any) -> tuple[str, Any]:
    try:
        return "value", fn(*args, **kwargs)
    except cel.EvalError as exc:
        return "error", type(exc).__name__


def same_outcome(a: tuple[str, Any], b: tuple[str, Any]) -> bool:
    return a[0] == b[0] and (same(a[1], b[1]) if a[0] == "value" else a[1] == b[1])


ZONES = st.sampled_from(["a", "b"])


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": draw(st.sampled_from(["p", "n1", "gpu-0"]))}
    if draw(st.booleans()):
        metadata["labels"] = draw(st.fixed_dictionaries({}, optional={"zone": ZONES, "gpu": st.sampled_from(["h100", "a100"]), "team": st.just("ml")}))
    containers = []
    for name in draw(st.lists(st.sampled_from(["main", "side", ""]), max_size=3)):
        container: dict[str, Any] = {"name": name}
        if draw(st.booleans()):
            container["resources"] = draw(st.fixed_dictionaries({}, optional={"requests": st.fixed_dictionaries({"cpu": st.sampled_from(["1", "500m"])})}))
        containers.append(container)
    spec: dict[str, Any] = {"containers": containers}
    if draw(st.booleans()):
        spec["priority"] = draw(st.integers(-5, 5))
    return {"metadata": metadata, "spec": spec}


@st.composite
def nodes(draw: st.DrawFn) -> dict[str, Any]:
    labels = draw(st.fixed_dictionaries({}, optional={"zone": ZONES, "tier": st.sampled_from(["high", "low"]), "h100": st.just("yes"), "a100": st.just("no")}))
    return {"metadata": {"name": draw(st.sampled_from(["n1", "n2", "gpu-1", "p"])), "labels": labels}}


BIND_EXPRESSIONS = [
    "node.metadata.labels['zone'] == pod.metadata.labels['zone']",
    "has(pod.metadata.labels) && has(pod.metadata.labels.zone) && node.metadata.labels[?'zone'].orValue('') == pod.metadata.labels.zone",
    "!has(pod.metadata.labels.gpu) || node.metadata.labels[pod.metadata.labels.gpu] == 'yes'",
    "pod.metadata.labels.zone == node.metadata.labels.zone || node.metadata.name.startsWith('gpu')",
    "node.metadata.name.startsWith('gpu') || pod.metadata.labels.zone == node.metadata.labels.zone",
    "pod.spec.containers.all(c, has(c.resources) && has(c.resources.requests)) && size(node.metadata.labels) > 0",
    "pod.spec.containers.exists(c, c.name == node.metadata.name)",
    "pod.spec.containers.exists(c, c.resources.requests.cpu == '1') || has(node.metadata.labels.tier)",
    "pod.spec.priority > 0 ? node.metadata.labels.tier == 'high' : true",
    "1 / size(pod.metadata.labels) > 0 || node.metadata.name == 'n1'",
    "pod.metadata.labels.filter(k, k in node.metadata.labels).size() == size(pod.metadata.labels)",
    "node.metadata.labels.exists(k, k == pod.metadata.name)",
    "[pod.metadata.name, node.metadata.name].exists(n, n.endsWith('1'))",
    "pod.metadata.labels.zone + '-' + node.metadata.name",
    "size(pod.spec.containers) + size(node.metadata.labels)",
    "pod.metadata.labels.missing == 'x' && node.metadata.name == 'nope'",
    "node.metadata.name == 'nope' && pod.metadata.labels.missing == 'x'",
    "has(pod.spec.priority) && pod.spec.priority * 2 > size(node.metadata.name)",
    "pod.spec.containers.map(c, c.name + node.metadata.name)",
    "node.metadata.labels.exists(k, pod.spec.containers.exists(c, c.name == k)) || pod.spec.priority == 1",
    "pod.metadata.name == node.metadata.name",
    "pod.spec.containers.size() > 1",
]


_BIND_PIECES = st.sampled_from(BIND_EXPRESSIONS)
BIND_TEXTS = st.one_of(
    _BIND_PIECES,
    _binary(_BIND_PIECES, ["&&", "||"], _BIND_PIECES),
    st.tuples(_BIND_PIECES, _BIND_PIECES, _BIND_PIECES).map(lambda t: f"({t[0]}) ? ({t[1]}) : ({t[2]})"),
)


@SETTINGS
@given(text=BIND_TEXTS, pod=pods(), node_list=st.lists(nodes(), min_size=1, max_size=3))
def test_bound_program_gives_the_same_outcome_as_evaluate(text: str, pod: dict[str, Any], node_list: list[dict[str, Any]]) -> None:
    program = cel.compile(text, variables=["pod", "node"], check=False)
    per_node = program.bind(pod=pod)  # binding itself never raises: pod-only errors surface per node, or are absorbed
    for node in node_list:
        expected = outcome(program.evaluate, {"pod": pod, "node": node})
        actual = outcome(per_node, node=node)
        assert same_outcome(actual, expected), f"{text!r}: bound {actual!r}, evaluate {expected!r}"


def test_bound_program_positional_and_keyword_calls_agree() -> None:
    program = cel.compile(BIND_EXPRESSIONS[3], variables=["pod", "node"])
    pod = {"metadata": {"labels": {"zone": "a"}}}
    node = {"metadata": {"name": "n1", "labels": {"zone": "a"}}}
    assert program.bind(pod=pod)(node) is program.bind(pod=pod)(node=node) is True


OPERANDS = [
    "true",
    "false",
    "pod.metadata.labels.zone == 'a'",
    "has(pod.metadata.labels.zone)",
    "pod.spec.priority > 0",
    "1 / pod.spec.priority > 0",
    "pod.metadata.name.startsWith('p')",
    "pod.spec.containers.all(c, c.name != '')",
    "pod.spec.containers.exists(c, c.resources.requests.cpu == '1')",
    "pod.metadata.labels.zone",
    "pod.spec.priority",
]


@functools.lru_cache(maxsize=None)
def logic_operands(depth: int) -> st.SearchStrategy[str]:
    leaves = st.sampled_from(OPERANDS)
    if depth == 0:
        return leaves
    sub = logic_operands(depth - 1)
    return st.one_of(
        leaves,
        sub.map(lambda e: f"!({e})"),
        _binary(sub, ["&&", "||"], sub),
        st.tuples(sub, sub, sub).map(lambda t: f"({t[0]} ? {t[1]} : {t[2]})"),
    )


def _kind(result: tuple[str, Any]) -> Any:
    """True, False, or 'error' (a non-bool value is an error to a logical operator)."""
    return result[1] if result[0] == "value" and type(result[1]) is bool else "error"


def _run(text: str, pod: dict[str, Any]) -> tuple[str, Any]:
    return outcome(cel.compile(text, variables=["pod"], check=False).evaluate, {"pod": pod})


@SETTINGS
@given(a=logic_operands(2), b=logic_operands(2), op=st.sampled_from(["&&", "||"]), pod=pods())
def test_logical_operators_are_commutative_even_with_errors(a: str, b: str, op: str, pod: dict[str, Any]) -> None:
    ka, kb = _kind(_run(a, pod)), _kind(_run(b, pod))
    decisive = op == "||"
    if ka is decisive or kb is decisive:
        expected: Any = decisive
    elif ka is (not decisive) and kb is (not decisive):
        expected = not decisive
    else:
        expected = "error"
    forward, backward = _kind(_run(f"({a}) {op} ({b})", pod)), _kind(_run(f"({b}) {op} ({a})", pod))
    assert forward == backward == expected, f"{a!r} {op} {b!r}: forward {forward!r}, backward {backward!r}, expected {expected!r}"


@pytest.mark.parametrize("op", ["&&", "||"])
def test_logical_operators_absorb_an_error_on_either_side(op: str) -> None:
    decisive = "false" if op == "&&" else "true"
    pod = {"metadata": {}, "spec": {"priority": 0}}
    for error in ["pod.metadata.labels.zone == 'a'", "1 / pod.spec.priority > 0", "pod.metadata.name"]:
        assert _run(f"{error} {op} {decisive}", pod) == _run(f"{decisive} {op} {error}", pod) == ("value", decisive == "true")
