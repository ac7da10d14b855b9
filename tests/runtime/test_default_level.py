"""The default level, the ecosystem's precision idiom: setter, context manager, environment."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import get_args

import numpy as np
import pytest

import mixpert
from mixpert.runtime.levels import LevelName

RNG = np.random.default_rng(4)
A = RNG.standard_normal((24, 40)).astype(np.float32)
B = RNG.standard_normal((40, 16)).astype(np.float32)


def test_names_are_case_insensitive_and_typed() -> None:
    assert mixpert.get_level("iv") is mixpert.get_level("IV") is mixpert.LEVELS["IV"]
    assert mixpert.get_level("FP16").name == "fp16" and mixpert.get_level("Auto").name == "auto"
    assert set(get_args(LevelName)) == {"auto", *mixpert.LEVELS}


def test_setter_and_context_manager() -> None:
    assert mixpert.get_default_level().name == "auto"
    iv, v = (mixpert.matmul(A, B, level=name) for name in ("IV", "V"))
    try:
        mixpert.set_default_level("iv")
        assert mixpert.get_default_level().name == "IV"
        assert np.array_equal(mixpert.matmul(A, B), iv)
        with mixpert.default_level("V"):
            assert np.array_equal(mixpert.matmul(A, B), v)
            seen = []
            other = threading.Thread(target=lambda: seen.append(mixpert.get_default_level()))
            other.start()
            other.join()
            assert seen[0].name == "IV"  # the block is this thread's; the process default holds
        assert np.array_equal(mixpert.matmul(A, B), iv)
        with pytest.raises(ValueError, match="not a known level"):
            mixpert.set_default_level("VII")
    finally:
        mixpert.set_default_level("auto")


def test_ops_a_plan_leaves_out_follow_the_default() -> None:
    def two(a, b, c):
        return a @ b, (a @ b) @ c

    f = mixpert.jit(two)
    with mixpert.default_level("T6"), mixpert.record() as calls:
        f(A, B, B.T.copy())
    assert {c.level for c in calls} == {"T6"}


def test_environment_variable() -> None:
    code = "import mixpert; print(mixpert.get_default_level().name)"
    env = {**os.environ, "MIXPERT_DEFAULT_LEVEL": "v"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.stdout.strip() == "V", done.stderr
    env["MIXPERT_DEFAULT_LEVEL"] = "fast"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert done.returncode != 0 and "$MIXPERT_DEFAULT_LEVEL: level='fast'" in done.stderr
