"""Run-time bounds on what one evaluation may build and scan.

Two kinds of protection, both raising ``EvalError`` subclasses so a policy's
failurePolicy decides what a failure means:

- **Growth.** A string longer than ``MAX_STRING_SIZE`` characters, or a list
  longer than ``MAX_LIST_SIZE`` items, is never built: concatenation (``+``),
  ``join``, ``replace``, ``format``, ``strings.quote``, ``split`` and
  ``findAll`` check the size of their result *before* allocating it and raise
  ``SizeLimitError``. 1 MiB is four times the 256 KiB Kubernetes allows for all
  of an object's annotations together; 1,000,000 items is well above the
  largest list kpe hands to an expression (150,000 pods at Kubernetes'
  documented cluster maximum) and holds 8 MB of references.
- **Cost.** The per-evaluation budget (``cost_limit``), in Kubernetes' units and one
  for the whole evaluation, kept only by an expression whose estimate for the largest
  objects the API server admits is over it (``engine.cel.checker.kubecost.request_bound``;
  any other cannot exceed it and counts nothing). Such an expression is charged up front
  the most its operations outside loops cost, each comprehension its items times the most
  one iteration costs (``kubecost.fixed_costs``), and the functions that scan strings one
  unit per ``SCAN_CHARS_PER_UNIT`` characters scanned (cel-go's
  ``StringTraversalCostFactor`` of 0.1), times ``ceil(len(pattern) / 4)`` for regular
  expressions (cel-go's ``RegexStringLengthCostFactor`` of 0.25), and
  ``FIND_RESULT_UNITS`` per string ``findAll`` returns (each result is a call into RE2
  and a new string). Over the budget, ``CostLimitError``.

The static estimate (``kubecost.py``) charges the same units for the worst case the
size assumptions allow, so an expression ``kpe check`` accepts stays within its
budget at run time on objects that respect those assumptions.
"""

from __future__ import annotations

from typing import Any, Final

from engine.cel.errors import EvalError

MAX_STRING_SIZE: Final = 1 << 20
MAX_LIST_SIZE: Final = 1_000_000
SCAN_CHARS_PER_UNIT: Final = 10
REGEX_CHARS_PER_FACTOR: Final = 4
FIND_RESULT_UNITS: Final = 10
# Strings up to this length take the inline fast paths of contains() and literal
# matches() without charging the budget: the static estimate already counts a
# field's scan at this size (engine.cel.checker.shapes.DEFAULT_STRING), and the check itself would cost
# more than the scan it measures.
FREE_SCAN_CHARS: Final = 4096


class SizeLimitError(EvalError):
    """A string or list that would grow past the run-time size limits."""


def string_too_large(what: str, size: int) -> SizeLimitError:
    return SizeLimitError(f"{what} would build a string of {size:,} characters, over the limit of {MAX_STRING_SIZE:,}")


def list_too_large(what: str, size: int) -> SizeLimitError:
    return SizeLimitError(f"{what} would build a list of {size:,} items, over the limit of {MAX_LIST_SIZE:,}")


def check_string(what: str, size: int) -> None:
    if size > MAX_STRING_SIZE:
        raise string_too_large(what, size)


def check_list(what: str, size: int) -> None:
    if size > MAX_LIST_SIZE:
        raise list_too_large(what, size)


def scan_units(chars: int) -> int:
    """Budget units for scanning ``chars`` characters once."""
    return -(-chars // SCAN_CHARS_PER_UNIT)


def regex_factor(pattern_chars: int) -> int:
    return max(1, -(-pattern_chars // REGEX_CHARS_PER_FACTOR))


def charge(budget: list[int], units: int, exceeded: Any, name: str) -> None:
    budget[0] -= units
    if budget[0] < 0:
        exceeded(name)
