"""mixpert: float32 matrix products on INT8/FP16 tensor cores at float32 accuracy (MixPert)."""

from .api import matmul, tune
from .config import show_config
from .execution import record_calls as record
from .inspection import inspect
from .jit import jit
from .passes.check_llvm import UnseenGemmWarning
from .passes.dataflow import DuplicateOpIdError
from .passes.native_sites import NotEmulatedWarning
from .passes.numpy_products import ProductTypingError
from .plan_book import DegenerateTuningDataWarning, MissingPlanError
from .plans.files import PlanFileError
from .plans.plan import Plan, PlanCoverageWarning, PlanMismatchError, StalePlanError
from .runtime.dispatch import clear_cache
from .runtime.levels import DEFAULT_LEVEL, LADDER, LEVELS, NATIVE_LEVEL, Level, get_level
from .runtime.matmul_plan import MatmulPlan
from .runtime.precision import default_level, get_default_level, set_default_level
from .tuning.copies import UncopyableArgumentError
from .tuning.search import TolUnreachableWarning
from .tuning.targets import NativeOnCpuWarning

__all__ = [
    "DEFAULT_LEVEL",
    "LADDER",
    "LEVELS",
    "NATIVE_LEVEL",
    "DegenerateTuningDataWarning",
    "DuplicateOpIdError",
    "Level",
    "MatmulPlan",
    "MissingPlanError",
    "NativeOnCpuWarning",
    "NotEmulatedWarning",
    "Plan",
    "PlanCoverageWarning",
    "PlanFileError",
    "PlanMismatchError",
    "ProductTypingError",
    "StalePlanError",
    "TolUnreachableWarning",
    "UnseenGemmWarning",
    "UncopyableArgumentError",
    "clear_cache",
    "default_level",
    "get_default_level",
    "get_level",
    "inspect",
    "jit",
    "matmul",
    "record",
    "set_default_level",
    "show_config",
    "tune",
]
__version__ = "0.1.0"
