"""mixpert.runtime: the emulation runtime (packer, level ladder, combine, CPU and CUDA backends)."""

from .dispatch import matmul
from .levels import DEFAULT_LEVEL, LADDER, LEVELS, NATIVE_LEVEL, Level, get_level

__all__ = [
    "DEFAULT_LEVEL",
    "LADDER",
    "LEVELS",
    "NATIVE_LEVEL",
    "Level",
    "get_level",
    "matmul",
]
