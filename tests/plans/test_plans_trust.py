"""Plans a user can trust and see: portable ids, nothing silently ignored, validated files,
visible levels, threads, checked arguments (issue "Plans and runs a user can trust and see")."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
from tuner_functions import mlp, mlp_inputs

import mixpert
from mixpert.plans import PlanFileError, read_plans
from mixpert.plans import files as plan_file
from mixpert.plans.plan import PlanCoverageWarning, PlanMismatchError

ARGS = mlp_inputs(np.random.default_rng(0), n=32)

MODULE = """\
import numpy as np
import mixpert

{prefix}
@mixpert.jit(tol=1e-5, plan_file={plan!r}, on_missing={on_missing!r})
def mlp(x, w1, w2):
    h = np.maximum(x @ w1, np.float32(0))
    return {last}


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((24, 16), (16, 12), (12, 8))]
    print(mlp(*args).shape, sorted(mlp.plans[0].levels.items()))
"""


def write_module(folder: Path, on_missing: str, prefix: str = "", last: str = "h @ w2") -> Path:
    path = folder / "model.py"
    plan = str(folder / "model.plan.json")
    path.write_text(MODULE.format(prefix=prefix, plan=plan, on_missing=on_missing, last=last))
    return path


def run(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, check=False
    )


# ---- 1. portable op ids ----------------------------------------------------------------------


def test_a_plan_tuned_imported_applies_run_as_a_script_and_after_edits_elsewhere(tmp_path):
    write_module(tmp_path, "tune")
    tuned = run(["-c", "import runpy; runpy.run_module('model', run_name='__main__')"], tmp_path)
    assert tuned.returncode == 0, tuned.stderr
    saved = read_plans(tmp_path / "model.plan.json")
    assert [p.function for p in saved] == ["mlp"] and sorted(saved[0].levels) == ["mlp:0", "mlp:1"]
    assert all(not op.location.startswith("/") for op in saved[0].ops)  # stored relative
    # the same file as a script, with lines added above the function: the plan still applies
    write_module(tmp_path, "raise", prefix="# a comment\n\nSCALE = 2\n")
    again = run(["model.py"], tmp_path)
    assert again.returncode == 0, again.stderr
    assert again.stdout == tuned.stdout


def test_an_edited_product_makes_the_plan_stale_naming_it(tmp_path):
    write_module(tmp_path, "tune")
    done = run(["model.py"], tmp_path)
    assert done.returncode == 0, done.stderr
    write_module(tmp_path, "raise", last="w2.T @ h.T")
    edited = run(["model.py"], tmp_path)
    assert edited.returncode != 0
    assert "StalePlanError" in edited.stderr and "edited: mlp:1" in edited.stderr


def test_op_ids_name_function_and_ordinal() -> None:
    f = mixpert.jit(mlp)
    assert sorted(f.ops) == ["mlp:0", "mlp:1", "mlp:2"]
    assert all(len(op.source_hash) == 12 for op in f.ops.values())


# ---- 2. never silently ignored ---------------------------------------------------------------


def test_a_plan_naming_ops_the_function_lacks_raises_naming_them() -> None:
    f = mixpert.jit(mlp, plan={"mlp:0": "I", "mlp:1": "IV", "mlp:2": "V", "mlp:7": "I"})
    with pytest.raises(PlanMismatchError, match="mlp:7"):
        f(*ARGS)


def test_a_plan_missing_ops_warns_naming_them() -> None:
    f = mixpert.jit(mlp, plan={"mlp:0": "I"})
    with pytest.warns(PlanCoverageWarning, match="mlp:1, mlp:2"):
        f(*ARGS)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f(*ARGS)  # once per plan, not on every call


def test_plans_for_other_inputs_live_side_by_side(tmp_path) -> None:
    path = tmp_path / "p.json"
    f = mixpert.jit(mlp, tol=1e-5, plan_file=path)
    f(*ARGS)
    wide = tuple(a.astype(np.float64) for a in ARGS)
    f(*wide)
    kinds = sorted(p.signature[0].split("[")[0] for p in read_plans(path))
    assert kinds == ["float32", "float64"]
    g = mixpert.jit(mlp, tol=1e-5, plan_file=path, on_missing="raise")
    g(*ARGS), g(*wide)  # both found, nothing tuned
    assert len(g.plans) == 2


def test_inspect_plan_uses_the_plan_file_lookup(tmp_path, monkeypatch) -> None:
    from click.testing import CliRunner

    from mixpert.cli import main

    (tmp_path / "fn.py").write_text("def f(a, b):\n    return a @ b\n")
    monkeypatch.chdir(tmp_path)
    np.savez(tmp_path / "in.npz", ARGS[0], ARGS[1])
    tuned = CliRunner().invoke(
        main, ["tune", "fn.py:f", "--tol", "1e-3", "--inputs", "in.npz", "--out", "p.json"]
    )
    assert tuned.exit_code == 0, tuned.output
    level = read_plans(tmp_path / "p.json")[0].levels["f:0"]
    shown = CliRunner().invoke(
        main, ["inspect", "fn.py:f", "--plan", "p.json", "--shapes", "32x32,32x32"]
    )
    assert shown.exit_code == 0, shown.output
    row = next(line for line in shown.output.splitlines() if "f:0" in line)
    assert f" {level} " in row  # the plan's level, and what ran: the same level on the CPU
    assert f"{level} on" in row


# ---- 3. plan files validated -----------------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs FIFOs")
def test_a_fifo_or_device_is_refused_without_reading(tmp_path) -> None:
    fifo = tmp_path / "plan.fifo"
    os.mkfifo(fifo)
    with pytest.raises(PlanFileError, match="regular file"):
        read_plans(fifo)  # would block forever if opened
    if Path("/dev/zero").exists():
        with pytest.raises(PlanFileError, match="regular file"):
            read_plans("/dev/zero")


def test_an_oversized_file_is_refused(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(plan_file, "MAX_BYTES", 64)
    (tmp_path / "big.json").write_text(json.dumps({"format": plan_file.FORMAT, "plans": []}) * 9)
    with pytest.raises(PlanFileError, match=r"big.json: \d+ bytes, more than the 64"):
        read_plans(tmp_path / "big.json")


@pytest.fixture(scope="module")
def tuned_mlp():
    """One plan for the cases below, each of which spoils a field of its own copy."""
    return mixpert.tune(mixpert.jit(mlp), ARGS, tol=1e-5)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"tol": "1e-5"}, "field 'tol' must be a positive finite number"),
        ({"tol": -1.0}, "field 'tol' must be a positive finite number"),
        ({"levels": {"mlp:0": "VII"}}, "field 'levels' must be an object op id -> known"),
        ({"signature": "float32"}, "field 'signature' must be a list of strings"),
        ({"profiling_runs": 1.5}, "field 'profiling_runs' must be an integer >= 0"),
        ({"shell": "rm -rf /"}, "unknown field 'shell'"),
        ({"ops": [{"op_id": 1}]}, r"ops\[0\]: field 'location' is missing"),
    ],
)
def test_every_field_is_checked_and_named(tmp_path, tuned_mlp, change, message) -> None:
    data = {"format": plan_file.FORMAT, "plans": [tuned_mlp.to_json() | change]}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PlanFileError, match=rf"bad.json, plans\[0\].*{message}"):
        read_plans(path)


@pytest.mark.parametrize("text", ["", "not json", "[1, 2]", '{"format": "mixpert-plans/2"}'])
def test_broken_files_raise_plan_file_errors(tmp_path, text) -> None:
    (tmp_path / "x.json").write_text(text)
    with pytest.raises(PlanFileError, match="x.json"):
        read_plans(tmp_path / "x.json")


def test_writes_are_atomic_and_a_missing_folder_is_refused_before_tuning(tmp_path) -> None:
    path = tmp_path / "p.json"
    mixpert.jit(mlp, tol=1e-5, plan_file=path)(*ARGS)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.json"]  # no temporary left
    with pytest.raises(PlanFileError, match="does not exist"):
        mixpert.jit(mlp, tol=1e-5, plan_file=tmp_path / "nowhere" / "p.json")


# ---- 4. what ran is visible ------------------------------------------------------------------


def test_inspect_shows_the_tuned_levels_of_a_tol_function() -> None:
    f = mixpert.jit(mlp, tol=1e-3)
    report = mixpert.inspect(f, *ARGS)
    plan = f.plans[0]
    assert {row.op_id: row.level for row in report.ops} == plan.levels
    assert all(row.ran for row in report.ops)


def test_record_shows_op_shape_backend_and_the_level_that_ran() -> None:
    f = mixpert.jit(mlp, plan={"mlp:0": "I", "mlp:1": "auto", "mlp:2": "V"})
    with mixpert.record() as calls:
        f(*ARGS)
    assert [(c.op_id, c.shape, c.level, c.backend) for c in calls] == [
        ("mlp:0", (32, 32, 32), "I", "cpu"),
        ("mlp:1", (32, 32, 32), "fp32", "cpu"),  # "auto" on the CPU is native float32
        ("mlp:2", (32, 32, 32), "V", "cpu"),
    ]


def test_tuning_is_logged(caplog) -> None:
    f = mixpert.jit(mlp, tol=1e-4)
    with caplog.at_level(logging.INFO, logger="mixpert"):
        f(*ARGS)
    text = caplog.text
    assert "tuning mlp [mlp:0, mlp:1, mlp:2] for tol=0.0001" in text and "profiling runs" in text


# ---- 5. threads ------------------------------------------------------------------------------


def test_first_calls_from_many_threads_tune_once_and_agree() -> None:
    f = mixpert.jit(fresh_copy(mlp), tol=1e-4)  # nothing analysed or compiled yet
    outputs: list[np.ndarray | None] = [None] * 8
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def work(i: int) -> None:
        try:
            barrier.wait()
            if i % 2:
                assert len(f.ops) == 3  # racing the first calls' analysis
            outputs[i] = f(*ARGS)
        except BaseException as error:  # noqa: BLE001
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(f.plans) == 1
    alone = mixpert.jit(mlp, plan=f.plans[0])(*ARGS)
    assert all(np.array_equal(out, alone) for out in outputs)


def fresh_copy(func):  # a new function object with the same code: no shared analysis
    return types.FunctionType(func.__code__, func.__globals__, func.__name__)


# ---- 6 and 7. arguments checked where given --------------------------------------------------


@pytest.mark.parametrize("tol", [float("nan"), -1e-5, 0.0, float("inf"), "1e-5", True, [1]])
def test_bad_tol_is_refused_at_decoration_and_in_tune(tol) -> None:
    with pytest.raises((TypeError, ValueError), match="tol"):
        mixpert.jit(mlp, tol=tol)
    with pytest.raises((TypeError, ValueError), match="tol"):
        mixpert.tune(mlp, ARGS, tol=tol)


def test_numpy_scalar_tol_is_accepted_and_saved(tmp_path) -> None:
    path = tmp_path / "p.json"
    mixpert.jit(mlp, tol=np.float32(1e-4), plan_file=path)(*ARGS)
    assert json.loads(path.read_text())["plans"][0]["tol"] == pytest.approx(1e-4)


def test_on_missing_and_default_level_are_checked_at_decoration() -> None:
    with pytest.raises(ValueError, match="'tune', 'default' or 'raise'"):
        mixpert.jit(mlp, tol=1e-5, on_missing="sometimes")
    with pytest.raises(ValueError, match="level='fp33'"):
        mixpert.jit(mlp, tol=1e-5, default_level="fp33")


@pytest.mark.parametrize(
    ("slices", "pairs", "message"),
    [
        (9, ((0, 0),), "1 to 4 slices"),
        (2, (), "at least one slice pair"),
        (2, ((0, 0), (2, 0)), "outside 2 x 2"),
        (2, ((0, 0), (0, 0)), "repeat"),
        (3, ((0, 0), (0, 1), (1, 0), (0, 2), (2, 0)), "consecutive"),
        (2, ((0, 0), (1, 1)), "without a gap"),
    ],
)
def test_custom_levels_are_checked(slices, pairs, message) -> None:
    with pytest.raises(ValueError, match=message):
        mixpert.Level("custom", "int8", slices, slices, pairs)


def test_a_wrong_typed_level_is_named() -> None:
    with pytest.raises(ValueError, match="level=3.5 is a float"):
        mixpert.matmul(ARGS[0], ARGS[1], level=3.5)


def test_masked_arrays_are_refused_not_unmasked() -> None:
    masked = np.ma.masked_greater(ARGS[0], 1.0)
    with pytest.raises(TypeError, match="operand a is a masked array"):
        mixpert.matmul(masked, ARGS[1])
    with pytest.raises(TypeError, match="argument 0 is a masked array"):
        mixpert.jit(mlp, plan={})(masked, *ARGS[1:])


def test_a_stale_plan_file_keeps_raising(tmp_path) -> None:
    path = tmp_path / "p.json"
    mixpert.jit(mlp, tol=1e-5, plan_file=path)(*ARGS)
    data = json.loads(path.read_text())
    sources = data["plans"][0]["op_sources"]
    sources[next(iter(sources))] = "0" * 12
    path.write_text(json.dumps(data))
    f = mixpert.jit(mlp, tol=1e-5, plan_file=path)
    for _ in range(2):  # never silently re-tuned and overwritten
        with pytest.raises(mixpert.StalePlanError):
            f(*ARGS)
    assert json.loads(path.read_text()) == data


def test_keyword_arguments_bind_by_name() -> None:
    x, w1, w2, w3 = ARGS
    f = mixpert.jit(mlp, tol=1e-4)
    np.testing.assert_array_equal(f(x, w1, w3=w3, w2=w2), f(x, w1, w2, w3))


def test_functions_sharing_a_qualified_name_are_refused(tmp_path) -> None:
    import importlib.util

    from mixpert.passes.dataflow import DuplicateOpIdError

    modules = []
    for name in ("moda", "modb"):
        (tmp_path / f"{name}.py").write_text(
            "import numba\n\n@numba.njit\ndef step(a, b):\n    return a @ b\n"
        )
        spec = importlib.util.spec_from_file_location(f"_dup_{name}", tmp_path / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    first, second = (m.step for m in modules)

    def both(a, b):
        return first(a, b) + second(a, b)

    with pytest.raises(DuplicateOpIdError, match="step:0 names two products"):
        mixpert.jit(both).ops  # noqa: B018


def test_inspect_without_arguments_shows_the_one_tuned_plan() -> None:
    f = mixpert.jit(mlp, tol=1e-3)
    f(*ARGS)
    assert {row.op_id: row.level for row in mixpert.inspect(f).ops} == f.plans[0].levels
