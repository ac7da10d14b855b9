"""The CUDA backend against the exact CPU oracle (GPU only: skipped here when none is usable)."""

from __future__ import annotations

import numpy as np
import pytest
from gpu_gate import returns_while_gpu_is_held

from mixpert.runtime import LADDER, auto, cpu, device, dispatch, get_level, packer
from mixpert.testdata import gemmul8

pytestmark = pytest.mark.gpu
if not device.gpu_available():
    pytest.skip(f"needs a CUDA GPU: {device.unavailable_reason()}", allow_module_level=True)

import cupy as cp  # noqa: E402

from mixpert.runtime.cuda import backend  # noqa: E402
from mixpert.runtime.cuda.auto_fallback import fallback_sgemm  # noqa: E402
from mixpert.runtime.cuda.native import native_gemm  # noqa: E402
from mixpert.runtime.cuda.packs import (  # noqa: E402
    A_SIDE,
    B_SIDE,
    a_tops,
    b_tops,
    exponents_from_tops,
    k_exponents,
    pack_a,
    pack_b,
    pack_int8,
    pack_int8_columns,
    tops_and_exponents,
)
from mixpert.runtime.cuda.sliced import int8_product  # noqa: E402
from mixpert.runtime.cuda.tn_gemm import CUDA_R_32F  # noqa: E402

INT8_LEVELS = [level.name for level in LADDER if level.kind == "int8"]
SHAPES = [(1, 1, 1), (1, 37, 1), (5, 3, 7), (64, 64, 64), (129, 257, 65), (300, 1000, 70)]


def make(rng: np.random.Generator, shape: tuple[int, int], kind: str) -> np.ndarray:
    if kind == "phi":
        u = rng.random(shape) - 0.5
        return (u * np.exp(1.0 * rng.standard_normal(shape))).astype(np.float32)
    if kind == "normal":
        return rng.standard_normal(shape).astype(np.float32)
    if kind == "uniform":
        return rng.random(shape).astype(np.float32)
    # binades: each row spans ~60 binades
    exps = rng.integers(-30, 30, size=shape)
    return (np.ldexp(rng.random(shape) + 0.5, exps) * rng.choice([-1, 1], size=shape)).astype(
        np.float32
    )


@pytest.mark.parametrize("level", INT8_LEVELS)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("kind", ["phi", "normal", "uniform", "binades"])
def test_int8_levels_bit_identical_to_cpu(level: str, shape: tuple, kind: str) -> None:
    rng = np.random.default_rng(hash((level, shape, kind)) % 2**32)
    m, k, n = shape
    a, b = make(rng, (m, k), kind), make(rng, (k, n), kind)
    expected = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    got = dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), level, backend="cuda")
    assert isinstance(got, cp.ndarray) and got.dtype == cp.float32
    np.testing.assert_array_equal(cp.asnumpy(got).view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("level", ["IV", "V"])
def test_strided_and_transposed_views(level: str) -> None:
    rng = np.random.default_rng(7)
    base_a = make(rng, (200, 300), "phi")
    base_b = make(rng, (260, 150), "normal")
    a, b = base_a[::2, 10:270], base_b[:, ::-1].T.T  # stepped rows, reversed columns
    a_f = np.asfortranarray(a)
    expected = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    for a_dev in (cp.asarray(a), cp.asarray(a_f), cp.asarray(base_a)[::2, 10:270]):
        got = dispatch.np_matmul_at_level(a_dev, cp.asarray(base_b)[:, ::-1], level, backend="cuda")
        np.testing.assert_array_equal(cp.asnumpy(got), expected)
    wide_b = make(rng, (260, 300), "normal")  # stepped columns: neither rows nor columns unit
    expected = dispatch.np_matmul_at_level(a, wide_b[:, ::2], level, backend="cpu")
    got = dispatch.np_matmul_at_level(
        cp.asarray(a), cp.asarray(wide_b)[:, ::2], level, backend="cuda"
    )
    np.testing.assert_array_equal(cp.asnumpy(got).view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("level", INT8_LEVELS + ["fp16"])
def test_nonfinite_bit_identical_and_where_float32_puts_them(level: str) -> None:
    rng = np.random.default_rng(3)
    a, b = make(rng, (40, 50), "normal"), make(rng, (50, 30), "normal")
    a[3, 7], a[9, 0], b[4, 11], b[2, 20] = np.nan, np.inf, -np.inf, np.nan
    b[0, 5] = 0.0  # Inf * 0 = NaN at (9, 5)
    got = cp.asnumpy(
        dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), level, backend="cuda")
    )
    native = a @ b
    np.testing.assert_array_equal(np.isnan(got), np.isnan(native))
    np.testing.assert_array_equal(np.isposinf(got), np.isposinf(native))
    np.testing.assert_array_equal(np.isneginf(got), np.isneginf(native))
    if level != "fp16":
        expected = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
        np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("level", ["IV", "V"])
def test_long_k_uses_exact_blocks(level: str) -> None:
    """k >= 2^17 exceeds one INT32 accumulator: blocks must keep the sums exact."""
    k = 2**17 + 48
    spec = get_level(level)
    from mixpert.runtime.combine import int32_k_block

    assert k > int32_k_block(spec)
    rng = np.random.default_rng(11)
    a = (rng.random((3, k)) * 0.9 + 0.1).astype(np.float32)  # same-sign: sums do not cancel
    b = (rng.random((k, 5)) * 0.9 + 0.1).astype(np.float32)
    expected = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    got = cp.asnumpy(
        dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), level, backend="cuda")
    )
    np.testing.assert_array_equal(got, expected)
    reference = a.astype(np.float64) @ b.astype(np.float64)
    assert np.abs(got - reference).max() / np.abs(reference).max() < 1e-6


def test_fp16_close_to_cpu_and_float32_grade() -> None:
    rng = np.random.default_rng(5)
    a, b = make(rng, (256, 512), "phi"), make(rng, (512, 128), "phi")
    reference = a.astype(np.float64) @ b.astype(np.float64)
    got = cp.asnumpy(
        dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), "fp16", backend="cuda")
    )
    error = np.linalg.norm(got - reference) / np.linalg.norm(reference)
    assert error < 2e-6


def test_native_levels() -> None:
    rng = np.random.default_rng(9)
    a, b = make(rng, (128, 256), "normal"), make(rng, (256, 64), "normal")
    a_dev, b_dev = cp.asarray(a), cp.asarray(b)
    reference = a.astype(np.float64) @ b.astype(np.float64)
    fp32 = dispatch.np_matmul_at_level(a_dev, b_dev, "fp32", backend="cuda")
    np.testing.assert_array_equal(cp.asnumpy(fp32), cp.asnumpy(a_dev @ b_dev))
    tf32 = cp.asnumpy(dispatch.np_matmul_at_level(a_dev, b_dev, "tf32", backend="cuda"))
    tf32_error = np.linalg.norm(tf32 - reference) / np.linalg.norm(reference)
    assert 1e-5 < tf32_error < 2e-3  # TF32 really ran: far worse than float32, still sane
    fp64 = cp.asnumpy(dispatch.np_matmul_at_level(a_dev, b_dev, "fp64", backend="cuda"))
    np.testing.assert_array_equal(fp64, reference.astype(np.float32))


def test_numpy_inputs_offload_and_return_numpy() -> None:
    rng = np.random.default_rng(13)
    a, b = make(rng, (600, 600), "phi"), make(rng, (600, 600), "phi")
    got = dispatch.np_matmul_at_level(a, b, "IV", backend="auto")  # 2 * 600^3 > offload threshold
    assert isinstance(got, np.ndarray)
    np.testing.assert_array_equal(got, dispatch.np_matmul_at_level(a, b, "IV", backend="cpu"))


def test_empty_dimensions_on_gpu() -> None:
    for m, k, n in [(0, 4, 3), (3, 0, 4), (4, 5, 0)]:
        got = dispatch.np_matmul_at_level(
            cp.ones((m, k), cp.float32), cp.ones((k, n), cp.float32), "IV"
        )
        assert got.shape == (m, n) and isinstance(got, cp.ndarray)
        assert not cp.asnumpy(got).any()


@pytest.mark.parametrize("level", ["IV", "V"])
def test_no_host_synchronisation_inside_a_call(level) -> None:
    """A whole uncached call at an explicit level enqueues on the current stream and returns
    while the stream is still held behind a spinning kernel (``gpu_gate``: no timing)."""
    n = 1024
    a = cp.random.standard_normal((n, n), dtype=cp.float32)
    b = cp.random.standard_normal((n, n), dtype=cp.float32)
    backend.product_at_level(a, b, get_level(level))  # warm-up: compile kernels, cuBLAS handle
    cp.cuda.Device().synchronize()
    assert returns_while_gpu_is_held(lambda: backend.product_at_level(a, b, get_level(level)))


# ---- subnormals and NaN payloads: CuPy compiles with -ftz=true, the kernels must not flush ------

EXACT_LEVELS = [*INT8_LEVELS, "fp64"]


def subnormal_inputs(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Rows of subnormal entries, rows mixing subnormals with normal ones, subnormal outputs."""
    exps = rng.integers(-149, -126, size=(24, 40))
    a = np.ldexp(rng.uniform(0.5, 1, size=(24, 40)), exps) * rng.choice([-1, 1], size=(24, 40))
    a = a.astype(np.float32)
    a[::3, ::5] = rng.standard_normal((8, 8)).astype(np.float32) * 1e-30
    b = rng.standard_normal((40, 16)).astype(np.float32)
    b[:, :4] *= np.float32(2.0**-60)  # products far below the smallest normal
    return a, b


@pytest.mark.parametrize("level", EXACT_LEVELS)
def test_subnormal_inputs_and_outputs_bit_identical(level: str) -> None:
    a, b = subnormal_inputs(np.random.default_rng(11))
    expected = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    assert (np.abs(expected[expected != 0]) < np.finfo(np.float32).tiny).any()  # subnormal out
    c = cp.full((24, 16), np.nan, dtype=cp.float32)  # poison: the result must not reuse it
    c[...] = dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), level, backend="cuda")
    np.testing.assert_array_equal(cp.asnumpy(c).view(np.uint32), expected.view(np.uint32))
    # column-major operands take the other pack kernels
    a_f, b_f = cp.asfortranarray(cp.asarray(a)), cp.asfortranarray(cp.asarray(b))
    got_f = cp.asnumpy(dispatch.np_matmul_at_level(a_f, b_f, level, backend="cuda"))
    np.testing.assert_array_equal(got_f.view(np.uint32), expected.view(np.uint32))


def test_subnormal_operands_of_the_fp16_split_are_kept() -> None:
    a = np.array([[1e-40, 3e-42], [1e-39, -2e-44]], np.float32)
    b = np.eye(2, dtype=np.float32)
    got = cp.asnumpy(
        dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), "fp16", backend="cuda")
    )
    np.testing.assert_array_equal(got, dispatch.np_matmul_at_level(a, b, "fp16", backend="cpu"))
    assert (got != 0).all()


@pytest.mark.parametrize("level", ["fp64", "IV", "fp16"])
def test_nan_payloads_come_out_canonical_on_both_backends(level: str) -> None:
    a = np.ones((3, 4), np.float32)
    a.view(np.uint32)[1, 2] = 0x7FC01234  # a NaN with a payload
    a.view(np.uint32)[2, 0] = 0xFFA00001  # a negative signalling NaN
    b = np.ones((4, 5), np.float32)
    cpu = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    gpu = cp.asnumpy(
        dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), level, backend="cuda")
    )
    np.testing.assert_array_equal(gpu.view(np.uint32), cpu.view(np.uint32))
    assert (cpu.view(np.uint32)[1:] == 0x7FC00000).all()


def test_float64_operands_round_as_numpy_rounds_them() -> None:
    a = np.array([[1e-41, 2.5e-39, 1.0]], np.float64)
    b = np.array([[1.0], [1.0], [0.0]], np.float64)
    gpu = cp.asnumpy(
        dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), "IV", backend="cuda")
    )
    np.testing.assert_array_equal(gpu, dispatch.np_matmul_at_level(a, b, "IV", backend="cpu"))


@pytest.mark.parametrize("level", [*INT8_LEVELS, "fp16", "fp64"])
def test_the_top_of_the_range_bit_identical(level: str) -> None:
    fmax = np.finfo(np.float32).max
    a = np.array([[fmax, 0], [fmax / 2, fmax / 2], [3e38, 3e37], [2e38, 3e38], [-fmax, 1]])
    b = np.array([[1.0, 2.0], [1.0, -1.0]])
    a, b = a.astype(np.float32), b.astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    got = cp.asnumpy(
        dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), level, backend="cuda")
    )
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))
    assert np.isfinite(expected[:3, 0]).all() and expected[3, 0] == np.inf


# ---- wide-range data: equilibration along k, the same exponents on both backends -----------


def wide_range_cases(rng: np.random.Generator) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    n = 96
    scale = np.exp2(rng.uniform(-10, 10, n)).astype(np.float32)
    x = (rng.standard_normal((n, n)) * scale).astype(np.float32)
    w = (rng.standard_normal((n, 12)) / scale[:, None]).astype(np.float32)
    column = rng.standard_normal((n, n)).astype(np.float32)
    column[:, 3] *= np.float32(1e6)
    dead = rng.standard_normal((40, n)).astype(np.float32)
    dead[:, 5] = np.float32(1e30)
    b_dead = rng.standard_normal((n, 30)).astype(np.float32)
    b_dead[5] = 0
    return {
        "raw-features": (x, w),
        "outlier-column": (column, rng.standard_normal((n, 20)).astype(np.float32)),
        "dead-k": (dead, b_dead),
        "phi2": (make(rng, (64, n), "phi") ** 2, make(rng, (n, 48), "phi") ** 3),
        # every line unresolved at IV and V (bypass): recomputed in k order on both backends
        "phi=2.5": (gemmul8(np, rng, (70, 300), 2.5), gemmul8(np, rng, (300, 50), 2.5)),
        "outlier-row": (
            outlier_row(rng, (50, 200)),
            rng.standard_normal((200, 40)).astype(np.float32),
        ),
    }


def outlier_row(rng: np.random.Generator, shape: tuple[int, int]) -> np.ndarray:
    x = rng.standard_normal(shape).astype(np.float32)
    x[7, 100] = np.float32(1e6)
    return x


@pytest.mark.parametrize("level", [*INT8_LEVELS, "fp16"])
@pytest.mark.parametrize(
    "case", ["raw-features", "outlier-column", "dead-k", "phi2", "phi=2.5", "outlier-row"]
)
@pytest.mark.parametrize("b_layout", ["C", "F"])
def test_wide_range_data_bit_identical(level: str, case: str, b_layout: str) -> None:
    a, b = wide_range_cases(np.random.default_rng(31))[case]
    expected = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    b_dev = cp.asarray(b) if b_layout == "C" else cp.asfortranarray(cp.asarray(b))
    got = cp.asnumpy(dispatch.np_matmul_at_level(cp.asarray(a), b_dev, level, backend="cuda"))
    if level == "fp16":  # FP32 accumulation in the tensor cores: close, not the same bits
        np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-6 * np.abs(expected).max())
        return
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("case", ["phi=2.5", "outlier-row", "raw-features"])
@pytest.mark.parametrize("level", ["IV", "V"])
def test_the_pack_kernels_flag_the_cpu_unresolved_lines(case: str, level: str) -> None:
    a, b = wide_range_cases(np.random.default_rng(31))[case]
    lv = get_level(level)
    rows, cols = cpu.unresolved_lines(a, b, lv)
    a_dev, b_dev = cp.asarray(a), cp.asarray(b)
    kexp = k_exponents(a_dev, b_dev)
    a_pack, b_pack = pack_a(a_dev, kexp, lv), pack_b(b_dev, kexp, lv)
    assert int(a_pack.nonfinite.sum()) == rows and int(b_pack.nonfinite.sum()) == cols
    assert dispatch.unresolved_lines(a_dev, b_dev, level) == (rows, cols)
    if case == "phi=2.5" or (case, level) == ("outlier-row", "IV"):
        assert rows + cols > 0


def test_the_rebalanced_k_count_is_the_cpu_one() -> None:
    a, b = wide_range_cases(np.random.default_rng(31))["raw-features"]
    cpu_count = dispatch.rebalanced_k(a, b, "IV")
    assert cpu_count > 0 and dispatch.rebalanced_k(cp.asarray(a), cp.asarray(b), "IV") == cpu_count


@pytest.mark.parametrize("case", ["outlier-column", "phi=2.5", "dead-k", "long-k", "stack"])
def test_column_packing_is_the_same_for_any_chunks_of_k(monkeypatch, case: str) -> None:
    """One chunk of k per strip of columns, or the smallest chunks: the same bytes."""
    rng = np.random.default_rng(8)
    if case == "long-k":
        a, b = make(rng, (3, 9000), "binades"), make(rng, (9000, 40), "phi")
        b[17, 3] = np.nan
    elif case == "stack":
        a, b = make(rng, (6, 20, 300), "phi"), make(rng, (6, 300, 33), "normal")
    else:
        a, b = wide_range_cases(np.random.default_rng(31))[case]
    a_dev, b_dev = cp.asarray(a), cp.asarray(b)
    kexp = k_exponents(a_dev, b_dev)
    packs = []
    for blocks in (1, 10**6):
        monkeypatch.setattr("mixpert.runtime.cuda.packs.COLUMN_BLOCKS", blocks)
        packs.append(pack_int8_columns(b_dev, kexp, 3, True, bypass_wide=True))
    for field in ("data", "exponents", "nonfinite"):
        assert cp.array_equal(getattr(packs[0], field), getattr(packs[1], field)), field
    b3, kexp2 = (b_dev, kexp) if b_dev.ndim == 3 else (b_dev[None], kexp[None])
    n = b3.shape[2]
    for z in range(b3.shape[0]):  # the row packer on B^T: an independent implementation
        rows = pack_int8(cp.ascontiguousarray(b3[z].T), kexp2[z], B_SIDE, 3, True, True)
        part = packs[0].part(z * n, n)
        for field in ("data", "exponents", "nonfinite"):
            assert cp.array_equal(getattr(rows, field), getattr(part, field)), (z, field)
    if case != "stack":
        expected = dispatch.np_matmul_at_level(a, b, "IV", backend="cpu")
        got = cp.asnumpy(dispatch.np_matmul_at_level(a_dev, b_dev, "IV", backend="cuda"))
        np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


def packer_edge_lines(rng: np.random.Generator, floor: float, k: int = 256) -> np.ndarray:
    """Lines that take every branch of the pack kernels' integer paths (kernels/packs.cuh's
    packer_integer): subnormal entries beside normal ones, scales too small for a float32
    2^shift, the top of the range, exact half-way roundings, NaN and Inf, and (lines 5-7, scale
    2^1) 8, 9 and 0 entries just below the bypass floor 2^(e - deep - 1) = ``floor``, 20 on it."""
    tiny = np.finfo(np.float32).smallest_subnormal
    lines = rng.standard_normal((12, k)).astype(np.float32)
    lines[0, ::7] = tiny * rng.integers(1, 2**23, size=len(lines[0, ::7]))  # subnormals
    lines[1] *= np.float32(2.0**-110)  # 2^shift beyond float32's range: the exact path
    lines[2] = tiny * rng.integers(-(2**22), 2**22, size=k)  # a subnormal scale
    lines[3] = np.finfo(np.float32).max * rng.uniform(-1, 1, size=k).astype(np.float32)
    lines[4] = np.float32(2.0**-23) * (2 * rng.integers(-(2**20), 2**20, size=k) + 1)  # ties
    lines[4, 0] = 1.0  # scale 2^1: x 2^22 is half-way at three slices
    below = np.nextafter(np.float32(floor), np.float32(0))
    for row, deep in ((5, 8), (6, 9), (7, 0)):
        lines[row] = rng.uniform(0.5, 1, size=k) * rng.choice([-1, 1], size=k)
        lines[row, 0] = 1.0
        lines[row, 1 : 1 + deep] = below * rng.choice([-1, 1], deep)
        lines[row, 20:40] = floor  # on the floor: not deep
    lines[8, 3], lines[9, 5], lines[9, 6] = np.nan, np.inf, -np.inf
    lines[10] = 0
    lines[11, ::2] = np.float32(2.0**-126)  # the smallest normal beside N(0, 1) entries
    return lines


@pytest.mark.parametrize("slices", [1, 2, 3, 4])
# moved: the k-exponents reach this far either way (138: the most two float32 binades give)
@pytest.mark.parametrize("moved", [0, 6, 138])
def test_the_pack_kernels_give_the_cpu_packer_bytes(slices: int, moved: int) -> None:
    """Row and column packs, digit for digit, exponents and flags, against packer.slice_rows
    and bypass.unresolved, with and without k-indices that move (and one dead). Far moves
    take a moving line's entries to both sides of its quick way's limits (2^(sign f + shift)
    a normal float32, the deep bound within float32's binades)."""
    from mixpert.runtime import bypass, equilibrate, packer

    rng = np.random.default_rng(slices)
    k = 256
    deep = bypass.deep_binades(packer.fraction_bits(slices), k)
    lines = packer_edge_lines(rng, 2.0**-deep, k)
    f = np.zeros(k, np.int32)
    if moved:
        f[rng.choice(k, 40, replace=False)] = rng.integers(-moved, moved + 1, size=40)
        f[9] = equilibrate.DEAD
    kexp = cp.asarray(np.append(f, np.int32(moved != 0)))
    for side, rebalanced in (
        (A_SIDE, equilibrate.rebalance_a(lines, f)),
        (B_SIDE, equilibrate.rebalance_b(lines.T, f).T),
    ):
        exps = packer.scale_exponents(rebalanced, axis=1)
        digits = packer.slice_rows(rebalanced, exps, slices).transpose(1, 0, 2)
        wide = bypass.unresolved(rebalanced, exps, packer.fraction_bits(slices), k)
        flags = ~np.isfinite(lines).all(axis=1) | wide
        rows = cp.asarray(lines)
        packs = [  # each line's maximum found by the packer, then taken from its operand's tops
            pack_int8(rows, kexp, side, slices, False, True),
            pack_int8(rows, kexp, side, slices, False, True, tops=a_tops(rows)),
        ]
        if side == B_SIDE:  # B's columns, read in place from a row-major B
            b = cp.asarray(np.ascontiguousarray(lines.T))
            packs.append(pack_int8_columns(b, kexp, slices, False, True))
            packs.append(pack_int8_columns(b, kexp, slices, False, True, b_tops(b)))
        for pack in packs:
            np.testing.assert_array_equal(cp.asnumpy(pack.exponents), exps)
            np.testing.assert_array_equal(cp.asnumpy(pack.data)[:, :, :k], digits)
            np.testing.assert_array_equal(cp.asnumpy(pack.nonfinite) != 0, flags)
        if not moved and slices > 1:  # 9 deep entries of 256 pass k / 32, 8 do not
            assert list(wide[5:8]) == [False, True, False]


def finite_max_bits(x: np.ndarray, axis: int) -> np.ndarray:
    """The CPU model of the tops' float32 bits: the largest finite |entry| along ``axis``."""
    return packer.finite_abs_max(x, axis).astype(np.float32).view(np.uint32)


@pytest.mark.parametrize(
    "shape", [(1, 1, 1), (1, 37, 5), (3, 33, 65), (1, 600, 1100), (4, 1030, 70), (7, 5, 2)]
)
@pytest.mark.parametrize("grid_y", [None, 2])  # 2: the blocks walk several strips of columns
def test_one_read_gives_the_k_and_line_maxima(
    monkeypatch, shape: tuple[int, int, int], grid_y: int | None
) -> None:
    """``a_tops`` / ``b_tops``: the k-exponents' maxima (``equilibrate``'s tops) and each
    line's largest finite |entry| and NaN/Inf flag, for stacks and matrices, B either way, with
    subnormal, zero, NaN and Inf entries and lines of them."""
    if grid_y is not None:
        monkeypatch.setattr("mixpert.runtime.cuda.packs.STRIP_GRID_Y", grid_y)
    rng = np.random.default_rng(sum(shape))
    count, rows, cols = shape
    x = make(rng, (count * rows, cols), "binades").reshape(shape)
    x[0, rows // 2, ::3] = np.finfo(np.float32).smallest_subnormal * 5
    x[-1, -1] = 0
    x[0, 0, cols - 1] = np.nan
    x[count - 1, rows - 1, 0] = -np.inf
    x[0, :, cols // 2] = np.inf
    bad_rows = ~np.isfinite(x).all(axis=2).reshape(-1)
    bad_cols = ~np.isfinite(x).all(axis=1).reshape(-1)
    rows_max, cols_max = finite_max_bits(x, 2).reshape(-1), finite_max_bits(x, 1).reshape(-1)
    dev = cp.asarray(x)
    tops = a_tops(dev)  # x's rows are the lines, its columns the k-indices
    np.testing.assert_array_equal(cp.asnumpy(tops.k).reshape(-1), cols_max)
    np.testing.assert_array_equal(cp.asnumpy(tops.lines), rows_max)
    np.testing.assert_array_equal(cp.asnumpy(tops.bad) != 0, bad_rows)
    for b in (dev, *((cp.asfortranarray(dev[0]),) if count == 1 else ())):
        tops = b_tops(b)  # x as B: a stack, or a column-major matrix
        np.testing.assert_array_equal(cp.asnumpy(tops.k).reshape(-1), rows_max)
        np.testing.assert_array_equal(cp.asnumpy(tops.lines), cols_max)
        np.testing.assert_array_equal(cp.asnumpy(tops.bad) != 0, bad_cols)
    if count == 1:  # a matrix, as the products pass it
        np.testing.assert_array_equal(cp.asnumpy(a_tops(dev[0]).lines), rows_max)
        np.testing.assert_array_equal(cp.asnumpy(b_tops(dev[0]).lines), cols_max)


@pytest.mark.parametrize("case", ["phi", "moves", "dead-k", "b-transposed", "stack", "side"])
def test_the_tops_launches_give_the_k_exponents_of_the_k_exponents_kernel(case: str) -> None:
    """The last block of the two tops' launches computes the k-exponents: the tops and the
    exponents of the separate launches (tops, then ``k_exponents``), for matrices, a stack of
    pairs whose exponents differ, B read transposed, and B's launch on a second stream."""
    rng = np.random.default_rng(12)
    a, b = make(rng, (300, 1000), "phi"), make(rng, (1000, 70), "phi")
    side = None
    if case == "moves":
        a[:, 5] *= np.float32(2.0**30)
    elif case == "dead-k":
        a[:, 9], b[400, :] = 0.0, 0.0
    elif case == "stack":  # more pairs than blocks of one launch; only pair 40 moves
        a, b = make(rng, (70, 40, 300), "normal"), make(rng, (70, 300, 33), "normal")
        a[40, :, 7] *= np.float32(2.0**20)
    elif case == "side":
        side = cp.cuda.Stream(non_blocking=True)
    a_dev = cp.asarray(a)
    b_dev = cp.asarray(b) if case != "b-transposed" else cp.asfortranarray(cp.asarray(b))
    a_top, b_top, kexp = tops_and_exponents(a_dev, b_dev, side)
    alone_a, alone_b = a_tops(a_dev), b_tops(b_dev)
    expected = exponents_from_tops(alone_a.k, alone_b.k)
    assert cp.array_equal(kexp, expected if a_dev.ndim == 3 else expected[0])
    for got, alone in ((a_top, alone_a), (b_top, alone_b)):
        for field in ("k", "lines", "bad"):
            assert cp.array_equal(getattr(got, field), getattr(alone, field)), field
    moved = cp.asnumpy(kexp[..., -1]).reshape(-1)
    if case == "stack":
        assert list(np.flatnonzero(moved)) == [40]
    else:
        assert moved[0] == (case in ("moves", "dead-k"))


def test_stack_packs_take_the_tops_only_for_the_pairs_where_no_k_index_moves() -> None:
    """A stack whose pairs' k-exponents differ (pair 1 rebalances a k-index, pairs 0 and 2
    move none): the packs made with the operands' tops have the bytes, scales and flags of those
    whose kernels find every line's maximum themselves, and the product has the CPU's bits."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 20, 300)).astype(np.float32)
    b = rng.standard_normal((3, 300, 33)).astype(np.float32)
    a[1, :, 7] *= np.float32(2.0**20)
    b[1, 7, :] *= np.float32(2.0**-20)
    a[2, 4, 9], b[0, 11, 5] = np.nan, np.inf
    a_dev, b_dev = cp.asarray(a), cp.asarray(b)
    a_top, b_top = a_tops(a_dev), b_tops(b_dev)
    kexp = exponents_from_tops(a_top.k, b_top.k)
    assert list(cp.asnumpy(kexp[:, -1]) != 0) == [False, True, False]
    rows = a_dev.reshape(-1, 300)
    pairs = (
        (
            pack_int8(rows, kexp, A_SIDE, 3, False, True, 3, a_top),
            pack_int8(rows, kexp, A_SIDE, 3, False, True, 3),
        ),
        (
            pack_int8_columns(b_dev, kexp, 3, True, True, b_top),
            pack_int8_columns(b_dev, kexp, 3, True, True),
        ),
    )
    for with_tops, without in pairs:
        for field in ("data", "exponents", "nonfinite", "flagged"):
            assert cp.array_equal(getattr(with_tops, field), getattr(without, field)), field
    expected = dispatch.np_matmul_at_level(a, b, "IV", backend="cpu")
    got = cp.asnumpy(dispatch.np_matmul_at_level(a_dev, b_dev, "IV", backend="cuda"))
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


@pytest.mark.parametrize("k", [300, 50_000])  # int32 class sums, and float64 over k blocks
def test_the_auto_fallback_decides_with_the_first_gemms_queued(k: int) -> None:
    """``int8_product``'s "auto" check waits for the packs' flag counts with the first weight
    classes' GEMMs queued (on the long-k path, their first k block): where the flagged lines
    cover little of C the result is level IV's bits, where they cover most it is SGEMM's (and
    ``on_native`` is told: cuBLASLt's float32 GEMM, which graphs capture too), on both class-sum
    paths."""
    rng = np.random.default_rng(k)
    a = cp.asarray(rng.standard_normal((48, k)).astype(np.float32))
    b = cp.asarray(rng.standard_normal((k, 40)).astype(np.float32))
    iv, told = get_level("IV"), []
    got = int8_product(a, b, iv, fallback=auto.EMULATED_FALLBACK, on_native=lambda: told.append(1))
    assert not told and cp.array_equal(got, int8_product(a, b, iv))
    a = cp.asarray(gemmul8(np, rng, (48, k), 2.5))  # phi = 2.5: most lines unresolved at IV
    b = cp.asarray(gemmul8(np, rng, (k, 40), 2.5))
    rows, cols = dispatch.unresolved_lines(a, b, "IV")
    assert rows * 40 + cols * 48 - rows * cols > 0.5 * 48 * 40
    got = int8_product(a, b, iv, fallback=auto.EMULATED_FALLBACK, on_native=lambda: told.append(1))
    sgemm = fallback_sgemm(a, b, cp.empty((48, 40), dtype=cp.float32))  # cuBLASLt's SGEMM
    assert told == [1] and cp.array_equal(got, sgemm)


def test_auto_runs_level_iv_on_a_large_product_with_a_dimension_under_3072() -> None:
    """CuPy operands of 2048 x k x 2048 with large_min_work multiply-adds: "auto" (its
    fast path for CuPy matrices included) gives level IV's bits, not cuBLAS SGEMM's; one
    column fewer, it runs SGEMM."""
    import mixpert

    rng = np.random.default_rng(21)
    side = auto.CROSSOVERS.large_min_dim
    k = auto.CROSSOVERS.large_min_work // side**2
    a = cp.asarray(rng.standard_normal((side, k), dtype=np.float32))
    b = cp.asarray(rng.standard_normal((k, side), dtype=np.float32))
    got = mixpert.matmul(a, b, level="auto")
    want = backend.product_at_level(a, b, get_level("IV"))
    assert cp.array_equal(got.view(cp.uint32), want.view(cp.uint32))
    assert not cp.array_equal(got, native_gemm(a, b, CUDA_R_32F))
    narrow = b[:, : side - 1]
    got = mixpert.matmul(a, narrow, level="auto")
    assert cp.array_equal(got, cp.matmul(a, narrow))


def test_auto_takes_sgemm_where_most_of_c_would_be_recomputed_exactly() -> None:
    """An outlier column flags most lines at IV (each recomputed in float64): "auto" runs
    cuBLAS SGEMM there, within the same componentwise bound; on N(0,1) data, and where the
    flagged lines are NaN/Inf ones (kept where float32 puts them, canonical), it runs IV."""
    from mixpert.runtime import bypass

    rng = np.random.default_rng(12)
    n = auto.CROSSOVERS.min_dim
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    a_dev, b_dev = cp.asarray(a), cp.asarray(b)
    iv = get_level("IV")
    for x in (a_dev, a_dev.copy()):
        if x is not a_dev:
            x[: n // 4, 5] = np.float32(np.nan)  # a quarter of the rows: NaN lines only
        want = cp.asnumpy(backend.product_at_level(x, b_dev, iv))
        got = cp.asnumpy(dispatch.np_matmul_at_level(x, b_dev))
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    a_dev[:, 3] *= np.float32(1e6)
    rows, cols = dispatch.unresolved_lines(a_dev, b_dev, "IV")
    assert bypass.exact_share(rows, cols, n, n) > auto.CROSSOVERS.exact_share
    got = dispatch.np_matmul_at_level(a_dev, b_dev)
    sgemm = native_gemm(a_dev, b_dev, CUDA_R_32F)
    np.testing.assert_array_equal(cp.asnumpy(got), cp.asnumpy(sgemm))
    a64, b64 = cp.asnumpy(a_dev).astype(np.float64), b.astype(np.float64)
    bound = 2 * n * 2.0**-24 * (np.abs(a64) @ np.abs(b64))
    assert (np.abs(cp.asnumpy(got) - a64 @ b64) <= bound).all()
    # a recorded call names what ran: fp32 where the runtime fell back, IV where it did not
    from mixpert.execution import hook, record_calls

    with record_calls() as calls:
        for x in (a_dev, cp.asarray(a)):
            hook.run_product(0, x, b_dev, dispatch.route(x, b_dev, "auto"))
    assert [(c.level, c.exact_lines) for c in calls] == [("fp32", (0, 0)), ("IV", (0, 0))]
