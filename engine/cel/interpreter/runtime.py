"""The names generated code calls: operator helpers, comprehension ranges,
optional support, and the conversion of Python exceptions to CEL errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from engine.cel.types import operators as ops
from engine.cel.errors import (
    CostLimitError,
    DivisionByZeroError,
    EvalError,
    IntOverflowError,
    NoSuchKeyError,
    NoSuchOverloadError,
    no_such_overload,
)
from engine.cel.types.values import OPTIONAL_NONE, Optional, UInt, has_bool_keys, map_key, plain_key, type_name, type_of


class Unbound:
    """The value of a declared variable the activation did not provide: any use is an error."""

    __slots__ = ("name",)

    def __init__(self, name: str = "") -> None:
        self.name = name

    def _fail(self, *args: Any) -> Any:
        raise EvalError(f"no value for variable '{self.name}'" if self.name else "unbound variable")

    __getitem__ = __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = __add__ = __radd__ = _fail
    __sub__ = __rsub__ = __contains__ = __len__ = __iter__ = __hash__ = _fail


UNBOUND = Unbound()


def unbound(name: str) -> Any:
    raise EvalError(f"undeclared reference to '{name}'")


def unknown_function(name: str) -> Any:
    def fail(*args: Any) -> Any:
        raise NoSuchOverloadError(f"unknown function '{name}'")

    return fail


def comprehension_range(value: Any, two_variables: bool) -> Any:
    t = type(value)
    if t is list:
        return list(enumerate(value)) if two_variables else value
    if t is dict:
        if has_bool_keys(value):
            return [(plain_key(k), v) for k, v in value.items()] if two_variables else [plain_key(k) for k in value]
        return list(value.items()) if two_variables else list(value)
    raise no_such_overload("comprehension", value)


def raise_no_such_overload(name: str, *args: Any) -> Any:
    raise no_such_overload(name, *args)


def truth(value: Any, where: str) -> bool:
    if value is True or value is False:
        return value
    raise no_such_overload(where, value)


def as_optional(value: Any, where: str) -> Optional:
    if type(value) is Optional:
        return value
    raise no_such_overload(where, value)


def optional_list(elements: list[Any], optional_flags: list[bool]) -> list[Any]:
    out = []
    for value, is_optional in zip(elements, optional_flags):
        if is_optional:
            opt = as_optional(value, "[?_]")
            if opt.present:
                out.append(opt.value)
        else:
            out.append(value)
    return out


def make_map(entries: list[tuple[Any, Any, bool]]) -> dict[Any, Any]:
    plain = []
    for key, value, is_optional in entries:
        if is_optional:
            opt = as_optional(value, "{?_: _}")
            if not opt.present:
                continue
            value = opt.value
        plain.append((key, value))
    return ops.make_map(plain)


def make_cost_check(text: str, limit: int) -> Any:
    def cost_exceeded(kind: str) -> Any:
        snippet = text if len(text) <= 80 else text[:77] + "..."
        raise CostLimitError(f"cost limit of {limit} exceeded by {kind}() in expression: {snippet}")

    return cost_exceeded


def convert(exc: BaseException) -> EvalError:
    """A Python exception escaping generated code, as the CEL error it stands for."""
    if isinstance(exc, EvalError):
        return exc
    if isinstance(exc, KeyError):
        key = exc.args[0] if exc.args else "?"
        return NoSuchKeyError(f"no such key: {key}")
    if isinstance(exc, TypeError):
        return NoSuchOverloadError(f"no such overload: {_describe_type_error(exc)}")
    if isinstance(exc, ZeroDivisionError):
        return DivisionByZeroError("division by zero")
    if isinstance(exc, OverflowError):
        return IntOverflowError(str(exc) or "overflow")
    if isinstance(exc, RecursionError):
        return EvalError("expression nested too deeply to evaluate")
    return EvalError(f"{type(exc).__name__}: {exc}")


_PY_TO_CEL = {"NoneType": "null", "str": "string", "float": "double", "dict": "map", "int": "int", "bool": "bool", "list": "list"}


def _describe_type_error(exc: TypeError) -> str:
    msg = str(exc)
    if "not subscriptable" in msg or "indices must be" in msg:
        kind = msg.split("'")[1] if "'" in msg else "value"
        if "indices must be" in msg:
            kind = msg.split(" ")[0]
        return f"field selection or index on {_PY_TO_CEL.get(kind, kind)}"
    return msg


# Expression forms of &&, || and the macros, for CEL nested too deeply for statements.


def logical_fold(decisive: bool, thunks: tuple[Any, ...], op: str) -> bool:
    error: BaseException | None = None
    for thunk in thunks:
        try:
            value = thunk()
        except CostLimitError:
            raise
        except Exception as exc:  # noqa: BLE001 - CEL errors are values here
            error = error or exc
            continue
        if value is decisive:
            return decisive  # type: ignore[no-any-return]  # the identity test above narrows it to Any
        if value is not (not decisive):
            error = error or no_such_overload(op, value)
    if error is not None:
        raise error
    return not decisive


def logical_and(*thunks: Any) -> bool:
    return logical_fold(False, thunks, "_&&_")


def logical_or(*thunks: Any) -> bool:
    return logical_fold(True, thunks, "_||_")


def comprehension(kind: str, budget: list[int], exceeded: Any, rng: Any, pred: Any, transform: Any) -> Any:
    if kind in ("optMap", "optFlatMap"):
        opt = as_optional(rng, kind)
        if not opt.present:
            return opt
        result = transform(opt.value)
        return Optional(result) if kind == "optMap" else as_optional(result, kind)
    two = pred is not None and pred.__code__.co_argcount == 2 or transform is not None and transform.__code__.co_argcount == 2
    items = comprehension_range(rng, two)
    budget[0] -= len(items)
    if budget[0] < 0:
        exceeded(kind)
    call: Callable[[Any, Any], Any] = (lambda f, item: f(*item)) if two else (lambda f, item: f(item))
    if kind in ("all", "exists"):
        decisive = kind == "exists"
        return logical_fold(decisive, tuple((lambda item=item: call(pred, item)) for item in items), kind)
    if kind == "exists_one":
        return sum(1 for item in items if truth(call(pred, item), kind)) == 1
    if kind == "filter":
        return [item for item in items if truth(call(pred, item), kind)]
    selected = [item for item in items if pred is None or truth(call(pred, item), kind)]
    if kind == "transformMap":
        return {map_key(item[0]): call(transform, item) for item in selected}
    return [call(transform, item) for item in selected]


_ABSENT = object()


def optional_step(value: Any, key: Any) -> Any:
    """One presence-tested step of an optional chain; ``_ABSENT`` once anything is missing."""
    if value is _ABSENT:
        return _ABSENT
    if type(value) is Optional:
        if not value.present:
            return _ABSENT
        value = value.value
    opt = ops.optional_index(value, key)
    return opt.value if opt.present else _ABSENT


# optional.* functions and methods -------------------------------------------


def optional_of(value: Any) -> Optional:
    return Optional(value)


def optional_none() -> Optional:
    return OPTIONAL_NONE


_ZERO = (None, False, 0, 0.0, "", b"")


def optional_of_non_zero(value: Any) -> Optional:
    t = type(value)
    if value is None or (t in (bool, int, UInt, float, str, bytes) and not value) or (t in (list, dict) and not value):
        return OPTIONAL_NONE
    if hasattr(value, "is_zero") and value.is_zero():
        return OPTIONAL_NONE
    return Optional(value)


def optional_has_value(opt: Optional) -> bool:
    return opt.present


def optional_value(opt: Optional) -> Any:
    if not opt.present:
        raise EvalError("optional.none() dereference")
    return opt.value


def optional_or_value(opt: Optional, default: Any) -> Any:
    return opt.value if opt.present else default


def optional_or(opt: Optional, other: Any) -> Optional:
    if opt.present:
        return opt
    return as_optional(other, "or")


FUNCTIONS = {
    "optional.of": optional_of,
    "optional.none": optional_none,
    "optional.ofNonZeroValue": optional_of_non_zero,
}
METHODS = {
    "hasValue": {Optional: optional_has_value},
    "value": {Optional: optional_value},
    "orValue": {Optional: optional_or_value},
    "or": {Optional: optional_or},
}
RESULT_TYPES = {"optional.of": "optional", "optional.none": "optional", "optional.ofNonZeroValue": "optional", "hasValue": "bool", "or": "optional"}

SIZED = frozenset((str, bytes, list, dict))
# Types whose Python == is CEL's == when both sides have the type (NaN != NaN included).
PLAIN_EQ = frozenset((str, int, bool, float, bytes, type(None)))
STR_CONTAINERS = frozenset((dict, list))


def namespace() -> dict[str, Any]:
    """The helpers every generated function may call, by the names codegen uses."""
    return {
        "_eq": ops.equals,
        "_lt": ops.less,
        "_le": ops.less_equal,
        "_gt": ops.greater,
        "_ge": ops.greater_equal,
        "_add": ops.add,
        "_sub": ops.subtract,
        "_mul": ops.multiply,
        "_div": ops.divide,
        "_mod": ops.modulo,
        "_neg": ops.negate,
        "_not": ops.logical_not,
        "_in": ops.contains,
        "_index": ops.index,
        "_optidx": ops.optional_index,
        "_optsel": ops.optional_select,
        "_optstep": optional_step,
        "_ABSENT": _ABSENT,
        "_select": ops.select,
        "_has": ops.has,
        "_size": ops.size,
        "_SIZED": SIZED,
        "_PLAIN_EQ": PLAIN_EQ,
        "_STR_CONTAINERS": STR_CONTAINERS,
        "_type_of": type_of,
        "_nso": no_such_overload,
        "_raise_nso": raise_no_such_overload,
        "_range": comprehension_range,
        "_truth": truth,
        "_as_optional": as_optional,
        "_Optional": Optional,
        "_mapkey": map_key,
        "_optlist": optional_list,
        "_makemap": make_map,
        "_unbound": unbound,
        "_unknown_function": unknown_function,
        "_unknown_method": unknown_function,
        "_convert": convert,
        "_and": logical_and,
        "_or": logical_or,
        "_comprehension": comprehension,
        "_Reraise": CostLimitError,
        "_UNBOUND": UNBOUND,
        "type_name": type_name,
    }
