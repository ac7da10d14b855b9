"""Plans and threads (issue 38, part 4): every plan error names its file, plan files get the
coverage check ``plan=`` gets, any malformed file is a ``PlanFileError``, and the active plan is
per call and per thread whoever the caller is, errors keeping their cause."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import numba
import numpy as np
import pytest

import mixpert
from mixpert.execution import MixpertRuntimeError, hook, state
from mixpert.plans import (
    Plan,
    PlanCoverageWarning,
    PlanFileError,
    PlanMismatchError,
    StalePlanError,
    read_plans,
)

mixpert_jit = importlib.import_module("mixpert.jit")  # the module: mixpert.jit is the function
RNG = np.random.default_rng(38)
A = RNG.standard_normal((16, 16)).astype(np.float32)


def chain(a, b):
    return (a @ b) @ b


def tuned_file(tmp_path: Path) -> tuple[Path, dict]:
    """A plan file for ``chain`` as `mixpert tune` writes it, and its JSON."""
    f = mixpert.jit(chain)
    path = mixpert.tune(f, (A, A), tol=1e-3).save(tmp_path / "plans.json")
    return path, json.loads(path.read_text())


def rewrite(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


# --- every plan error names the file ----------------------------------------------------------
def edited_chain(a, b):  # chain with one product edited: a plan for chain is stale for it
    return (a @ b) @ b.T


edited_chain.__qualname__ = "chain"


def test_a_stale_plan_names_its_file_wherever_it_is_read(tmp_path) -> None:
    path, _ = tuned_file(tmp_path)
    edited = mixpert.jit(edited_chain)
    with pytest.raises(StalePlanError, match=rf"plan file {path}: stale plan for chain"):
        Plan.load(path, edited)
    book = mixpert.jit(edited_chain, tol=1e-3, plan_file=path)
    for _ in range(2):  # the next call refuses it again
        with pytest.raises(StalePlanError, match=rf"plan file {path}: stale plan for chain"):
            book(A, A)
    plan = read_plans(path)[0]  # read now, applied later: the error still names the file
    with pytest.raises(StalePlanError, match=rf"plan file {path}"):
        mixpert.jit(edited_chain, plan=plan)(A, A)
    with pytest.raises(PlanMismatchError, match=rf"plan file {path}: plan is for chain"):
        plan.check(mixpert.jit(lambda a, b: a @ b))
    assert plan == Plan.from_json(plan.to_json()) and "source" not in plan.to_json()


def test_inspect_names_the_plan_file_of_a_stale_plan(tmp_path) -> None:
    path, _ = tuned_file(tmp_path)
    (tmp_path / "edited.py").write_text("def chain(a, b):\n    return (a @ b) @ b.T\n")
    for extra in ([], ["--shapes", "16x16,16x16"]):
        done = subprocess.run(
            [sys.executable, "-m", "mixpert.cli", "inspect", "edited.py:chain", "--plan",
             str(path), *extra],
            cwd=tmp_path, capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 2, done.stderr
        assert f"plan file {path}: stale plan for chain" in done.stderr, done.stderr


# --- the coverage check runs for plan files as for plan= --------------------------------------
def test_a_plan_file_naming_ops_the_function_lacks_is_refused(tmp_path) -> None:
    path, data = tuned_file(tmp_path)
    data["plans"][0]["levels"]["chain:7"] = "IV"
    rewrite(path, data)
    f = mixpert.jit(chain, tol=1e-3, plan_file=path)
    with pytest.raises(PlanMismatchError, match=rf"plan file {path}: .*does not have: chain:7"):
        f(A, A)
    explicit = mixpert.jit(chain, plan=Plan.load(path))  # the same check as plan=
    with pytest.raises(PlanMismatchError, match=rf"plan file {path}: .*chain:7"):
        explicit(A, A)


def test_a_plan_file_leaving_ops_out_warns_naming_them_and_the_file(tmp_path) -> None:
    path, data = tuned_file(tmp_path)
    del data["plans"][0]["levels"]["chain:1"]
    rewrite(path, data)
    f = mixpert.jit(chain, tol=1e-3, plan_file=path)
    with pytest.warns(PlanCoverageWarning, match=rf"plan file {path}: .*leaves out ops chain:1"):
        f(A, A)
    assert f.plans[0].source == str(path)  # the file's plan ran, not a new tuning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mixpert.jit(chain, tol=1e-3, plan_file=path)(A, A)
    (warned,) = [w for w in caught if issubclass(w.category, PlanCoverageWarning)]
    assert warned.filename == __file__  # it points at the user's call


def test_a_plan_file_that_would_go_unread_is_refused(tmp_path) -> None:
    path, _ = tuned_file(tmp_path)
    with pytest.raises(TypeError, match="plan_file=.* is read by functions jitted with tol="):
        mixpert.jit(chain, plan_file=path)
    with pytest.raises(TypeError, match="drop plan="):
        mixpert.jit(chain, tol=1e-3, plan={"chain:0": "IV"}, plan_file=path)
    explicit = mixpert.jit(chain, plan=Plan.load(path, mixpert.jit(chain)))  # what to do instead
    assert np.array_equal(explicit(A, A), mixpert.jit(chain, tol=1e-3, plan_file=path)(A, A))


# --- any malformed file gives PlanFileError ---------------------------------------------------
def plan_json(**fields: object) -> str:
    plan = {"levels": {}, "function": "chain", "op_hash": "0", "signature": [], "device": "cpu",
            "tol": 1e-3, "error": 0.0, "predicted_speedup": 1.0} | fields  # fmt: skip
    return json.dumps({"format": "mixpert-plans/2", "plans": [plan]})


HOSTILE = {
    "nested lists": ("[" * 100_000 + "]" * 100_000, "nested"),
    "nested objects": ('{"a": ' * 50_000 + "1" + "}" * 50_000, "nested"),
    "nested just under the parser's limit": (
        plan_json(levels="@").replace('"@"', "[" * 990 + "]" * 990),
        "nested",
    ),
    "a huge integer": (plan_json(profiling_runs="@").replace('"@"', "9" * 5000), "5000 digits"),
    "an integer beyond int64": (plan_json(profiling_runs=2**63), "profiling_runs"),
    "a huge float": (plan_json(tol="@").replace('"@"', "1e999"), "'tol' must be a positive"),
    "NaN": (plan_json(error="@").replace('"@"', "NaN"), "NaN"),
    "NaN tol": (plan_json(tol="@").replace('"@"', "NaN"), "NaN"),
    "an array at the top": ("[1, 2]", "must hold a JSON object, found list"),
    "a string at the top": ('"plans"', "found str"),
    "duplicate keys": (plan_json().replace('"tol": 0.001', '"tol": 0.001, "tol": 1'), "twice"),
    "a bad signature": (plan_json(signature=[1]), "'signature'"),
    "not JSON": ("{oops", "not JSON"),
    "empty": ("", "not JSON"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_plan_files_are_plan_file_errors_naming_the_file(tmp_path, name) -> None:
    text, needle = HOSTILE[name]
    path = tmp_path / "hostile.json"
    path.write_text(text)
    with pytest.raises(PlanFileError, match=rf"plan file {path}") as raised:
        Plan.load(path)
    assert needle in str(raised.value)
    with pytest.raises(PlanFileError, match=rf"plan file {path}"):
        mixpert.jit(chain, tol=1e-3, plan_file=path)(A, A)


def test_bytes_that_are_not_utf8_and_a_byte_order_mark(tmp_path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(plan_json().replace("chain", "caf\u00e9").encode("latin-1"))
    with pytest.raises(PlanFileError, match=rf"plan file {path}: not UTF-8"):
        Plan.load(path)
    path.write_bytes(b"\xef\xbb\xbf" + plan_json().encode())  # as some editors save it
    assert Plan.load(path).function == "chain"


def test_infinite_errors_round_trip(tmp_path) -> None:
    """An overflowing function's plan has error inf: the file mixpert writes reads back."""
    plan = Plan.from_json(json.loads(plan_json(error=float("inf")))["plans"][0])
    path = plan.save(tmp_path / "p.json")
    assert "Infinity" in path.read_text() and Plan.load(path).error == float("inf")


# --- the active plan is per call and per thread -----------------------------------------------
def inner(x, y):
    return x @ y


def other(x, y):
    return x @ y


def callers() -> tuple[Any, Any, Any]:
    """``inner`` at level V, plain Numba code calling it, and ``other`` at level I."""
    jitted = mixpert.jit(inner)
    jitted.plan = dict.fromkeys(jitted.ops, "V")

    @numba.njit
    def plain(x, y):
        return jitted(x, y)

    busy = mixpert.jit(other)
    busy.plan = dict.fromkeys(busy.ops, "I")
    return jitted, plain, busy


def run_threads(count: int, target) -> list[BaseException]:  # type: ignore[no-untyped-def]
    failures: list[BaseException] = []

    def guarded() -> None:
        try:
            target()
        except BaseException as error:  # noqa: BLE001 - reported by the test
            failures.append(error)

    threads = [threading.Thread(target=guarded) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return failures


def test_after_eight_threads_a_plain_numba_caller_runs_its_functions_plan() -> None:
    jitted, plain, busy = callers()
    want_v, want_i = mixpert.matmul(A, A, level="V"), mixpert.matmul(A, A, level="I")
    assert not np.array_equal(want_v, A @ A)  # the levels tell apart
    barrier = threading.Barrier(8)

    def serve() -> None:
        for _ in range(10):
            barrier.wait()  # calls start together and end in any order
            assert np.array_equal(busy(A, A), want_i)

    assert run_threads(8, serve) == []
    assert state._open == {}  # every call's scope is gone, whatever order they ended in
    np.testing.assert_array_equal(plain(A, A), want_v)
    np.testing.assert_array_equal(jitted(A, A), want_v)


def test_a_plain_numba_caller_runs_its_plan_while_another_thread_is_mid_call(
    monkeypatch,
) -> None:
    _, plain, busy = callers()
    inside, release = threading.Event(), threading.Event()
    run = hook.dispatch.run

    def slow_in_worker(*args, **kwargs):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "busy":
            inside.set()
            release.wait(30)
        return run(*args, **kwargs)

    monkeypatch.setattr(hook.dispatch, "run", slow_in_worker)
    worker = threading.Thread(target=lambda: busy(A, A), name="busy")
    worker.start()
    try:
        assert inside.wait(30)  # busy's call is open, with its plan at level I
        np.testing.assert_array_equal(plain(A, A), mixpert.matmul(A, A, level="V"))
        got: list[np.ndarray] = []  # a fresh thread that opened nothing, too
        assert run_threads(1, lambda: got.append(plain(A, A))) == []
        np.testing.assert_array_equal(got[0], mixpert.matmul(A, A, level="V"))
        with mixpert.record() as calls:  # recorded here, not into the other call
            plain(A, A)
        assert [(c.op_id, c.level) for c in calls] == [("inner:0", "V")]
    finally:
        release.set()
        worker.join()


def blocks(a, b, out):
    for i in numba.prange(a.shape[0]):
        out[i] = a[i] @ b
    return out


def test_prange_workers_run_their_calls_plan_while_other_threads_run_others() -> None:
    """Numba's workers open no scope: each product takes the open call whose function runs its
    op, never another thread's call that happens to be newer (nor a plain Numba caller's)."""
    _, plain, busy = callers()
    parallel = mixpert.jit(blocks, parallel=True)
    parallel.plan = dict.fromkeys(parallel.ops, "V")
    stack = RNG.standard_normal((8, 16, 16)).astype(np.float32)
    want_v = np.stack([mixpert.matmul(x, A, level="V") for x in stack])
    want = {1: mixpert.matmul(A, A, level="I"), 2: mixpert.matmul(A, A, level="V")}
    counter = iter(range(4))
    lock = threading.Lock()

    def call() -> None:
        with lock:
            mine = next(counter)
        for _ in range(10):
            if mine:  # one thread's calls of the prange function at a time: see state's doc
                assert np.array_equal([busy, plain][mine % 2](A, A), want[1 + mine % 2])
            else:
                with mixpert.record() as calls:
                    got = parallel(stack, A, np.zeros_like(stack))
                assert np.array_equal(got, want_v)
                assert len(calls) == 8 and {c.level for c in calls} == {"V"}

    assert run_threads(4, call) == []


def test_each_thread_runs_its_own_calls_plan() -> None:
    jitted, plain, _ = callers()
    levels = ["I", "II", "IV", "V"]
    variants = {lv: jitted.with_plan(dict.fromkeys(jitted.ops, lv)) for lv in levels}
    want = {lv: mixpert.matmul(A, A, level=lv) for lv in levels}
    order = iter(levels * 2)
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def call() -> None:
        with lock:
            level = next(order)
        for _ in range(5):
            barrier.wait()
            assert np.array_equal(variants[level](A, A), want[level]), level

    assert run_threads(8, call) == []


def test_a_tol_function_runs_each_calls_plan_in_every_thread(monkeypatch) -> None:
    """Two kinds of input, two plans, eight threads alternating them: each call runs the plan
    its own arguments chose (the function's last resolved plan is no shared slot)."""
    f = mixpert.jit(inner, tol=1e-3, on_missing="raise")
    stack = RNG.standard_normal((2, 16, 16)).astype(np.float32)
    kinds = {"2-D": ((A, A), "I"), "stack": ((stack, A), "V")}
    for args, level in kinds.values():
        plan = mixpert.tune(f, args, tol=1e-3)
        plan.levels = dict.fromkeys(plan.levels, level)
        f.plan_book.plans.append(plan)
    want = {kind: mixpert.matmul(*args, level=level) for kind, (args, level) in kinds.items()}
    keep = mixpert_jit.keep_standing

    def keep_slowly(plan: Any) -> None:  # let other threads run while a call picks its plan
        keep(plan)
        time.sleep(0.001)

    monkeypatch.setattr(mixpert_jit, "keep_standing", keep_slowly)
    counter = iter(range(8))
    lock = threading.Lock()

    def call() -> None:
        with lock:
            kind = ["2-D", "stack"][next(counter) % 2]
        args = kinds[kind][0]
        for _ in range(20):
            assert np.array_equal(f(*args), want[kind]), kind

    assert run_threads(8, call) == []


# --- errors under any caller keep their cause -------------------------------------------------
def test_a_runtime_error_under_plain_numba_keeps_its_cause() -> None:
    _, plain, _ = callers()
    wrong = RNG.standard_normal((7, 5)).astype(np.float32)
    with pytest.raises(MixpertRuntimeError, match=r"ValueError: a.shape\[1\] = 16") as raised:
        plain(A, wrong)
    assert isinstance(raised.value.__cause__, ValueError)
    assert "(16, 16)" in str(raised.value) and "(7, 5)" in str(raised.value)
    with pytest.raises(ValueError, match=r"a.shape\[1\] = 16"):  # the wrapper: the original
        mixpert.jit(inner, plan={"inner:0": "V"})(A, wrong)


def test_errors_in_eight_threads_each_name_their_own_shapes() -> None:
    _, plain, _ = callers()
    messages: dict[int, str] = {}
    counter = iter(range(8))
    lock = threading.Lock()

    def fail() -> None:
        with lock:
            rows = 3 + next(counter)
        b = np.ones((rows, 4), np.float32)
        for _ in range(5):
            try:
                plain(A, b)
            except MixpertRuntimeError as error:
                assert f"b is ({rows}, 4)" in str(error), str(error)
                assert isinstance(error.__cause__, ValueError)
                messages[rows] = str(error)

    assert run_threads(8, fail) == []
    assert sorted(messages) == list(range(3, 11))
