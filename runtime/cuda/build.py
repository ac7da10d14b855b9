"""The CUDA backend's NVRTC modules, built through CuPy at first use from the CUDA C of kernels/
(``sources``): the pack module (``pack.cu``: tops, k-exponents, the INT8 and FP16 packers,
level IV-blocks's kernels), the combine module (``combine.cu``: the combine and bypass kernels,
level fp32-ordered's kernels) and, for captured products, the decide module (``decide.cu``)."""

from __future__ import annotations

import functools

import cupy as cp

from . import sources

OPTIONS = ("--std=c++17",)


@functools.cache
def pack_module() -> cp.RawModule:
    return cp.RawModule(code=sources.module("pack.cu"), options=OPTIONS)


@functools.cache
def combine_module() -> cp.RawModule:
    return cp.RawModule(code=sources.module("combine.cu"), options=OPTIONS)


@functools.cache
def decide_module() -> cp.RawModule:
    """``decide.cu``: "auto"'s fallback decided on the GPU (graph conditional nodes: built only
    where ``conditional.available``)."""
    return cp.RawModule(code=sources.module("decide.cu"), options=OPTIONS)
