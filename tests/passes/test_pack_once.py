"""Pack once what does not change: which operands the compiler proves loop-invariant, and what
the run time does with them (one pack per call, reused while the k-exponents hold, same bits)."""

from __future__ import annotations

import numba
import numpy as np
import pytest
from conftest import gemmul8

import mixpert
from mixpert.execution import record_calls
from mixpert.execution.kept_packs import arguments_overlap
from mixpert.runtime import cpu
from mixpert.runtime.levels import get_level
from mixpert.runtime.pack_reuse import Kept, PackSlot


def invariance(f) -> dict[int, tuple[bool, bool]]:  # type: ignore[no-untyped-def]
    """Ordinal -> (A, B) invariant, for the function's own ops."""
    qualname = f.py_func.__qualname__
    return {op.ordinal: op.invariant for op in f.ops.values() if op.qualname == qualname}


# --- the analysis -------------------------------------------------------------------------------


@mixpert.jit
def kmeans_like(x, centroids, iterations):
    c = centroids.copy()
    for _ in range(iterations):
        d = (x @ c.T) * np.float32(2)
        labels = np.argmin(d, axis=1)
        onehot = (d <= np.take_along_axis(d, labels[:, None], axis=1)).astype(x.dtype)
        sums = onehot.T @ x
        c = sums / (onehot.sum(axis=0)[:, None] + np.float32(1))
    return c @ c.T


@mixpert.jit
def writes_in_loop(x, w, r):
    y = x
    for _ in range(3):
        y = x @ w
        x[0, 0] = 1.0  # x changes: its product packs again
        z = r.T @ w  # r is only read; w changes below
        w -= np.float32(0.1) * z
    return y


@mixpert.jit
def write_through_view(x, w):
    top = x[:2]
    y = x
    for _ in range(3):
        y = x @ w
        top[0, 0] = 2.0  # a view of x: x changes
    return y


@numba.njit
def scale_first_row(a):
    a[0] *= 2.0


@numba.njit
def row_norms(a):
    return np.sqrt((a * a).sum(axis=1))


@mixpert.jit
def callee_writes(x, w, v):
    y = x
    for _ in range(3):
        y = x @ w  # x: a jitted callee writes it
        scale_first_row(x)
        y = y + (v @ w)[0, 0] * row_norms(v).sum()  # a called function may write anything
    return y


@mixpert.jit
def out_and_inplace(x, w, u, out):
    for _ in range(3):
        np.dot(x, w, out)  # writes out, reads x and w
        u @= w  # writes u
        out = out + u @ w
    return out


@mixpert.jit
def blocks_of_queries(queries, refs, block):
    out = np.zeros((queries.shape[0], refs.shape[0]), dtype=queries.dtype)
    for start in range(0, queries.shape[0], block):
        q = queries[start : start + block]
        out[start : start + block] = q @ refs.T  # refs.T: a view made in the loop
    return out


@mixpert.jit
def nested(x, ws):
    total = np.zeros((x.shape[0], ws.shape[2]), dtype=x.dtype)
    for i in range(ws.shape[0]):
        for _ in range(2):
            total = total + x @ ws[i]  # ws[i] changes with the outer loop
    return total


def test_loop_invariant_operands_are_found() -> None:
    assert invariance(kmeans_like) == {0: (True, False), 1: (False, True), 2: (False, False)}
    assert invariance(blocks_of_queries) == {0: (False, True)}
    assert invariance(nested) == {0: (True, False)}


def test_operands_written_in_the_loop_are_not_invariant() -> None:
    assert invariance(writes_in_loop) == {0: (False, False), 1: (True, False)}
    assert invariance(write_through_view) == {0: (False, True)}
    assert invariance(callee_writes) == {0: (False, False), 1: (False, False)}  # calls: opaque
    # np.dot(x, w, out) writes only out; u @= w writes u
    assert invariance(out_and_inplace) == {0: (True, True), 1: (False, True), 2: (False, True)}


@mixpert.jit
def ufunc_output(a, b):
    s = np.float32(0)
    for _ in range(3):
        s += (a @ b).sum()
        np.add(a, np.float32(1), a)  # a ufunc's positional output
    return s


@mixpert.jit
def method_of_a_view(a, b):
    s = np.float32(0)
    for i in range(3):
        s += (a @ b).sum()
        a.T.fill(np.float32(i))
    return s


@mixpert.jit
def flipped_view(a, b):
    s = np.float32(0)
    for i in range(3):
        s += (a @ b).sum()
        f = np.fliplr(a)
        f[0, 0] = np.float32(i)
    return s


@mixpert.jit
def held_in_a_list(a, b):
    s = np.float32(0)
    for i in range(3):
        s += (a @ b).sum()
        held = [b]
        held[0][0, 0] = np.float32(i)  # b, through the list
    return s


@mixpert.jit
def positional_out(a, b, c):
    s = np.float32(0)
    for _ in range(3):
        s += (a @ b).sum()
        np.clip(c, 0, 1, a)  # clip's out, by position
    return s


SHARED = np.ones((4, 4), np.float32)


@mixpert.jit
def writes_a_global(b):
    s = np.float32(0)
    table = SHARED
    for i in range(3):
        s += (table @ b).sum()
        SHARED[0, 0] = np.float32(i)  # object mode (CuPy) could: another load of the name
    return s


def test_writes_the_analysis_must_see() -> None:
    assert invariance(writes_a_global) == {0: (False, True)}
    assert invariance(ufunc_output) == {0: (False, True)}
    assert invariance(method_of_a_view) == {0: (False, True)}
    assert invariance(flipped_view) == {0: (False, True)}
    assert invariance(held_in_a_list) == {0: (True, False)}
    assert invariance(positional_out) == {0: (False, True)}


# --- the run time -------------------------------------------------------------------------------

IV_EVERYWHERE = {f"kmeans_like:{i}": "IV" for i in range(3)}


def kmeans_inputs(seed: int = 0) -> tuple[np.ndarray, np.ndarray, int]:
    rng = np.random.default_rng(seed)
    x = gemmul8(0.5)(rng, (300, 48))
    return x, x[:12].copy(), 4


def kmeans_reference(x: np.ndarray, centroids: np.ndarray, iterations: int) -> np.ndarray:
    """``kmeans_like`` in Python, each product one ``mixpert.matmul`` at IV (nothing kept)."""
    c = centroids.copy()
    for _ in range(iterations):
        d = mixpert.matmul(x, c.T, level="IV") * np.float32(2)
        labels = np.argmin(d, axis=1)
        onehot = (d <= np.take_along_axis(d, labels[:, None], axis=1)).astype(x.dtype)
        sums = mixpert.matmul(onehot.T, x, level="IV")
        c = sums / (onehot.sum(axis=0)[:, None] + np.float32(1))
    return mixpert.matmul(c, c.T, level="IV")


def test_invariant_operands_are_packed_once_per_call_with_the_same_bits() -> None:
    f = kmeans_like.with_plan(IV_EVERYWHERE)
    x, c0, iterations = kmeans_inputs()
    with record_calls() as calls:
        got = f(x, c0, iterations)
    reused = [(call.op_id, call.reused) for call in calls]
    first = [("kmeans_like:0", (False, False)), ("kmeans_like:1", (False, False))]
    later = [("kmeans_like:0", (True, False)), ("kmeans_like:1", (False, True))]
    assert reused == first + later * (iterations - 1) + [("kmeans_like:2", (False, False))]
    np.testing.assert_array_equal(
        got.view(np.uint32), kmeans_reference(x, c0, iterations).view(np.uint32)
    )
    with record_calls() as again:  # a new call packs again: nothing is kept between calls
        f(x, c0, iterations)
    assert again[0].reused == (False, False)


def test_overlapping_arguments_keep_nothing() -> None:
    f = kmeans_like.with_plan(IV_EVERYWHERE)
    x, _, iterations = kmeans_inputs()
    with record_calls() as calls:
        got = f(x, x[:12], iterations)  # the centroids are a view of the points
    assert not any(any(call.reused) for call in calls)
    np.testing.assert_array_equal(got, kmeans_reference(x, x[:12], iterations))
    assert arguments_overlap((x, x[5:9])) and not arguments_overlap((x, x.copy(), 3))


@mixpert.jit(plan={"rescaled:0": "IV"})
def rescaled(x, w, scales):
    out = np.zeros((x.shape[0], w.shape[1]), dtype=x.dtype)
    for s in scales:
        out = out + x @ (w * s)  # x is invariant; w's scale moves the k-exponents
    return out


def test_a_kept_pack_is_made_again_when_the_exponents_move() -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((40, 24), dtype=np.float32)
    w = rng.standard_normal((24, 16), dtype=np.float32)
    scales = np.array([1.0, 2.0**20, 2.0**20, 1.0], dtype=np.float32)
    with record_calls() as calls:
        got = rescaled(x, w, scales)
    # 2^20 puts every k-index of w 20 binades above x: the exponents move, A packs again
    assert [call.reused for call in calls] == [(False, False), (False, False), (True, False),
                                               (False, False)]  # fmt: skip
    want = np.zeros((40, 16), dtype=np.float32)
    for s in scales:
        want = want + mixpert.matmul(x, w * s, level="IV")
    np.testing.assert_array_equal(got, want)


def test_kept_slot_semantics() -> None:
    slot = PackSlot()
    made: list[str] = []

    def make(name: str):  # type: ignore[no-untyped-def]
        return lambda: made.append(name) or name

    f0, f1 = np.zeros(4, np.int32), np.array([0, 3, 0, 0], np.int32)
    kept = Kept(slot, ("x", 1))
    assert kept.pack("IV", f0, make("p0")) == "p0"
    assert kept.pack("IV", f0.copy(), make("p1")) == "p0"  # equal exponents: reused
    assert kept.pack("V", f0, make("p2")) == "p2"  # another level: packed again
    assert kept.pack("V", f1, make("p3")) == "p3"  # other exponents: packed again
    assert Kept(slot, ("y", 1)).pack("V", f1, make("p4")) == "p4"  # another operand
    assert made == ["p0", "p2", "p3", "p4"] and (slot.packs, slot.reuses) == (4, 1)
    assert kept.tops(make("t0")) == "t0" and kept.tops(make("t1")) == "t0"


def test_cpu_product_with_kept_operands_gives_the_same_bits_on_wide_data() -> None:
    rng = np.random.default_rng(7)
    a = gemmul8(0.5)(rng, (70, 90))
    a[:, 5] *= np.float32(100)  # an outlier column: rebalanced against each B
    level = get_level("IV")
    slot = PackSlot()
    b0 = gemmul8(0.5)(np.random.default_rng(0), (90, 33))
    b2 = b0 * np.float32(3)
    b2[5, :] *= np.float32(1e-3)  # moves the exponent of k-index 5
    for seed, b in enumerate((b0, -b0, b2)):  # A kept across three products
        rows, cols = cpu.unresolved_lines(a, b, level)
        assert rows < 70 and cols < 33  # most lines go through the kept slices
        keep = (Kept(slot, ("a",)), Kept(PackSlot(), ("b", seed)))
        np.testing.assert_array_equal(
            cpu.product_at_level(a, b, level, keep), cpu.product_at_level(a, b, level)
        )
    assert (slot.packs, slot.reuses) == (2, 1)  # reused for -B, packed again when f moved


def test_a_slot_tells_backends_apart() -> None:
    slot = PackSlot()
    kept = Kept(slot, ("x",))
    f = np.zeros(3, np.int32)
    assert kept.on("cpu").pack("IV", f, lambda: "cpu pack") == "cpu pack"
    assert kept.on("cuda").pack("IV", f, lambda: "cuda pack") == "cuda pack"
    assert kept.on("cuda").tops(lambda: "cuda tops") == "cuda tops"
    assert kept.on("cpu").tops(lambda: "cpu tops") == "cpu tops"


@numba.njit
def helper_calling_back(a, b, depth):
    return recursive(a, b, depth - 1) if depth > 0 else np.float32(0)


@mixpert.jit
def recursive(a, b, depth):
    s = np.float32(0)
    for _ in range(2):
        s += (a @ b).sum()
    return s + helper_calling_back(a, b, depth)


@mixpert.jit
def with_a_closure(a, b):
    def scaled(x):
        return x * np.float32(2)

    s = np.float32(0)
    for _ in range(2):
        s += scaled(a @ b).sum()
    return s


def test_functions_that_reenter_or_define_functions_keep_nothing() -> None:
    from mixpert.execution.kept_packs import keeps_packs

    assert not keeps_packs(recursive.py_func)  # through the callee that calls it back
    assert not keeps_packs(with_a_closure.py_func)
    assert keeps_packs(kmeans_like.py_func)
    assert recursive._invariant_operands() == {}


def test_arguments_in_containers_keep_nothing() -> None:
    x = np.zeros((4, 4), np.float32)
    assert arguments_overlap((x, (x.copy(),)))  # an array inside a tuple
    assert arguments_overlap((x, [1, 2]))
    assert not arguments_overlap((x, x.copy(), 3, 2.5, None, np.float32(1)))


@pytest.mark.gpu
def test_gpu_kept_packs_match_the_cpu_oracle() -> None:
    import cupy as cp

    f = kmeans_like.with_plan(IV_EVERYWHERE)
    x, c0, iterations = kmeans_inputs(5)
    with record_calls() as calls:
        got = f(cp.asarray(x), cp.asarray(c0), iterations)
    assert any(call.reused[0] for call in calls) and any(call.reused[1] for call in calls)
    np.testing.assert_array_equal(cp.asnumpy(got), kmeans_reference(x, c0, iterations))
