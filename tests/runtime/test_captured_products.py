"""Products replayed from a CUDA graph (the plan cache, ``MatmulPlan``) give the uncached path's
bits and the CPU oracle's, whatever the operands' layout, address, stream or thread."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
from gpu_gate import returns_while_gpu_is_held

import mixpert
from mixpert.runtime import plan_cache

pytestmark = pytest.mark.gpu
INT8_LEVELS = ["I", "T6", "IV", "V"]


def _operands(m: int, k: int, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((m, k)) * np.exp(rng.standard_normal((m, 1)))).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    return a, b


def _uncached(a, b, level: str, monkeypatch: pytest.MonkeyPatch):
    with monkeypatch.context() as patch:
        patch.setenv(plan_cache.SWITCH, "0")
        return mixpert.matmul(a, b, level=level)


def _same_bits(x, y) -> bool:
    import cupy

    x, y = cupy.asarray(x), cupy.asarray(y)
    return x.shape == y.shape and bool(cupy.array_equal(x.view(cupy.uint32), y.view(cupy.uint32)))


@pytest.fixture(autouse=True)
def _fresh_cache():
    mixpert.clear_cache()
    yield
    mixpert.clear_cache()


@pytest.mark.parametrize("level", INT8_LEVELS)
@pytest.mark.parametrize("shape", [(1, 1, 1), (33, 17, 65), (130, 300, 97), (256, 1024, 256)])
def test_replayed_bits_equal_the_oracle_and_the_uncached_path(level, shape, monkeypatch) -> None:
    import cupy

    for seed in range(3):  # new data at new addresses each call: the graph's copies take them
        a, b = _operands(*shape, seed)
        a_gpu, b_gpu = cupy.asarray(a), cupy.asarray(b)
        replayed = mixpert.matmul(a_gpu, b_gpu, level=level)
        assert _same_bits(replayed, _uncached(a_gpu, b_gpu, level, monkeypatch))
        assert _same_bits(replayed, mixpert.matmul(a, b, level=level, backend="cpu"))


@pytest.mark.parametrize("level", ["I", "IV", "V"])
@pytest.mark.parametrize("shape", [(64, 256, 256, 256), (5, 33, 70, 17), (1, 40, 50, 30)])
def test_replayed_stacks_equal_the_oracle_and_the_uncached_path(level, shape, monkeypatch) -> None:
    """Stacks (s, m, k) @ (s, k, n) replay one graph per signature (one pair: the matrix's),
    with each pair's bits the CPU oracle's; NaN and Inf in one pair stay in that pair."""
    import cupy

    count, m, k, n = shape
    rng = np.random.default_rng(count + m)
    for seed in range(3):
        a = rng.standard_normal((count, m, k)) * np.exp(rng.standard_normal((count, m, 1)))
        b = rng.standard_normal((count, k, n))
        a, b = a.astype(np.float32), b.astype(np.float32)
        if seed == 2:
            a[-1, 0, 1], b[0, 2, -1] = np.nan, np.inf
        a_gpu, b_gpu = cupy.asarray(a), cupy.asarray(b)
        replayed = mixpert.matmul(a_gpu, b_gpu, level=level)
        assert _same_bits(replayed, _uncached(a_gpu, b_gpu, level, monkeypatch))
        assert _same_bits(replayed, mixpert.matmul(a, b, level=level, backend="cpu"))
    cache = mixpert.runtime.cuda.backend._plans[cupy.cuda.Device().id]
    assert len(cache) == 1  # planned once for the three calls


def test_views_offsets_and_special_values(monkeypatch) -> None:
    import cupy

    a, b = _operands(96, 200, 80, 7)
    a[3, 5], a[10] = np.nan, 3e38  # a NaN line and a line only the bypass resolves
    b[:, 4] *= 2.0**-130  # subnormal products
    big_a, big_b = cupy.asarray(np.pad(a, 3)), cupy.asarray(np.asfortranarray(b))
    views = (big_a[3:-3, 3:-3], big_b)  # an offset view and a column-major operand
    for level in ("IV", "V"):
        got = mixpert.matmul(*views, level=level)
        assert _same_bits(got, mixpert.matmul(a, b, level=level, backend="cpu"))
        assert _same_bits(got, _uncached(*views, level, monkeypatch))


@pytest.mark.parametrize("level", ["IV", "T6"])
def test_operands_read_in_place_or_through_the_plans_buffers_in_any_order(level) -> None:
    """One plan, called with operands it reads where they lie (C-contiguous, aligned) and with
    others it copies first (offset views, column-major), in turn, each with new data: every
    call's bits are the oracle's (a graph left pointing at an earlier call's arrays shows)."""
    import cupy

    from mixpert.runtime.cuda import backend

    m, k, n = 130, 300, 97
    rng = np.random.default_rng(11)

    def laid_out(x: np.ndarray, how: str):
        if how == "contiguous":
            return cupy.asarray(x)
        if how == "aligned view":  # in place: C-contiguous, 64 rows in (a multiple of 256 B)
            padded = cupy.zeros((x.shape[0] + 64, x.shape[1]), dtype=cupy.float32)
            padded[64:] = cupy.asarray(x)
            return padded[64:]
        if how == "offset view":  # copied: starts 4 bytes off
            flat = cupy.zeros(x.size + 1, dtype=cupy.float32)
            flat[1:] = cupy.asarray(x).ravel()
            return flat[1:].reshape(x.shape)
        return cupy.asarray(np.asfortranarray(x))  # copied: column-major

    hows = ["contiguous", "offset view", "contiguous", "column-major", "aligned view"]
    for i, (how_a, how_b) in enumerate(zip(hows, hows[1:] + hows[:1], strict=True)):
        a = (rng.standard_normal((m, k)) * np.exp(rng.standard_normal((m, 1)))).astype(np.float32)
        b = rng.standard_normal((k, n)).astype(np.float32)
        a_gpu, b_gpu = laid_out(a, how_a), laid_out(b, how_b)
        assert how_a != "aligned view" or a_gpu.data.ptr % 256 == 0
        got = mixpert.matmul(a_gpu, b_gpu, level=level)
        a_gpu[...] = cupy.nan  # (the caller's operands change after the call: already read)
        assert _same_bits(got, mixpert.matmul(a, b, level=level, backend="cpu")), (i, how_a)
    plans = list(backend._plans[cupy.cuda.Device().id]._plans.values())
    assert len(plans) == 1
    if cupy.cuda.runtime.driverGetVersion() >= 12040:  # (the driver reads kernels' params)
        assert plans[0].reads_in_place


@pytest.mark.parametrize("shape", [(1, 7, 1), (1, 64, 33), (33, 17, 65), (256, 256, 256)])
@pytest.mark.parametrize("level", ["auto", "fp32"])
def test_small_native_products_replay_with_cupys_bits(shape, level) -> None:
    """A small product "auto" leaves to cuBLAS (and level fp32) replays CuPy's own SGEMM as a
    graph from its second call, reading the operands where they lie: every call gives
    ``cupy.matmul``'s bits, operands laid out otherwise included (CuPy's call runs those)."""
    import cupy

    from mixpert.runtime.cuda import backend

    m, k, n = shape
    sgemm_plans = lambda: [  # noqa: E731
        plan for key, plan in backend._plans[cupy.cuda.Device().id]._plans.items()
        if key[0] == "sgemm"
    ]  # fmt: skip
    for seed in range(4):
        a, b = (cupy.asarray(x) for x in _operands(m, k, n, seed))
        if seed == 3:  # column-major: not read in place
            a = cupy.asfortranarray(a)
        want = cupy.matmul(a, b)
        got = mixpert.matmul(a, b, level=level)
        a[...] = cupy.nan  # (changed after the call: the call has read it)
        assert _same_bits(got, want), seed
        if seed == 0:  # the first sight of a signature makes no plan
            assert not sgemm_plans()
    plans = sgemm_plans()
    assert len(plans) == 1 and plans[0] is not None  # made at the second call, used since


@pytest.mark.parametrize("level", ["IV", "T6"])
@pytest.mark.parametrize("shape", [(16, 65536, 16), (8, 20000, 24)])
def test_thin_outputs_of_long_sums_replay_without_touching_other_memory(level, shape) -> None:
    """An output smaller than the scratch its product zeroes (m, n small, k long): the capture
    must not let the output take the freed scratch's memory, where a rebound graph would zero
    past the caller's output (or the driver refuse the call). Each call's bits are the
    oracle's and the arrays around it keep theirs."""
    import cupy

    for seed in range(4):  # the second call plans; later ones replay into fresh outputs
        a, b = _operands(*shape, seed)
        a_gpu, b_gpu = cupy.asarray(a), cupy.asarray(b)
        guards = [cupy.full(1 << size, 7.0, dtype=cupy.float32) for size in (8, 16, 21)]
        got = mixpert.matmul(a_gpu, b_gpu, level=level)
        assert _same_bits(got, mixpert.matmul(a, b, level=level, backend="cpu")), seed
        assert all(bool((guard == 7.0).all()) for guard in guards), seed
        assert _same_bits(a_gpu, a) and _same_bits(b_gpu, b)
        del guards, got  # (freed: the next call's output may land where they were)


def test_two_streams_and_two_threads_at_once(monkeypatch) -> None:
    import cupy

    pairs = [_operands(128, 256, 128, seed) for seed in range(4)]
    want = [mixpert.matmul(a, b, level="IV", backend="cpu") for a, b in pairs]
    results: dict[int, list] = {}

    def work(index: int) -> None:
        with cupy.cuda.Stream(non_blocking=True) as stream:
            got = [mixpert.matmul(cupy.asarray(a), cupy.asarray(b), level="IV") for a, b in pairs]
            stream.synchronize()
            results[index] = got

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # and on one shared stream from two threads: calls of one plan must not interleave
    shared: dict[int, list] = {}

    def on_default(index: int) -> None:
        shared[index] = [
            mixpert.matmul(cupy.asarray(a), cupy.asarray(b), level="IV") for a, b in pairs * 5
        ]

    threads = [threading.Thread(target=on_default, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in (*results.values(), *shared.values()):
        for c, w in zip(got, want * 5, strict=False):
            assert _same_bits(c, w)


def test_the_fused_kernels_switch_gets_a_plan_of_its_own(monkeypatch) -> None:
    """A graph captured with the fused kernel on is not replayed with it off (MIXPERT_FUSED=0
    asks for cuBLAS's GEMMs and the combine), nor the other way: one plan each, same bits."""
    import cupy

    from mixpert.runtime.cuda import backend, fused

    a, b = (cupy.asarray(x) for x in _operands(200, 300, 100, 3))
    got = {}
    for to in ("0", "1", "0"):
        with fused.switched(to):
            got[to] = mixpert.matmul(a, b, level="IV")
    assert len(backend._plans[cupy.cuda.Device().id]) == 2
    assert _same_bits(got["0"], got["1"])


@pytest.mark.parametrize("fused_kernel", ["0", "1"])
def test_making_a_plan_leaves_cupys_cublas_handle_on_the_callers_stream(fused_kernel) -> None:
    """A library that calls cuBLAS on CuPy's handle as CuPy left it (GEMMul8 does) must not
    find it on a stream of the plan's, gone once the plan is made."""
    import cupy
    from cupy.cuda import cublas

    from mixpert.runtime.cuda import fused

    a, b = (cupy.asarray(x) for x in _operands(300, 200, 100, 4))
    for stream in (cupy.cuda.Stream(non_blocking=True), cupy.cuda.get_current_stream()):
        with stream, fused.switched(fused_kernel):
            mixpert.matmul(a, b, level="IV")  # (the cuBLAS class sums where the switch is 0)
            mixpert.matmul(a[:, :64], b[:64], level="T6")
            handle_stream = cublas.getStream(cupy.cuda.device.get_cublas_handle())
        assert handle_stream == stream.ptr


def test_a_cache_evicted_mid_loop_keeps_the_bits(monkeypatch) -> None:
    import cupy

    monkeypatch.setenv(plan_cache.SWITCH, "2,1024")  # two plans at most: shapes evict each other
    mixpert.runtime.cuda.backend._plans.clear()
    shapes = [(64, 96, 48), (80, 96, 48), (96, 96, 48)]
    data = [_operands(*s, i) for i, s in enumerate(shapes)]
    want = [mixpert.matmul(a, b, level="T6", backend="cpu") for a, b in data]
    for _ in range(4):
        for (a, b), w in zip(data, want, strict=True):
            assert _same_bits(mixpert.matmul(cupy.asarray(a), cupy.asarray(b), level="T6"), w)
    cache = mixpert.runtime.cuda.backend._plans[cupy.cuda.Device().id]
    assert len(cache) <= 2


def test_ops_sgemm_plans_share_their_shapes_plan_once_the_cache_is_full(monkeypatch) -> None:
    """Each owner (a jitted op) gets a replayed SGEMM plan of its own while the cache has room;
    past that, new owners share the shape's plan: the calls keep CuPy's bits, and once every
    owner has its plan no call captures again (no cycle of evictions and captures)."""
    import cupy

    from mixpert.runtime.cuda import backend

    monkeypatch.setenv(plan_cache.SWITCH, "2,1024")
    backend._plans.clear()
    backend._sighted.clear()  # (a signature is planned at its second sight)
    captures: list[tuple[int, int, int]] = []

    class Counted(backend.CapturedSgemm):
        def __init__(self, m: int, k: int, n: int) -> None:
            captures.append((m, k, n))
            super().__init__(m, k, n)

    monkeypatch.setattr(backend, "CapturedSgemm", Counted)
    owners = ["op0", "op1", "op2", "op3"]
    for round_ in range(6):
        a, b = (cupy.asarray(x) for x in _operands(64, 96, 48, round_))
        want = cupy.matmul(a, b)
        for owner in owners:
            got = backend.replayed_sgemm(a, b, owner)
            assert got is None or _same_bits(got, want), (round_, owner)
            if round_ >= 2:
                assert got is not None, (round_, owner)  # planned: every owner replays
        if round_ == 2:
            settled = len(captures)
    assert len(captures) == settled  # rounds 3-5 captured nothing
    cache = backend._plans[cupy.cuda.Device().id]
    owners_kept = [key[1] for key in cache._plans]
    assert len(owners_kept) == 2 and None in owners_kept  # one own plan and the shared one


@pytest.mark.parametrize("level, n", [("IV", 256), ("auto", 3072)])  # auto: IV, its fallback
def test_a_call_returns_before_the_gpu_is_done(level, n) -> None:
    """No host synchronisation in a replayed call, "auto"'s fallback included: enqueued behind
    a kernel that spins until the host lets it go, the call returns while that kernel runs."""
    import cupy

    from mixpert.runtime.cuda import captured

    if level == "auto" and not (_auto_emulates(n) and captured.conditional_nodes()):
        pytest.skip("no conditional nodes here, or auto does not take IV at this size")
    a, b = (cupy.asarray(x) for x in _operands(n, n, n, 3))
    mixpert.matmul(a, b, level=level)  # planned (the planning run synchronises, once)
    assert returns_while_gpu_is_held(lambda: mixpert.matmul(a, b, level=level)), (
        "the replayed call waited for the GPU"
    )


def test_a_small_native_product_planned_at_its_second_call_does_not_wait() -> None:
    """ "auto" on a product it leaves to cuBLAS plans its graph at the signature's second call:
    that call, too, returns while the GPU is held."""
    import cupy

    a, b = (cupy.asarray(x) for x in _operands(256, 256, 256, 5))
    want = cupy.matmul(a, b)
    assert _same_bits(mixpert.matmul(a, b), want)  # the first sight: no plan
    got: list = []
    assert returns_while_gpu_is_held(lambda: got.append(mixpert.matmul(a, b))), (
        "the planning call waited for the GPU"
    )
    assert _same_bits(got[0], want)


def test_matmul_plan_is_a_planned_product_and_refuses_other_shapes() -> None:
    import cupy

    a, b = _operands(200, 300, 100, 11)
    with mixpert.MatmulPlan(cupy.asarray(a), cupy.asarray(b), level="IV") as product:
        assert product.captured
        for seed in range(3):
            x, y = _operands(200, 300, 100, seed)
            assert _same_bits(product(cupy.asarray(x), cupy.asarray(y)),
                              mixpert.matmul(x, y, level="IV", backend="cpu"))  # fmt: skip
        with pytest.raises(ValueError, match=r"operand b has shape \(300, 99\)"):
            product(cupy.asarray(x), cupy.asarray(y[:, :99]))
    assert not product.captured  # released


def test_host_time_of_a_replayed_call_is_small() -> None:
    """Host microseconds of a repeated IV product at n = 1024 (calls back to back): a bound
    far above the target, so a loaded machine does not fail it, far below the uncached path."""
    import cupy

    a, b = (cupy.asarray(x) for x in _operands(1024, 1024, 1024, 5))
    for _ in range(3):
        mixpert.matmul(a, b, level="IV")
    cupy.cuda.Device().synchronize()
    start = time.perf_counter()
    for _ in range(50):
        mixpert.matmul(a, b, level="IV")
    host = (time.perf_counter() - start) / 50
    cupy.cuda.Device().synchronize()
    assert host < 200e-6, f"{host * 1e6:.0f} us of host time a call"


def _auto_emulates(n: int) -> bool:
    from mixpert.runtime import auto

    return auto.on_gpu(n, n, n, 1, "matrix", None).fallback is not None


@pytest.mark.parametrize("phi", [0.5, 4.0])  # narrow data: level IV; most lines unresolved: SGEMM
def test_auto_replayed_decides_its_fallback_on_the_gpu(phi, monkeypatch) -> None:
    """ "auto" where it takes level IV with its fallback: the graph's conditional nodes give
    the uncached call's bits (IV's on narrow data, the float32 GEMM's where the unresolved
    lines would cover most of C), with NaN rows flagged but not counted as unresolved."""
    import cupy

    from mixpert.runtime.cuda import captured
    from mixpert.testdata import gemmul8

    if not captured.conditional_nodes():
        pytest.skip("CUDA graphs here have no conditional nodes (CUDA 12.4+)")
    n = 3072
    assert _auto_emulates(n)
    rng = np.random.default_rng(int(phi * 10))
    a = cupy.asarray(gemmul8(np, rng, (n, n), phi))
    b = cupy.asarray(gemmul8(np, rng, (n, n), phi))
    replayed = mixpert.matmul(a, b, level="auto")
    uncached = _uncached(a, b, "auto", monkeypatch)
    assert _same_bits(replayed, uncached)
    iv = _uncached(a, b, "IV", monkeypatch)
    assert _same_bits(replayed, iv) == (phi < 1)
    if phi < 1:  # NaN rows are flagged, but never make "auto" leave level IV
        a[: n // 2, 7] = np.nan
        assert _same_bits(mixpert.matmul(a, b, level="auto"), _uncached(a, b, "auto", monkeypatch))
        assert _same_bits(mixpert.matmul(a, b, level="auto"), _uncached(a, b, "IV", monkeypatch))


def test_auto_replayed_takes_each_calls_arrays_in_its_conditional_body(monkeypatch) -> None:
    """One "auto" plan called in turn with data it emulates (phi = 0.5) and data whose
    unresolved lines make its conditional body run the float32 GEMM (phi = 4), each at new
    addresses: every call has the uncached call's bits, so the level's kernels and the body's
    GEMM read that call's operands and write its output (a body left on an earlier call's
    arrays shows); on a driver that rewrites the body's nodes, the plan reads in place."""
    import cupy

    from mixpert.runtime.cuda import backend, captured, graph_operands
    from mixpert.testdata import gemmul8

    if not captured.conditional_nodes():
        pytest.skip("CUDA graphs here have no conditional nodes (CUDA 12.4+)")
    n = 3072
    assert _auto_emulates(n)
    rng = np.random.default_rng(46)
    kept = []  # (alive: each call's arrays land at new addresses)
    for phi in (0.5, 4.0, 0.5, 4.0, 4.0, 0.5):
        a = cupy.asarray(gemmul8(np, rng, (n, n), phi))
        b = cupy.asarray(gemmul8(np, rng, (n, n), phi))
        want = _uncached(a, b, "auto", monkeypatch)
        assert _same_bits(mixpert.matmul(a, b, level="auto"), want), phi
        assert _same_bits(want, _uncached(a, b, "IV", monkeypatch)) == (phi < 1)  # body ran
        kept.append((a, b))
    plans = list(backend._plans[cupy.cuda.Device().id]._plans.values())
    assert len(plans) == 1
    if cupy.cuda.runtime.driverGetVersion() >= graph_operands.BODIES_FROM:
        assert plans[0].reads_in_place


def _decided_on_the_host(a, b, monkeypatch: pytest.MonkeyPatch):
    """ "auto" uncached, its fallback read back to the host (as where graphs have no
    conditional nodes)."""
    from mixpert.runtime.cuda import conditional

    with monkeypatch.context() as patch:
        patch.setattr(conditional, "usable", lambda: False)
        return _uncached(a, b, "auto", monkeypatch)


@pytest.mark.parametrize("phi", [0.5, 4.0])
def test_auto_uncached_decides_its_fallback_on_the_gpu(phi, monkeypatch) -> None:
    """Uncached (past the replayed sizes, or with the plan cache off), "auto"'s fallback is
    decided by a small graph behind the level's product: the host-decided bits (IV's on narrow
    data, SGEMM's where unresolved lines cover most of C; NaN rows never count), and the call
    returns while the stream is held."""
    import cupy

    from mixpert.runtime.cuda import captured
    from mixpert.testdata import gemmul8

    if not captured.conditional_nodes():
        pytest.skip("CUDA graphs here have no conditional nodes (CUDA 12.4+)")
    n = 3072
    assert _auto_emulates(n)
    rng = np.random.default_rng(int(phi * 10) + 1)
    a = cupy.asarray(gemmul8(np, rng, (n, n), phi))
    b = cupy.asarray(gemmul8(np, rng, (n, n), phi))
    on_gpu = _uncached(a, b, "auto", monkeypatch)
    assert _same_bits(on_gpu, _decided_on_the_host(a, b, monkeypatch))
    assert _same_bits(on_gpu, _uncached(a, b, "IV", monkeypatch)) == (phi < 1)
    if phi < 1:
        a[: n // 2, 7] = np.nan
        on_gpu = _uncached(a, b, "auto", monkeypatch)
        assert _same_bits(on_gpu, _decided_on_the_host(a, b, monkeypatch))
        assert _same_bits(on_gpu, _uncached(a, b, "IV", monkeypatch))
    with monkeypatch.context() as patch:  # two calls, the first one's graph still queued
        patch.setenv(plan_cache.SWITCH, "0")
        assert returns_while_gpu_is_held(
            lambda: [mixpert.matmul(a, b, level="auto") for _ in range(2)]
        )
    from mixpert.runtime.cuda import conditional

    # updated in place once run: a second executable graph only for the call behind the first
    assert all(len(pool) <= 2 for pool in conditional._executables.values())
