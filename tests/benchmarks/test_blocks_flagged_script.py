"""benchmarks/blocks_flagged_rows.py: its inputs hold exactly the unresolved rows it labels."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from mixpert.runtime import LEVELS, dispatch

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def script():
    """The script's module, loaded past its GPU check (only its helpers run here)."""
    from mixpert.runtime import device

    saved = device.exit_without_gpu
    device.exit_without_gpu = lambda what: None
    try:
        spec = importlib.util.spec_from_file_location(
            "blocks_flagged_rows", BENCHMARKS / "blocks_flagged_rows.py"
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # (its dataclass looks its module up)
        spec.loader.exec_module(module)
    finally:
        device.exit_without_gpu = saved
    yield module
    sys.modules.pop("blocks_flagged_rows", None)


@pytest.mark.parametrize("wide", [0, 2, 5, -1])
def test_inputs_hold_the_labelled_unresolved_rows(script, wide: int) -> None:
    """IV-blocks's CPU rule finds exactly the rows the table names (all of them for -1), and
    no column of B."""
    m, k, n = 300, 700, 24
    a, b = script.inputs(np, m, k, n, wide, seed=1)
    rows, cols = dispatch.unresolved_lines(a, b, LEVELS["IV-blocks"])
    assert (rows, cols) == (m if wide < 0 else wide, 0)
    assert np.isfinite(a).all() and np.isfinite(b).all()
