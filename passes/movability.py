"""Pass ``placement``: whether a function's body can run on CuPy copies of its NumPy arguments.

A ``mixpert.jit`` function whose plan is for a GPU, called with NumPy arrays, can move its data
to the GPU once, run its body there on CuPy arrays (the object-mode path CuPy arguments take)
and bring its results back once (``mixpert.one_trip``), instead of sending every product's
operands over and its result back. That is only right for *whole-array* code, where every
operation has CuPy's counterpart and no Python loop walks elements one at a time. This pass
reads the untyped Numba IR and says so, conservatively: anything it does not know keeps the body
on the host, with the reason and the line.

The body stays on the host where it

- runs a ``prange`` loop, or iterates over anything but ``range`` (``for row in x``);
- indexes an array by a value that changes as a loop runs, other than through slices
  (``x[i, j]``, ``x[:, j]`` in a loop over ``j``: element by element);
- builds or grows a list, set or dict inside a loop;
- calls a NumPy function CuPy lacks or that makes a host array from no array argument
  (``np.empty(shape)``, ``np.arange``), draws random numbers, calls a method CuPy arrays lack,
  a Python function, a closure, or a jitted callee whose own body stays on the host;
- reads a global that is no plain constant (a module-level NumPy array), or defines functions.

Whole-array loops (``for _ in range(iterations): c = ...``, blocked updates through slices) and
the scalar code around them move. What the IR cannot show is judged at call time
(``mixpert.one_trip``: arguments that are not NumPy arrays of numbers, arrays sharing memory),
and a body CuPy still refuses at run time (a TypeError) runs on the host after all.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import ModuleType

import numpy as np
from numba import prange
from numba.core import ir
from numba.core.analysis import compute_cfg_from_blocks
from numba.core.compiler import StateDict
from numba.core.ir_utils import guard

from . import callees
from .placement import MOVABLE, Placement
from .record import record_of
from .scalar_rules import mixpert_weak
from .writes import callee_object, resolve_call


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# NumPy functions CuPy has under the same name, reached through ``__array_function__`` or
# ``__array_ufunc__`` when an argument is a CuPy array (CuPy's names, issue 47's audit).
NUMPY_FUNCTIONS = _words(
    """abs absolute add all allclose amax amin angle any arccos arccosh arcsin arcsinh arctan
    arctan2 arctanh argmax argmin argpartition argsort argwhere around array_equal array_split
    atleast_1d atleast_2d atleast_3d average bincount bitwise_and bitwise_not bitwise_or
    bitwise_xor broadcast_arrays broadcast_to cbrt ceil clip column_stack concatenate conj
    conjugate copy copysign corrcoef cos cosh count_nonzero cov cross cumprod cumsum deg2rad
    degrees diag diagonal diff digitize divide divmod dot dsplit dstack einsum empty_like equal
    exp exp2 expand_dims expm1 fabs fix flatnonzero flip fliplr flipud float_power floor
    floor_divide fmax fmin fmod frexp full_like greater greater_equal histogram hsplit hstack
    hypot imag inner interp invert isclose isfinite isinf isnan kron ldexp left_shift less
    less_equal log log10 log1p log2 logaddexp logaddexp2 logical_and logical_not logical_or
    logical_xor matmul max maximum mean median min minimum mod modf moveaxis multiply nan_to_num
    nanargmax nanargmin nancumsum nanmax nanmean nanmin nanprod nanstd nansum nanvar negative
    nextafter nonzero not_equal ones_like outer partition percentile positive power prod ptp
    quantile rad2deg radians ravel real reciprocal remainder repeat reshape right_shift rint
    roll rot90 round searchsorted sign signbit sin sinh sort split sqrt square squeeze stack std
    subtract sum swapaxes take take_along_axis tan tanh tensordot tile trace transpose tril triu
    true_divide trunc unique var vdot vsplit vstack where zeros_like"""
)
LINALG_FUNCTIONS = _words(
    """cholesky det eigh eigvalsh inv lstsq matrix_power matrix_rank norm pinv qr slogdet solve
    svd"""
)
# Array methods CuPy's ndarray has with NumPy's meaning.
ARRAY_METHODS = _words(
    """all any argmax argmin argsort astype clip conj conjugate copy cumprod cumsum diagonal
    dot fill flatten item max mean min nonzero prod ptp ravel repeat reshape round sort squeeze
    std sum swapaxes take tolist trace transpose var view"""
)
# Python built-ins that run on CuPy arrays and scalars alike (min, max, float: through the
# arrays' comparison and conversion methods); list, set, dict are judged like literals.
BUILTINS = _words(
    "abs bool complex divmod enumerate float int isinstance len max min pow print range "
    "round slice tuple zip dict list set"
)
CONTAINERS = frozenset(["list", "set", "dict"])
LIST_METHODS = frozenset(["append", "extend", "insert", "add", "update", "setdefault", "pop"])
BUILDS = {"build_list": "a list", "build_set": "a set", "build_map": "a dict"}

PlacementOf = Callable[[object], "Placement | None"]  # a jitted callee's (None: unknown)


def judge(func_ir: ir.FunctionIR, placement_of: PlacementOf) -> Placement:
    """The placement of the function ``func_ir`` is the IR of (module docstring): the first
    reason in source order, or ``MOVABLE``."""
    return _Judge(func_ir, placement_of).run()


class _Judge:
    def __init__(self, func_ir: ir.FunctionIR, placement_of: PlacementOf):
        self.func_ir = func_ir
        self.placement_of = placement_of
        loops = compute_cfg_from_blocks(func_ir.blocks).loops().values()
        self.variant: dict[int, set[str]] = {}  # block -> names that change as its loops run
        for loop in loops:
            changing = _loop_variant(func_ir, loop.body)
            for label in loop.body:
                self.variant.setdefault(label, set()).update(changing)

    def run(self) -> Placement:
        found: list[tuple[int, str]] = []
        for label in sorted(self.func_ir.blocks):
            looped = label in self.variant
            changing = self.variant.get(label, set())
            for stmt in self.func_ir.blocks[label].body:
                reason = self.statement(stmt, looped, changing)
                if reason:
                    found.append((stmt.loc.line, reason))
        if not found:
            return MOVABLE
        line, reason = min(found, key=lambda item: item[0])
        return Placement(reason, line)

    # --- statements ------------------------------------------------------------------------
    def statement(self, stmt: ir.Stmt, looped: bool, changing: set[str]) -> str:
        if isinstance(stmt, ir.SetItem) and looped and self.by_element(stmt.index, changing):
            return f"writes {_name(stmt.target)} element by element in a loop"
        if isinstance(stmt, ir.SetAttr):
            return f"sets the attribute {stmt.attr} of {_name(stmt.target)} (an object)"
        if not isinstance(stmt, ir.Assign):
            return ""
        value = stmt.value
        if isinstance(value, (ir.Global, ir.FreeVar)):
            return _global_reason(value.name, value.value)
        if isinstance(value, ir.Yield):
            return "is a generator"
        if not isinstance(value, ir.Expr):
            return ""
        op = value.op
        if op == "call":
            return self.call(value, looped)
        if op == "getitem" and looped and self.by_element(value.index, changing):
            return f"reads {_name(value.value)} element by element in a loop"
        if op in BUILDS and looped:
            return f"builds {BUILDS[op]} in a loop"
        if op == "make_function":
            return "defines a function"
        if op == "getiter" and not self.iterates_range(value.value):
            return f"loops over the items of {_name(value.value)}"
        return ""

    def by_element(self, index: ir.Var, changing: set[str]) -> bool:
        """An index with a part that changes as the loop runs and is no slice."""
        definition = guard(self.func_ir.get_definition, index)
        parts = definition.items if _is_expr(definition, "build_tuple") else [index]
        return any(p.name in changing and not self.is_slice(p) for p in parts)

    def is_slice(self, var: ir.Var) -> bool:
        definition = guard(self.func_ir.get_definition, var)
        if not _is_expr(definition, "call"):
            return False
        return guard(self.func_ir.infer_constant, definition.func) is slice

    def iterates_range(self, var: ir.Var) -> bool:
        definition = guard(self.func_ir.get_definition, var)
        if not _is_expr(definition, "call"):
            return False
        called = callee_object(self.func_ir, definition)
        return called is range or _is_prange(called)  # (prange: said where it is called)

    # --- calls -----------------------------------------------------------------------------
    def call(self, expr: ir.Expr, looped: bool) -> str:
        if expr.vararg is not None or expr.varkwarg is not None:
            return "calls with *args or **kwargs"
        called = callee_object(self.func_ir, expr)
        if called is mixpert_weak:  # numpy-scalar-rules' typed literal: a plain scalar
            return ""
        if _is_prange(called):
            return "runs a prange loop"
        if isinstance(called, type) and issubclass(called, BaseException):
            return ""  # raise ValueError(...)
        if callees.python_function(called) is not None:
            return self.callee(called)
        name = resolve_call(self.func_ir, expr)
        if name is None:
            return f"calls {_name(expr.func)}, which CuPy cannot run"
        attr, owner = name
        if isinstance(owner, ir.Var):
            return self.method(attr, owner, looped)
        if owner == "builtins":
            if attr in CONTAINERS and looped:
                return f"builds a {attr} in a loop"
            return "" if attr in BUILTINS else f"calls the built-in {attr}"
        if owner == "math":
            return ""
        if isinstance(owner, str) and owner.startswith("numpy"):
            return _numpy_reason(attr, owner, called)
        return f"calls {owner}.{attr}, which CuPy cannot run"

    def method(self, attr: str, owner: ir.Var, looped: bool) -> str:
        path = attr.split(".")
        method = path[-1]
        if path[:-1] == ["dtype"] or path == ["dtype", "type"]:
            return ""  # x.dtype.type(0.5): a NumPy scalar of the array's dtype
        if method in LIST_METHODS:
            return f"grows the list {_name(owner)} in a loop" if looped else ""
        if method in ARRAY_METHODS and all(p in ("T", "real", "imag") for p in path[:-1]):
            return ""
        return f"calls .{attr}() of {_name(owner)}, which CuPy arrays lack"

    def callee(self, called: object) -> str:
        name = callees.python_function(called).__qualname__
        inner = self.placement_of(called)
        if inner is None:
            return f"calls {name}, whose body is being judged (recursion)"
        if inner.movable:
            return ""
        where = "" if inner.line is None else f" at its line {inner.line}"
        return f"calls {name}, which {inner.reason}{where}"


def _loop_variant(func_ir: ir.FunctionIR, body: Iterable[int]) -> set[str]:
    """Names defined in the loop ``body`` whose values change from one iteration to the next:
    phis and iterators, and what is computed from them (constants made in the loop do not)."""
    definitions = {
        stmt.target.name: stmt.value
        for label in body
        for stmt in func_ir.blocks[label].find_insts(ir.Assign)
    }
    changing: set[str] = set()
    grew = True
    while grew:
        grew = False
        for name, value in definitions.items():
            if name in changing:
                continue
            if isinstance(value, ir.Var):
                uses = [value]
            elif isinstance(value, ir.Expr):
                if value.op in ("phi", "iternext"):
                    changing.add(name)
                    grew = True
                    continue
                uses = value.list_vars()
            else:  # constants, globals: the same every time
                continue
            if any(v.name in changing for v in uses):
                changing.add(name)
                grew = True
    return changing


def _numpy_reason(attr: str, owner: str, called: object) -> str:
    if owner == "numpy.random":
        return f"draws random numbers (np.random.{attr}: CuPy's generators draw others)"
    if owner == "numpy.linalg":
        return "" if attr in LINALG_FUNCTIONS else f"calls np.linalg.{attr}, which CuPy lacks"
    if owner != "numpy":
        return f"calls {owner.replace('numpy', 'np', 1)}.{attr}, which CuPy lacks"
    if isinstance(called, type) and issubclass(called, np.generic):
        return ""  # np.float32(0.5): a NumPy scalar
    if attr in NUMPY_FUNCTIONS:
        return ""
    if callable(getattr(np, attr, None)) and attr in _HOST_MAKERS:
        return f"np.{attr} makes a NumPy array on the host"
    return f"calls np.{attr}, which CuPy lacks"


# NumPy functions that make an array without dispatching on an array argument: on the GPU they
# would put a host array beside CuPy ones (``np.zeros_like(x)`` is the way that moves).
_HOST_MAKERS = _words(
    """arange array asarray ascontiguousarray asfortranarray empty eye frombuffer fromfunction
    fromiter full identity linspace logspace ones tri zeros"""
)


def _global_reason(name: str, value: object) -> str:
    """Why reading the global ``name`` keeps the body on the host ("" for plain constants)."""
    if isinstance(value, np.ndarray):
        return f"reads the global array {name} (host memory)"
    if _plain(value):
        return ""
    return f"reads the global {name} (a {type(value).__name__})"


def _plain(value: object) -> bool:
    """Modules, functions, classes, numbers, strings, dtypes and tuples of them: nothing that
    holds host arrays."""
    if value is None or isinstance(value, (ModuleType, type, str, bytes, numbers.Number)):
        return True
    if isinstance(value, (np.dtype, np.generic)) or callable(value):
        return True
    return isinstance(value, tuple) and all(_plain(v) for v in value)


def _is_prange(called: object) -> bool:
    return called is prange


def _is_expr(definition: object, op: str) -> bool:
    return isinstance(definition, ir.Expr) and definition.op == op


def _name(var: ir.Var) -> str:
    """A variable as its source spells it (Numba's temporaries as what they are)."""
    return "a value" if var.name.startswith("$") else var.name.split(".")[0]


@dataclass(frozen=True)
class JudgePlacement:
    """Puts the function's ``Placement`` in its summary, where callers and ``mixpert.jit``
    find it (``callees.summary_of``)."""

    name: str = "placement"

    def apply(self, state: StateDict) -> bool:
        summary = record_of(state).summary
        if summary is not None:
            summary.placement = judge(state.func_ir, _callee_placement)
        return False


def _callee_placement(callee: object) -> Placement | None:
    summary = callees.summary_of(callee)
    return None if summary is None else summary.placement
