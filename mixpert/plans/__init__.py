"""Tuned plans: the data (``plan``), plan files (``files``) and the plan book a jitted function
chooses its plan from (``lookup``).

Layers, lowest first: ``files`` (the format, checked JSON objects) <- ``plan`` (``Plan`` and its
loading and saving) <- ``lookup`` (``PlanBook``, which tunes through ``mixpert.tuning``). This
package re-exports the first two only: ``lookup`` imports the tuner, which imports ``plan``.
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
