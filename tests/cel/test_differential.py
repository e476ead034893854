"""kpe's CEL against Google's C++ CEL (cel-expr-python) on generated policy-like
expressions over generated pods and nodes, and kpe's evaluate() against bind().

Default: a fixed, derandomized set of examples (KPE_DIFFERENTIAL_EXAMPLES, 2000),
so CI sees the same expressions on every run. A longer run:

    KPE_DIFFERENTIAL_EXAMPLES=20000 python -m pytest -q tests/cel/test_differential.py -s

prints the counts (agreements, known differences by id, unexplained).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

pytest.importorskip("cel_expr_python.cel", reason="cel-expr-python is not installed (it is in the 'test' extra: pip install -e '.[test]')")

from .differential import ERROR, CelCpp, Disagreement, Tally, explain, expressions, kpe_run, load_known_differences, locate, nodes, pods, show, show_cpp  # noqa: E402

# Generated CEL such as `[1, 2]['a']` (an error at run time) makes Python's compile() warn.
pytestmark = pytest.mark.filterwarnings("ignore::SyntaxWarning")

EXAMPLES = int(os.environ.get("KPE_DIFFERENTIAL_EXAMPLES", "2000"))
KNOWN = load_known_differences()
TALLY = Tally()


@pytest.fixture(scope="module")
def cel_cpp() -> Iterator[CelCpp]:
    yield CelCpp()
    print("\n" + TALLY.summary())
    unused = [k.id for k in KNOWN if not TALLY.known[k.id]]
    if unused:
        print(f"  known differences not met in this run: {', '.join(unused)}")


@settings(
    max_examples=EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=False,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much, HealthCheck.function_scoped_fixture],
)
@given(case=expressions(), pod=pods(), node=nodes())
def test_kpe_agrees_with_cel_cpp_and_bind_agrees_with_evaluate(cel_cpp: CelCpp, case: tuple[str, tuple[str, ...]], pod: Any, node: Any) -> None:
    text, parts = case
    evaluated, bound = kpe_run(text, pod, node)
    assert evaluated == bound, f"evaluate and bind differ on {text!r}: {show(evaluated)} vs {show(bound)}"
    other = cel_cpp.run(text, {"pod": pod, "node": node})
    if evaluated == other.canon:
        TALLY.agreements += 1
        TALLY.both_errors += evaluated == ERROR
        return
    # A known difference is judged where it starts: the smallest generated
    # sub-expression on which the engines already disagree.
    where = locate(text, parts, evaluated, other, cel_cpp, pod, node)
    known = explain(KNOWN, where)
    if known is not None:
        TALLY.add_known(known, where)
        return
    TALLY.unexplained.append(text)
    raise AssertionError(
        f"kpe and cel-cpp disagree on {text!r}:\n  kpe:     {show(evaluated)}\n  cel-cpp: {show_cpp(other)}\n"
        f"  first on {where.culprit!r}: kpe {show(where.kpe)}, cel-cpp {show_cpp(where.cel_cpp)}"
    )


@pytest.mark.parametrize("entry", KNOWN, ids=[k.id for k in KNOWN])
def test_each_known_difference_is_real_and_explained_by_its_entry(cel_cpp: CelCpp, entry: Any) -> None:
    """Every entry has a reason and examples on which the engines do disagree as it
    says, so the list stays true."""
    assert entry.reason.strip() and entry.examples
    pod = {"metadata": {"name": "p", "labels": {"team": "ml", "app": "web", "zone": "a"}}, "spec": {"priority": 1, "containers": []}}
    node = {"metadata": {"name": "n", "labels": {"zone": "a"}}, "spec": {}}
    for text in entry.examples:
        evaluated, bound = kpe_run(text, pod, node)
        assert evaluated == bound
        other = cel_cpp.run(text, {"pod": pod, "node": node})
        assert evaluated != other.canon, f"{entry.id}: the engines agree on {text!r} ({show(evaluated)})"
        d = Disagreement(text, evaluated, other)
        assert entry.explains(d), f"{entry.id} does not explain {text!r}: kpe {show(evaluated)}, cel-cpp {show_cpp(other)}"
