"""Whether a CUDA GPU is usable here (CuPy importable and at least one device that answers)."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np


@functools.cache
def cupy_module() -> Any | None:
    """The cupy module when a GPU is usable, else None (never raises)."""
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return None
        cupy.cuda.Device(0).compute_capability  # noqa: B018  (touches the driver)
        return cupy
    except Exception:  # no CuPy, no driver, no device: all mean "no GPU"
        return None


def gpu_available() -> bool:
    return cupy_module() is not None


def unavailable_reason() -> str:
    try:
        import cupy
    except ImportError:
        return (
            "CuPy is not installed (pip install 'mixpert[cuda12]' or 'mixpert[cuda13]', "
            "as the driver's CUDA major)"
        )
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as error:  # driver missing or broken
        return f"CUDA driver unavailable: {error}"
    return "no CUDA device found" if count < 1 else "GPU available"


def is_cupy_array(x: Any) -> bool:
    return type(x).__module__.startswith("cupy")


def array_module(x: Any) -> Any:
    """cupy for a CuPy array, else numpy: the module whose functions run on ``x``'s device."""
    return cupy_module() if is_cupy_array(x) else np


def to_host(x: Any) -> np.ndarray:
    """A NumPy array of ``x`` (CuPy arrays copied from their GPU, Dask arrays computed;
    NumPy ones as they are)."""
    if is_dask_array(x):
        x = x.compute()
    return np.asarray(x.get() if is_cupy_array(x) else x)


def is_dask_array(x: Any) -> bool:
    """A dask.array.Array (NumPy or CuPy chunks), recognised without importing Dask."""
    return type(x).__module__.startswith("dask.array")


def device_name() -> str:
    """The current GPU's name ("NVIDIA H100 80GB HBM3"), or "cpu" where none is usable."""
    cp = cupy_module()
    if cp is None:
        return "cpu"
    name = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["name"]
    return name.decode() if isinstance(name, bytes) else str(name)


def exit_without_gpu(what: str) -> None:
    """End a GPU-only script with one line saying why, where no GPU is usable."""
    if not gpu_available():
        raise SystemExit(f"{what} needs a CUDA GPU: {unavailable_reason()}")
