"""``mixpert.show_config()``: what mixpert found here, and why a GPU is or is not used."""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from typing import Any

from .runtime import device
from .runtime.precision import ENV, get_default_level

CUDA_EXTRAS = {12: "mixpert[cuda12]", 13: "mixpert[cuda13]"}


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


def _cupy_packages() -> dict[str, str]:
    found = {}
    for dist in metadata.distributions():
        name = (dist.metadata["Name"] or "").lower()
        if name == "cupy" or name.startswith("cupy-cuda"):
            found[name] = dist.version
    return found


def config() -> dict[str, Any]:
    """What ``show_config`` prints, as data."""
    info: dict[str, Any] = {
        "mixpert": _version("mixpert"),
        "python": platform.python_version(),
        "numpy": _version("numpy"),
        "numba": _version("numba"),
        "llvmlite": _version("llvmlite"),
        "networkx": _version("networkx"),
        "cupy packages": _cupy_packages(),
        "triton": _version("triton"),
        "default level": get_default_level().name,
        "gpu": None,
    }
    cp = device.cupy_module()
    if cp is not None:
        runtime = cp.cuda.runtime
        info["gpu"] = device.device_name()
        info["cuda driver"] = runtime.driverGetVersion()
        info["cuda runtime"] = runtime.runtimeGetVersion()
        info["gpu used"] = "yes: CuPy arrays run there, NumPy ones when the product is large"
        from .runtime.cuda import fused

        info["fused kernel"] = fused.status()
    else:
        info["gpu used"] = f"no: {device.unavailable_reason()}"
        if len(info["cupy packages"]) > 1:
            info["gpu used"] += f" (several CuPy packages installed: {info['cupy packages']})"
    return info


def show_config(file: Any = None) -> None:
    """Print versions, the CuPy package and GPU found, why a GPU is not used, and which
    ``mixpert[cudaNN]`` extra matches the driver (``nvidia-smi`` shows its CUDA version)."""
    out = file or sys.stdout
    for key, value in config().items():
        print(f"{key:>14}: {value}", file=out)
    extras = ", ".join(f"CUDA {major}.x: pip install '{e}'" for major, e in CUDA_EXTRAS.items())
    print(f"{'cuda extras':>14}: {extras}", file=out)
    print(f"{'set default':>14}: mixpert.set_default_level(...) or ${ENV}", file=out)
