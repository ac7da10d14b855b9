"""mixpert: float32 matrix products on INT8/FP16 tensor cores at float32 accuracy (MixPert)."""

from .api import matmul, tune
from .config import show_config
from .execution import record_calls as record
from .inspection import inspect
from .jit import jit
from .passes.native_sites import NotEmulatedWarning
from .passes.numpy_products import ProductTypingError
from .plans.lookup import MissingPlanError
from .plans.plan import Plan, StalePlanError
from .runtime.levels import DEFAULT_LEVEL, LADDER, LEVELS, NATIVE_LEVEL, Level, get_level
from .runtime.precision import default_level, get_default_level, set_default_level

__all__ = [
    "DEFAULT_LEVEL",
    "LADDER",
    "LEVELS",
    "NATIVE_LEVEL",
    "Level",
    "MissingPlanError",
    "NotEmulatedWarning",
    "Plan",
    "ProductTypingError",
    "StalePlanError",
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
