"""Profiling runs: the jitted function run once under a candidate plan, on copies of its arguments
(``copies``), its error against float64 measured.

Each run measures the function's output error, MixPert Eq. 10 over all floating-point outputs
together: ``sqrt(sum ||X - X64||_F^2) / sqrt(sum ||X64||_F^2)``, where X64 comes from the
undecorated Python function run on float64 copies of the inputs, on their device (computed
once); the final contents of arrays the function writes into count as outputs. The same run
keeps each op's sampled products, from which its own error and the model's figures come
(``error_model``). Runs are cached per plan and capped by a budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import networkx as nx

from ..execution import record_calls
from ..execution.product_samples import ProductSample
from ..metrics import output_error
from ..one_trip import nbytes
from ..runtime import device
from ..timing import synchronizer_for
from .copies import copies, float64_copies, float_array_leaves, parameter_names
from .error_model import error_spread, model_error, own_error

OP_SECONDS_RUNS = 3  # op_seconds, call_seconds: a warm-up run, then two timed ones


class Tunable(Protocol):
    """What the tuner needs of a jitted function (``mixpert.jit`` gives one)."""

    py_func: Callable[..., Any]

    @property
    def ops(self) -> Mapping[str, Any]: ...

    @property
    def graph(self) -> nx.DiGraph: ...

    def with_plan(self, plan: Mapping[str, str]) -> Callable[..., Any]: ...


@dataclass(frozen=True)
class Trial:
    """One profiling run under a plan: the function's error, its spread between inputs
    (``error_model.error_spread``), each op's own error and the levels its sampled calls ran
    at ("auto" resolved: what the own error is the error of)."""

    error: float
    spread: float
    own: Mapping[str, float]
    ran: Mapping[str, frozenset[str]] = field(default_factory=dict)


@dataclass
class Profiler:
    """Runs the function under candidate plans; caches trials and model errors; counts runs."""

    func: Tunable
    args: tuple[Any, ...]
    budget: int | None = None
    on_run: Callable[[], None] | None = None
    reference: Any = None
    runs: int = 0
    trials: dict[tuple[tuple[str, str], ...], Trial] = field(default_factory=dict)
    flops: dict[str, float] = field(default_factory=dict)  # op id -> sum of 2*m*k*n
    samples: dict[str, list[ProductSample]] = field(default_factory=dict)  # from the first run
    models: dict[tuple[str, str], float] = field(default_factory=dict)
    # what the first run's products read and wrote (float32 A, B and C) and its result held:
    # the bytes a call with NumPy arguments moves to a GPU and back (``trip``)
    product_bytes: int = 0
    result_bytes: int = 0

    # the float arrays the function writes into (``float_array_leaves`` of the arguments,
    # nested ones included): their final contents are outputs too
    written: tuple[int, ...] = ()
    names: tuple[str, ...] = field(default=(), init=False)  # the parameters', for refusals

    def __post_init__(self) -> None:
        self.names = parameter_names(self.func.py_func)
        if self.reference is not None:  # given: a held-out input's, kept from an earlier run
            return
        reference_args = float64_copies(self.args, self.names)
        result = self.func.py_func(*reference_args)
        given, ran = float_array_leaves(self.args), float_array_leaves(reference_args)
        self.written = tuple(
            i for i, (g, r) in enumerate(zip(given, ran, strict=True)) if not _same_values(g, r)
        )
        self.reference = (result, *(ran[i] for i in self.written))

    def copied_args(self) -> tuple[Any, ...]:
        """Deep copies of the arguments for one run: the caller's objects are never run on."""
        return copies(self.args, self.names)

    def trial(self, levels: Mapping[str, str]) -> Trial:
        key = tuple(sorted(levels.items()))
        if key in self.trials:
            return self.trials[key]
        if self.budget is not None and self.runs >= self.budget:
            raise BudgetExhausted
        args = self.copied_args()
        with record_calls(samples=True) as calls:
            result = self.func.with_plan(dict(levels))(*args)
        leaves = float_array_leaves(args)
        outputs = (result, *(leaves[i] for i in self.written))
        self.runs += 1
        if not self.flops:  # shapes do not depend on levels: learn them from the first run
            self.product_bytes = sum(4 * (c.m * c.k + c.k * c.n + c.m * c.n) for c in calls)
            self.result_bytes = nbytes(result)
            for call in calls:
                self.flops[call.op_id] = (
                    self.flops.get(call.op_id, 0.0) + 2.0 * call.m * call.k * call.n
                )
                if call.sample is not None:
                    self.samples.setdefault(call.op_id, []).append(call.sample)
        if self.on_run is not None:
            self.on_run()
        own: dict[str, list[ProductSample]] = {}
        ran: dict[str, set[str]] = {}
        for call in calls:
            if call.sample is not None:
                own.setdefault(call.op_id, []).append(call.sample)
                ran.setdefault(call.op_id, set()).add(call.level)
        self.trials[key] = Trial(
            output_error(outputs, self.reference),
            error_spread(outputs, self.reference),
            {op: own_error(samples) for op, samples in own.items()},
            {op: frozenset(levels) for op, levels in ran.items()},
        )
        return self.trials[key]

    def cached(self, levels: Mapping[str, str]) -> Trial | None:
        """The trial of ``levels`` when a run made it, else None (no run is made)."""
        return self.trials.get(tuple(sorted(levels.items())))

    def error(self, levels: Mapping[str, str]) -> float:
        """The function's Eq. 10 error under ``levels`` (one profiling run, cached)."""
        return self.trial(levels).error

    def model(self, op: str, level: str) -> float:
        """``error_model.model_error`` of ``level`` on op ``op``'s sampled products (cached)."""
        key = (op, level)
        if key not in self.models:
            self.models[key] = model_error(self.samples.get(op, []), level)
        return self.models[key]

    def op_seconds(self, levels: Mapping[str, str]) -> dict[str, float]:
        """Measured seconds of each op under ``levels``: the least of two runs after a first
        (which compiles kernels and fills caches; the runtime plans a product signature seen
        again at its second call, a graph capture that must not count); three profiling runs."""
        best: dict[str, float] = {}
        for run in range(OP_SECONDS_RUNS):
            with record_calls() as calls:
                self.func.with_plan(dict(levels))(*self.copied_args())
            self.runs += 1
            seconds: dict[str, float] = {}
            for call in calls:
                seconds[call.op_id] = seconds.get(call.op_id, 0.0) + call.seconds
            if run > 0:
                best = {op: min(t, best.get(op, math.inf)) for op, t in seconds.items()}
        return best

    def call_seconds(self, levels: Mapping[str, str]) -> float:
        """Measured seconds of one whole call under ``levels``, synchronised: the least of two
        runs after a first (as ``op_seconds``); three profiling runs."""
        jitted, sync = self.func.with_plan(dict(levels)), synchronizer_for(self.args)
        best = math.inf
        for run in range(OP_SECONDS_RUNS):
            args = self.copied_args()
            sync()
            start = time.perf_counter()
            jitted(*args)
            sync()
            self.runs += 1
            if run > 0:
                best = min(best, time.perf_counter() - start)
        return best


def _same_values(given: Any, ran: Any) -> bool:
    """Whether a float64 copy still holds the values of the argument it was made from."""
    xp = device.array_module(given)
    return bool(xp.array_equal(given.astype(xp.float64), ran, equal_nan=True))


class BudgetExhausted(Exception):
    """The profiling budget (ops x levels) is spent; the tuner keeps its best plan so far."""
