"""The first hour (issue 38, part 5): every CLI misuse is one line naming the option and the rule,
given before anything runs (exit 2, nothing on stdout); ``--shapes`` takes scalars and integers;
input files that are not what they should be say what to give; a product whose operands do not
fit is named with its line; float64 inputs are refused for what they are; direct
``mixpert.matmul`` calls are recorded; a failing subprocess in a test shows what it printed."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import mixpert
from mixpert.runtime import device

CONFTEST = Path(__file__).resolve().parents[1] / "conftest.py"  # tests/conftest.py


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-P", "-m", "mixpert.cli", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)


def refused(done: subprocess.CompletedProcess[str], *needles: str) -> str:
    """The one error line of a usage error (exit 2) given before any output."""
    shown = f"exit {done.returncode}\n--- stderr ---\n{done.stderr}\n--- stdout ---\n{done.stdout}"
    assert done.returncode == 2, shown
    assert done.stdout == "", shown  # refused before anything ran or printed
    assert "Traceback" not in done.stderr, shown
    (line,) = [x for x in done.stderr.splitlines() if x.startswith("Error:")]
    for needle in needles:
        assert needle in line, shown
    return line


FN = "import numpy as np\n\ndef f(a, b):\n    return a @ b\n"
SCALED = textwrap.dedent(
    """
    import numpy as np

    def scaled(a, b, s, n):
        c = a @ b
        for _ in range(n):
            c = (c @ b.T) * s
        return c
    """
)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "fn.py").write_text(FN)
    (tmp_path / "scaled.py").write_text(SCALED)
    rng = np.random.default_rng(0)
    a, b = rng.random((16, 8)), rng.random((8, 4))
    np.savez(tmp_path / "f32.npz", a.astype(np.float32), b.astype(np.float32))
    np.savez(tmp_path / "f64.npz", a, b)
    np.savez(tmp_path / "mismatch.npz", a.astype(np.float32), b[:5].astype(np.float32))
    np.save(tmp_path / "one.npy", a.astype(np.float32))
    return tmp_path


# --- options are checked while parsing ---------------------------------------------------------
@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (["levels", "--n", "-5"], ["'--n'", "-5", "x>=1"]),
        pytest.param(["levels", "--n", "0"], ["'--n'", "x>=1"], marks=pytest.mark.slow),
        (["levels", "--phi", "-1"], ["'--phi'", "x>=0"]),
        (["run", "gemm", "--size", "0"], ["'--size'", "x>=1"]),
        (["run", "gemm", "--size", "-3", "--json"], ["'--size'", "x>=1"]),
        (["run", "gemm", "--tune-size", "0"], ["'--tune-size'", "x>=1"]),
        (["run", "gemm", "--tol", "0"], ["'--tol'", "positive finite"]),
        pytest.param(
            ["run", "gemm", "--tol", "-1e-3"],
            ["'--tol'", "positive finite"],
            marks=pytest.mark.slow,
        ),
        (["run", "gemm", "--tol", "nan"], ["'--tol'", "positive finite"]),
        (["demo", "--size", "0"], ["'--size'", "x>=1"]),
        (["bench", "--breakdown-n", "0"], ["'--breakdown-n'", "x>=1"]),
        (["tune", "fn.py:f", "--tol", "0", "--inputs", "f32.npz"], ["'--tol'", "positive"]),
        (["inspect", "fn.py:f", "--print-ir-after", "bogus"], ["'--print-ir-after'", "'bogus'"]),
        (["inspect", "fn.py:f", "--shapes", "8x4,zz:3"], ["--shapes", "'zz:3'", "TYPE:VALUE"]),
        (["inspect", "fn.py:f", "--shapes", "8x4,i:1.5"], ["--shapes", "'i:1.5'", "type i"]),
        (["inspect", "fn.py:f", "--shapes", "8x4,4x3:f8"], ["--shapes", "'4x3:f8'"]),
        (["inspect", "fn.py:f", "--shapes", "8xq"], ["--shapes", "'8xq'"]),
    ],
)
def test_bad_options_are_refused_before_anything_runs(folder, args, needles) -> None:
    refused(cli(*args, cwd=folder), *needles)


@pytest.mark.parametrize("command", [["run", "gemm"], ["levels"]])
def test_cuda_without_a_gpu_is_refused_before_anything_runs(folder, command) -> None:
    if device.gpu_available():
        pytest.skip("a GPU is usable here")
    done = cli(*command, "--backend", "cuda", cwd=folder)
    refused(done, "'--backend'", "cuda needs a usable CUDA GPU", device.unavailable_reason())


def test_print_ir_after_takes_pass_names_and_all(folder) -> None:
    done = cli("inspect", "fn.py:f", "--print-ir-after", "mixpert-rewrite-matmul", cwd=folder)
    assert done.returncode == 0, done.stderr
    assert "IR after mixpert-rewrite-matmul" in done.stdout
    done = cli("inspect", "fn.py:f", "--print-ir-after", "nopython_type_inference",
               "--shapes", "8x4,4x3", cwd=folder)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "IR after nopython_type_inference" in done.stdout
    assert "mixpert-rewrite-matmul" in cli("inspect", "--help", cwd=folder).stdout


# --- --shapes takes scalars and integers --------------------------------------------------------
@pytest.mark.slow  # (fresh processes: seconds each; CI runs it with -m slow)
def test_shapes_take_scalars_integers_and_dtypes(folder) -> None:
    for spec in ("16x8,8x8,f32:0.5,i:2", "16x8,8x8,f:0.5,i:2"):
        done = cli("inspect", "scaled.py:scaled", "--shapes", spec, "--json", cwd=folder)
        assert done.returncode == 0, done.stderr
        result = json.loads(done.stdout)
        assert result["signature"].startswith(
            "(Array(float32, 2, 'C', False, aligned=True), Array(float32, 2, 'C', False, "
            "aligned=True), float32, int64)"
        )  # a Python float beside float32 arrays is typed float32, as a call types it
        shapes = {op["op_id"]: op["shapes"] for op in result["ops"]}
        assert shapes == {"scaled:0": [[16, 8, 8]], "scaled:1": [[16, 8, 8]] * 2}
    done = cli("inspect", "fn.py:f", "--shapes", "8x4:f64,4x3:f64", "--json", cwd=folder)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)["ops"]
    assert "float64" in row["native"]  # Numba's own product for float64 operands, and why
    done = cli("inspect", "fn.py:f", "--shapes", "8x4:i64,4x3:i32", "--json", cwd=folder)
    assert done.returncode == 0, done.stderr
    help_text = " ".join(cli("inspect", "--help", cwd=folder).stdout.split())
    assert "TYPE:VALUE (f32:1.5, f:0.5, i:3, b:true: a scalar)" in help_text


# --- input files --------------------------------------------------------------------------------
def test_a_python_file_as_inputs_says_what_to_give(folder) -> None:
    done = cli("tune", "fn.py:f", "--tol", "1e-4", "--inputs", "fn.py", cwd=folder)
    line = refused(done, "--inputs", "fn.py", "fn.py:NAME", ".npz")
    assert "pickle" not in line
    done = cli("tune", "fn.py:f", "--tol", "1e-4", "--inputs", "one.npy", cwd=folder)
    refused(done, "--inputs", "one.npy", "np.savez")
    done = cli("tune", "fn.py:f", "--tol", "1e-4", "--inputs", "f32.npz", "--inputs", "fn.py",
               cwd=folder)  # fmt: skip
    refused(done, "fn.py:NAME")  # every file is checked before tuning starts


@pytest.mark.slow  # (fresh processes: seconds each; CI runs it with -m slow)
def test_a_shape_mismatch_names_the_product_and_its_line(folder) -> None:
    done = cli("tune", "fn.py:f", "--tol", "1e-4", "--inputs", "mismatch.npz", cwd=folder)
    line = refused(done, "mismatch.npz", "product f:0 at fn.py:4", "`return a @ b`")
    assert "size 5 is different from 8" in line  # NumPy's own words stay
    done = cli("inspect", "fn.py:f", "--shapes", "8x4,5x3", cwd=folder)
    refused(done, "product f:0 at fn.py:4", "a.shape[1] = 4 must equal b.shape[0] = 5")


@pytest.mark.slow  # (fresh processes: seconds each; CI runs it with -m slow)
def test_float64_inputs_are_refused_for_what_they_are(folder) -> None:
    done = cli("tune", "fn.py:f", "--tol", "1e-4", "--inputs", "f64.npz", cwd=folder)
    line = refused(done, "--inputs f64.npz", "not float32", "`a` float64", "`b` float64",
                   ".astype(np.float32)")  # fmt: skip
    assert "scalar_rules" not in line and "Python float" not in line
    (folder / "mlp.py").write_text(
        "import numpy as np\n\ndef mlp(x, w1, w2):\n"
        "    h = np.maximum(x @ w1, 0.0)\n    return h @ w2\n"
    )
    rng = np.random.default_rng(1)
    np.savez(folder / "mlp64.npz", x=rng.random((8, 8)), w1=rng.random((8, 8)),
             w2=rng.random((8, 4)))  # fmt: skip
    done = cli("tune", "mlp.py:mlp", "--tol", "1e-4", "--inputs", "mlp64.npz", cwd=folder)
    line = refused(done, "`x` float64, `w1` float64, `w2` float64", ".astype(np.float32)")
    assert "0.0" not in line and "scalar_rules" not in line
    tuned = cli("tune", "fn.py:f", "--tol", "1e-4", "--inputs", "f32.npz", "--json", cwd=folder)
    assert tuned.returncode == 0, tuned.stderr  # float32 inputs tune as before
    (folder / "add.py").write_text("def add(a, b):\n    return a + b.sum()\n")
    done = cli("tune", "add.py:add", "--tol", "1e-4", "--inputs", "f32.npz", cwd=folder)
    refused(done, "--inputs f32.npz", "no matrix product")


# --- mixpert.record() sees direct calls ---------------------------------------------------------
def test_direct_matmul_calls_are_recorded() -> None:
    rng = np.random.default_rng(2)
    a = rng.standard_normal((12, 9)).astype(np.float32)
    b = rng.standard_normal((9, 7)).astype(np.float32)
    stack = rng.standard_normal((3, 12, 9)).astype(np.float32)
    with mixpert.record() as calls:
        plain = mixpert.matmul(a, b, level="IV")
        mixpert.matmul(a, b)  # "auto": native float32 on the CPU
        mixpert.matmul(stack, b, level="V")
        mixpert.matmul(a, b[:, 0], level="IV")  # a vector: native
    assert [(c.op_id, c.shape, c.level, c.backend) for c in calls] == [
        ("mixpert.matmul", (12, 9, 7), "IV", "cpu"),
        ("mixpert.matmul", (12, 9, 7), "fp32", "cpu"),
        ("mixpert.matmul", (36, 9, 7), "V", "cpu"),
        ("mixpert.matmul", (12, 9, 1), "fp32", "cpu"),
    ]
    assert all(c.seconds > 0 for c in calls)
    assert np.array_equal(plain, mixpert.matmul(a, b, level="IV"))  # recording changes no bit
    with mixpert.record() as calls, pytest.raises(ValueError, match="must equal"):
        mixpert.matmul(a, a, level="IV")
    assert calls == []  # a failed call is no record


def test_direct_calls_and_jitted_calls_share_one_recording() -> None:
    a = np.ones((8, 8), np.float32)
    f = mixpert.jit(lambda x, y: x @ y)
    f.plan = dict.fromkeys(f.ops, "V")
    with mixpert.record() as calls:
        f(mixpert.matmul(a, a, level="III"), a)
    assert [c.level for c in calls] == ["III", "V"]
    assert calls[1].op_id.endswith(":0") and calls[0].op_id == "mixpert.matmul"


# --- a failing subprocess shows what it printed -------------------------------------------------
def test_a_failing_checked_subprocess_shows_its_stderr(tmp_path) -> None:
    """tests/conftest.py adds a failed ``check=True`` subprocess's stderr to the report."""
    (tmp_path / "conftest.py").write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('mixpert_tests_conftest', "
        f"{str(CONFTEST)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "pytest_runtest_makereport = module.pytest_runtest_makereport\n"
    )
    (tmp_path / "test_inner.py").write_text(
        "import subprocess, sys\n\n"
        "def test_fails():\n"
        "    code = 'import sys; sys.stderr.write(\"the real cause\\\\n\"); sys.exit(3)'\n"
        "    subprocess.run([sys.executable, '-c', code], capture_output=True, text=True,\n"
        "                   check=True)\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_inner.py"],
        cwd=tmp_path, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stdout + done.stderr
    assert "failed subprocess stderr" in done.stdout and "the real cause" in done.stdout, (
        done.stdout + done.stderr
    )
