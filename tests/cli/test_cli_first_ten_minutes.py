"""The first ten minutes: a wheel that works, a CLI that runs exactly the named file, one-line
errors with meaningful exit codes, output for pipes and scripts."""

from __future__ import annotations

import json
import site
import subprocess
import sys
import venv
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[2]  # the repository


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``mixpert ARGS`` in ``cwd`` as its console script runs it: -P keeps the working
    directory off ``sys.path``, so any import of a file there would be mixpert's doing."""
    command = [sys.executable, "-P", "-m", "mixpert.cli", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=False)


def ran(command: list[Any], **options: Any) -> subprocess.CompletedProcess[str]:
    """``command`` run to success; a failure's assertion shows what it printed."""
    done = subprocess.run(command, capture_output=True, text=True, check=False, **options)
    assert done.returncode == 0, (
        f"{' '.join(map(str, command))} exited {done.returncode}\n"
        f"--- stderr ---\n{done.stderr}\n--- stdout ---\n{done.stdout}"
    )
    return done


def venv_of_this_environment(env_dir: Path) -> Path:
    """A fresh virtual environment (its python returned) that sees the packages of the
    interpreter running the tests, whether that is itself a virtual environment or a system
    install, but not the checkout. ``venv`` builds from the base interpreter, so
    ``system_site_packages`` alone would show the base's packages: in a fresh virtual
    environment those lack llvmlite, Numba and the rest (issue 38). A .pth file lists this
    interpreter's site folders, after the new environment's own: the wheel's mixpert comes
    first, and the folders' .pth files (an editable install's link to the checkout) are not
    run."""
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    code = "import sysconfig; print(sysconfig.get_path('purelib'))"
    purelib = Path(ran([python, "-c", code]).stdout.strip())
    folders = [*site.getsitepackages(), site.getusersitepackages()]
    ours = [f for f in dict.fromkeys(folders) if f in sys.path and Path(f).is_dir()]
    (purelib / "_test_environment.pth").write_text("".join(f"{f}\n" for f in ours))
    return python


TARGET = "import numpy as np\n\ndef f(a, b):\n    return a @ b\n"
TRAP = "open({marker!r}, 'a').write('ran\\n')\n"


def test_runs_exactly_the_named_file_once(tmp_path) -> None:
    for name in ("cupy", "json", "model", "data"):
        (tmp_path / f"{name}.py").write_text(TRAP.format(marker=str(tmp_path / f"{name}.ran")))
    (tmp_path / "model.v2.py").write_text(TRAP.format(marker=str(tmp_path / "v2.ran")) + TARGET)
    (tmp_path / "data.txt").write_text("not python")
    done = cli("inspect", "model.v2.py:f", "--shapes", "8x4,4x3", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.glob("*.ran")) == ["v2.ran"]
    assert (tmp_path / "v2.ran").read_text() == "ran\n"  # its top level ran once
    refused = cli("inspect", "data.txt:f", cwd=tmp_path)
    assert refused.returncode == 2 and "not a Python file" in refused.stderr
    assert "Traceback" not in refused.stderr and not (tmp_path / "data.ran").exists()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        pytest.param(  # test_first_hour.py names more of it
            ["inspect", "fn.py:f", "--shapes", "8xq"], "--shapes", marks=pytest.mark.slow
        ),
        pytest.param(  # test_first_hour.py: test_a_shape_mismatch_names_the_product_and_its_line
            ["inspect", "fn.py:f", "--shapes", "8x4,5x3"],
            "a.shape[1] = 4 must equal",
            marks=pytest.mark.slow,
        ),
        (["inspect", "fn.py:f", "--plan", "garbage.json"], "not JSON"),
        (["inspect", "fn.py:g"], "has no 'g'"),
        (["tune", "fn.py:f", "--tol", "1e-4", "--inputs", "in.npz", "--levels", "IV,VII"], "VII"),
        pytest.param(  # test_first_hour.py: --tol 0
            ["tune", "fn.py:f", "--tol", "-1", "--inputs", "in.npz"],
            "positive",
            marks=pytest.mark.slow,
        ),
        (["tune", "fn.py:f", "--tol", "1e-4", "--inputs", "garbage.json"], "--inputs"),
        (
            ["tune", "fn.py:f", "--tol", "1e-4", "--inputs", "in.npz", "--out", "no/p.json"],
            "folder",
        ),
        (["run", "nosuchsample"], "does not exist"),
        (["levels", "--n", "8", "--backend", "cuda"], "CUDA"),
    ],
)
def test_user_errors_are_one_line_with_exit_2(tmp_path, args, needle) -> None:
    (tmp_path / "fn.py").write_text(TARGET)
    (tmp_path / "garbage.json").write_text("{oops")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "in.npz", rng.random((8, 4), np.float32), rng.random((4, 3), np.float32))
    done = cli(*args, cwd=tmp_path)
    if needle == "CUDA" and done.returncode == 0:
        pytest.skip("a GPU is present")
    assert done.returncode == 2, done.stdout + done.stderr
    assert needle in done.stderr and "Traceback" not in done.stderr


@pytest.mark.slow  # (fresh processes: seconds each; CI runs it with -m slow)
def test_exit_codes_version_help_json_and_named_inputs(tmp_path) -> None:
    (tmp_path / "fn.py").write_text(TARGET)
    rng = np.random.default_rng(1)
    a, b = rng.random((16, 8), np.float32), rng.random((8, 4), np.float32)
    np.savez(tmp_path / "named.npz", b=b, a=a)  # bound by parameter name, not file order
    tuned = cli("tune", "fn.py:f", "--tol", "1e-3", "--inputs", "named.npz", "--json", cwd=tmp_path)
    assert tuned.returncode == 0, tuned.stderr
    plan = json.loads(tuned.stdout)
    assert plan["signature"] == ["float32[16x8]", "float32[8x4]"] and plan["met_tol"]
    tight = cli("tune", "fn.py:f", "--tol", "1e-30", "--inputs", "named.npz", cwd=tmp_path)
    assert tight.returncode == 1  # the tol is out of reach: the plan is the most accurate one
    inspected = json.loads(cli("inspect", "fn.py:f", "--shapes", "8x4,4x3", "--json",
                               cwd=tmp_path).stdout)  # fmt: skip
    assert inspected["ops"][0]["op_id"] == "f:0" and inspected["ops"][0]["shapes"] == [[8, 4, 3]]
    rows = json.loads(cli("levels", "--n", "32", "--json", cwd=tmp_path).stdout)
    assert {row["level"] for row in rows} >= {"IV", "V", "fp16"}
    assert cli("--version", cwd=tmp_path).stdout.startswith("mixpert, version")
    assert "Usage" in cli("-h", cwd=tmp_path).stdout


def test_output_for_pipes_keeps_ids_whole(tmp_path) -> None:
    (tmp_path / "deep.py").write_text(
        "class Model:\n    class Layer:\n        @staticmethod\n"
        "        def forward_with_a_long_name(a, b):\n            return a @ b\n"
    )
    done = cli("inspect", "deep.py:Model", cwd=tmp_path)  # a class is not a function
    assert done.returncode != 0
    code = (
        "import numpy as np\n\n"
        "def a_rather_long_function_name_for_a_layer(a, b):\n    return (a @ b) @ b.T\n"
    )
    (tmp_path / "long.py").write_text(code)
    done = cli("inspect", "long.py:a_rather_long_function_name_for_a_layer", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "a_rather_long_function_name_for_a_layer:1" in done.stdout  # whole, on one line
    assert "\r" not in done.stdout and "…" not in done.stdout


def test_run_takes_a_user_file(tmp_path) -> None:
    sample = (ROOT / "samples" / "gemm.py").read_text()
    (tmp_path / "my_gemm.py").write_text(sample)
    done = cli("run", "my_gemm.py", "--size", "32", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["sample"] == "my_gemm" and result["ok"]


@pytest.mark.slow
def test_a_wheel_runs_the_demo_and_the_samples(tmp_path) -> None:
    wheels = tmp_path / "wheels"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q",
         "-w", str(wheels), str(ROOT)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if built.returncode != 0:
        pytest.skip(f"cannot build a wheel here: {built.stderr[-2000:]}")
    env_dir = tmp_path / "venv"
    python = venv_of_this_environment(env_dir)  # dependencies from the running environment
    wheel = next(wheels.glob("mixpert-*.whl"))
    ran([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)])
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = ran([python, "-P", "-c", "import mixpert; print(mixpert.__file__)"], cwd=work)
    assert str(env_dir) in where.stdout  # the wheel's copy, not the checkout
    for args in (["run", "gemm", "--size", "32", "--json"], ["demo", "--size", "16"]):
        ran([python, "-P", "-m", "mixpert.cli", *args], cwd=work)


def test_the_library_imports_without_the_cli_and_plot_libraries() -> None:
    code = (
        "import sys, mixpert; "
        "print(sorted(m for m in ('click', 'rich', 'matplotlib') if m in sys.modules))"
    )
    assert ran([sys.executable, "-c", code]).stdout.strip() == "[]"
