"""Level IV-blocks (runtime/blocks.py): its arithmetic on the CPU against exact integers, its
accuracy against level IV on wide rows, its bypassed lines, and the GPU kernels' bits."""

from __future__ import annotations

import numpy as np
import pytest

import mixpert
from mixpert.runtime import auto, blocks, bypass, cpu, device, dispatch, get_level, packer
from mixpert.testdata import gemmul8

LEVEL = get_level("IV-blocks")


def _expected_by_hand(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The module docstring's arithmetic with Python integers: per block, the digits'
    class sums joined into one integer T, each block's term added into a Python float
    (float64) in block order, then rounded to float32."""
    (m, k), n = a.shape, b.shape[1]
    total = [[0.0] * n for _ in range(m)]
    for start in range(0, k, blocks.BLOCK_K):
        rows, cols = a[:, start : start + blocks.BLOCK_K], b[start : start + blocks.BLOCK_K].T
        ea, eb = packer.scale_exponents(rows, 1), packer.scale_exponents(cols, 1)
        da = packer.slice_rows(rows, ea, 3).astype(int).tolist()
        db = packer.slice_rows(np.ascontiguousarray(cols), eb, 3).astype(int).tolist()
        for r in range(m):
            for c in range(n):
                sums = [0, 0, 0, 0]
                for i, j in LEVEL.pairs:
                    sums[i + j] += sum(x * y for x, y in zip(da[i][r], db[j][c], strict=True))
                block = ((sums[0] * 256 + sums[1]) * 256 + sums[2]) * 256 + sums[3]
                total[r][c] += float(block) * 2.0 ** (int(ea[r]) + int(eb[c]) - 38)
    return np.array(total).astype(np.float32)


def test_the_cpu_model_is_the_documented_arithmetic() -> None:
    rng = np.random.default_rng(1)
    a = gemmul8(np, rng, (4, 150), 1.0)
    b = gemmul8(np, rng, (150, 3), 1.0)
    a[1, 64:128] *= np.float32(2.0**-30)  # a second block far below the first one
    assert dispatch.unresolved_lines(a, b, LEVEL) == (0, 0)  # (no line is recomputed)
    got = cpu.product_at_level(a, b, LEVEL)
    np.testing.assert_array_equal(got.view(np.uint32), _expected_by_hand(a, b).view(np.uint32))


def test_one_block_of_small_integers_is_exact() -> None:
    rng = np.random.default_rng(2)
    a = rng.integers(-100, 101, (20, 64)).astype(np.float32)
    b = rng.integers(-100, 101, (64, 9)).astype(np.float32)
    got = mixpert.matmul(a, b, level="IV-blocks", backend="cpu")
    np.testing.assert_array_equal(got, (a.astype(np.float64) @ b).astype(np.float32))


def test_class_pairs_fit_int32_at_the_level_and_longer_blocks_would_not() -> None:
    assert blocks.class_pairs(LEVEL) == ((0, 1), (2, 3))
    blocks.check_int32(LEVEL)
    with pytest.raises(ValueError, match=r"classes \(2, 3\) of a block of 256 k-steps"):
        blocks.check_int32(LEVEL, block=256)


@pytest.mark.parametrize("phi", [0.5, 1.0, 1.5])
def test_block_scales_are_float32_grade_and_beat_iv_on_wide_rows(phi: float) -> None:
    rng = np.random.default_rng(3)
    a, b = gemmul8(np, rng, (96, 2048), phi), gemmul8(np, rng, (2048, 40), phi)
    exact = a.astype(np.float64) @ b.astype(np.float64)

    def error(level: str) -> float:
        c = mixpert.matmul(a, b, level=level, backend="cpu")
        return float(np.linalg.norm(c - exact) / np.linalg.norm(exact))

    in_order = np.zeros((96, 40), dtype=np.float32)  # float32 sums in k order, as SGEMM's
    for q in range(2048):
        in_order += np.outer(a[:, q], b[q])
    assert error("IV-blocks") <= float(np.linalg.norm(in_order - exact) / np.linalg.norm(exact))
    assert error("IV-blocks") < error("IV")


def test_entries_deep_below_their_block_make_the_row_exact() -> None:
    """A row whose entries lie far below their block's scale (one outlier in each block) is
    unresolved: it is recomputed in order, exactly, as level IV does for its wide lines."""
    rng = np.random.default_rng(4)
    k = 512
    a = rng.standard_normal((6, k)).astype(np.float32)
    b = rng.standard_normal((k, 5)).astype(np.float32)
    a[2] *= np.float32(2.0**-30)
    a[2, :: blocks.BLOCK_K] = 1.0  # each block's scale is set by one entry 2^30 above the rest
    assert dispatch.unresolved_lines(a, b, "IV-blocks") == (1, 0)
    got = mixpert.matmul(a, b, level="IV-blocks", backend="cpu")
    np.testing.assert_array_equal(got[2], bypass.in_order(a[2:3], b)[0])
    bound = 2 * k * 2.0**-24 * (np.abs(a).astype(np.float64) @ np.abs(b))
    assert np.all(np.abs(got - a.astype(np.float64) @ b) <= bound)


def test_nonfinite_lines_and_the_ends_of_the_range() -> None:
    rng = np.random.default_rng(5)
    a = rng.standard_normal((7, 200)).astype(np.float32)
    b = rng.standard_normal((200, 6)).astype(np.float32)
    a[0] *= np.finfo(np.float32).max / 8  # near the top: the float64 totals do not overflow
    a[1] *= np.float32(2.0**-140)  # subnormal entries
    a[3, 17] = np.nan
    b[5, 4] = np.inf
    got = mixpert.matmul(a, b, level="IV-blocks", backend="cpu")
    want = mixpert.matmul(a, b, level="fp64", backend="cpu")
    assert np.isnan(got[3]).all() and np.isnan(want[3]).all()
    np.testing.assert_array_equal(got[:, 4], want[:, 4])  # recomputed in order, like fp64's
    finite = np.isfinite(want)
    scale = np.abs(a).astype(np.float64) @ np.abs(np.where(np.isfinite(b), b, 0))
    assert np.all(np.abs(got[finite] - want[finite]) <= 2.0**-22 * scale[finite])
    assert np.count_nonzero(got[1]) == got.shape[1]  # subnormal rows are not flushed


# ---- the GPU kernels -------------------------------------------------------------------


def _gpu_matches_cpu(a: np.ndarray, b: np.ndarray, a_gpu: object = None) -> None:
    cp = device.cupy_module()
    from mixpert.runtime.cuda import backend

    expected = cpu.product_at_level(a, b, LEVEL)
    got = cp.asnumpy(
        backend.product_at_level(cp.asarray(a) if a_gpu is None else a_gpu, cp.asarray(b), LEVEL)
    )
    np.testing.assert_array_equal(got.view(np.uint32), expected.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize(
    "shape",
    [(1, 1, 1), (5, 3, 7), (64, 64, 64), (129, 257, 65), (300, 1001, 70), (70, 130, 130),
     (300, 1000, 130), (2000, 4096, 16), (40_000, 200, 24)],
)  # fmt: skip
@pytest.mark.parametrize("phi", [0.5, 2.0])
def test_gpu_blocks_give_the_cpu_bits(shape: tuple[int, int, int], phi: float) -> None:
    """Odd sizes (k not a multiple of 4: element copies), several column groups (n > 64, with
    16-byte and element copies), and more row tiles than resident blocks (each walks several)."""
    m, k, n = shape
    rng = np.random.default_rng(m + k + n)
    _gpu_matches_cpu(gemmul8(np, rng, (m, k), phi), gemmul8(np, rng, (k, n), phi))


@pytest.mark.gpu
@pytest.mark.parametrize(("k", "n"), [(200, 30), (99, 30), (200, 7)])  # 16-byte copies or not
def test_gpu_rows_kernel_capped_for_more_blocks_runs_where_they_save_a_round(
    k: int, n: int
) -> None:
    """1 and 4 n-tiles a block: the variant capped for 4 blocks an SM, with its own shared
    memory and grid, where its extra blocks save a round of A's row tiles; the plain one where
    both take as many rounds; the CPU model's bits."""
    from mixpert.runtime.cuda import geometry, iv_blocks
    from mixpert.runtime.cuda.launch import resident_blocks

    cp = device.cupy_module()
    gpu = cp.cuda.Device().id
    vec = "_vec" if k % 4 == 0 else ""
    nt = iv_blocks.n_tiles_per_block(-(-n // 8))

    def variant(name: str, shapes: dict[int, tuple[int, int]]) -> tuple[object, int, int]:
        """The kernel, its shared memory, and the blocks of it the GPU runs at once."""
        kernel = iv_blocks._rows_kernel(f"blocks_rows_{nt}{name}{vec}")
        shared = shapes[nt][0] * iv_blocks.stage_bytes(nt, blocks.BLOCK_K, LEVEL.b_slices)
        return (
            kernel,
            shared,
            resident_blocks(kernel, geometry.BLOCKS_THREADS, gpu, shared),
        )

    busy, plain = (
        variant("_busy", geometry.BLOCKS_BUSY_SHAPES),
        variant("", geometry.BLOCKS_SHAPES),
    )
    busy_rows, plain_rows = busy[2], plain[2]
    if busy_rows <= plain_rows:
        assert cp.cuda.Device().compute_capability != "90", "an H100 runs more capped blocks"
        pytest.skip(f"the capped variant runs no more blocks here ({busy_rows}, {plain_rows})")
    tile = geometry.BLOCKS_TILE_ROWS

    def launch(m: int) -> tuple[object, int, int]:
        return iv_blocks._rows_launch(nt, vec, m, 1, LEVEL, gpu)

    assert launch(tile) == (plain[0], plain[1], 1)  # one round each
    if busy_rows < 2 * plain_rows:
        assert launch((busy_rows + 1) * tile) == (plain[0], plain[1], plain_rows)  # two each
    m = busy_rows * tile - tile // 2  # one round for the capped variant, two for the plain one
    assert launch(m) == (busy[0], busy[1], busy_rows)
    rng = np.random.default_rng(k)
    _gpu_matches_cpu(gemmul8(np, rng, (m, k), 1.0), gemmul8(np, rng, (k, n), 1.0))


@pytest.mark.gpu
def test_gpu_blocks_give_the_cpu_bits_on_the_packers_edge_cases() -> None:
    """Subnormal entries and scales, the top of the range, ties, NaN and Inf, entries on and
    below the bypass floor, in A's rows and in B's columns; and an unaligned A (element copies)."""
    from test_cuda_backend import packer_edge_lines

    cp = device.cupy_module()
    rng = np.random.default_rng(6)
    k = 256
    lines = packer_edge_lines(rng, 2.0 ** -bypass.deep_binades(23, k), k)
    other = rng.standard_normal((k, 12)).astype(np.float32)
    _gpu_matches_cpu(lines, other)
    _gpu_matches_cpu(other.T.copy(), np.ascontiguousarray(lines.T))
    flat = cp.empty(lines.size + 1, dtype=cp.float32)
    shifted = flat[1:].reshape(lines.shape)  # 4 bytes past a 16-byte boundary
    shifted[...] = cp.asarray(lines)
    _gpu_matches_cpu(lines, other, shifted)


@pytest.mark.gpu
def test_gpu_blocks_saturate_near_the_top_of_the_range_like_the_cpu() -> None:
    """Exact results at FLT_MAX stay finite (slicing rounds FLT_MAX's block up to 2^128);
    true overflows give inf: the same bits on both backends."""
    top = np.finfo(np.float32).max
    cases = [
        ([[top]], [[1.0]]),
        ([[top / 2, top / 2]], [[1.0], [1.0]]),
        ([[top, 1.0]], [[1.0], [-1.0]]),
        ([[3e38, 3e37]], [[1.0], [1.0]]),
        ([[-2e38, -3e38], [3e38, 3e38]], [[2.0], [2.0]]),
    ]
    for a, b in cases:
        _gpu_matches_cpu(np.array(a, np.float32), np.array(b, np.float32))


@pytest.mark.gpu
def test_gpu_counts_the_unresolved_lines_the_cpu_model_recomputes() -> None:
    """Inspection's count of IV-blocks's unresolved lines on the GPU (the CPU rule's functions
    on CuPy arrays, after an exact widening: subnormal block tops, NaN/Inf, a k not a multiple
    of the block), against the CPU model."""
    from test_cuda_backend import packer_edge_lines

    cp = device.cupy_module()
    rng = np.random.default_rng(7)
    for k in (256, 300):
        lines = packer_edge_lines(rng, 2.0 ** -bypass.deep_binades(23, k), k)
        lines = np.concatenate([lines, lines * np.float32(2.0**-130)])
        other = gemmul8(np, rng, (k, 9), 3.0)  # phi = 3: B's columns unresolved
        expected = dispatch.unresolved_lines(lines, other, LEVEL)
        assert expected[0] > 0 and expected[1] > 0
        assert dispatch.unresolved_lines(cp.asarray(lines), cp.asarray(other), LEVEL) == expected


@pytest.mark.gpu
def test_gpu_blocks_take_the_exact_way_where_the_block_scale_is_tiny() -> None:
    """Blocks whose top lies around 2^-103 (2^shift leaves float32's range: the kernels switch
    from float32 scaling to integer arithmetic there), with subnormal entries beside them."""
    rng = np.random.default_rng(8)
    a = rng.standard_normal((40, 256)).astype(np.float32)
    for row in range(40):
        a[row] *= np.float32(2.0 ** (-110 + row % 10))  # block tops near 2^-104 .. 2^-99
    tiny = np.finfo(np.float32).smallest_subnormal
    a[:, 1::5] = tiny * rng.integers(1, 2**20, a[:, 1::5].shape)
    b = rng.standard_normal((256, 24)).astype(np.float32)
    _gpu_matches_cpu(a, b)
    _gpu_matches_cpu(b.T.copy(), np.ascontiguousarray(a.T))  # ... in B's columns


@pytest.mark.gpu
@pytest.mark.parametrize("phi", [2.0, 4.0])
def test_gpu_recomputes_scattered_and_all_wide_rows_with_the_cpu_bits(phi: float) -> None:
    """Wide-range rows (3% of them, scattered, at phi = 2; all of them at phi = 4), 11 wide
    columns and an Inf, recomputed in order from the kernels' lists: the CPU model's bits."""
    rng = np.random.default_rng(10)
    a, b = gemmul8(np, rng, (3000, 700), 0.5), gemmul8(np, rng, (700, 40), 0.5)
    wide = rng.random(3000) < (0.03 if phi < 3 else 1.0)
    a[wide] = gemmul8(np, rng, (int(wide.sum()), 700), phi)
    b[:, 3:14] = gemmul8(np, rng, (700, 11), phi)  # more columns than one pass takes (8)
    b[9, 20] = np.inf
    rows, cols = dispatch.unresolved_lines(a, b, LEVEL)
    assert 0 < rows <= wide.sum() and cols == 11
    _gpu_matches_cpu(a, b)


def _listed_rows_in_order_case(
    k: int, n: int, many: bool = False
) -> tuple[np.ndarray, np.ndarray, int]:
    """A NaN row, an Inf row and two unresolved rows among narrow ones (``many``: 182 more
    unresolved rows, so that the listed entries pass half the bypass grid's warps at every n,
    and the kernel takes a warp per row and 32 columns); row 7 also holds +-2^64 pairs (B's
    two rows equal) at the starts of k, of its second chunk of 32 and of its tail, which
    absorb the running sum's low bits: only the in-order sum gives its bits."""
    rng = np.random.default_rng(k + n)
    a, b = gemmul8(np, rng, (300, k), 0.5), gemmul8(np, rng, (k, n), 0.5)
    a[3, k // 2] = np.nan
    a[150, 0] = -np.inf
    wide = [7, 299, *range(8, 150), *range(151, 191)] if many else [7, 299]  # (not 3, 150)
    a[wide] = gemmul8(np, rng, (len(wide), k), 6.0)
    a[wide, ::2] *= np.float32(2.0**-90)  # (deep entries beside the row's top: unresolved)
    for q in {1, 32, k // 32 * 32} & set(range(1, k)):
        a[7, q - 1 : q + 1] = 2.0**64, -(2.0**64)
        b[q] = b[q - 1]
    return a, b, 7


def test_the_listed_rows_case_tells_the_order_apart() -> None:
    """The GPU test below fails a kernel that sums a chunk of 32 k-steps out of order: row 7's
    in-order sums differ from those of each chunk reversed."""
    for k, n in ((31, 1), (40, 33), (1000, 100)):
        a, b, row = _listed_rows_in_order_case(k, n)
        got = cpu.product_at_level(a, b, LEVEL)[row]
        reversed_chunks = np.concatenate(
            [np.arange(q, min(q + 32, k))[::-1] for q in range(0, k, 32)]
        )
        products = a[row, reversed_chunks, None].astype(np.float64) * b[reversed_chunks]
        out_of_order = np.zeros(n)
        for p in products:
            out_of_order = out_of_order + p
        assert dispatch.unresolved_lines(a, b, LEVEL)[0] >= 1
        assert np.any(got != out_of_order.astype(np.float32)), (k, n)


@pytest.mark.gpu
@pytest.mark.parametrize("k", [31, 40, 1000])  # within one chunk of 32; one and a tail; many
@pytest.mark.parametrize("n", [1, 33, 100])  # one lane of a warp; a second warp for 1 column
@pytest.mark.parametrize("many", [False, True])  # a warp per entry; per row and 32 columns
def test_gpu_recomputes_listed_rows_in_order_with_the_cpu_bits(k: int, n: int, many: bool) -> None:
    """Listed rows (over k in order; NaN canonical) beside narrow ones: the CPU model's bits,
    both ways the kernel takes (a warp per entry where they are few)."""
    a, b, _ = _listed_rows_in_order_case(k, n, many)
    listed = dispatch.unresolved_lines(a, b, LEVEL)[0] + 2  # (+ the NaN and Inf rows)
    assert listed >= (182 if many else 2)
    if many:  # more entries than half the grid's warps (a block of 8 per 8 row items, or fewer)
        assert listed * n * 2 > 300 * -(-n // 32)
    _gpu_matches_cpu(a, b)


def test_auto_takes_sgemm_where_the_listed_lines_cost_more_than_iv_blocks_saves() -> None:
    """Past exact_share of C, or past row_entries listed entries a row of A (IV-blocks's
    route's fallback, ``auto.BLOCKS_FALLBACK``): at n = 64 the entries bound (m / 128 rows)
    comes long before the share (m / 10 rows); at n = 1 the share does."""
    m, share, per_row = 65536, auto.CROSSOVERS.exact_share, auto.CROSSOVERS.row_entries
    takes_sgemm = auto.BLOCKS_FALLBACK.takes_sgemm
    assert not takes_sgemm(0, 0, m, 64)
    limit = per_row * m / 64  # rows at n = 64
    assert limit < share * m
    assert not takes_sgemm(limit, 0, m, 64)
    assert takes_sgemm(limit + 1, 0, m, 64)
    assert not takes_sgemm(share * m, 0, m, 1)
    assert takes_sgemm(share * m + 1, 0, m, 1)
    assert takes_sgemm(0, 7, m, 64)  # 7 of 64 columns: past the share of C


def _fallback_sgemm(a, b):
    """ "auto"'s float32 GEMM in place of IV-blocks (cuBLASLt's, as a graph runs it)."""
    from mixpert.runtime.cuda.auto_fallback import fallback_sgemm

    cp = device.cupy_module()
    return fallback_sgemm(a, b, cp.empty((a.shape[0], b.shape[1]), dtype=cp.float32))


@pytest.mark.gpu
def test_gpu_auto_sample_is_not_fooled_by_wide_rows_at_its_own_stride() -> None:
    """Every 64th row of A unresolved (1.6% of C), 64 the sample's stride: rows at a hashed
    offset in each run of 64 see about 4 of them, so "auto" keeps IV-blocks (rows evenly
    spaced from 0 would all be wide ones, and "auto" would take SGEMM)."""
    import functools

    cp = device.cupy_module()
    from mixpert.runtime.cuda import backend, iv_blocks

    m, k, n = 16384, 1024, 16
    assert iv_blocks._sample_stride(m, k) == 64
    rng = np.random.default_rng(11)
    a, b = gemmul8(np, rng, (m, k), 0.5), gemmul8(np, rng, (k, n), 0.5)
    a[::64] = gemmul8(np, rng, (m // 64, k), 6.0)
    a[::64, ::2] *= np.float32(2.0**-90)
    assert dispatch.unresolved_lines(a, b, LEVEL) == (m // 64, 0)
    a, b = cp.asarray(a), cp.asarray(b)
    told: list[int] = []
    got = backend.product_at_level(
        a, b, LEVEL, fallback=auto.BLOCKS_FALLBACK, on_native=functools.partial(told.append, 1)
    )
    assert told == []
    assert cp.array_equal(got, backend.product_at_level(a, b, LEVEL), equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize(("wide", "falls_back"), [(8, False), (9, True)])
def test_gpu_auto_decides_on_the_device_as_on_the_host_at_the_bound(
    wide: int, falls_back: bool
) -> None:
    """4096 x 1024 x 16: 256 sampled rows, each standing for 16. With 8 of them unresolved
    the estimate's entries (128 rows x 16) sit exactly at row_entries x m: the host goes
    on, and so must the rows kernel (had it given up, C would be left unwritten); with 9 both
    take SGEMM."""
    import functools

    cp = device.cupy_module()
    from mixpert.runtime.cuda import backend, iv_blocks

    m, k, n = 4096, 1024, 16
    sampled = iv_blocks.sampled_rows(m, k)
    stride = iv_blocks._sample_stride(m, k)
    assert len(sampled) * stride == m and auto.CROSSOVERS.row_entries * m == 8 * stride * n
    assert all(i * stride <= r < (i + 1) * stride for i, r in enumerate(sampled))
    rng = np.random.default_rng(wide)
    a, b = gemmul8(np, rng, (m, k), 0.5), gemmul8(np, rng, (k, n), 0.5)
    rows = sampled[:wide]
    a[rows] = gemmul8(np, rng, (wide, k), 6.0)
    a[rows, ::2] *= np.float32(2.0**-90)
    assert dispatch.unresolved_lines(a, b, LEVEL) == (wide, 0)
    a, b = cp.asarray(a), cp.asarray(b)
    told: list[int] = []
    got = backend.product_at_level(
        a, b, LEVEL, fallback=auto.BLOCKS_FALLBACK, on_native=functools.partial(told.append, 1)
    )
    assert told == ([1] if falls_back else [])
    want = _fallback_sgemm(a, b) if falls_back else backend.product_at_level(a, b, LEVEL)
    assert cp.array_equal(got, want, equal_nan=True)
    untold = backend.product_at_level(a, b, LEVEL, fallback=auto.BLOCKS_FALLBACK)
    assert cp.array_equal(untold, want, equal_nan=True)  # (decided on the GPU, where it can)


@pytest.mark.gpu
def test_gpu_auto_runs_sgemm_where_most_of_c_would_be_recomputed_exactly() -> None:
    """Under "auto" (its route's fallback), IV-blocks runs cuBLAS SGEMM where its exactly
    recomputed lines would cost more than it saves (``auto.Fallback.takes_sgemm``: more than
    exact_share of C, or more than row_entries entries a row of A in rows; A's rows
    estimated from a sample, B's columns counted), and says so; on narrow data, with a few wide
    rows, or where the flagged rows are NaN/Inf ones, it keeps its own bits."""
    import functools

    cp = device.cupy_module()
    from mixpert.runtime.cuda import backend

    rng = np.random.default_rng(9)

    def pair(phi: float, wide_rows: float = 0.0) -> tuple[object, object]:
        a, b = gemmul8(np, rng, (3000, 512), 0.5), gemmul8(np, rng, (512, 24), 0.5)
        wide = rng.random(3000) < wide_rows
        a[wide] = gemmul8(np, rng, (int(wide.sum()), 512), phi)
        return cp.asarray(a), cp.asarray(b)

    narrow, few, most = pair(0.5), pair(4.0, 0.005), pair(4.0, 0.6)
    entries = pair(4.0, 0.05)  # 5% of C, but 24 entries a wide row: more than 0.5 a row of A
    nonfinite = narrow[0].copy(), narrow[1]
    nonfinite[0][::3, 7] = cp.nan
    for a, b in (few, most, entries):
        rows, cols = dispatch.unresolved_lines(a, b, LEVEL)
        takes_sgemm = auto.BLOCKS_FALLBACK.takes_sgemm(rows, cols, 3000, 24)
        assert takes_sgemm == (a is not few[0]), (rows, cols)
        assert (bypass.exact_share(rows, cols, 3000, 24) > auto.CROSSOVERS.exact_share) == (
            a is most[0]
        )
    cases = ((narrow, False), (few, False), (most, True), (entries, True), (nonfinite, False))
    for (a, b), falls_back in cases:
        told: list[int] = []
        got = backend.product_at_level(
            a, b, LEVEL, fallback=auto.BLOCKS_FALLBACK, on_native=functools.partial(told.append, 1)
        )
        want = _fallback_sgemm(a, b) if falls_back else backend.product_at_level(a, b, LEVEL)
        assert told == ([1] if falls_back else [])
        assert cp.array_equal(got, want, equal_nan=True)
        untold = backend.product_at_level(a, b, LEVEL, fallback=auto.BLOCKS_FALLBACK)
        assert cp.array_equal(untold, want, equal_nan=True)
