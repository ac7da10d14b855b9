"""The wgmma kernels of ``runtime/cuda/fused_wgmma.py`` (Hopper only) against the exact CPU
oracle and the class-sum pipeline: every level's kernel called on its packs, and the levels
``fused`` routes to it through a product, the same bits on the tails of every tile, k not a
multiple of the k-step, stacks, NaN/Inf, unresolved lines and the ends of the float32 range;
each variant (``fused_wgmma.VARIANTS``) the bits of its level's kernel; the sizes they serve;
the operands they refuse, by name."""

from __future__ import annotations

import numpy as np
import pytest

import mixpert
from mixpert.runtime import device, dispatch, get_level, pack_reuse
from mixpert.testdata import gemmul8

pytestmark = pytest.mark.gpu
if not device.gpu_available():
    pytest.skip(f"needs a CUDA GPU: {device.unavailable_reason()}", allow_module_level=True)

import cupy as cp  # noqa: E402

from mixpert.runtime.combine import int32_k_block  # noqa: E402
from mixpert.runtime.cuda import fused, fused_wgmma, sliced  # noqa: E402
from mixpert.runtime.cuda.packs import K_ALIGN  # noqa: E402

IV = get_level("IV")
if not fused_wgmma.available(IV):
    pytest.skip("the wgmma kernels run on compute capability 9.0 (Hopper) only",
                allow_module_level=True)  # fmt: skip

KERNELS = sorted(fused_wgmma.FORMS)
VARIANTS = sorted(fused_wgmma.VARIANTS)
ROUTED = sorted(fused_wgmma.ROUTED)
# one line; tails of the 128 x 64 tile on both sides; whole tiles; k of one K_ALIGN, k past one
# and several 128-byte k-steps with a remainder
SHAPES = [(1, 1, 1), (129, 257, 65), (128, 300, 64), (300, 1000, 70), (257, 2100, 200), (64, 16, 3)]


@pytest.fixture(autouse=True)
def _no_plans_kept():
    """Each test plans its own products: a graph kept from an earlier test would replay them
    without a launch of the kernel."""
    mixpert.clear_cache()
    yield
    mixpert.clear_cache()


def bits(x) -> np.ndarray:
    return cp.asnumpy(x).view(np.uint32) if isinstance(x, cp.ndarray) else x.view(np.uint32)


def on_gpu(a, b, level: str = "IV", monkeypatch=None, fused_off: bool = False):
    if fused_off:
        monkeypatch.setenv(fused.SWITCH, "0")
    got = dispatch.np_matmul_at_level(cp.asarray(a), cp.asarray(b), level, backend="cuda")
    if fused_off:
        monkeypatch.delenv(fused.SWITCH)
    return got


def by_kernel(
    a: np.ndarray, b: np.ndarray, level: str, variant: fused_wgmma.Form | None = None
) -> cp.ndarray:
    """a @ b at ``level`` through its wgmma kernel (or ``variant``) alone, then the bypass, as
    ``sliced`` runs a fused product (on NaN-poisoned output: an entry the kernel skips shows)."""
    x, y = cp.asarray(a), cp.asarray(b)
    a_pack, b_pack = sliced._packs(x, y, get_level(level), pack_reuse.KEEP_NOTHING)
    c = cp.full((1, a.shape[0], b.shape[1]), cp.nan, dtype=cp.float32)
    fused_wgmma.product(a_pack, b_pack, get_level(level), c, variant)
    sliced._bypass_lines(a_pack, b_pack, x[None], y[None], c)
    return c[0]


def raw(a_pack, b_pack, level: str, c_shape, variant: fused_wgmma.Form | None = None):
    """The kernel's own output on the packs (no bypass), on NaN-poisoned C."""
    c = cp.full(c_shape, cp.nan, dtype=cp.float32)
    fused_wgmma.product(a_pack, b_pack, get_level(level), c, variant)
    return c


@pytest.mark.parametrize("level", KERNELS)
@pytest.mark.parametrize("shape", SHAPES)
def test_each_levels_kernel_gives_the_cpu_oracles_bits(level, shape):
    rng = np.random.default_rng(sum(shape))
    m, k, n = shape
    a, b = gemmul8(np, rng, (m, k), 2.0), gemmul8(np, rng, (k, n), 2.0)
    if m > 2:
        a[2, 0] = np.nan  # a line the bypass recomputes
    want = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    np.testing.assert_array_equal(bits(by_kernel(a, b, level)), bits(want))


@pytest.mark.parametrize("name", VARIANTS)
@pytest.mark.parametrize("shape", [*SHAPES, (130, 2048, 70)])
def test_each_variant_gives_its_levels_kernels_bits_and_the_cpu_oracles(name, shape):
    """A variant on the shapes of the levels' test (k_pad 16, 272, 304, 1008: a last 64-byte
    k-block zero-filled past k_pad; 2112: whole 64-byte k-blocks, a half 128-byte one) and
    k_pad = 2048 (whole k-blocks of either width): its raw output the same bits as its level's
    kernel, and with the bypass the oracle's."""
    variant = fused_wgmma.VARIANTS[name]
    level = fused_wgmma.level_of(variant)
    rng = np.random.default_rng(sum(shape) + 5)
    m, k, n = shape
    a, b = gemmul8(np, rng, (m, k), 2.0), gemmul8(np, rng, (k, n), 2.0)
    if m > 2:
        a[2, 0] = np.nan  # a line the bypass recomputes
    x, y = cp.asarray(a), cp.asarray(b)
    a_pack, b_pack = sliced._packs(x, y, get_level(level), pack_reuse.KEEP_NOTHING)
    own = raw(a_pack, b_pack, level, (1, m, n))
    np.testing.assert_array_equal(bits(raw(a_pack, b_pack, level, (1, m, n), variant)), bits(own))
    want = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    np.testing.assert_array_equal(bits(by_kernel(a, b, level, variant)), bits(want))


def ends_of_the_range(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """200 x 520 @ 520 x 130 with NaN and Inf lines, FLT_MAX rows (saturation) and a row whose
    products are subnormal."""
    a, b = gemmul8(np, rng, (200, 520), 1.0), gemmul8(np, rng, (520, 130), 1.0)
    a[3, 7], b[4, 11], b[2, 20] = np.nan, -np.inf, np.inf
    a[5] = np.float32(3.4028235e38) * np.sign(a[5])
    b[:, 6] = 1.0
    a[9] = np.ldexp(a[9], -140).astype(np.float32)
    return a, b


@pytest.mark.parametrize("name", VARIANTS)
def test_each_variant_has_each_pairs_bits_on_stacks_and_the_ends_of_the_range(name):
    """NaN/Inf lines, FLT_MAX rows, subnormal products: the oracle's bits; packs read as a stack
    of 3 pairs: its level's kernel's bits."""
    variant = fused_wgmma.VARIANTS[name]
    level = fused_wgmma.level_of(variant)
    rng = np.random.default_rng(13)
    a, b = ends_of_the_range(rng)
    want = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    np.testing.assert_array_equal(bits(by_kernel(a, b, level, variant)), bits(want))
    x = cp.asarray(gemmul8(np, rng, (3 * 133, 300), 1.5))  # a stack of 3 pairs, as lines
    y = cp.asarray(gemmul8(np, rng, (300, 3 * 71), 1.5))
    a_pack, b_pack = sliced._packs(x, y, get_level(level), pack_reuse.KEEP_NOTHING)
    own = raw(a_pack, b_pack, level, (3, 133, 71))
    np.testing.assert_array_equal(
        bits(raw(a_pack, b_pack, level, (3, 133, 71), variant)), bits(own)
    )


PING_PONG = [name for name, form in fused_wgmma.VARIANTS.items()
             if form.tile_m == fused_wgmma.PINGPONG]  # fmt: skip


@pytest.mark.parametrize("name", PING_PONG)
@pytest.mark.parametrize("shape", [(1088, 200, 3000), (60, 100, 60), (64, 48, 64), (1, 1024, 130)])
def test_ping_pong_consumers_take_turn_after_turn_with_their_levels_bits(name, shape):
    """Many tiles a block (799 of 64 x 64 on at most 132 blocks: each consumer's turn barrier
    and every stage's parity wrap again and again, and the odd last tile leaves a consumer
    without one), one tile in all (the second consumer has none), a row of A only: the level's
    kernel's raw bits, on poisoned C."""
    variant = fused_wgmma.VARIANTS[name]
    level = fused_wgmma.level_of(variant)
    rng = np.random.default_rng(sum(shape))
    m, k, n = shape
    x = cp.asarray(gemmul8(np, rng, (m, k), 1.5))
    y = cp.asarray(gemmul8(np, rng, (k, n), 1.5))
    a_pack, b_pack = sliced._packs(x, y, get_level(level), pack_reuse.KEEP_NOTHING)
    own = raw(a_pack, b_pack, level, (1, m, n))
    assert not cp.isnan(own).any()
    np.testing.assert_array_equal(bits(raw(a_pack, b_pack, level, (1, m, n), variant)), bits(own))


@pytest.mark.parametrize("level", ROUTED)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("phi", [0.5, 4.0])
def test_routed_products_equal_the_cpu_oracle_and_the_class_sum_pipeline(
    level, shape, phi, monkeypatch
):
    rng = np.random.default_rng(sum(shape) + int(phi))
    m, k, n = shape
    a, b = gemmul8(np, rng, (m, k), phi), gemmul8(np, rng, (k, n), phi)
    launches = []
    product = fused_wgmma.product
    monkeypatch.setattr(fused_wgmma, "product", lambda *x: launches.append(1) or product(*x))
    got = on_gpu(a, b, level)
    assert launches, f"level {level} did not run its wgmma kernel"
    want = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    np.testing.assert_array_equal(bits(got), bits(want))
    pipeline = on_gpu(a, b, level, monkeypatch, fused_off=True)
    np.testing.assert_array_equal(bits(pipeline), bits(want))


@pytest.mark.parametrize("level", ROUTED)
def test_stacks_have_each_pairs_cpu_bits(level):
    rng = np.random.default_rng(11)
    a = gemmul8(np, rng, (5, 133, 300), 1.5)
    b = gemmul8(np, rng, (5, 300, 71), 1.5)
    a[2, 4, 9], b[3, 7, 2] = np.nan, np.inf  # in one pair each: the others keep their bits
    want = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    np.testing.assert_array_equal(bits(on_gpu(a, b, level)), bits(want))


@pytest.mark.parametrize("level", KERNELS)
def test_special_values_and_the_ends_of_the_float32_range(level):
    """NaN/Inf lines (bypassed), an unresolved row (recomputed), FLT_MAX rows (saturation),
    subnormal products: the oracle's bits, entry for entry."""
    rng = np.random.default_rng(3)
    a, b = ends_of_the_range(rng)
    a[11, :3] = [1e30, 1e-30, -1e30]
    want = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    np.testing.assert_array_equal(bits(by_kernel(a, b, level)), bits(want))


@pytest.mark.parametrize("level", KERNELS)
def test_products_just_past_float32s_top_saturate_as_the_oracle(level):
    """Rows of 2^120 against columns of 256 ones and zeros: products of exactly 2^128, past
    float32's top by less than the error bound of I, T6 and IV (saturated to +-FLT_MAX) and by
    more than V's (+-Inf), beside finite products in the same tiles: the kernel's second pass,
    taken only where an output converts to +-Inf, gives the oracle's bits."""
    rng = np.random.default_rng(21)
    a, b = gemmul8(np, rng, (130, 300), 0.5), gemmul8(np, rng, (300, 70), 0.5)
    a[4], a[77] = 2.0**120, -(2.0**120)
    b[:, [0, 5, 69]] = 0.0
    b[:256, [0, 5, 69]] = 1.0
    want = dispatch.np_matmul_at_level(a, b, level, backend="cpu")
    past_the_top = want[np.ix_([4, 77], [0, 5, 69])]
    saturated = np.abs(past_the_top) == np.finfo(np.float32).max
    assert saturated.all() if level != "V" else np.isinf(past_the_top).all()
    np.testing.assert_array_equal(bits(by_kernel(a, b, level)), bits(want))


def test_large_outputs_stay_fused_and_match_the_pipeline(monkeypatch):
    """Level IV is fused at every size on Hopper (where Triton's kernel hands large outputs to
    the class-sum pipeline); at 2048 x 1040 x 2048 both give the same bits."""
    side = fused.PIPELINE_MIN_SIDE
    assert fused.serves(IV, side, side, K_ALIGN) and fused.serves(IV, 4 * side, 4 * side, K_ALIGN)
    assert not fused.serves(IV, 64, 64, int32_k_block(IV) + K_ALIGN)  # k past one INT32 block
    rng = np.random.default_rng(7)
    a, b = gemmul8(np, rng, (2048, 1040), 1.0), gemmul8(np, rng, (1040, 2048), 1.0)
    np.testing.assert_array_equal(
        bits(on_gpu(a, b)), bits(on_gpu(a, b, "IV", monkeypatch, fused_off=True))
    )


def test_operands_it_cannot_take_are_refused_by_name():
    x = cp.asarray(np.random.default_rng(1).standard_normal((64, 64), dtype=np.float32))
    a_pack, b_pack = sliced._packs(x, x, IV, pack_reuse.KEEP_NOTHING)
    c = cp.empty((1, 64, 64), dtype=cp.float32)
    product = fused_wgmma.product
    cases = {
        "level 'III': has no kernel": lambda: product(a_pack, b_pack, get_level("III"), c),
        "a_pack.slots = 3: must be 4": lambda: product(a_pack, b_pack, get_level("V"), c),
        "c (1, 64, 64) float64": lambda: product(a_pack, b_pack, IV, c.astype(cp.float64)),
        "c (64, 64) float32": lambda: product(a_pack, b_pack, IV, c[0]),
        "kernel fused_wgmma_V_k128: does not compute level IV's pairs": lambda: product(
            a_pack, b_pack, IV, c, fused_wgmma.VARIANTS["V_k128"]
        ),
    }
    for what, call in cases.items():
        with pytest.raises(ValueError, match=what.replace("(", r"\(").replace(")", r"\)")):
            call()
