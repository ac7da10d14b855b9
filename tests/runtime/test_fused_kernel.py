"""The fused INT8 kernel (runtime/cuda/fused.py) against the exact CPU oracle and against the
class-sum pipeline it replaces: the same bits on awkward shapes, stacks, thin outputs, tiles
that do not divide the shape, NaN/Inf and unresolved lines (GPU with Triton only)."""

from __future__ import annotations

import numpy as np
import pytest

import mixpert
from mixpert.runtime import LADDER, device, dispatch, get_level
from mixpert.testdata import gemmul8

pytestmark = pytest.mark.gpu
if not device.gpu_available():
    pytest.skip(f"needs a CUDA GPU: {device.unavailable_reason()}", allow_module_level=True)

import cupy as cp  # noqa: E402

from mixpert.runtime.cuda import fused, fused_wgmma, sliced  # noqa: E402
from mixpert.runtime.cuda.packs import K_ALIGN  # noqa: E402

if not fused.triton_installed():
    pytest.skip("the fused kernel needs Triton (the CUDA extras)", allow_module_level=True)

INT8_LEVELS = [level.name for level in LADDER if level.kind == "int8"]
# tails of every tile size, one line, k of one K_ALIGN, k not a multiple of BK
SHAPES = [(1, 1, 1), (3, 16, 5), (129, 257, 65), (300, 1000, 70), (257, 129, 129), (64, 4000, 33)]


def bits(x) -> np.ndarray:
    return cp.asnumpy(x).view(np.uint32) if isinstance(x, cp.ndarray) else x.view(np.uint32)


def operands(rng, m: int, k: int, n: int, phi: float = 1.0):
    return gemmul8(np, rng, (m, k), phi), gemmul8(np, rng, (k, n), phi)


@pytest.mark.parametrize("kernel", ["as routed", "Triton's"])  # (Triton's: other GPUs' kernel)
@pytest.mark.parametrize("level", INT8_LEVELS)
@pytest.mark.parametrize("shape", SHAPES)
def test_fused_bits_equal_the_cpu_oracle_and_the_class_sum_pipeline(
    level, shape, kernel, monkeypatch, request
):
    if kernel == "Triton's":  # (plans made either way hold the other's kernel: none kept)
        monkeypatch.setattr(fused, "on_wgmma", lambda level: False)
        mixpert.clear_cache()
        request.addfinalizer(mixpert.clear_cache)
    rng = np.random.default_rng(abs(hash((level, shape))) % 2**32)
    a, b = operands(rng, *shape)
    assert fused.serves(get_level(level), shape[0], shape[2], K_ALIGN)
    want = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    got = dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), level, backend="cuda")
    np.testing.assert_array_equal(bits(got), bits(want))
    monkeypatch.setenv(fused.SWITCH, "0")
    pipeline = dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), level, backend="cuda")
    np.testing.assert_array_equal(bits(pipeline), bits(want))


OTHER_TILES = [fused.Tile(64, 64, 128, 4, 4), fused.Tile(128, 32, 64, 4, 3)]


@pytest.mark.parametrize("tile", [fused.TILE, *OTHER_TILES])
def test_every_tile_gives_the_same_bits(tile, monkeypatch):
    """The shipped tile and others, on a shape that none of them divides (Triton's kernel,
    which level IV runs off Hopper)."""
    monkeypatch.setattr(fused, "TILE", tile)
    monkeypatch.setattr(fused, "on_wgmma", lambda level: False)
    rng = np.random.default_rng(5)
    a, b = operands(rng, 333, 1040, 97, phi=2.0)
    want = dispatch.np_matmul_at_level(a, b, "IV", backend="cpu")
    got = dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), "IV", backend="cuda")
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("level", ["IV", "V", "T6"])
def test_fused_stacks_have_each_pairs_cpu_bits(level):
    rng = np.random.default_rng(11)
    a = gemmul8(np, rng, (70, 33, 130), 1.5)
    b = gemmul8(np, rng, (70, 130, 17), 1.5)
    want = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    got = dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), level, backend="cuda")
    np.testing.assert_array_equal(bits(got), bits(want))


@pytest.mark.parametrize("plans", ["0", "1"])
def test_a_stack_runs_one_fused_launch_and_no_int8_gemm(monkeypatch, plans):
    """Uncached, a stack's call launches the fused kernel once; with plans kept, the plan's
    first run and its capture do, and later calls replay the graph with no launch of their own."""
    monkeypatch.setenv("MIXPERT_PLAN_CACHE", plans)
    mixpert.clear_cache()
    launches, gemms = [], []
    product = fused.product
    monkeypatch.setattr(fused, "product", lambda *a, **k: launches.append(1) or product(*a, **k))
    monkeypatch.setattr(sliced, "gemm_tn", lambda *a, **k: gemms.append(1))
    a = cp.asarray(np.random.default_rng(1).standard_normal((64, 48, 40), dtype=np.float32))
    b = cp.asarray(np.random.default_rng(2).standard_normal((64, 40, 24), dtype=np.float32))
    first = dispatch.np_matmul_at_level(a, b, "IV", backend="cuda")
    made = len(launches)
    again = dispatch.np_matmul_at_level(a, b, "IV", backend="cuda")
    assert (made, len(launches), len(gemms)) == ((1, 2, 0) if plans == "0" else (2, 2, 0))
    np.testing.assert_array_equal(bits(again), bits(first))
    mixpert.clear_cache()


@pytest.mark.parametrize("level", ["IV", "V", "I"])
def test_special_values_and_the_ends_of_the_float32_range(level):
    """NaN/Inf lines (bypassed), a row whose range the slices cannot resolve, FLT_MAX rows
    (saturation), rows near the subnormal end: the oracle's bits, entry for entry."""
    rng = np.random.default_rng(3)
    a, b = operands(rng, 150, 300, 90)
    a[3, 7], b[4, 11], b[2, 20] = np.nan, -np.inf, np.inf
    a[5] = np.float32(3.4028235e38) * np.sign(a[5])  # FLT_MAX row
    b[:, 6] = 1.0
    a[9] = np.ldexp(a[9], -140).astype(np.float32)  # subnormal products
    a[11, :3] = [1e30, 1e-30, -1e30]  # a row of ~200 binades: unresolved, recomputed
    want = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    got = dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), level, backend="cuda")
    np.testing.assert_array_equal(bits(got), bits(want))


def test_k_beyond_one_int32_block_runs_the_class_sum_pipeline():
    from mixpert.runtime.combine import int32_k_block

    level = get_level("IV")
    assert not fused.serves(level, 64, 64, int32_k_block(level) + K_ALIGN)
    assert fused.serves(level, 64, 64, int32_k_block(level) // K_ALIGN * K_ALIGN)


def test_large_outputs_go_to_the_class_sum_pipeline_where_it_is_faster(monkeypatch):
    """Triton's kernel (level IV's off Hopper) against cuBLAS's GEMMs."""
    monkeypatch.setattr(fused, "on_wgmma", lambda level: False)
    level, side = get_level("IV"), fused.PIPELINE_MIN_SIDE
    assert fused.serves(level, side - 1, side, K_ALIGN)  # small or thin: fused
    assert fused.serves(level, 65536, 64, K_ALIGN)
    assert not fused.serves(level, side, side, K_ALIGN)  # both sides large: cuBLAS's GEMMs
    assert not fused.serves(get_level("V"), fused.PIPELINE_MIN_SIDE_MANY_PAIRS, side, K_ALIGN)
    monkeypatch.setenv(fused.SWITCH, "always")
    assert fused.serves(level, side, side, K_ALIGN)


@pytest.mark.parametrize("name", sorted(fused_wgmma.ROUTED))
def test_on_hopper_routed_levels_run_their_kernel_where_it_beats_the_class_sums(name, monkeypatch):
    level, side = get_level(name), fused_wgmma.ROUTED[name]
    if not fused.on_wgmma(level):
        pytest.skip(f"level {name}'s wgmma kernel does not run here (Hopper only)")
    assert fused.serves(level, 65536, 64, K_ALIGN)  # thin: the kernel
    large = side or 16384
    assert fused.serves(level, large, large, K_ALIGN) == (side is None)
    monkeypatch.setenv(fused.SWITCH, "always")
    assert fused.serves(level, large, large, K_ALIGN)


def test_the_switch_turns_it_off_and_show_config_says_so(monkeypatch):
    from mixpert.config import config

    assert config()["fused kernel"].startswith("on where")
    assert ("fused_wgmma" in config()["fused kernel"]) == fused.on_wgmma(get_level("IV"))
    monkeypatch.setenv(fused.SWITCH, "0")
    assert not fused.serves(get_level("IV"), 64, 64, K_ALIGN)
    assert config()["fused kernel"] == f"off: {fused.SWITCH}=0"
