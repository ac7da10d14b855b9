"""Running jitted functions: plans, native semantics, bit-for-bit fp32, errors, profiling, cache."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numba
import numpy as np
import pytest

import mixpert
from mixpert import execution
from mixpert.execution import hook
from mixpert.passes.check_llvm import UnseenGemmWarning
from mixpert.plans.plan import as_active_plan
from mixpert.runtime import device

RNG = np.random.default_rng(7)


def f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


A, B, C = f32(12, 9), f32(9, 7), f32(7, 5)


def three(a, b, c):  # the Python function every test below compiles
    x = a @ b
    y = np.dot(x, c)
    return x, y, y.dot(c.T)


emulated = mixpert.jit(three)
OPS = sorted(emulated.ops, key=lambda op: emulated.ops[op].line)
PLAN = dict(zip(OPS, ["I", "V", "IV"], strict=True))


def test_explicit_plan_equals_runtime_op_by_op() -> None:
    f = emulated.with_plan(PLAN)
    x, y, z = f(A, B, C)
    x_ref = mixpert.matmul(A, B, level="I")
    y_ref = mixpert.matmul(x_ref, C, level="V")
    z_ref = mixpert.matmul(y_ref, np.ascontiguousarray(C.T), level="IV")
    assert np.array_equal(x, x_ref) and np.array_equal(y, y_ref) and np.array_equal(z, z_ref)


def test_native_float32_everywhere_equals_numba_bit_for_bit() -> None:
    plain = numba.njit(three)(A, B, C)
    ours = emulated.with_plan(dict.fromkeys(OPS, "fp32"))(A, B, C)
    for got, want in zip(ours, plain, strict=True):
        assert got.dtype == want.dtype and np.array_equal(got, want)


def test_swapping_plans_does_not_recompile() -> None:
    emulated.with_plan(PLAN)(A, B, C)
    before = len(emulated.dispatcher.overloads)
    low = emulated.with_plan(dict.fromkeys(OPS, "I"))(A, B, C)[0]
    high = emulated.with_plan(dict.fromkeys(OPS, "V"))(A, B, C)[0]
    assert len(emulated.dispatcher.overloads) == before
    assert not np.array_equal(low, high)
    assert np.array_equal(high, mixpert.matmul(A, B, level="V"))


def test_plan_setter_and_plan_types() -> None:
    f = emulated.with_plan(dict.fromkeys(OPS, "II"))
    assert np.array_equal(f(A, B, C)[0], mixpert.matmul(A, B, level="II"))
    with pytest.raises(ValueError, match="not a known level"):
        f.plan = {OPS[0]: "VII"}
    with pytest.raises(TypeError, match="pass a mixpert.Plan or a mapping"):
        f.plan = [("op", "II")]  # type: ignore[assignment]


def test_record_calls_profiles_each_op() -> None:
    with execution.record_calls() as calls:
        emulated.with_plan(PLAN)(A, B, C)
    assert [(c.op_id, c.m, c.k, c.n, c.level) for c in calls] == [
        (OPS[0], 12, 9, 7, "I"),
        (OPS[1], 12, 7, 5, "V"),
        (OPS[2], 12, 5, 7, "IV"),
    ]
    assert all(c.seconds > 0 for c in calls)


def test_default_level_is_the_runtime_default() -> None:
    x = emulated(A, B, C)[0]  # no plan: "auto", native float32 on the CPU
    assert np.array_equal(x, mixpert.matmul(A, B))


@pytest.mark.filterwarnings("error::mixpert.passes.check_llvm.UnseenGemmWarning")
def test_non_float32_operands_keep_numba_semantics() -> None:
    def mixed(a, b, v):
        return a @ b, np.dot(a, v), a.dot(v)

    a64, b64, v = A.astype(np.float64), B.astype(np.float64), B[:, 0].astype(np.float64)
    ours = mixpert.jit(mixed, plan=None)(a64, b64, v)
    plain = numba.njit(mixed)(a64, b64, v)
    for got, want in zip(ours, plain, strict=True):
        assert got.dtype == np.float64 and np.array_equal(got, want)


def test_runtime_errors_surface_in_the_caller() -> None:
    f = emulated.with_plan(PLAN)
    with pytest.raises(ValueError, match=r"a.shape\[1\] = 9 must equal b.shape\[0\] = 7"):
        f(A, C, C)


def test_unexpected_runtime_failure_is_raised_not_swallowed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    def boom(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise RuntimeError("backend exploded")

    monkeypatch.setattr(hook.dispatch, "run", boom)
    with pytest.raises(RuntimeError, match="backend exploded"):
        emulated.with_plan(PLAN)(A, B, C)
    assert execution.take_pending_error() is None


def test_transposed_and_strided_views() -> None:
    at = np.asfortranarray(A)
    f = emulated.with_plan(PLAN)
    assert np.array_equal(f(at, B, C)[0], mixpert.matmul(A, B, level="I"))
    wide = f32(12, 18)
    assert np.array_equal(f(wide[:, ::2], B, C)[0], mixpert.matmul(wide[:, ::2], B, level="I"))


def test_matmul_in_njit_callee_is_rewritten() -> None:
    @numba.njit
    def inner(x, w):
        return x @ w

    def outer(a, b):
        return inner(a, b)

    f = mixpert.jit(outer)
    (op,) = f.ops
    f.plan = {op: "I"}
    assert np.array_equal(f(A, B), mixpert.matmul(A, B, level="I"))
    assert np.array_equal(inner(A, B), A @ B)  # the user's own njit function is untouched


def test_blas_calls_the_pass_cannot_see_are_reported() -> None:
    def covariance(x):
        return np.cov(x).astype(np.float32) @ x

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mixpert.jit(covariance)(f32(5, 5))
    messages = [str(w.message) for w in caught if issubclass(w.category, UnseenGemmWarning)]
    assert len(messages) == 1 and "covariance" in messages[0] and "np.cov (line" in messages[0]

    def cube(x):
        return np.linalg.matrix_power(x, 3)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mixpert.jit(cube)(f32(4, 4))
    messages = [str(w.message) for w in caught if issubclass(w.category, UnseenGemmWarning)]
    assert len(messages) == 1 and "np.linalg.matrix_power" in messages[0]


def test_object_mode_pipeline_runs_the_same_ops() -> None:
    # The CuPy path, exercised with NumPy arrays: same op ids, plan and runtime calls.
    f = emulated.with_plan(PLAN)
    with execution.activate(as_active_plan(PLAN)), execution.record_calls() as calls:
        x, y, z = f.dispatcher_for("object")(A, B, C)
    assert [c.op_id for c in calls] == OPS
    assert np.array_equal(x, mixpert.matmul(A, B, level="I"))


CACHE_SCRIPT = textwrap.dedent(
    """
    import numba, numpy as np, mixpert

    def f(a, b):
        return a @ b

    plain = numba.njit(cache=True)(f)
    ours = mixpert.jit(f, cache=True)
    op = next(iter(ours.ops))
    ours.plan = {op: "I"}
    a = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    assert np.array_equal(ours(a, a), mixpert.matmul(a, a, level="I"))
    assert np.array_equal(plain(a, a), a @ a) or np.allclose(plain(a, a), a @ a)
    print(len(ours.dispatcher.stats.cache_hits), len(plain.stats.cache_hits))
    """
)


def test_cache_true_works_apart_from_numba_entries(tmp_path: Path) -> None:
    module = tmp_path / "cached_mod.py"
    module.write_text(CACHE_SCRIPT)
    env = {**__import__("os").environ, "NUMBA_CACHE_DIR": str(tmp_path / "cache")}

    def run() -> str:
        done = subprocess.run(
            [sys.executable, str(module)], capture_output=True, text=True, env=env, check=False
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.split()

    assert run() == ["0", "0"]
    assert run() == ["1", "1"]  # both load their own entries, and ours still calls the runtime
    names = sorted(p.name for p in (tmp_path / "cache").rglob("*.nbi"))
    assert len(names) == 2 and sum(n.startswith("mixpert-") for n in names) == 1


@pytest.mark.gpu
def test_cupy_operands_run_on_the_gpu_with_the_same_ops_and_plan() -> None:
    cp = device.cupy_module()
    a, b, c = (cp.asarray(x) for x in (A, B, C))
    f = emulated.with_plan(PLAN)
    with execution.record_calls() as calls:
        x, y, z = f(a, b, c)
    assert all(type(r) is cp.ndarray for r in (x, y, z))  # no host copies of the results
    assert [c.op_id for c in calls] == OPS
    assert np.array_equal(x.get(), mixpert.matmul(a, b, level="I").get())
    assert np.array_equal(y.get(), mixpert.matmul(x, c, level="V").get())


@pytest.mark.gpu
def test_cupy_operands_at_native_float32_match_cupy() -> None:
    cp = device.cupy_module()
    a, b, c = (cp.asarray(x) for x in (A, B, C))
    x, _, _ = emulated.with_plan(dict.fromkeys(OPS, "fp32"))(a, b, c)
    assert np.array_equal(x.get(), (a @ b).get())


def stacked(a, b):
    return a @ b


@pytest.mark.gpu
def test_cupy_stacks_in_object_mode_run_the_plan_with_the_cpu_bits() -> None:
    cp = device.cupy_module()
    rng = np.random.default_rng(5)
    a = rng.standard_normal((2, 3, 20, 30)).astype(np.float32)
    for b in (rng.standard_normal((3, 30, 10)), rng.standard_normal((30, 10))):
        b = b.astype(np.float32)
        f = mixpert.jit(stacked)
        f.plan = dict.fromkeys(f.ops, "IV")
        with execution.record_calls() as calls:
            got = f(cp.asarray(a), cp.asarray(b))
        assert type(got) is cp.ndarray and {c.level for c in calls} == {"IV"}
        want = mixpert.matmul(a, b, level="IV", backend="cpu")
        np.testing.assert_array_equal(got.get().view(np.uint32), want.view(np.uint32))


def prange_blocks(a, b, out):
    for i in numba.prange(a.shape[0]):
        out[i] = a[i] @ b
    return out


@pytest.mark.slow  # (a parallel compile: seconds; CI runs it with -m slow)
def test_products_inside_prange_run_the_plan_on_every_thread() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 16, 16)).astype(np.float32)
    b = rng.standard_normal((16, 16)).astype(np.float32)
    f = mixpert.jit(prange_blocks, parallel=True)
    f.plan = dict.fromkeys(f.ops, "V")
    want = np.stack([mixpert.matmul(a[i], b, level="V") for i in range(8)])
    np.testing.assert_array_equal(f(a, b, np.zeros_like(a)), want)
    with execution.record_calls() as calls:
        f(a, b, np.zeros_like(a))
    assert len(calls) == 8 and {c.level for c in calls} == {"V"}  # tuning sees them all
    # measure=False: the walk's levels (timed on a GPU, products this small run natively on
    # the host, the host's own run being faster: tuning.trip)
    plan = mixpert.tune(f, (a, b, np.zeros_like(a)), tol=1e-6, target="cuda", measure=False)
    assert plan.levels and all(lv != "fp32" for lv in plan.levels.values())


def test_a_mixpert_function_called_from_plain_numba_runs_its_plan() -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((16, 16)).astype(np.float32)

    def inner(x, y):
        return x @ y

    jitted = mixpert.jit(inner)
    jitted.plan = dict.fromkeys(jitted.ops, "V")

    @numba.njit
    def outer(x, y):
        return jitted(x, y) + np.float32(1)

    np.testing.assert_array_equal(outer(a, a), mixpert.matmul(a, a, level="V") + np.float32(1))


def small_then_large(a, b, c, d):
    return a @ b, c @ d


@pytest.mark.gpu
def test_gpu_tuning_leaves_native_the_ops_emulation_slows_down() -> None:
    """The measured check of the cost model: a 64^3 product runs faster natively than at any
    emulated level, a 4096^3 one slower, so a GPU tune leaves the first native (TF32 is as fast
    there and may meet tol), and emulates the second."""
    cp = device.cupy_module()
    rng = cp.random.default_rng(2)
    args = [rng.standard_normal(s, dtype=cp.float32) for s in ((64, 64),) * 2 + ((4096, 4096),) * 2]
    f = mixpert.jit(small_then_large)
    plan = mixpert.tune(f, tuple(args), tol=1e-4)
    small, large = f.ops
    assert not mixpert.get_level(plan.levels[small]).emulated  # fp32 (or tf32, as fast)
    assert mixpert.get_level(plan.levels[large]).emulated
    assert plan.error <= 1e-4
