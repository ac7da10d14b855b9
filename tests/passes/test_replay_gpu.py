"""``@mixpert.jit`` on CuPy arrays, on a GPU: whole-call replay (``replay=True``) gives the bits of
the direct call, with fresh inputs at new addresses each call, two signatures side by side,
arguments the body writes into and results that are arguments; a body that reads the GPU back
on the host runs directly, with the same results; and the short way of a site keeps its bits.
Calls that read their arguments in place (the graph pointed at them and at new outputs) keep
the direct call's bits with arguments at new addresses each call, never write the caller's
arrays and never wait for the GPU; a graph that reaches an argument through a pointer array in
device memory keeps copying (or runs directly), with the direct call's bits.
The decisions themselves, without a GPU: tests/passes/test_jit_on_cupy_logic.py and
tests/passes/test_replay_standin.py."""

from __future__ import annotations

import ctypes
import logging
from collections import Counter
from typing import Any

import numpy as np
import pytest
from gpu_gate import returns_while_gpu_is_held

import mixpert
from mixpert import replay
from mixpert.runtime import device

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _fresh_cache():
    mixpert.clear_cache()
    yield
    mixpert.clear_cache()


def gpu(*shape: int, seed: int, scale: float = 1.0) -> Any:
    cp = device.cupy_module()
    rng = np.random.default_rng(seed)
    rows = np.exp(0.5 * rng.standard_normal((*shape[:-1], 1)))  # phi = 0.5
    return cp.asarray((rng.standard_normal(shape) * rows * scale).astype(np.float32))


def same_bits(x: Any, y: Any) -> bool:
    cp = device.cupy_module()
    if isinstance(x, tuple):
        return type(y) is tuple and len(x) == len(y) and all(map(same_bits, x, y))
    if x.shape != y.shape or x.dtype != y.dtype:
        return False
    unsigned = {2: cp.uint16, 4: cp.uint32, 8: cp.uint64}[x.dtype.itemsize]
    return bool(cp.array_equal(x.view(unsigned), y.view(unsigned)))


def graphs(f: Any) -> list[Any]:
    """The calls ``f`` keeps as graphs (None: a signature left to the direct call)."""
    return [e for k, e in replay._calls._plans.items() if k[0] is f._replays]


def pair(func: Any, levels: list[str]) -> tuple[Any, Any]:
    """``func`` jitted with and without replay, under one plan (op i at levels[i])."""
    direct = mixpert.jit(func)
    plan = dict(zip(direct.ops, levels, strict=True))
    return direct.with_plan(plan), mixpert.jit(func, replay=True).with_plan(plan)


def mlp(x, w1, b1, w2, b2, w3, b3):
    h = np.maximum(x @ w1 + b1, np.float32(0))
    h = np.maximum(h @ w2 + b2, np.float32(0))
    return h @ w3 + b3


def mlp_args(w: int, seed: int) -> tuple[Any, ...]:
    weights = []
    for i in range(3):
        weights += [gpu(w, w, seed=seed + 2 * i, scale=w**-0.5), gpu(w, seed=seed + 2 * i + 1)]
    return (gpu(4 * w, w, seed=seed + 9), *weights)


@pytest.mark.parametrize("levels", [["fp32"] * 3, ["IV", "fp32", "T6"], ["V"] * 3])
def test_an_mlp_replays_the_direct_calls_bits(levels) -> None:
    direct, replayed = pair(mlp, levels)
    for seed in range(4):  # fresh inputs at new addresses each call: the graph copies them in
        args = mlp_args(256, seed)
        assert same_bits(replayed(*args), direct(*args))
    (graph,) = graphs(replayed)
    assert graph is not None and graph.nbytes > 0


def attention(q, k, v):
    s = (q @ k.T) * np.float32(0.125)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ v


@pytest.mark.parametrize("levels", [["fp32", "fp32"], ["IV", "T6"]])
def test_attention_replays_the_direct_calls_bits(levels) -> None:
    direct, replayed = pair(attention, levels)
    for seed in range(3):
        q, k, v = (gpu(128, 64, seed=10 * seed + i) for i in range(3))
        assert same_bits(replayed(q, k, v), direct(q, k, v))
    assert [g is not None for g in graphs(replayed)] == [True]


def reads_back(x, w):
    y = x @ w
    if float(y.max()) > 0:  # a host read: no graph can hold it
        return y * np.float32(2)
    return y


def test_a_host_read_runs_directly_with_the_same_results(caplog) -> None:
    direct, replayed = pair(reads_back, ["fp32"])
    with caplog.at_level(logging.DEBUG, logger="mixpert"):
        for seed in range(3):
            x, w = gpu(64, 32, seed=seed), gpu(32, 16, seed=seed + 5)
            assert same_bits(replayed(x, w), direct(x, w))
    assert graphs(replayed) == [None]
    assert any("run without replay" in r.getMessage() for r in caplog.records)


def test_two_signatures_side_by_side() -> None:
    direct, replayed = pair(mlp, ["IV", "fp32", "fp32"])
    for seed in range(3):
        for w in (128, 192):
            args = mlp_args(w, 100 * seed + w)
            assert same_bits(replayed(*args), direct(*args))
    assert len(graphs(replayed)) == 2 and all(g is not None for g in graphs(replayed))


def views_and_scalars(x, w, s):
    return (x @ w) * s


def test_views_offsets_and_scalar_values() -> None:
    direct, replayed = pair(views_and_scalars, ["IV"])
    big = gpu(70, 90, seed=3)
    for s in (0.5, 0.5, -2.0):  # a scalar's value is part of the signature
        for x in (big[3:67, 5:69], big[:64, :64].T, big[1:65, 1:65]):  # offsets, a transpose
            w = gpu(64, 32, seed=4)
            assert same_bits(replayed(x, w, s), direct(x, w, s))
    assert all(g is not None for g in graphs(replayed))


def step(x, w, out):
    out[...] = np.tanh(x @ w)
    x *= np.float32(0.5)
    return out, x, x.T


def test_arguments_written_and_returned() -> None:
    cp = device.cupy_module()
    direct, replayed = pair(step, ["fp32"])
    for seed in range(3):
        x, w = gpu(64, 64, seed=seed), gpu(64, 64, seed=seed + 1)
        x2, out, out2 = (
            x.copy(),
            cp.full((64, 64), np.nan, cp.float32),
            cp.empty((64, 64), cp.float32),
        )
        got = replayed(x, w, out)
        want = direct(x2, w, out2)
        assert same_bits(got, want) and same_bits(x, x2) and same_bits(out, out2)
        assert got[0] is out and got[1] is x  # the caller's own arrays back ...
        assert got[2].data.ptr == x.data.ptr and got[2].strides == x.T.strides  # ... and views
    assert [g is not None for g in graphs(replayed)] == [True]


def batched(q, k):
    return q @ k


def test_a_stack_of_int8_products_replays_its_kernels() -> None:
    direct, replayed = pair(batched, ["IV"])
    for seed in range(3):
        q, k = gpu(8, 64, 96, seed=seed), gpu(8, 96, 48, seed=seed + 3)
        assert same_bits(replayed(q, k), direct(q, k))
    assert [g is not None for g in graphs(replayed)] == [True]


def two_products(x, w):
    return (x @ w) @ w


def test_auto_replays_with_its_fallback_decided_on_the_gpu() -> None:
    """At 2048^3 "auto" takes level IV where its graph decides the fallback on the GPU (else
    SGEMM): either way the whole call replays, with the direct call's bits."""
    direct, replayed = pair(two_products, ["auto", "auto"])
    for seed in range(3):
        x, w = gpu(2048, 2048, seed=seed), gpu(2048, 2048, seed=seed + 7, scale=2048**-0.5)
        assert same_bits(replayed(x, w), direct(x, w))
    assert [g is not None for g in graphs(replayed)] == [True]


def forks(graph: Any) -> int:
    """Nodes of a captured CuPy graph that two nodes or more depend on: where work queued on two
    streams went apart (one stream's capture is a chain)."""
    get = ctypes.CDLL("libcuda.so.1").cuGraphGetEdges_v2
    get.argtypes = [ctypes.c_void_p] * 4 + [ctypes.POINTER(ctypes.c_size_t)]
    count = ctypes.c_size_t()
    assert get(graph.graph, None, None, None, ctypes.byref(count)) == 0
    sources, targets = (ctypes.c_void_p * count.value)(), (ctypes.c_void_p * count.value)()
    assert get(graph.graph, sources, targets, None, ctypes.byref(count)) == 0
    return sum(1 for dependents in Counter(sources).values() if dependents >= 2)


@pytest.mark.parametrize(("level", "forked"), [("T6", True), ("IV", True), ("fp32", False)])
def test_an_int8_site_packs_b_beside_a_in_the_graph(level, forked) -> None:
    """B's tops and pack run on a second stream beside A's, as a plan's own graph runs them
    (fp32: one cuBLAS call, a chain), with the direct call's bits."""
    direct, replayed = pair(batched, [level])  # (here a product of two matrices)
    for seed in range(3):
        x, w = gpu(512, 384, seed=seed), gpu(384, 256, seed=seed + 5)
        assert same_bits(replayed(x, w), direct(x, w))
    (call,) = graphs(replayed)
    assert (forks(call._graph) > 0) is forked


def test_a_native_site_keeps_cupys_bits_and_an_int8_site_the_plans() -> None:
    def one(x, w):
        return x @ w

    x, w = gpu(300, 200, seed=1), gpu(200, 100, seed=2)
    native = mixpert.jit(one)
    native = native.with_plan(dict.fromkeys(native.ops, "fp32"))
    emulated = native.with_plan(dict.fromkeys(native.ops, "IV"))
    for _ in range(3):
        assert same_bits(native(x, w), x @ w)
        assert same_bits(emulated(x, w), mixpert.matmul(x, w, level="IV"))


def test_a_replayed_call_leaves_cupys_cublas_handle_on_the_callers_stream() -> None:
    """Whole-call replay captures on a stream of its own, gone once the call's graph is made:
    CuPy's cuBLAS handle must come back on the caller's stream (a library calling cuBLAS on it
    without setting one, as GEMMul8 does, would crash)."""
    cp = device.cupy_module()
    from cupy.cuda import cublas

    _, replayed = pair(mlp, ["fp32", "IV", "fp32"])
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        for seed in range(3):  # planned at a signature's first or second call
            replayed(*mlp_args(128, seed))
        assert graphs(replayed), "the call was not replayed"
        assert cublas.getStream(cp.cuda.device.get_cublas_handle()) == stream.ptr


# --- reading in place ---------------------------------------------------------------------------


def rebinds_here() -> bool:
    """Whether the driver has the calls ``graph_operands`` rewrites a graph with (12.4+)."""
    return device.cupy_module().cuda.runtime.driverGetVersion() >= 12040


@pytest.mark.parametrize("levels", [["fp32"] * 3, ["auto"] * 3, ["IV", "fp32", "T6"]])
def test_an_mlp_read_in_place_keeps_the_direct_calls_bits_and_the_callers_arrays(levels):
    """The MLP of the benchmark (x 2048 x 512, three 512 x 512 layers): each call's arguments
    at new addresses, its results all kept (a graph left writing an earlier call's output, or
    reading an earlier call's arguments, shows), the caller's arrays never written."""
    cp = device.cupy_module()
    direct, replayed = pair(mlp, levels)
    calls = []
    for seed in range(5):
        args = mlp_args(512, 10 * seed)
        before = [x.copy() for x in args]
        calls.append((args, before, replayed(*args)))
    for args, before, got in calls:
        assert same_bits(got, direct(*args))
        assert all(same_bits(x, y) for x, y in zip(args, before, strict=True))
    outputs = [got.data.ptr for _, _, got in calls]
    assert len(set(outputs)) == len(outputs)  # (a new array each call)
    (graph,) = graphs(replayed)
    assert graph is not None
    if rebinds_here() and levels == ["fp32"] * 3:  # (CuPy's SGEMM and elementwise kernels)
        assert graph.reads_in_place, "the MLP's calls copy their arguments"
    cp.cuda.get_current_stream().synchronize()


def test_a_call_read_in_place_does_not_wait_for_the_gpu() -> None:
    _, replayed = pair(mlp, ["fp32"] * 3)
    for seed in range(2):  # (the capture, then one replay: the pool's blocks)
        replayed(*mlp_args(512, seed))
    args = mlp_args(512, 7)
    assert returns_while_gpu_is_held(lambda: replayed(*args)), "a replayed call waited"
    if rebinds_here():
        assert graphs(replayed)[0].reads_in_place


_THROUGH_POINTERS = r"""
extern "C" __global__ void through_pointers(const unsigned long long* hidden, const float* y,
                                            float* out, int n) {
    // x's address, read from device memory and unmasked: no node's parameter holds it
    const float* x = (const float*)(hidden[0] ^ (1ull << 62));
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * x[i] + y[i];
}
"""


def through_pointers(xs: tuple[Any, ...]) -> Any:
    """2 x + y + x, where the kernel reads x through a pointer array in device memory (masked,
    so no parameter of the fill either holds x's address) and the last sum reads x where a
    node's parameter holds it: ``graph_operands`` finds a binding, which misses the first."""
    cp = device.cupy_module()
    x, y = xs
    hidden = cp.full((1,), x.data.ptr ^ (1 << 62), dtype=cp.uint64)
    out = cp.empty_like(x)
    kernel = cp.RawKernel(_THROUGH_POINTERS, "through_pointers")
    kernel(((x.size + 255) // 256,), (256,), (hidden, y, out, np.int32(x.size)))
    return out + x


def cupy_stacks(xs: tuple[Any, ...]) -> Any:
    """CuPy's own batched product of two stacks (its cuBLAS wrapper: refused under capture)."""
    return device.cupy_module().matmul(*xs)


@pytest.mark.parametrize("body", [through_pointers, cupy_stacks])
def test_a_graph_reaching_an_argument_through_device_pointers_keeps_its_bits(body) -> None:
    """A body whose GPU work reads an argument through an address in device memory: calls
    keep the direct call's bits with the arguments at new addresses each call, the binding's
    trial refusing to read in place (or the signature running directly)."""
    cp = device.cupy_module()
    replays = replay.Replays(body.__name__, frozenset)  # (the body writes no argument)
    shape = (64, 96) if body is through_pointers else (8, 64, 96)
    other = shape if body is through_pointers else (8, 96, 48)
    for seed in range(4):
        x, y = gpu(*shape, seed=seed), gpu(*other, seed=seed + 7)
        before = (x.copy(), y.copy())
        got = replays.call((x, y), None, body)
        assert same_bits(got, body((x, y)))
        assert same_bits(x, before[0]) and same_bits(y, before[1])
    (call,) = [e for k, e in replay._calls._plans.items() if k[0] is replays]
    if body is through_pointers:
        assert call is not None and not call.reads_in_place
    cp.cuda.get_current_stream().synchronize()


@pytest.mark.parametrize("levels", [["fp32"], ["IV"]])
def test_a_stack_of_products_at_new_addresses_keeps_the_direct_calls_bits(levels) -> None:
    direct, replayed = pair(batched, levels)
    for seed in range(4):
        q, k = gpu(8, 64, 96, seed=seed), gpu(8, 96, 48, seed=seed + 3)
        before = (q.copy(), k.copy())
        assert same_bits(replayed(q, k), direct(q, k))
        assert same_bits(q, before[0]) and same_bits(k, before[1])
