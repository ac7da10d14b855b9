"""mixpert: float32 matrix products on INT8/FP16 tensor cores at float32 accuracy (MixPert)."""

from .api import matmul
from .inspection import inspect
from .jit import jit
from .runtime.levels import DEFAULT_LEVEL, LADDER, LEVELS, Level, get_level

__all__ = ["DEFAULT_LEVEL", "LADDER", "LEVELS", "Level", "get_level", "inspect", "jit", "matmul"]
__version__ = "0.1.0"
from .plan import Plan, StalePlanError
from .plan_lookup import MissingPlanError
from .tuner import tune

__all__ += ["MissingPlanError", "Plan", "StalePlanError", "tune"]
