"""Level fp32-ordered's arithmetic (runtime/ordered.py): IEEE fmaf modelled exactly, chunked
sums, and the same bits from the GPU kernel."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

import mixpert
from mixpert.runtime import device, ordered


def _correctly_rounded(x: Fraction) -> np.float32:
    """float32 nearest to x, ties to even, from exact rationals."""
    guess = np.float32(float(x))
    near = (
        np.nextafter(guess, np.float32(-np.inf)),
        guess,
        np.nextafter(guess, np.float32(np.inf)),
    )
    return min(near, key=lambda c: (abs(Fraction(float(c)) - x), int(c.view(np.uint32)) & 1))


def test_fma32_rounds_once_where_a_float64_sum_would_round_twice() -> None:
    one_up = np.float32(1 + 2**-23)
    a, b = np.float32(1 + 2**-23), np.float32(2.0**-24 * (1 - 2**-23))
    product = np.float64(a) * np.float64(b)  # 2^-24 - 2^-70: just below a float32 half step
    twice = np.float32(product + np.float64(one_up))  # float64 lands on the midpoint: ties up
    assert twice == np.float32(1 + 2**-22)
    once = ordered.fma32(np.array([product, -product]), np.array([one_up, -one_up]))
    assert once[0] == one_up and once[1] == -one_up


def test_fma32_matches_exact_rationals_on_random_and_subnormal_cases() -> None:
    rng = np.random.default_rng(4)
    n = 3000
    a = rng.standard_normal(n).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    acc = rng.standard_normal(n).astype(np.float32)
    a[:1000] = rng.integers(1, 2**12, 1000).astype(np.float32)  # sums near float32 midpoints
    b[:1000] = (rng.integers(1, 2**12, 1000) * 2.0**-30).astype(np.float32)
    acc[:1000] = 1.0
    a[1000:2000] *= np.float32(2.0**-70)  # results in the subnormal range
    b[1000:2000] *= np.float32(2.0**-70)
    acc[1000:2000] *= np.float32(2.0**-135)
    got = ordered.fma32(a.astype(np.float64) * b.astype(np.float64), acc)
    for i in range(n):
        want = _correctly_rounded(
            Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(acc[i]))
        )
        assert got[i].view(np.uint32) == want.view(np.uint32), i


def test_chunks_sum_in_float64_and_short_k_is_one_fma_chain() -> None:
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 5, 40)).astype(np.float32)
    b = rng.standard_normal((3, 40, 4)).astype(np.float32)
    c = ordered.ordered_product(a, b)
    chain = np.zeros((3, 5, 4), np.float32)  # first chunk by hand
    for q in range(ordered.CHUNK):
        chain = ordered.fma32(a[..., :, q, None].astype(np.float64) * b[..., None, q, :], chain)
    rest = ordered.ordered_product(a[..., ordered.CHUNK :], b[..., ordered.CHUNK :, :])
    want = (chain.astype(np.float64) + rest.astype(np.float64)).astype(np.float32)
    assert np.array_equal(c, want)
    short = ordered.ordered_product(a[..., :7], b[..., :7, :])
    chain = np.zeros((3, 5, 4), np.float32)
    for q in range(7):
        chain = ordered.fma32(a[..., :, q, None].astype(np.float64) * b[..., None, q, :], chain)
    assert np.array_equal(short, chain)


def segment_sensitive(
    m: int, n: int, segments: int = 2, first: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Operands whose every entry is 0 with segments and 1 without: chunk sums 2^60 and 1 in
    segment ``first``, -2^60 and 1 in the next. Summed in one float64 chain, 2^60 absorbs the
    first 1, cancels, and the last 1 survives; per segment, each 1 is absorbed."""
    k = segments * ordered.SEGMENT
    a = np.zeros((m, k), np.float32)
    b = np.zeros((k, n), np.float32)
    second = (first + 1) * ordered.SEGMENT
    start = first * ordered.SEGMENT
    for q, value in ((start, 2.0**30), (start + ordered.CHUNK, 1.0), (second, -(2.0**30)),
                     (second + ordered.CHUNK, 1.0)):  # fmt: skip
        a[:, q] = value
        b[q, :] = abs(value)
    return a, b


def test_segment_totals_are_summed_in_order() -> None:
    a, b = segment_sensitive(3, 2)
    assert not ordered.ordered_product(a, b).any()  # one chain would give 1 everywhere
    k = ordered.SEGMENT  # one segment: the chain's own result
    assert np.array_equal(
        ordered.ordered_product(a[:, :k], b[:k]), np.full((3, 2), 2.0**60, np.float32)
    )


def test_subnormal_products_are_kept_not_flushed() -> None:
    a = np.full((2, 3, 8), 1e-20, np.float32)
    b = np.full((2, 8, 2), 1e-20, np.float32)
    c = mixpert.matmul(a, b, level="fp32-ordered", backend="cpu")
    exact = 8 * np.float64(np.float32(1e-20)) ** 2  # 8e-40: subnormal in float32
    assert np.all(c > 0) and np.allclose(c, exact, rtol=1e-5)


@pytest.mark.gpu
def test_gpu_kernel_keeps_subnormal_sums_with_the_cpu_bits() -> None:
    cp = device.cupy_module()
    rng = np.random.default_rng(6)
    for shape_a, shape_b in (((64, 9, 70), (64, 70, 11)), ((3, 40, 33), (3, 33, 50))):
        a = (rng.standard_normal(shape_a) * 1e-20).astype(np.float32)
        b = (rng.standard_normal(shape_b) * 1e-20).astype(np.float32)
        want = mixpert.matmul(a, b, level="fp32-ordered", backend="cpu")
        got = mixpert.matmul(cp.asarray(a), cp.asarray(b), level="fp32-ordered").get()
        assert np.count_nonzero(want) > want.size // 2
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("k", "n"), [(1, 1), (7, 5), (33, 16), (600, 17), (300, 128), (256, 40)]
)  # k past a chunk and past a B slab (128), partial chunks; n > 16 takes column groups
def test_gpu_tall_products_have_the_cpu_bits(k, n) -> None:
    """The tall kernels (one thread per row of A and group of columns) keep the level's order."""
    from mixpert.runtime.cuda import fp32_ordered

    cp = device.cupy_module()
    rng = np.random.default_rng(k + n)
    m = fp32_ordered.ROWS_MIN_M + 37
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a[3, 0], a[5, -1], b[0, -1] = np.inf, np.float32(1e-40), np.nan
    want = ordered.ordered_product(a, b)
    got = fp32_ordered.ordered_product(cp.asarray(a), cp.asarray(b)).get()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "n"), [(16, 16), (13, 16), (3, 20), (8, 32), (40, 33)])
def test_gpu_split_k_reads_a_transposed_a_in_place_with_the_cpu_bits(m, n) -> None:
    """X.T @ Y with X C-ordered (A column-major): the split-k kernel reads A along its rows, with
    the bits of the C-ordered product, segments and partial stages included."""
    from mixpert.runtime.cuda import fp32_ordered

    cp = device.cupy_module()
    rng = np.random.default_rng(m * n)
    k = 9 * ordered.SEGMENT + 77
    x = rng.standard_normal((k, m)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    x[5, 1], x[-1, -1], b[7, 0] = np.float32(3e-41), np.inf, np.nan
    a_gpu = cp.asarray(x).T
    assert a_gpu.flags.f_contiguous and not a_gpu.flags.c_contiguous
    assert fp32_ordered._splits_k(m, n, k, fp32_ordered.tile_size(m, n))
    want = ordered.ordered_product(np.ascontiguousarray(x.T), b)
    got = fp32_ordered.ordered_product(a_gpu, cp.asarray(b)).get()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize(("a_offset", "b_offset"), [(0, 0), (1, 0), (0, 3)])
def test_gpu_split_k_reads_aligned_and_unaligned_operands_with_the_cpu_bits(
    a_offset, b_offset
) -> None:
    """The split-k kernel for small outputs copies 16 bytes at a time where both operands are
    16-byte aligned (here k and n are multiples of 4), 4 bytes where either is not: the same
    bits."""
    from mixpert.runtime.cuda import fp32_ordered

    cp = device.cupy_module()
    rng = np.random.default_rng(a_offset + 7 * b_offset)
    m, k, n = 20, 9 * ordered.SEGMENT + 64, 12
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a[2, 5], b[-3, 1] = np.float32(2e-41), -np.inf
    a_gpu = cp.empty(m * k + a_offset, dtype=cp.float32)[a_offset:].reshape(m, k)
    b_gpu = cp.empty(k * n + b_offset, dtype=cp.float32)[b_offset:].reshape(k, n)
    a_gpu[...], b_gpu[...] = cp.asarray(a), cp.asarray(b)
    assert fp32_ordered._splits_k(m, n, k, fp32_ordered.tile_size(m, n))
    want = ordered.ordered_product(a, b)
    got = fp32_ordered.ordered_product(a_gpu, b_gpu).get()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0, 1])  # 1: A starts 4 bytes past a 16-byte boundary
@pytest.mark.parametrize(("k", "n"), [(64, 16), (2 * ordered.SEGMENT + 36, 8), (100, 3)])
def test_gpu_tall_kernel_reads_aligned_and_unaligned_rows_with_the_cpu_bits(k, n, offset) -> None:
    """The tall kernel's 16-byte tile loads (k a multiple of 4, A aligned) and its 4-byte ones
    (A one float past an aligned start) give the same bits, rows past m and a partial block
    included."""
    from mixpert.runtime.cuda import fp32_ordered

    cp = device.cupy_module()
    rng = np.random.default_rng(k + offset)
    m = fp32_ordered.ROWS_MIN_M + 77
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a[9, 4], a[40, -1], b[-1, 0] = np.nan, np.float32(-1e-41), np.inf
    flat = cp.empty(m * k + offset, dtype=cp.float32)
    a_gpu = flat[offset:].reshape(m, k)  # C-contiguous either way
    a_gpu[...] = cp.asarray(a)
    assert (a_gpu.data.ptr % 16 == 0) == (offset == 0)
    want = ordered.ordered_product(a, b)
    got = fp32_ordered.ordered_product(a_gpu, cp.asarray(b)).get()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("count", "m", "k", "n"),
    [
        (5000, 16, 16, 16),
        (5, 1, 1, 1),
        (3000, 16, 24, 13),
        (5000, 32, 17, 31),
        (3000, 33, 32, 64),
        (9, 64, 30, 2),
        (40, 32, 40, 32),
        (5, 70, 30, 65),
    ],
)
def test_gpu_stack_kernels_have_the_cpu_bits(count, m, k, n) -> None:
    """The stack kernels: small-stack (pairs of at most 16 x 16, blocks walking pairs, the next
    pair in flight) for both stage sizes (k <= 16, 32), pairs (at most 32 x 32 with k <= 32, or
    33 to 64 a side with k <= 64), and the tile kernel beyond (32 x 40 x 32: past T = 32's k);
    stacks longer than the blocks that run at once."""
    from mixpert.runtime.cuda import fp32_ordered

    cp = device.cupy_module()
    rng = np.random.default_rng(count + m + k + n)
    a = rng.standard_normal((count, m, k)).astype(np.float32)
    b = rng.standard_normal((count, k, n)).astype(np.float32)
    a[0, 0, 0], a[-1, -1, -1], b[count // 2, 0, -1] = np.float32(1e-40), np.inf, np.nan
    a[1] = -0.0  # a pair of -0.0 rows: the chains start from +0
    want = ordered.ordered_product(a, b)
    got = fp32_ordered.ordered_product(cp.asarray(a), cp.asarray(b)).get()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0, 1])  # 1: A starts 4 bytes past a 16-byte boundary
@pytest.mark.parametrize(
    ("count", "m", "k", "n"),
    [
        (4099, 32, 32, 32),
        (1027, 17, 32, 32),
        (301, 30, 28, 20),
        (7, 20, 8, 24),
        (66, 19, 5, 7),
        (9, 32, 1, 32),
        (5, 1, 32, 1),
        (130, 32, 32, 3),
        (1025, 64, 64, 64),
        (77, 33, 60, 48),
        (130, 40, 50, 36),
        (9, 64, 40, 17),
    ],
)
def test_gpu_pairs_kernel_has_the_cpu_bits(count, m, k, n, offset) -> None:
    """The small-pairs kernels (blocks walking groups of pairs through two stages; T = 32: k one
    chunk, T = 64: one or two): 16-byte and 4-byte copies, a last group cut short, more groups
    than blocks, single rows and columns; chains that end at -0.0 (the total is +0) and at a
    subnormal (kept)."""
    from mixpert.runtime.cuda import fp32_ordered

    cp = device.cupy_module()
    rng = np.random.default_rng(count + m + k + n + offset)
    a = rng.standard_normal((count, m, k)).astype(np.float32)
    b = rng.standard_normal((count, k, n)).astype(np.float32)
    a[0, 0, 0], a[-1, -1, -1], b[0, 0, -1] = np.float32(1e-40), -np.inf, np.nan
    b[1] = -0.0  # a pair of -0.0 columns: the chains start from +0
    if count > 4:  # (pairs 2 and 3, clear of the NaN and the infinity)
        a[2, 0], b[2, :, 0] = 1e-30, -1e-30  # each product rounds to -0.0: the chain ends at -0
        a[3, -1], b[3, :, -1] = 1e-20, 1e-20  # products of 1e-40: a subnormal sum
    a_gpu = cp.empty(a.size + offset, dtype=cp.float32)[offset:].reshape(a.shape)
    a_gpu[...] = cp.asarray(a)
    assert fp32_ordered.pairs_tile(m, n, k) is not None
    want = ordered.ordered_product(a, b)
    got = fp32_ordered.ordered_product(a_gpu, cp.asarray(b)).get()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.gpu
def test_gpu_kernels_that_need_more_shared_memory_than_a_block_gets_are_routed_around(
    monkeypatch,
) -> None:
    """On a GPU whose blocks cannot have the split-k, pairs and thin kernels' shared memory (32
    KiB here; a T4's 64 KiB is short of the split-k and 64 x 64 pairs kernels'), the
    products take the kernels that fit, with the same bits; asked for directly, the kernel
    refuses clearly."""
    from mixpert.runtime.cuda import fp32_ordered, launch

    cp = device.cupy_module()
    rng = np.random.default_rng(5)
    k = 9 * ordered.SEGMENT + 40
    a, b = (
        rng.standard_normal((24, k)).astype(np.float32),
        rng.standard_normal((k, 8)).astype(np.float32),
    )
    x = rng.standard_normal((50, 30, 20)).astype(np.float32)
    y = rng.standard_normal((50, 20, 32)).astype(np.float32)
    x64 = rng.standard_normal((3, 64, 64)).astype(np.float32)
    tall = rng.standard_normal((fp32_ordered.ROWS_MIN_M * 2 + 5, 32)).astype(np.float32)
    thin = rng.standard_normal((32, 32)).astype(np.float32)
    assert fp32_ordered.pairs_shared_bytes(32) > 32 * 1024
    monkeypatch.setattr(launch, "shared_fits", lambda shared, device: shared <= 32 * 1024)
    for left, right in ((a, b), (x, y), (x64, x64), (tall, thin)):
        want = ordered.ordered_product(left, right)
        got = fp32_ordered.ordered_product(cp.asarray(left), cp.asarray(right)).get()
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    with pytest.raises(NotImplementedError, match="bytes of shared memory"):
        fp32_ordered.ordered_pairs_product(cp.asarray(x), cp.asarray(y))
    with pytest.raises(NotImplementedError, match="ordered_thin needs"):
        fp32_ordered.ordered_thin_product(cp.asarray(tall), cp.asarray(thin))


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "k", "n"), [(65, 8, 8), (8, 65, 8), (8, 8, 72), (32, 40, 32)])
def test_gpu_pairs_kernel_refuses_pairs_past_its_tiles(m, k, n) -> None:
    from mixpert.runtime.cuda import fp32_ordered

    cp = device.cupy_module()
    a, b = cp.ones((2, m, k), dtype=cp.float32), cp.ones((2, k, n), dtype=cp.float32)
    with pytest.raises(ValueError, match=r"small-pairs kernel takes pairs with m, n <= T"):
        fp32_ordered.ordered_pairs_product(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize(("m", "k", "n"), [(16, 33, 16), (17, 16, 16), (16, 8, 17)])
def test_gpu_small_stack_kernel_refuses_pairs_past_its_tile(m, k, n) -> None:
    from mixpert.runtime.cuda import fp32_ordered

    cp = device.cupy_module()
    a, b = cp.ones((2, m, k), dtype=cp.float32), cp.ones((2, k, n), dtype=cp.float32)
    with pytest.raises(ValueError, match=r"small-stack kernel takes pairs with m, n <= 16"):
        fp32_ordered.ordered_stack_product(a, b)


@pytest.mark.gpu
@pytest.mark.parametrize(("k", "n"), [(100, 16), (2 * ordered.SEGMENT + 64, 8), (37, 5)])
def test_gpu_tall_kernel_walks_several_row_blocks_per_block(k, n, monkeypatch) -> None:
    """With grid y capped at 2, each block of the tall kernel walks three row blocks (the last
    partial): its per-warp tile buffers and copy groups start afresh for each, on the 16-byte
    (k % 4 == 0) and 4-byte paths, with and without segments."""
    from mixpert.runtime.cuda import fp32_ordered, geometry

    cp = device.cupy_module()
    monkeypatch.setattr(fp32_ordered, "MAX_GRID_YZ", 2)
    rng = np.random.default_rng(k + n)
    m = 5 * geometry.ROWS_THREADS + 77
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a[-1, -1], b[0, 0] = np.float32(-2e-40), np.inf
    want = ordered.ordered_product(a, b)
    got = fp32_ordered.ordered_rows_product(cp.asarray(a), cp.asarray(b)).get()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.gpu
def test_gpu_products_taller_than_one_grid_keep_the_cpu_bits() -> None:
    """Row blocks beyond grid y's 65535 loop inside the kernels: the tall fp32-ordered kernel
    (128 rows a block) and the bypass of a NaN column at level IV (64 rows a block)."""
    from mixpert.runtime.cuda import geometry

    cp = device.cupy_module()
    rng = np.random.default_rng(9)
    for level, rows_per_block, k, n in (
        ("fp32-ordered", geometry.ROWS_THREADS, 3, 2),
        ("IV", 64, 5, 3),
    ):
        m = geometry.MAX_GRID_YZ * rows_per_block + 300
        a = rng.standard_normal((m, k)).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        b[0, 1] = np.nan  # IV: column 1 is recomputed by the bypass kernel, every row block
        want = mixpert.matmul(a, b, level=level, backend="cpu")
        got = mixpert.matmul(cp.asarray(a), cp.asarray(b), level=level).get()
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), level


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("m", "k", "n", "kernel"),
    [
        (9, 2 * ordered.SEGMENT + 77, 11, "small"),  # tile kernel, segments walked in turn
        (None, 3 * ordered.SEGMENT + 5, 8, "tall"),  # tall kernel (m set below)
        (32, 9 * ordered.SEGMENT + 77, 32, "split"),  # outputs <= 32 x 32: chunks at once
        (24, 9 * ordered.SEGMENT + 128, 28, "split"),  # ... in 16-byte copies
        (32, 300 * ordered.SEGMENT + 44, 32, "split"),  # ... blocks walking several segments
        (70, 12 * ordered.SEGMENT, 3, "split"),  # a block per 64 x 64 tile and segment
        (16, 9 * ordered.SEGMENT + 300, 16, "split"),  # outputs <= 16 x 16
        (5, 8 * ordered.SEGMENT + 33, 7, "split"),
        (12, 450 * ordered.SEGMENT + 36, 8, "split"),
        (3, 1100 * ordered.SEGMENT + 9, 5, "split"),  # totals: rounds around their ring, odd
        (6, 700 * ordered.SEGMENT, 2, "split"),  # ... and even entry counts
        (20, 10 * ordered.SEGMENT, 24, "split"),  # a last stage exactly full
    ],
)
def test_gpu_long_k_kernels_have_the_cpu_bits(m, k, n, kernel) -> None:
    """Every kernel sums segment totals in order: the segment-sensitive operands give 0 (one
    float64 chain would give 1), random ones the CPU model's bits."""
    from mixpert.runtime.cuda import fp32_ordered

    cp = device.cupy_module()
    m = fp32_ordered.ROWS_MIN_M + 37 if m is None else m
    split = fp32_ordered._splits_k(m, n, k, fp32_ordered.tile_size(m, n))
    assert split == (kernel == "split")
    segments = k // ordered.SEGMENT
    for first in (0, segments - 2):  # the last pair: the totals' last rounds too
        a, b = segment_sensitive(m, n, segments, first)
        a, b = np.pad(a, ((0, 0), (0, k - a.shape[1]))), np.pad(b, ((0, k - b.shape[0]), (0, 0)))
        got = fp32_ordered.ordered_product(cp.asarray(a), cp.asarray(b)).get()
        assert not got.any(), first
    rng = np.random.default_rng(k)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a[1, 3], b[-1, 0] = np.float32(1e-40), np.inf
    want = ordered.ordered_product(a, b)
    got = fp32_ordered.ordered_product(cp.asarray(a), cp.asarray(b)).get()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0, 1])  # 1: A starts 4 bytes past a 16-byte boundary
@pytest.mark.parametrize(
    ("k", "n"), [(1, 1), (16, 16), (7, 5), (32, 32), (20, 9), (4, 12), (16, 4), (8, 8), (3, 32)]
)
def test_gpu_thin_products_have_the_cpu_bits(k, n, offset) -> None:
    """The thin kernel (k within one chunk, n <= 32: TSM2L's shape) keeps the level's order,
    with 16-byte and 4-byte loads of A, and with more row blocks than blocks that run at once."""
    from mixpert.runtime.cuda import fp32_ordered

    cp = device.cupy_module()
    rng = np.random.default_rng(k * 100 + n)
    # several blocks, a partial last one
    m = fp32_ordered.ROWS_MIN_M * 3 + 37 if k != 4 else 3_000_037
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    a[3, 0], a[5, -1], b[0, -1] = np.inf, np.float32(1e-40), np.nan
    a[7] = -0.0  # a row of -0.0: the chains start from +0
    if k > 1 and n > 1:  # row 9, column 0: its last product underflows to -0.0, returned as +0
        a[9], b[-1, 0] = 0.0, np.float32(1e-20)
        a[9, -1] = np.float32(-1e-30)
    flat = cp.empty(m * k + offset, dtype=cp.float32)
    a_gpu = flat[offset:].reshape(m, k)
    a_gpu[...] = cp.asarray(a)
    want = ordered.ordered_product(a, b)
    got = fp32_ordered.ordered_product(a_gpu, cp.asarray(b)).get()
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))
    if k > 1 and n > 1:
        assert got.view(np.uint32)[9, 0] == 0


@pytest.mark.gpu
def test_gpu_thin_kernel_launched_with_more_shared_memory_than_before_keeps_the_cpu_bits() -> None:
    """One thin kernel (16 columns, 16-byte copies) takes more shared memory as k grows: each
    launch, in any order, is allowed what it takes (a cached allowance once left k = 32 after
    k = 8 allowed k = 8's amount: a launch failure)."""
    from mixpert.runtime.cuda import fp32_ordered

    cp = device.cupy_module()
    rng = np.random.default_rng(16)
    b = rng.standard_normal((32, 16)).astype(np.float32)
    for k in (32, 8, 32, 4, 16, 28):
        a = rng.standard_normal((fp32_ordered.ROWS_MIN_M + 129, k)).astype(np.float32)
        want = ordered.ordered_product(a, b[:k])
        got = fp32_ordered.ordered_thin_product(cp.asarray(a), cp.asarray(b[:k])).get()
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), k
