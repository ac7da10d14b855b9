"""Which storage a call may write into, read off the untyped IR (for ``dataflow`` and
``loop_invariance``).

The answer errs towards writing: a call is *opaque* when nothing here knows what it touches
(a Python function, an unknown method, ``*args``), and such a call may write any array it can
reach. Known calls write only what NumPy's rules say: a ufunc its positional outputs (``np.add(a,
1, a)``) and ``out=``; a NumPy function its ``out`` argument, given by position or keyword, and
its first argument when it mutates in place (``np.copyto``); a mutating method (``fill``, ``sort``)
its receiver; a pure method (``sum``, ``astype``) nothing but its positional arguments after the
first (conservatively: some take ``out`` there); an analysed jitted callee the arguments its
summary says it writes.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba.core import ir
from numba.core.ir_utils import find_callname, guard

# NumPy functions and array methods that write into their first argument (or receiver).
MUTATING_FUNCS = frozenset(["copyto", "fill_diagonal", "put", "place", "putmask", "put_along_axis"])
MUTATING_METHODS = frozenset(["fill", "sort", "put", "itemset", "resize", "partition", "setfield"])
# Array methods that write nothing (Numba's supported ones, and NumPy's usual ones).
PURE_METHODS = frozenset(
    [
        "all",
        "any",
        "argmax",
        "argmin",
        "argsort",
        "astype",
        "clip",
        "compress",
        "conj",
        "conjugate",
        "copy",
        "cumprod",
        "cumsum",
        "diagonal",
        "dot",
        "flatten",
        "item",
        "max",
        "mean",
        "min",
        "nonzero",
        "prod",
        "ptp",
        "ravel",
        "real",
        "imag",
        "repeat",
        "reshape",
        "round",
        "searchsorted",
        "squeeze",
        "std",
        "sum",
        "swapaxes",
        "take",
        "tolist",
        "tobytes",
        "trace",
        "transpose",
        "var",
        "view",
        "T",
        "flat",
        "shape",
        "size",
        "ndim",
        "dtype",
    ]
)
# Modules whose functions never write into an argument (in Numba's nopython subset).
PURE_MODULES = frozenset(["builtins", "math", "cmath", "numba", "numpy.linalg"])


def resolve_call(func_ir: ir.FunctionIR, expr: ir.Expr) -> tuple[str, object] | None:
    return guard(find_callname, func_ir, expr)


@dataclass(frozen=True)
class CallWrites:
    """The variables a call may write into; ``opaque``: it may write anything it can reach."""

    vars: tuple[ir.Var, ...] = ()
    opaque: bool = False


SummaryWrites = Callable[[object], "set[int] | None"]  # callee -> arguments it writes, if known


def call_writes(func_ir: ir.FunctionIR, expr: ir.Expr, mutates_of: SummaryWrites) -> CallWrites:
    """What the call ``expr`` may write into (``mutates_of``: an analysed callee's written
    arguments, None for a callee not analysed)."""
    args = list(expr.args)
    kws = dict(expr.kws)
    out = [kws["out"]] if "out" in kws else []
    if expr.vararg is not None or expr.varkwarg is not None:
        return CallWrites((*args, *kws.values()), opaque=True)
    callee = callee_object(func_ir, expr)
    mutated = None if callee is None or kws else mutates_of(callee)
    if mutated is not None:
        return CallWrites(tuple(args[i] for i in sorted(mutated) if i < len(args)))
    name = resolve_call(func_ir, expr)
    if name is None:
        return CallWrites((*args, *kws.values()), opaque=True)
    attr, base = name
    if isinstance(base, ir.Var):  # a method of ``base`` (possibly of a view: "T.fill")
        method = attr.rsplit(".", 1)[-1]
        if method in MUTATING_METHODS:
            return CallWrites((base, *args, *out))
        if method in PURE_METHODS:
            return CallWrites((*args[1:], *out))
        return CallWrites((base, *args, *kws.values()), opaque=True)
    if base == "numpy":
        return CallWrites((*_numpy_outputs(attr, args), *out))
    if base == "numpy.random":
        return CallWrites(tuple(args))  # shuffle, permutation of arrays in place
    if base in PURE_MODULES:
        return CallWrites(tuple(out))
    return CallWrites((*args, *kws.values()), opaque=True)


def _numpy_outputs(attr: str, args: list[ir.Var]) -> list[ir.Var]:
    """Positional arguments of ``numpy.<attr>(*args)`` it writes into."""
    fn = getattr(np, attr, None)
    if attr in MUTATING_FUNCS:
        return args[:1]
    if isinstance(fn, np.ufunc):
        return args[fn.nin :]  # positional outputs
    position = _out_position(fn)
    if position is None:
        return []
    return args[position : position + 1]


def _out_position(fn: Any) -> int | None:
    """Where ``fn`` takes ``out`` positionally, if it does."""
    try:
        parameters = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # no signature: C functions
        return None
    for i, p in enumerate(parameters):
        if p.name == "out" and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            return i
    return None


def callee_object(func_ir: ir.FunctionIR, expr: ir.Expr) -> object | None:
    """The Python object called, when it is a global or closure constant."""
    try:
        return func_ir.infer_constant(expr.func)
    except Exception:  # not a constant: a local closure, a method, ...
        return None
