"""1-D and N-D operands with np.matmul's semantics (vectors native, stacks broadcast)."""

from __future__ import annotations

import numpy as np
import pytest

import mixpert
from mixpert.runtime import device, ordered
from mixpert.testdata import gemmul8

RNG = np.random.default_rng(21)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CASES = {
    "stack @ shared weights": (f32(3, 5, 6), f32(6, 4)),
    "matrix @ stack": (f32(5, 6), f32(3, 6, 4)),
    "stack @ stack": (f32(3, 5, 6), f32(3, 6, 4)),
    "broadcast stacks": (f32(1, 3, 5, 6), f32(2, 1, 6, 4)),
    "matrix @ vector": (f32(5, 6), f32(6)),
    "vector @ stack": (f32(6), f32(3, 6, 4)),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("level", ["IV", "V", "fp32"])
def test_np_matmul_semantics(case: str, level: str) -> None:
    a, b = CASES[case]
    c = mixpert.matmul(a, b, level=level)
    want = np.matmul(a.astype(np.float64), b.astype(np.float64))
    assert c.shape == want.shape and c.dtype == np.float32
    np.testing.assert_allclose(c, want, rtol=1e-5, atol=1e-5)


def test_stacks_run_each_pair_at_the_level() -> None:
    a, b = CASES["stack @ stack"]
    c = mixpert.matmul(a, b, level="I")
    for i in range(3):
        np.testing.assert_array_equal(c[i], mixpert.matmul(a[i], b[i], level="I"))


@pytest.mark.parametrize("level", ["I", "T6", "IV", "V"])
@pytest.mark.parametrize(
    ("a_shape", "b_shape", "phi"),
    [((40, 16, 16), (40, 16, 16), 0.5), ((2, 3, 30, 70), (3, 70, 20), 2.5),
     ((6, 3, 1), (6, 1, 4), 1.0), ((4, 2, 5), (4, 5, 0), 1.0)],
)  # fmt: skip
def test_cpu_stacks_in_one_call_have_each_pairs_bits(level, a_shape, b_shape, phi) -> None:
    """All pairs at once on the CPU (cpu.int8_product_stack) give every pair the bits of its
    own 2-D product: equilibration, scales, bypassed lines (wide data, NaN, Inf) included."""
    rng = np.random.default_rng(len(a_shape) + a_shape[-1])
    a, b = gemmul8(np, rng, a_shape, phi), gemmul8(np, rng, b_shape, phi)
    if a.size and b.size:
        a.reshape(-1, *a_shape[-2:])[0, 0, 0] = np.inf
        b.reshape(-1, *b_shape[-2:])[-1, 0, 0] = np.nan
    c = mixpert.matmul(a, b, level=level, backend="cpu")
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a_all = np.broadcast_to(a, (*batch, *a.shape[-2:]))
    b_all = np.broadcast_to(b, (*batch, *b.shape[-2:]))
    for index in np.ndindex(*batch):
        want = mixpert.matmul(a_all[index], b_all[index], level=level, backend="cpu")
        assert np.array_equal(c[index].view(np.uint32), want.view(np.uint32)), index


def test_shared_weights_fold_into_one_product() -> None:
    a, w = CASES["stack @ shared weights"]
    folded = mixpert.matmul(a.reshape(-1, 6), w, level="IV").reshape(3, 5, 4)
    np.testing.assert_array_equal(mixpert.matmul(a, w, level="IV"), folded)


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(CASES))
def test_every_batch_element_has_the_cpu_bits_on_the_gpu(case: str) -> None:
    cp = device.cupy_module()
    a, b = CASES[case]
    want = mixpert.matmul(a, b, level="IV", backend="cpu")
    got = mixpert.matmul(cp.asarray(a), cp.asarray(b), level="IV", backend="cuda")
    assert type(got) is cp.ndarray
    if "vector" in case:  # native: BLAS orders differ
        np.testing.assert_allclose(got.get(), want, rtol=1e-5, atol=1e-5)
        return
    np.testing.assert_array_equal(got.get().view(np.uint32), want.view(np.uint32))


STACK_LEVELS = ["I", "T6", "IV", "V", "fp32-ordered"]
GPU_STACKS = [
    ((40, 16, 16), (40, 16, 16), 0.5),
    ((2, 3, 30, 70), (3, 70, 20), 2.5),  # broadcast, wide range: bypassed lines
    ((6, 3, 1), (6, 1, 4), 1.0),
    ((5, 70, 33), (5, 33, 90), 1.5),  # tiles of the in-order kernel cut m and n
]


def _special_stacks(a_shape, b_shape, phi, seed) -> tuple[np.ndarray, np.ndarray]:
    """Stacks of fresh gemmul8 data with an Inf, a NaN with a payload and a subnormal in them."""
    rng = np.random.default_rng(seed)
    a, b = gemmul8(np, rng, a_shape, phi), gemmul8(np, rng, b_shape, phi)
    a.reshape(-1, *a_shape[-2:])[0, 0, 0] = np.inf
    b.reshape(-1, *b_shape[-2:])[-1, 0, 0] = np.array(0x7FC00123, np.uint32).view(np.float32)
    a.reshape(-1, *a_shape[-2:])[-1, -1, -1] = np.float32(1e-40)  # subnormal
    return a, b


@pytest.mark.gpu
@pytest.mark.parametrize("level", STACK_LEVELS)
@pytest.mark.parametrize(("a_shape", "b_shape", "phi"), GPU_STACKS)
def test_gpu_stacks_have_the_cpu_bits(level, a_shape, b_shape, phi) -> None:
    """The CUDA stack path (a few launches for the whole stack) gives every pair the CPU
    oracle's bits: equilibration, scales, bypassed lines, NaN, Inf and subnormals included."""
    cp = device.cupy_module()
    a, b = _special_stacks(a_shape, b_shape, phi, seed=a_shape[-1])
    want = mixpert.matmul(a, b, level=level, backend="cpu")
    got = mixpert.matmul(cp.asarray(a), cp.asarray(b), level=level, backend="cuda")
    assert type(got) is cp.ndarray and got.shape == want.shape
    assert np.array_equal(got.get().view(np.uint32), want.view(np.uint32))


@pytest.mark.gpu
@pytest.mark.parametrize("level", ["IV", "fp32-ordered"])
def test_gpu_stacks_longer_than_one_launch_and_long_k(level) -> None:
    """70000 pairs (more than a grid dimension holds: launches in chunks) and k beyond one
    INT32 block (k blocks summed in float64) keep the CPU's bits."""
    cp = device.cupy_module()
    rng = np.random.default_rng(7)
    for a_shape, b_shape in (((70000, 2, 3), (70000, 3, 2)), ((2, 4, 50000), (2, 50000, 3))):
        a, b = gemmul8(np, rng, a_shape, 1.0), gemmul8(np, rng, b_shape, 1.0)
        want = mixpert.matmul(a, b, level=level, backend="cpu")
        got = mixpert.matmul(cp.asarray(a), cp.asarray(b), level=level).get()
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), a_shape


@pytest.mark.gpu
@pytest.mark.parametrize("count", [4, 64])
def test_gpu_stack_runs_one_int8_gemm_per_class_whatever_its_length(count, monkeypatch) -> None:
    """No loop over the pairs: one strided-batched GEMM per weight class, no 2-D product (the
    class-sum pipeline; the fused kernel's stacks: test_fused_kernel)."""
    cp = device.cupy_module()
    from mixpert.runtime import plan_cache
    from mixpert.runtime.cuda import backend, fused, sliced

    monkeypatch.setenv(fused.SWITCH, "0")
    monkeypatch.setenv(plan_cache.SWITCH, "0")  # (a plan would run it twice: warm, captured)
    calls = []
    gemm = sliced.gemm_tn
    monkeypatch.setattr(sliced, "gemm_tn", lambda *args, **kw: calls.append(1) or gemm(*args, **kw))
    monkeypatch.setattr(
        backend, "product_at_level", lambda *args: pytest.fail("a pair ran on its own")
    )
    a = cp.asarray(f32(count, 48, 40))
    b = cp.asarray(f32(count, 40, 24))
    mixpert.matmul(a, b, level="IV")
    assert len(calls) == len(mixpert.LEVELS["IV"].groups)


def test_auto_routes_stacks_by_their_shape() -> None:
    """On the GPU "auto" picks per stack shape (dispatch's crossovers); the CPU stays native."""
    from mixpert.runtime import auto, dispatch

    def level(count: int, m: int, k: int, n: int, backend: str = "cuda") -> str:
        a, b = shaped(count, m, k), shaped(count, k, n)
        return dispatch.resolve_level("auto", a, b, backend).name

    small, large = auto.CROSSOVERS.ordered_max_dim, auto.CROSSOVERS.min_dim
    assert level(4096, small, small, small) == auto.ORDERED.name
    assert level(4096, small, small, small, backend="cpu") == "fp32"
    assert level(4096, small, small + 1, small) == "fp32"
    pairs = auto.CROSSOVERS.pairs_max_dim  # the pairs kernel, where it copies 16 bytes at a time
    assert level(4096, pairs, pairs, pairs) == level(512, 17, 20, 8) == auto.ORDERED.name
    assert level(4096, pairs, pairs - 2, pairs) == level(4096, pairs, pairs, 17) == "fp32"
    assert level(4096, pairs + 1, pairs, pairs) == "fp32"
    side = auto.CROSSOVERS.stack_min_dim  # level IV for stacks of large pairs, enough of them
    count = auto.CROSSOVERS.stack_min_work // side**3
    assert level(count, side, side, side) == level(4, 2 * side, 2 * side, 2 * side) == "IV"
    assert level(count // 2, side, side, side) == "fp32"
    assert (
        level(16 * count, side, side // 2, side)
        == level(8 * count, side // 2, side, side)
        == "fp32"
    )
    assert level(16, large, large, large) == auto.EMULATED.name
    assert level(64, large, small, large) == "fp32"  # thin k: the packs cost more than they save


def test_auto_runs_native_where_level_iv_workspace_does_not_fit(monkeypatch) -> None:
    """Where "auto" would take level IV (one large product, or a stack of large pairs) but the
    GPU has less free memory than IV's workspace, it runs native float32, which needs none,
    rather than raise MemoryError."""
    from types import SimpleNamespace

    from mixpert.runtime import auto, device, dispatch

    free = {"bytes": 0}
    fake_cuda = SimpleNamespace(
        workspace_bytes=lambda level, m, k, n, count=1: 1000 * count,
        free_bytes=lambda: free["bytes"],
        replays=lambda m, k, n: False,
        crossovers=lambda shipped, route: shipped,
    )
    monkeypatch.setattr(device, "gpu_available", lambda: True)
    monkeypatch.setattr(dispatch, "_cuda", lambda: fake_cuda)
    big, side = auto.CROSSOVERS.min_dim, auto.CROSSOVERS.stack_min_dim
    count = auto.CROSSOVERS.stack_min_work // side**3
    for a, b, pairs in (
        (shaped(big, big), shaped(big, big), 1),
        (shaped(count, side, side), shaped(count, side, side), count),
    ):
        free["bytes"] = 1000 * pairs
        assert dispatch.resolve_level("auto", a, b, "cuda").name == auto.EMULATED.name
        free["bytes"] = 1000 * pairs - 1
        assert dispatch.resolve_level("auto", a, b, "cuda").name == "fp32"


def shaped(*shape: int) -> np.ndarray:
    """A float32 array of ``shape`` that takes no memory (routing reads only shapes)."""
    return np.broadcast_to(np.float32(0), shape)


def test_auto_routes_large_products_to_level_iv(monkeypatch) -> None:
    """One product: level IV on the GPU where every dimension is at least min_dim, or at least
    large_min_dim with large_min_work multiply-adds (``auto.CROSSOVERS``); native float32 one
    step short of either rule, and on the CPU. With no plan cache, so that no product replays
    one graph: the rule for those (from replayed_min_dim a side, ``test_auto_policy``) would
    take most of these shapes, as it did run alone where graphs take conditional nodes."""
    from mixpert.runtime import auto, dispatch, plan_cache

    monkeypatch.setenv(plan_cache.SWITCH, "0")

    def level(m: int, k: int, n: int, backend: str = "cuda") -> str:
        return dispatch.resolve_level("auto", shaped(m, k), shaped(k, n), backend).name

    big, side = auto.CROSSOVERS.min_dim, auto.CROSSOVERS.large_min_dim
    long = auto.CROSSOVERS.large_min_work // side**2  # side x long x side: just enough work
    assert level(big, big, big) == level(side, long, side) == auto.EMULATED.name
    assert level(long, side, side) == level(side, side, long) == auto.EMULATED.name
    assert level(side, 2 * side, long // 2) == auto.EMULATED.name  # 2048 x 4096 x 8192
    assert level(side, long - 1, side) == "fp32"  # one multiply-add row short
    assert level(side - 1, 2 * long, side) == level(long, side, side - 1) == "fp32"
    assert level(big, big, big - 1) == "fp32"  # 3071 a side: too little work for the second rule
    assert level(big, big, big, backend="cpu") == "fp32"
    assert level(64 * side, side // 2, side // 2) == "fp32"  # 1024 a side stays native
    stack = dispatch.resolve_level(
        "auto", shaped(1, 64 * side, side // 2), shaped(1, side // 2, side // 2), "cuda"
    )
    assert stack.name == "fp32"  # ... in a stack of one pair too


def test_auto_routes_thin_products_with_a_very_long_k_to_split_k() -> None:
    """One product with tiny m and n and a very long k: fp32-ordered's split-k on the GPU."""
    from mixpert.runtime import auto, dispatch

    def level(m: int, k: int, n: int, backend: str = "cuda") -> str:
        return dispatch.resolve_level("auto", shaped(m, k), shaped(k, n), backend).name

    thin, long_k = auto.CROSSOVERS.split_max_mn, auto.CROSSOVERS.split_min_k
    assert level(thin, long_k, thin) == level(2, long_k, 2) == auto.ORDERED.name
    assert level(1, long_k, 1) == level(3, long_k, 17) == auto.ORDERED.name
    # matrix-vector products stay with cuBLAS's own kernels
    assert level(1, long_k, 3) == level(thin, 4 * long_k, 1) == level(1, long_k, thin) == "fp32"
    assert level(16, 64 * long_k, 16) == auto.ORDERED.name  # no upper bound on k
    assert level(thin, long_k, thin, backend="cpu") == "fp32"
    assert level(thin + 1, long_k, thin) == level(thin, long_k, thin + 1) == "fp32"
    assert level(thin, long_k - 1, thin) == level(8, long_k - 1, 8) == "fp32"
    stack = dispatch.resolve_level("auto", shaped(2, thin, long_k), shaped(2, long_k, thin), "cuda")
    assert stack.name == "fp32"  # stacks: each pair's own kernel, not split-k


def test_auto_routes_tall_narrow_products_to_the_tall_kernel() -> None:
    """One product with many rows, few columns and a long enough k: fp32-ordered's tall
    kernel on the GPU; one bound short of the rule stays native."""
    from mixpert.runtime import auto, dispatch

    def level(m: int, k: int, n: int, backend: str = "cuda") -> str:
        return dispatch.resolve_level("auto", shaped(m, k), shaped(k, n), backend).name

    tall, narrow = auto.CROSSOVERS.tall_min_m, auto.CROSSOVERS.tall_max_n
    deep = auto.CROSSOVERS.tall_min_k
    assert level(tall, deep, narrow) == auto.ORDERED.name
    assert level(2 * tall, deep, 1) == auto.ORDERED.name
    assert level(tall, deep, narrow, backend="cpu") == "fp32"
    assert level(tall - 1, deep, narrow) == "fp32"
    assert level(tall, deep, narrow + 1) == "fp32"
    assert level(tall, deep - 1, narrow) == "fp32"


def test_auto_routes_tall_products_with_a_long_k_to_iv_blocks(monkeypatch) -> None:
    """Where A is large (m k at least blocks_min_mk, rows enough to fill the GPU) and n
    small, level IV-blocks, ahead of the tall kernel; wider n only with a longer k; never on a
    GPU without INT8 mma.sync (there the tall kernel's rule applies)."""
    from mixpert.runtime import auto, dispatch

    def level(m: int, k: int, n: int, backend: str = "cuda") -> str:
        return dispatch.resolve_level("auto", shaped(m, k), shaped(k, n), backend).name

    monkeypatch.setattr(auto, "_blocks_supported", lambda gpu: True)
    rows, deep, area = (
        auto.CROSSOVERS.blocks_min_m,
        auto.CROSSOVERS.blocks_min_k,
        auto.CROSSOVERS.blocks_min_mk,
    )
    narrow, wide = auto.CROSSOVERS.blocks_max_n, auto.CROSSOVERS.blocks_wide_max_n
    assert level(area // 4096, 4096, narrow) == level(area // deep, deep, 1) == "IV-blocks"
    assert level(rows, area // rows, wide) == "IV-blocks"  # k = 16384: n up to 64
    few, fill = auto.CROSSOVERS.blocks_few_rows_max_n, auto.CROSSOVERS.blocks_fill_m
    assert level(rows, area // rows, few) == level(fill, area // fill, narrow) == "IV-blocks"
    assert level(rows, area // rows, few + 1) == "fp32"  # 4 n-tiles: too few row tiles
    assert level(fill - 1, area // rows, narrow) == "fp32"
    assert level(area // 4096, 4096, narrow + 1) == "fp32"
    assert level(area // 4096, 4096, narrow, backend="cpu") == "fp32"
    assert level(area // 4096 - 1, 4096, narrow) == "fp32"  # A below 1 GiB
    assert level(rows - 1, 2 * area // rows, 8) == "fp32"  # too few rows
    tall = (auto.CROSSOVERS.tall_min_m, auto.CROSSOVERS.tall_min_k)  # A of 256 MiB: the tall kernel
    assert level(*tall, 8) == "fp32-ordered"
    monkeypatch.setattr(auto, "_blocks_supported", lambda gpu: False)
    assert level(area // 4096, 4096, 16) == "fp32-ordered"


def test_auto_routes_very_tall_products_with_k_and_n_within_a_chunk_to_the_thin_kernel(
    monkeypatch,
) -> None:
    from mixpert.runtime import auto, dispatch

    def level(m: int, k: int, n: int) -> str:
        return dispatch.resolve_level("auto", shaped(m, k), shaped(k, n), "cuda").name

    monkeypatch.setattr(auto, "_thin_kernel_fits", lambda gpu, k, n: True)
    rows, wide = auto.CROSSOVERS.thin_min_m, auto.CROSSOVERS.thin_wide_min_m
    most = auto.CROSSOVERS.thin_max_kn
    assert level(rows, 16, 16) == level(4 * rows, 8, 8) == auto.ORDERED.name
    assert level(rows, ordered.CHUNK, most // ordered.CHUNK) == "fp32-ordered"
    assert level(rows, most // 32, 32) == "fp32-ordered"  # up to 32 columns within k n
    assert level(rows - 1, 16, 16) == "fp32"
    past = level(rows, 16, most // 16 + 1)
    assert past == "fp32"  # k n past the rule: the FMAs outweigh the bytes
    assert level(wide - 1, ordered.CHUNK, ordered.CHUNK) == "fp32"
    assert level(wide, ordered.CHUNK, ordered.CHUNK) == "fp32-ordered"  # any k n from `wide` rows
    assert level(wide, 4, 64) == "fp32"  # n past the thin kernel's columns
    assert level(wide, ordered.CHUNK + 1, 1) == "fp32"  # k past one chunk
    # A GPU whose blocks cannot have the kernel's shared memory keeps cuBLAS.
    monkeypatch.setattr(auto, "_thin_kernel_fits", lambda gpu, k, n: False)
    assert level(wide, 16, 16) == "fp32"


@pytest.mark.parametrize("a_shape, b_shape", [((3, 5, 6), (3, 6, 4)), ((5, 6), (6, 4))])
def test_an_unknown_backend_is_refused_for_stacks_and_matrices(a_shape, b_shape) -> None:
    a, b = f32(*a_shape), f32(*b_shape)
    with pytest.raises(ValueError, match=r"backend='gpu' is not one of 'auto', 'cpu', 'cuda'"):
        mixpert.matmul(a, b, level="IV", backend="gpu")
