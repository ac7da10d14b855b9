"""Tuned plans: the data (``plan``) and plan files (``files``), nothing that tunes.

Layers, lowest first: ``files`` (the format, checked JSON objects) <- ``plan`` (``Plan`` and its
loading and saving). The tuner (``mixpert.tuning``) makes plans and sits above this package; the
plan book a jitted function chooses its plan from, tuning when none matches, sits above the
tuner (``mixpert.plan_book``).
"""

from .files import PlanFileError, check_folder
from .plan import (
    OpReport,
    Plan,
    PlanCoverageWarning,
    PlanLike,
    PlanMismatchError,
    StalePlanError,
    as_active_plan,
    check_plan_covers,
    function_identity,
    read_plans,
    save_plan,
    signature_of,
)

__all__ = [
    "OpReport",
    "Plan",
    "PlanCoverageWarning",
    "PlanFileError",
    "PlanLike",
    "PlanMismatchError",
    "StalePlanError",
    "as_active_plan",
    "check_folder",
    "check_plan_covers",
    "function_identity",
    "read_plans",
    "save_plan",
    "signature_of",
]
