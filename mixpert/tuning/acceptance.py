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
   as native float32's. Float32 arithmetic itself (``FLOAT32_KINDS``, and "auto" where its
   calls ran such a level) is float32 grade by definition and held to tol only: its own error
   and the in-order figure are two estimates of one error, and which is larger depends on the
   seed, not on the kind of data;
3. every other op whose own error on the tuning input lies far below the model's figure (below
   1/``UNREPRESENTATIVE`` of it: exact, integer, constant or tiny data) has the model's figure
   within tol: a level is never chosen because one input was exact in it.

``refusal`` says which rule a plan breaks, naming the op and the figures: the plan records it
for each op above the cheapest candidate (``OpReport.forced_by``). The held-out inputs
(``held_out``) check the plan beyond this rule.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..runtime.levels import get_level
from .error_model import AUTO_STANDS_FOR, FLOAT32_GRADE, margin_for
from .profiling import Profiler, Trial, Tunable

# An op whose result reaches a discrete step may err at most what a float32 GEMM summing in k
# order errs on it (``error_model.FLOAT32_GRADE``: what SGEMM's bound 2 k u |A||B| is written
# for), so its decisions flip about as often as native float32's do.
# An op whose own error on the tuning data is below 1/UNREPRESENTATIVE of the model's figure for
# generic data (exact, integer, constant, tiny data) is judged by the model, not the data.
UNREPRESENTATIVE = 4.0
# Levels that compute in float32 itself (native float32, float32 in a fixed order): float32
# grade by definition, so rule 2 holds them to tol only.
FLOAT32_KINDS = ("fp32", "ordered")


def float32_arithmetic(level: str) -> bool:
    """Whether ``level`` (a level's name, "auto" resolved) computes in float32 itself."""
    return get_level(level).kind in FLOAT32_KINDS


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

    def refusal(self, trial: Trial, levels: Mapping[str, str]) -> str:
        """Which rule ``levels`` breaks under ``trial``, and why ("" when it passes)."""
        share = self.share(trial)
        if not trial.error <= share * self.tol:
            return (
                f"rule 1: the function's error {trial.error:.2e} exceeds {share:.2f} x tol "
                "(its share of tol for inputs not seen)"
            )
        for op, level in levels.items():
            if op in self.prof.samples:
                why = self.op_refusal(trial, op, level)
                if why:
                    return why
        return ""

    def accepts(self, trial: Trial, levels: Mapping[str, str]) -> bool:
        return not self.refusal(trial, levels)

    def op_fits(self, trial: Trial, op: str, level: str) -> bool:
        """Whether ``level`` keeps op ``op`` within its budget beyond the inputs seen."""
        return not self.op_refusal(trial, op, level)

    def model_allows(self, op: str, level: str) -> bool:
        """Whether the model alone leaves ``level`` possible for ``op`` (saves a profiling run):
        an op feeding a decision is held to its budget whatever the data."""
        return op not in self.decisions or not self.op_refusal(None, op, level)

    def op_refusal(self, trial: Trial | None, op: str, level: str) -> str:
        """Why ``level`` does not keep op ``op`` within its budget beyond the inputs seen, naming
        the rule ("" when it does); ``trial`` None: the model's figures alone."""
        model = self.prof.model(op, level)
        own = 0.0 if trial is None else trial.own.get(op, 0.0)
        if op in self.decisions:  # a decision can hide any error: the op answers for itself
            worst = max(own, model)
            if not worst <= self.tol:
                return f"rule 2: {op} feeds a decision and errs {worst:.2e} at {level}, over tol"
            grade = self.prof.model(op, FLOAT32_GRADE)
            if not self._model_float32_grade(op, level, grade):
                return (
                    f"rule 2: {op} feeds a decision and the model's error at {level}, "
                    f"{model:.2e}, exceeds float32 grade {grade:.2e}"
                )
            ran = frozenset() if trial is None else trial.ran.get(op, frozenset())
            if not (all(float32_arithmetic(r) for r in ran) or own <= grade):
                return (
                    f"rule 2: {op} feeds a decision and its own error at {level}, {own:.2e}, "
                    f"exceeds float32 grade {grade:.2e}"
                )
            return ""
        if own * UNREPRESENTATIVE < model and not model <= self.tol:  # the data flattered it
            return (
                f"rule 3: {op}'s tuning data were near exact at {level} (own error {own:.2e}); "
                f"the model's {model:.2e} for data of their kind exceeds tol"
            )
        return ""  # representative data: the function's measured error decides

    def _model_float32_grade(self, op: str, level: str, grade: float) -> bool:
        """Whether the model holds ``level`` to float32 grade on op ``op``: float32 arithmetic
        is so by definition (comparing it with its own figure would only compare two
        estimates of one error); "auto" when each level it stands for is; others by figure."""
        if float32_arithmetic(level):
            return True
        if get_level(level).kind == "policy":
            return all(self._model_float32_grade(op, lv, grade) for lv in AUTO_STANDS_FOR)
        return self.prof.model(op, level) <= grade
