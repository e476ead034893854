"""The contract between the compiler and the function libraries.

Each library module (``strings``, ``timestamps``, ``quantity``, ...) exports:

``FUNCTIONS: dict[str, Callable[..., object]]``
    global-call functions, ``name(args...)``, e.g. ``quantity('1Gi')``.
``METHODS: dict[str, dict[type, Callable[..., object]]]``
    receiver-style functions, ``recv.name(args...)``, keyed by the exact Python
    type of the receiver (``type(recv)``); called as ``impl(recv, *args)``.
``RESULT_TYPES: dict[str, str]``
    the CEL type name a function or method always returns (for static checks);
    omitted where it depends on the arguments.
``COSTS: dict[str, Callable[..., int]]`` (optional)
    for functions whose work grows with their input (string scans): the run-time
    budget units a call costs, from the same arguments (receiver first); 0 for
    arguments the function does not take (it then raises its own error).
``BUDGETED: dict[str, Callable[..., object]]`` (optional)
    implementations that charge the budget themselves while they work, called as
    ``impl(budget, exceeded, *args)`` (``findAll``, which charges per result).
``READS: dict[str, tuple[Paths | None, ...]]`` (optional)
    for functions that take a Kubernetes object (a pod) and read only some of its
    fields: per argument (the receiver first for methods), the field paths the
    function reads of it, or ``None`` for an argument it reads whole. A path is a
    tuple of field names (or one string of them joined with dots); lists are
    transparent, so ``("spec", "containers", "resources", "requests")`` is that
    of every container. kpe's cache keeps only what policies read of the pods
    bound to nodes (``engine.cluster.projection``): a call to a function with no entry
    keeps each of its arguments whole, which is always correct; an entry lets
    the cache drop the rest. It must list everything the function looks at,
    presence included, and the function must not return (part of) an argument:
    its result is taken to be a new value.

Implementations take plain run-time values (see ``values``), raise
``EvalError`` subclasses with CEL-style messages for bad input, and
``no_such_overload(name, *args)`` for argument types or counts they do not take.
This module merges the libraries into the tables the generated code calls.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

from engine.cel.errors import no_such_overload

Function = Callable[..., Any]
Paths = tuple["tuple[str, ...] | str", ...]
"""Field paths a function reads of one argument (see ``READS`` above)."""


class Library:
    """Merged function tables of several library modules."""

    def __init__(self, modules: list[ModuleType]) -> None:
        self.functions: dict[str, Function] = {}
        self.methods: dict[str, dict[type, Function]] = {}
        self.result_types: dict[str, str] = {}
        self.costs: dict[str, Callable[..., int]] = {}
        self.budgeted: dict[str, Function] = {}
        self.reads: dict[str, tuple[Paths | None, ...]] = {}
        for module in modules:
            self.functions.update(getattr(module, "FUNCTIONS", {}))
            for name, by_type in getattr(module, "METHODS", {}).items():
                self.methods.setdefault(name, {}).update(by_type)
            self.result_types.update(getattr(module, "RESULT_TYPES", {}))
            self.costs.update(getattr(module, "COSTS", {}))
            self.budgeted.update(getattr(module, "BUDGETED", {}))
            self.reads.update(getattr(module, "READS", {}))

    @property
    def namespaces(self) -> frozenset[str]:
        """The qualifiers of namespaced functions (``strings`` of ``strings.quote``, ``kube``...)."""
        return frozenset(name.split(".", 1)[0] for name in self.functions if "." in name)

    def charged(self, name: str, *, method: bool) -> Function | None:
        """``impl(budget, exceeded, *args)`` for a function that spends the run-time
        budget (``None`` for one that does not): it charges, then calls."""
        if name in self.budgeted:
            return self.budgeted[name]
        cost = self.costs.get(name)
        if cost is None:
            return None
        impl = self.method(name) if method else self.functions[name]

        def call(budget: list[int], exceeded: Callable[[str], Any], *args: Any) -> Any:
            units = cost(*args)
            if units:
                budget[0] -= units
                if budget[0] < 0:
                    exceeded(name)
            return impl(*args)

        call.__name__ = f"charged_{name}"
        return call

    def method(self, name: str) -> Function:
        """A dispatcher for ``recv.name(...)`` over every receiver type that has it."""
        table = self.methods[name]

        def dispatch(recv: Any, *args: Any) -> Any:
            impl = table.get(type(recv))
            if impl is None:
                raise no_such_overload(name, recv, *args)
            return impl(recv, *args)

        dispatch.__name__ = f"method_{name}"
        return dispatch
