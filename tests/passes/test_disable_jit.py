"""NUMBA_DISABLE_JIT=1: the Python function runs, its products at the plan's levels."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np

SCRIPT = textwrap.dedent(
    """
    import sys, numba, numpy as np, mixpert

    def f(a, b, c):
        h = np.maximum(a @ b, 0.0)
        return np.dot(h, c) + a.dot(b)[:, :1], np.matmul(a, b) @ c

    rng = np.random.default_rng(0)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in ((6, 5), (5, 4), (4, 3)))
    j = mixpert.jit(f)
    j.plan = dict(zip(sorted(j.ops), ["I", "II", "III", "IV", "V"]))
    with mixpert.record() as calls:
        out = j(a, b, c)
    np.savez(sys.argv[1], *out)
    print(numba.config.DISABLE_JIT, len(calls), sorted({c.level for c in calls}))
    """
)


def test_the_python_function_runs_with_the_plans_levels(tmp_path) -> None:
    script = tmp_path / "script.py"
    script.write_text(SCRIPT)
    results = {}
    for flag in ("0", "1"):
        env = {**os.environ, "NUMBA_DISABLE_JIT": flag}
        out = tmp_path / f"out{flag}.npz"
        done = subprocess.run([sys.executable, str(script), str(out)], env=env,
                              capture_output=True, text=True, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr
        results[flag] = (done.stdout.split(maxsplit=1), np.load(out))
    (jit_flag, jit_calls), jitted = results["0"]
    (python_flag, python_calls), python = results["1"]
    assert (jit_flag, python_flag) == ("0", "1")
    assert python_calls == jit_calls  # the same products, at the same levels
    for key in jitted.files:
        np.testing.assert_array_equal(python[key], jitted[key])
