"""``@mixpert.jit``: Numba nopython compilation whose matrix products run on the mixpert runtime.

The decorated function is a ``MixpertFunction``: calling it activates its plan (op id -> level
name; unlisted ops run at the runtime's default level) for the duration of the call and runs the
compiled code, whose rewritten matmul sites ask the runtime for each product. With ``tol`` and no
``plan``, the plan comes from a ``PlanBook`` (``mixpert.plan_book``): a matching tuned plan from
memory or ``plan_file``, else tune now, run a safe default, or raise, as ``on_missing`` says.

A plan (a ``Plan`` or a mapping op id -> level name) becomes an ``ActivePlan`` here, once, and
is read at run time by the rewritten sites (``mixpert.execution``), so ``f.plan = {...}`` or
``f.with_plan(...)`` switch levels without recompiling. CuPy operands run the same
passes in Numba's object-mode pipeline: the data stays on the GPU and the products go to the
runtime's CUDA backend.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Generic, ParamSpec, TypeVar, get_args, overload

import networkx as nx
import numba
import numpy as np
from numba.core import typeinfer, types
from numba.core.compiler_lock import global_compiler_lock
from numba.core.typing.typeof import Purpose, typeof

from . import one_trip
from .execution import (
    ActivePlan,
    MixpertRuntimeError,
    PackScope,
    activate,
    op_index,
    reraise_pending,
)
from .execution.hook import run_site
from .execution.kept_packs import keeps_packs
from .execution.state import keep_standing
from .interpreted import native, python_variant
from .passes import callees
from .passes.dispatcher import MixpertDispatcher, ScalarRules, make_dispatcher, numba_options
from .passes.numpy_products import product_typing_error
from .passes.placement import Placement
from .passes.record import KEY
from .passes.sites import OpInfo
from .plan_book import OnMissing, PlanBook
from .plans.plan import Plan, PlanLike, as_active_plan, check_plan_covers
from .replay import Replays
from .runtime.device import is_cupy_array, is_dask_array
from .runtime.levels import NATIVE_LEVEL
from .runtime.validation import refuse_masked
from .tuning.targets import Target

log = logging.getLogger("mixpert")


def weak_float_arguments(args: tuple[Any, ...]) -> tuple[Any, ...]:
    """Python float arguments of a float32 function (every floating-point array argument is
    float32) become np.float32: NEP 50 makes them weak beside float32 arrays, and Numba would
    otherwise type them float64 and widen every expression they touch."""
    if not any(type(a) is float for a in args):
        return args  # nothing to convert: the common case, kept cheap
    arrays = [a for a in args if hasattr(a, "dtype") and hasattr(a, "shape")]
    floats = [a for a in arrays if np.issubdtype(a.dtype, np.floating)]
    if not floats or any(a.dtype != np.float32 for a in floats):
        return args
    return tuple(np.float32(a) if type(a) is float else a for a in args)


P = ParamSpec("P")
R = TypeVar("R")
# numba.njit's eager signatures: one ("float32[:, :](float32[:, :])", a Signature, a tuple of
# argument types) or a list of them
Signatures = str | tuple[Any, ...] | list[Any] | numba.core.typing.Signature


class MixpertFunction(Generic[P, R]):
    """A jitted function; see the module docstring. ``.ops`` and ``.graph`` describe its GEMMs.
    It keeps the decorated function's signature for type checkers."""

    def __init__(
        self,
        py_func: Callable[P, R],
        *,
        tol: float | None = None,
        plan: PlanLike | None = None,
        cache: bool = False,
        options: dict[str, Any] | None = None,
        plan_book: PlanBook | None = None,
        scalar_rules: ScalarRules = "numpy",
        replay: bool = False,
        _dispatchers: dict[str, MixpertDispatcher] | None = None,
    ):
        functools.update_wrapper(self, py_func)
        self.py_func = py_func
        self.__mixpert_py_func__ = py_func  # how the passes recognise a mixpert callee
        self.tol = tol
        self.cache = cache
        self.options = numba_options(options or {})  # refuses what mixpert cannot honour
        self.forceobj = bool(self.options.get("forceobj"))  # honoured: object mode, every call
        self.plan_book = plan_book
        if scalar_rules not in get_args(ScalarRules):
            raise ValueError(f"scalar_rules={scalar_rules!r}: use 'numpy' (NEP 50) or 'numba'")
        self.scalar_rules = scalar_rules
        self._python: Callable[..., Any] | None = None  # the NUMBA_DISABLE_JIT variant
        self._dispatchers = {} if _dispatchers is None else _dispatchers
        self._resolved: tuple[Any, ActivePlan] | None = None  # last plan from the book
        self._invariance: dict[int, tuple[bool, bool]] | None = None  # _invariant_operands
        self._op_indices: frozenset[int] | None = None  # _ops_run
        self._mutates: frozenset[int] | None = None  # mutated_arguments
        self._names: tuple[str, ...] | None = None  # the parameters', for placement_for
        self._refused: dict[tuple[Any, ...], str] = {}  # argument kind -> why CuPy refused
        self._entries: dict[tuple[type, ...], Callable[..., Any]] = {}  # _learn_entry
        # argument types -> compiled code a call of such types runs at once (_learn_entry)
        self._direct: dict[tuple[type, ...], Callable[..., Any]] = {}
        if not isinstance(replay, bool):
            raise TypeError(f"replay={replay!r}: give True (replay calls on CuPy arrays) or False")
        self.replay = replay
        self._replays = Replays(repr(self), lambda: self.mutated_arguments) if replay else None
        self.plan = plan

    # --- plan --------------------------------------------------------------------------------
    @property
    def plan(self) -> PlanLike | None:
        """The plan as given (a ``Plan``, a mapping op id -> level name, or None)."""
        return self._plan

    @plan.setter
    def plan(self, plan: PlanLike | None) -> None:
        self._active = as_active_plan(plan)  # validates level names now, not mid-run
        keep_standing(self._active)  # for calls from plain @numba.njit code
        self._plan = plan
        self._plan_checked = plan is None  # against the ops at the first call (check_plan_covers)
        if plan is not None:
            self.plan_book = None  # an explicit plan wins over looking one up

    @property
    def plans(self) -> list[Plan]:
        """The tuned plans this function holds: the explicit one, or its book's (per input)."""
        if isinstance(self._plan, Plan):
            return [self._plan]
        return list(self.plan_book.plans) if self.plan_book is not None else []

    def plan_for(self, *args: Any) -> PlanLike | None:
        """The plan a call with ``args`` runs (for a ``tol=`` function this may tune now)."""
        if self.plan_book is None:
            return self._plan
        return self.plan_book.plan_for(self, args)

    @property
    def active_plan(self) -> ActivePlan:
        """The plan calls run under when no plan book chooses one per call."""
        return self._active

    def with_plan(self, plan: PlanLike | None) -> MixpertFunction[P, R]:
        """The same compiled function under another plan (shares the dispatchers: no recompile)."""
        return MixpertFunction(
            self.py_func,
            tol=self.tol,
            plan=plan,
            cache=self.cache,
            options=self.options,
            scalar_rules=self.scalar_rules,
            replay=self.replay,
            _dispatchers=self._dispatchers,
        )

    # --- compilation -------------------------------------------------------------------------
    def dispatcher_for(self, mode: callees.Mode) -> MixpertDispatcher:
        disp = self._dispatchers.get(mode)
        if disp is None:
            with global_compiler_lock:  # threads racing a first call share one dispatcher
                disp = self._dispatchers.get(mode)
                if disp is None:
                    cache = self.cache and mode == "nopython"
                    disp = make_dispatcher(
                        self.py_func, mode, self.options, cache, self.scalar_rules
                    )
                    self._dispatchers[mode] = disp
        return disp

    @property
    def dispatcher(self) -> MixpertDispatcher:
        """The nopython Numba dispatcher (``.signatures``, ``.inspect_llvm()``, ...)."""
        return self.dispatcher_for("nopython")

    @property
    def _numba_type_(self) -> types.Type:  # lets other jitted code call this function
        return types.Dispatcher(self.dispatcher)

    def _active_for(self, args: tuple[Any, ...]) -> tuple[PlanLike | None, ActivePlan]:
        """The plan a call with ``args`` runs: as given (or found by the book), and as the run
        time reads it."""
        if self.plan_book is None:
            if not self._plan_checked:
                check_plan_covers(self._plan, self)  # type: ignore[arg-type]
                self._plan_checked = True
            return self._plan, self._active
        plan = self.plan_book.plan_for(self, args)
        resolved = self._resolved  # read once: other threads' calls replace it meanwhile
        if resolved is None or resolved[0] is not plan:
            resolved = (plan, as_active_plan(plan))
            self._resolved = resolved
            keep_standing(resolved[1])
        return resolved

    def _interpreted(self) -> Callable[..., Any]:
        """The Python function with its products at the plan's levels (NUMBA_DISABLE_JIT)."""
        if self._python is None:
            qualname = self.py_func.__qualname__

            def site(ordinal: int, a: Any, b: Any, kind: str) -> Any:
                op = op_index(f"{qualname}:{ordinal}")
                return run_site(op, a, b, native(kind), matmul=kind == "matmul")

            self._python = python_variant(self.py_func, site)
        return self._python

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        entry = None if kwargs else self._direct.get(tuple(map(type, args)))
        if entry is not None:  # (CuPy arrays and scalars that need no look: _learn_entry)
            return self._body(None, "object", self._active_for(args)[1], args, entry)
        if kwargs:  # positional from here on: plans match, tuning and profiling call by position
            bound = inspect.signature(self.py_func).bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = bound.args, {}  # type: ignore[assignment]
        refuse_masked(args)
        lazy_or_gpu = any(is_cupy_array(a) or is_dask_array(a) for a in args)
        # CuPy and Dask run in object mode, as does everything under forceobj=True
        mode = "object" if lazy_or_gpu or self.forceobj else "nopython"
        disp = self._dispatchers.get(mode) or self.dispatcher_for(mode)
        given, plan = self._active_for(args)  # plans match the arguments as the caller gave them
        if self.scalar_rules == "numpy":
            args = weak_float_arguments(args)  # type: ignore[assignment]
        refused = ""  # why CuPy refused a body the pass let through
        if mode == "nopython" and one_trip.wanted(given):  # NumPy arguments, a GPU plan
            moved, result, refused = self._one_trip(plan, args)
            if moved:
                return result
        if mode == "object" and self._replays is not None:  # (CuPy: one graph a signature)
            return self._replays.call(args, plan, lambda xs: self._body(disp, mode, plan, xs))
        result = self._body(disp, mode, plan, args)
        if refused:  # the host ran what the GPU refused: CuPy's, not the code's, error
            self._refused[_arguments_kind(args)] = refused
            log.debug("%s: stays on the host from now on: %s", self.py_func.__qualname__, refused)
        return result

    def _body(
        self,
        disp: MixpertDispatcher | None,
        mode: str,
        plan: ActivePlan,
        args: tuple[Any, ...],
        entry: Callable[..., Any] | None = None,
    ) -> Any:
        """The compiled body on ``args`` under ``plan`` (the interpreted one under
        NUMBA_DISABLE_JIT; ``entry``, object-mode code known to take them), with the runtime's
        errors as the caller should see them."""
        with activate(plan, PackScope(self._invariant_operands, args), self._ops_run):
            if numba.config.DISABLE_JIT:
                return self._interpreted()(*args)
            try:
                if mode != "object":
                    return disp(*args)  # type: ignore[misc]
                if entry is None:
                    key = _entry_key(args)
                    entry = None if key is None else self._entries.get(key)
                if entry is not None:  # object mode: straight to the compiled code
                    return entry(*args)
                result = disp(*args)  # type: ignore[misc]
                self._learn_entry(disp, args)  # type: ignore[arg-type]
                return result
            except MixpertRuntimeError as relay:
                reraise_pending(relay)
            except numba.core.errors.TypingError as error:
                concise = product_typing_error(error)
                if concise is None:
                    raise
                raise concise from None

    def _learn_entry(self, disp: MixpertDispatcher, args: tuple[Any, ...]) -> None:
        """Keep the object-mode code compiled for arguments like ``args`` (``_entry_key``), so
        later calls skip the dispatcher: it types each CuPy argument afresh every call, through
        Numba's failed typing of an unknown object (tens of microseconds an argument)."""
        key = _entry_key(args)
        code = self.py_func.__code__
        takes_all = code.co_argcount == len(args) and not code.co_kwonlyargcount
        if key is None or not takes_all or code.co_flags & _STAR_ARGUMENTS:
            return  # (defaults and star-arguments: the dispatcher folds them)
        compiled = disp.overloads.get(tuple(_numba_type(a) for a in args))
        if compiled is not None and compiled.objectmode:
            self._entries[key] = compiled.entry_point
            # a call of these types needs nothing __call__ does before the body where a CuPy
            # array says object mode and no value is looked at: no masked or NumPy array, no
            # Python float (NEP 50's weak floats), no int (its Numba type is its value's), no
            # replay, no move to the GPU (nopython calls alone)
            cupy = any(is_cupy_array(a) for a in args)
            if cupy and self._replays is None and not {int, float} & set(key):
                self._direct[key] = compiled.entry_point

    def _one_trip(self, plan: ActivePlan, args: tuple[Any, ...]) -> tuple[bool, Any, str]:
        """(True, result, "") where the call ran on the GPU in one trip (``mixpert.one_trip``);
        (False, None, "") where it stays on the host, as ``placement_for`` says (logged at
        DEBUG); (False, None, why) where CuPy refused the body (``one_trip.REFUSALS``: the
        caller runs it on the host, and keeps such arguments there if the host succeeds)."""
        placement = self.placement_for(*args)
        if log.isEnabledFor(logging.DEBUG):
            log.debug("%s: %s", self.py_func.__qualname__, placement)
        if not placement.movable:
            return False, None, ""
        body = self._interpreted() if numba.config.DISABLE_JIT else self.dispatcher_for("object")

        def run(moved: tuple[Any, ...]) -> Any:
            with activate(plan, PackScope(self._invariant_operands, moved), self._ops_run):
                return body(*moved)

        try:
            return True, one_trip.run(run, args, self.mutated_arguments), ""
        except one_trip.REFUSALS as refusal:
            return False, None, f"CuPy refused its body ({type(refusal).__name__}: {refusal})"

    def placement_for(self, *args: Any) -> Placement:
        """Where a call with ``args`` runs its body when its plan is for a GPU: on the GPU in
        one trip, or on the host and why (the pass's judgement of the body, then the
        arguments'; ``mixpert.one_trip``). Says nothing of whether a GPU is usable here."""
        refused = self._refused.get(_arguments_kind(args))
        if refused is not None:
            return Placement(refused)
        if self._names is None:
            self._names = tuple(inspect.signature(self.py_func).parameters)
        return one_trip.placement_for(self.placement, args, self._names, self.mutated_arguments)

    @property
    def placement(self) -> Placement | None:
        """Where the body runs for NumPy arguments under a plan for a GPU, as the compiler pass
        judged it from the code alone (``passes.movability``; None: not judged)."""
        summary = callees.summary_of(self)
        return None if summary is None else summary.placement

    @property
    def mutated_arguments(self) -> frozenset[int]:
        """Positions of the arguments the function may write into (callees' writes included)."""
        if self._mutates is None:
            summary = callees.summary_of(self)
            self._mutates = frozenset(summary.mutates) if summary is not None else frozenset()
        return self._mutates

    def compile_for(self, args: Sequence[Any]) -> None:
        """Compile for arguments like ``args`` as a call would; nothing where calls compile
        nothing ahead (CuPy or Dask arguments, forceobj=True: object mode decides per call;
        NUMBA_DISABLE_JIT). A product the types refuse raises ``ProductTypingError`` here, as
        the call would, so callers that run the plain Python function first (the tuner's
        float64 reference) do not meet NumPy's error for it instead."""
        if numba.config.DISABLE_JIT:
            return
        with contextlib.suppress(numba.core.errors.ForceLiteralArg):
            self._compiled_for(args)  # literal arguments: the call's own retry compiles them

    def _compiled_for(self, args: Sequence[Any]) -> tuple[Any, ...] | None:
        """The nopython signature compiled for ``args`` (None: object mode, nothing compiled)."""
        if self.forceobj or any(is_cupy_array(a) or is_dask_array(a) for a in args):
            return None
        if self.scalar_rules == "numpy":
            args = weak_float_arguments(tuple(args))
        disp = self.dispatcher_for("nopython")
        signature = tuple(disp.typeof_pyval(a) for a in args)  # as a call types them
        disp.compile(signature)  # a refused product: ProductTypingError
        return signature

    def native_reasons(self, args: Sequence[Any]) -> dict[str, str]:
        """Op id -> why the site runs Numba's own product for arguments like ``args`` (float64
        operands, a matrix-vector product, ...), from compiling for their types; {} where
        nothing is compiled ahead (object mode: CuPy or Dask arguments, forceobj=True)."""
        signature = self._compiled_for(args)
        if signature is None:
            return {}
        overload = self.dispatcher_for("nopython").overloads[signature]
        return dict(overload.metadata[KEY].native_reasons)

    # --- what the passes found -------------------------------------------------------------
    def _ops_run(self) -> frozenset[int]:
        """The op indices of every product the function runs (callees' included): the products
        of other threads (``prange`` workers) that run this call's plan (``execution.state``)."""
        if self._op_indices is None:
            self._op_indices = frozenset(op.op_index for op in self.ops.values())
        return self._op_indices

    def _invariant_operands(self) -> dict[int, tuple[bool, bool]]:
        """Op index -> (A, B) loop-invariant, for the function's own ops that have one: the
        operands a call packs once (``execution.kept_packs``)."""
        if self._invariance is None:
            qualname = self.py_func.__qualname__
            self._invariance = {
                op.op_index: op.invariant
                for op in self.ops.values()
                if op.qualname == qualname and any(op.invariant)
            } if keeps_packs(self.py_func) else {}  # fmt: skip
        return self._invariance

    @property
    def ops(self) -> dict[str, OpInfo]:
        """Op id -> OpInfo for every matmul site of the function and its jitted callees."""
        summary = callees.summary_of(self)
        return dict(summary.ops) if summary is not None else {}

    @property
    def graph(self) -> nx.DiGraph:
        """The GEMM dependency graph over op ids (nodes carry file, line, source)."""
        summary = callees.summary_of(self)
        return summary.graph.copy() if summary is not None else nx.DiGraph()

    @property
    def decision_ops(self) -> frozenset[str]:
        """Ops whose results reach a discrete step (argmin, a comparison, an integer cast, ...),
        directly or through the ops they feed: the tuner holds them to float32 grade."""
        summary = callees.summary_of(self)
        return summary.decision_ops() if summary is not None else frozenset()

    def __repr__(self) -> str:
        return f"<mixpert.jit {self.py_func.__module__}.{self.py_func.__qualname__}>"


_STAR_ARGUMENTS = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS
_INT64 = 1 << 63
# Argument types whose Numba type the type alone decides (object mode types a CuPy array as a
# Python object); an int's depends on its value (int64, or uint64 past it)
_TYPE_DECIDES: dict[type, bool] = {t: True for t in (float, bool, complex, str, type(None))}


def _entry_key(args: Sequence[Any]) -> tuple[type, ...] | None:
    """The argument types an object-mode call's compiled code is kept for, or None where
    Numba's types of these arguments depend on more than their types (NumPy arrays: dtype,
    layout; ints past int64)."""
    for a in args:
        kind = type(a)
        decides = _TYPE_DECIDES.get(kind)
        if decides is None:
            decides = _TYPE_DECIDES[kind] = is_cupy_array(a) or issubclass(kind, np.generic)
        if not decides and not (kind is int and -_INT64 <= a < _INT64):
            return None
    return tuple(map(type, args))


def _numba_type(value: Any) -> types.Type:
    """The type Numba's dispatcher gives an argument (``typeof_pyval``, without its
    bookkeeping): an object it cannot type is a Python object."""
    try:
        found = typeof(value, Purpose.argument)
    except (numba.core.errors.NumbaValueError, ValueError):
        return types.pyobject
    return types.pyobject if found is None else found


def _arguments_kind(args: Sequence[Any]) -> tuple[Any, ...]:
    """What a refusal by CuPy is remembered for: each argument's dtype and ndim, or its type."""
    return tuple((a.dtype, a.ndim) if isinstance(a, np.ndarray) else type(a) for a in args)


@overload
def jit(
    func: Callable[P, R],
    *,
    tol: float | None = None,
    plan: PlanLike | None = None,
    plan_file: str | Path | None = None,
    on_missing: OnMissing | None = None,
    default_level: str = NATIVE_LEVEL,
    target: Target | None = None,
    cache: bool = False,
    scalar_rules: ScalarRules = "numpy",
    replay: bool = False,
    **options: Any,
) -> MixpertFunction[P, R]: ...


@overload
def jit(
    func: Signatures | None = None,
    *,
    tol: float | None = None,
    plan: PlanLike | None = None,
    plan_file: str | Path | None = None,
    on_missing: OnMissing | None = None,
    default_level: str = NATIVE_LEVEL,
    target: Target | None = None,
    cache: bool = False,
    scalar_rules: ScalarRules = "numpy",
    replay: bool = False,
    **options: Any,
) -> Callable[[Callable[P, R]], MixpertFunction[P, R]]: ...


def jit(
    func: Callable[P, R] | Signatures | None = None,
    *,
    tol: float | None = None,
    plan: PlanLike | None = None,
    plan_file: str | Path | None = None,
    on_missing: OnMissing | None = None,
    default_level: str = NATIVE_LEVEL,
    target: Target | None = None,
    cache: bool = False,
    scalar_rules: ScalarRules = "numpy",
    replay: bool = False,
    **options: Any,
) -> MixpertFunction[P, R] | Callable[[Callable[P, R]], MixpertFunction[P, R]]:
    """Compile ``func`` with Numba (nopython) so its matmuls run on the mixpert runtime.

    ``plan``: a ``Plan`` or a mapping op id -> level name; ops it leaves out run at the default
    level (``mixpert.set_default_level``). ``tol`` without ``plan``: each call runs a tuned plan
    whose output error (MixPert Eq. 10 against float64) was within tol on representative inputs;
    it is read from ``plan_file`` (written by ``mixpert tune``) or made on the first call, and
    ``on_missing`` ("tune", "default": every op at ``default_level``, "raise") says what happens
    when none matches; see ``mixpert.plan_book``. ``target``: the device a tuned plan
    minimises time on ("auto": the GPU when one is usable, else the CPU, where plans run native
    float32 where it meets tol; "cuda" makes the GPU's plan on any machine; see
    ``mixpert.tuning.targets``). ``cache=True`` caches the compiled code on
    disk, apart from plain Numba's entries. ``scalar_rules``: "numpy" (default) types Python
    number literals combined with float32 operands as NumPy 2 does (NEP 50: ``x * 0.5`` stays
    float32; ``passes.scalar_rules``), "numba" keeps Numba's promotion to float64.
    ``replay=True``: a call on CuPy arrays whose GPU work reads nothing back to the host is
    captured once per argument signature (shapes, dtypes, strides, scalars' values, device,
    stream) as one CUDA graph and replayed, with the same bits; a signature whose capture fails
    (a host read, a synchronisation, ...) runs directly, logged at DEBUG (``mixpert.replay``;
    ``mixpert.clear_cache()`` releases the graphs). Other
    keywords go to Numba (``fastmath``, ``boundscheck``, ``parallel``, ``locals``, ...) and are
    checked now: ``forceobj=True`` runs every call in object mode (the products still go to the
    runtime); options mixpert cannot honour (``pipeline_class``, ``_nrt=False``,
    ``nopython=False``, ...) raise ValueError naming them, unknown names Numba's KeyError. Use
    as ``@mixpert.jit`` or ``@mixpert.jit(...)``; as with numba.njit, signatures given first
    (``@mixpert.jit("float32[:, :](float32[:, :], float32[:, :])")``) compile now, and calls
    with other argument types raise TypeError.
    """
    if plan_file is not None and (tol is None or plan is not None):  # it would go unread
        raise TypeError(
            f"plan_file={str(plan_file)!r} is read by functions jitted with tol= and no plan=: "
            + ("give tol= (the plans' error bound), " if tol is None else "drop plan= ")
            + "or pass one of its plans as plan=mixpert.Plan.load(path, f)"
        )

    def wrap(f: Callable[P, R]) -> MixpertFunction[P, R]:
        book = None if tol is None else PlanBook(tol, plan_file, on_missing, default_level, target)
        return MixpertFunction(
            f, tol=tol, plan=plan, cache=cache, options=options, plan_book=book,
            scalar_rules=scalar_rules, replay=replay,
        )  # fmt: skip

    if func is None:
        return wrap
    if callable(func):
        return wrap(func)
    signatures = func if isinstance(func, list) else [func]

    def eager(f: Callable[P, R]) -> MixpertFunction[P, R]:
        jitted = wrap(f)
        disp = jitted.dispatcher_for("object" if jitted.forceobj else "nopython")
        with typeinfer.register_dispatcher(disp):  # as numba.jit: recursion sees the function
            for signature in signatures:
                disp.compile(signature)
            disp.disable_compile()
        return jitted

    return eager
