"""mixpert.runtime: the emulation runtime (packer, level ladder, combine, CPU and CUDA backends)."""

from .dispatch import np_matmul_at_level
from .levels import DEFAULT_LEVEL, LADDER, LEVELS, NATIVE_LEVEL, Level, get_level

__all__ = [
    "DEFAULT_LEVEL",
    "LADDER",
    "LEVELS",
    "NATIVE_LEVEL",
    "Level",
    "get_level",
    "np_matmul_at_level",
]
