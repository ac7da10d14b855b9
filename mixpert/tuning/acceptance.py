"""The acceptance rule (``Rule``): when a plan is within tol beyond the inputs seen (what
``tol`` promises; docs/tuning.md says it for users).

A plan is accepted when

1. the function's Eq. 10 error on the tuning input is within ``margin_for(spread) * tol``:
   ``spread`` is the bootstrap spread of that error over blocks of the outputs
   (``error_model.error_spread``), so the error of another input of the same size stays within
   tol by ``error_model.Z`` spreads; outputs too small to cut get the smallest margin;
2. every op whose result reaches a discrete step (argmin/argmax/argsort, comparisons, ``where``'s
   condition, casts to integers: ``passes.dataflow``), or feeds an op that does, is float32
   grade: both its own error on the tuning input and the model's error for its level on generic
   data of its size and magnitudes (``error_model.model_error``) are at most the model's error
   of a float32 GEMM summing in k order on it (``error_model.FLOAT32_GRADE``), and at most tol.
   Its decisions then flip about as often as native float32's: for such functions tol bounds
   the continuous outputs measured on the tuning inputs, and the discrete ones are as stable
   as native float32's;
3. every other op whose own error on the tuning input lies far below the model's figure (below
   1/``UNREPRESENTATIVE`` of it: exact, integer, constant or tiny data) has the model's figure
   within tol: a level is never chosen because one input was exact in it.

The held-out inputs (``held_out``) check the plan beyond this rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from .error_model import FLOAT32_GRADE, margin_for
from .profiling import Profiler, Trial, Tunable

# An op whose result reaches a discrete step may err at most what a float32 GEMM summing in k
# order errs on it (``error_model.FLOAT32_GRADE``: what SGEMM's bound 2 k u |A||B| is written
# for), so its decisions flip about as often as native float32's do.
# An op whose own error on the tuning data is below 1/UNREPRESENTATIVE of the model's figure for
# generic data (exact, integer, constant, tiny data) is judged by the model, not the data.
UNREPRESENTATIVE = 4.0


def decision_ops(func: Tunable) -> frozenset[str]:
    """Ops whose results reach a discrete step (argmin, comparisons, integer casts, ...)."""
    found = getattr(func, "decision_ops", None)
    return frozenset(found) if found is not None else frozenset()


@dataclass
class Rule:
    """When a plan is within tol beyond the inputs seen (the module docstring's rule).

    ``margin``: a fixed share of tol for the function's measured error; None computes it from
    the error's spread (``error_model.margin_for``), times ``scale`` (tightened when validation
    inputs miss). ``decisions``: ops whose results reach a discrete step.
    """

    prof: Profiler
    tol: float
    decisions: frozenset[str] = frozenset()
    margin: float | None = None
    scale: float = 1.0
    input_spread: float = 0.0  # the error's spread over held-out inputs, once measured

    def share(self, trial: Trial) -> float:
        """The share of tol the function's measured error may use under ``trial``."""
        spread = max(trial.spread, self.input_spread)
        base = margin_for(spread) if self.margin is None else self.margin
        return base * self.scale

    def budget(self, op: str) -> float:
        """Float32 grade for an op that reaches a decision (at most tol); else tol."""
        if op not in self.decisions:
            return self.tol
        return min(self.tol, self.prof.model(op, FLOAT32_GRADE))

    def op_fits(self, trial: Trial, op: str, level: str) -> bool:
        """Whether ``level`` keeps op ``op`` within its budget beyond the inputs seen."""
        model, own = self.prof.model(op, level), trial.own.get(op, 0.0)
        if op in self.decisions:  # a decision can hide any error: the op answers for itself
            return max(own, model) <= self.budget(op)
        if own * UNREPRESENTATIVE < model:  # the tuning data flattered the level: model it
            return model <= self.budget(op)
        return True  # representative data: the function's measured error decides

    def accepts(self, trial: Trial, levels: Mapping[str, str]) -> bool:
        if not trial.error <= self.share(trial) * self.tol:
            return False
        return all(
            self.op_fits(trial, op, level)
            for op, level in levels.items()
            if op in self.prof.samples
        )

    def model_allows(self, op: str, level: str) -> bool:
        """Whether the model alone leaves ``level`` possible for ``op`` (saves a profiling run):
        an op feeding a decision is held to its budget whatever the data."""
        return op not in self.decisions or self.prof.model(op, level) <= self.budget(op)
