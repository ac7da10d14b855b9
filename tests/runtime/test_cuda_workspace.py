"""The CUDA backend's workspace: class sums in blocks of A's rows (of a stack's pairs) keep every
bit of the oracle and the memory within 4x the operands and output (GPU only)."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from mixpert.runtime import device, dispatch, get_level
from mixpert.testdata import gemmul8

pytestmark = pytest.mark.gpu
if not device.gpu_available():
    pytest.skip(f"needs a CUDA GPU: {device.unavailable_reason()}", allow_module_level=True)

import cupy as cp  # noqa: E402
from cupy.cuda import memory_hook  # noqa: E402

from mixpert.runtime import workspace  # noqa: E402
from mixpert.runtime.cuda import backend  # noqa: E402


class PeakBytes(memory_hook.MemoryHook):
    """The most bytes held from CuPy's pool at once while the hook is on."""

    name = "PeakBytes"

    def __init__(self) -> None:
        self.live: dict[int, int] = {}
        self.peak = 0

    def malloc_postprocess(self, **kwargs) -> None:
        self.live[kwargs["mem_ptr"]] = kwargs["mem_size"]
        self.peak = max(self.peak, sum(self.live.values()))

    def free_postprocess(self, **kwargs) -> None:
        self.live.pop(kwargs["mem_ptr"], None)


def operands(rng: np.random.Generator, shape: tuple[int, ...], kind: str) -> np.ndarray:
    if kind == "phi=2.5":  # every line unresolved: the exact bypass runs per block
        return gemmul8(np, rng, shape, 2.5)
    x = rng.standard_normal(shape).astype(np.float32)
    if kind == "nonfinite":
        x[..., 3, 1] = np.nan
        x[..., 0, 2] = np.inf
    if kind == "outlier":
        x[..., 5] *= np.float32(1e6)
    return x


@pytest.mark.parametrize("level", ["I", "IV", "V"])
@pytest.mark.parametrize("kind", ["normal", "nonfinite", "outlier", "phi=2.5"])
@pytest.mark.parametrize("blocks", [1, 3, None])  # rows (pairs) per block; None: the budget's
@pytest.mark.parametrize("n", [44, 45])  # 44: four entries per combine thread
def test_blocked_class_sums_keep_the_oracles_bits(monkeypatch, level, kind, blocks, n) -> None:
    monkeypatch.setattr(workspace, "GEMM_ROW_BLOCK", 24)
    monkeypatch.setattr(workspace, "GEMM_ROW_BLOCK_MIN_N", 0)  # blocks of rows at any n
    if blocks is not None:
        monkeypatch.setattr(workspace, "gpu_block", lambda units, *_: min(units, blocks))
    rng = np.random.default_rng(zlib.crc32(f"{level} {kind} {n}".encode()))
    a, b = operands(rng, (70, 130), kind), operands(rng, (130, n), kind)
    expected = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    got = cp.asnumpy(
        dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), level, backend="cuda")
    )
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
    sa, sb = operands(rng, (5, 9, 130), kind), operands(rng, (5, 130, n - 32), kind)
    expected = np.stack(
        [
            dispatch.np_matmul_at_level(x, y, level, backend="cpu")
            for x, y in zip(sa, sb, strict=True)
        ]
    )
    got = cp.asnumpy(
        backend.stack_product_at_level(cp.asarray(sa), cp.asarray(sb), get_level(level))
    )
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


def test_blocked_long_k_keeps_the_oracles_bits(monkeypatch) -> None:
    monkeypatch.setattr(workspace, "gpu_block", lambda units, *_: min(units, 4))
    rng = np.random.default_rng(12)
    k = 2**17 + 48
    a = (rng.random((6, k)) * 0.9 + 0.1).astype(np.float32)
    b = (rng.random((k, 5)) * 0.9 + 0.1).astype(np.float32)
    expected = dispatch.np_matmul_at_level(a, b, "IV", backend="cpu")
    got = cp.asnumpy(
        dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), "IV", backend="cuda")
    )
    np.testing.assert_array_equal(got, expected)


def test_the_result_is_ready_on_the_callers_stream(monkeypatch) -> None:
    """Every block runs on the caller's own stream, the result ordered there."""
    monkeypatch.setattr(workspace, "GEMM_ROW_BLOCK", 256)
    monkeypatch.setattr(workspace, "GEMM_ROW_BLOCK_MIN_N", 0)
    rng = np.random.default_rng(4)
    a, b = operands(rng, (2048, 512), "normal"), operands(rng, (512, 1024), "normal")
    expected = dispatch.np_matmul_at_level(a, b, "IV", backend="cpu")
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        got = backend.product_at_level(cp.asarray(a), cp.asarray(b), get_level("IV"))
        host = cp.asnumpy(got, stream=stream)  # ordered on the caller's stream only
    np.testing.assert_array_equal(host, expected)


@pytest.mark.parametrize("level", ["IV", "V"])
@pytest.mark.parametrize(
    "shape",
    [
        (4096, 64, 4096),
        (1024, 1024, 1024),
        (16384, 16, 1024),
        (8, 2048, 64, 2048),
        (1, 8192, 64, 8192),
    ],
)
def test_gpu_workspace_stays_within_4x_operands_and_output(level, shape) -> None:
    rng = np.random.default_rng(2)
    *stack, m, k, n = shape
    a = cp.asarray(rng.standard_normal((*stack, m, k)).astype(np.float32))
    b = cp.asarray(rng.standard_normal((*stack, k, n)).astype(np.float32))
    product = backend.stack_product_at_level if stack else backend.product_at_level
    product(a, b, get_level(level))  # compiles kernels, picks the GEMM algorithms
    cp.cuda.Device().synchronize()
    hook = PeakBytes()
    with hook:
        c = product(a, b, get_level(level))
        cp.cuda.Device().synchronize()
    assert hook.peak <= 4 * (a.nbytes + b.nbytes + c.nbytes), (hook.peak, a.nbytes)
    count = stack[0] if stack else 1
    assert hook.peak <= backend.workspace_bytes(get_level(level), m, k, n, count)  # the refusal's


@pytest.mark.parametrize("shape", [(300, 400, 200), (3, 300, 400, 200)])
def test_a_product_that_cannot_fit_is_refused_before_allocating(monkeypatch, shape) -> None:
    *stack, m, k, n = shape
    a = cp.ones((*stack, m, k), cp.float32)
    b = cp.ones((*stack, k, n), cp.float32)
    monkeypatch.setattr(backend, "free_bytes", lambda: 1_000_000)
    hook = PeakBytes()
    rows = m * (stack[0] if stack else 1)
    with hook, pytest.raises(MemoryError, match=rf"level IV: a \({rows} x {k}\) @ \({k} x {n}\)"):
        (backend.stack_product_at_level if stack else backend.product_at_level)(
            a, b, get_level("IV")
        )
    assert hook.peak == 0
