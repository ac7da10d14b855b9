"""mixpert.bench.sample_products: products timed one by one inside a call (native, and at the
plan's levels), and the bounds on a sample's speedup they give."""

from __future__ import annotations

import numba
import numpy as np
import pytest

import mixpert
from mixpert.bench.sample_products import (
    OpSeconds,
    bounds,
    floor_seconds,
    mixpert_op_seconds,
    native_op_seconds,
)
from mixpert.execution.hook import run_site
from mixpert.passes import stubs

STEPS = 3


@mixpert.jit
def chain(a, b, steps):
    c = a
    for _ in range(steps):
        c = c @ b
    return c + np.dot(a, b)


def operands() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((24, 24)).astype(np.float32)
    return a, (rng.standard_normal((24, 24)) / 24).astype(np.float32)


def test_native_products_are_timed_per_op_with_the_plans_op_ids() -> None:
    a, b = operands()
    per_op, wall = native_op_seconds(chain, (a, b, STEPS), np)
    assert set(per_op) == set(chain.ops)  # the compiler's op ids, as plans name them
    assert per_op["chain:0"].calls == STEPS and per_op["chain:1"].calls == 1
    assert all(t.seconds > 0 for t in per_op.values())
    assert sum(t.seconds for t in per_op.values()) < wall


def test_products_at_the_plans_levels_are_timed_as_the_function_runs() -> None:
    a, b = operands()
    tuned = chain.with_plan({"chain:0": "IV", "chain:1": "fp32"})
    per_op, _ = mixpert_op_seconds(tuned, (a, b, STEPS), np)
    assert {op: t.calls for op, t in per_op.items()} == {"chain:0": STEPS, "chain:1": 1}
    assert stubs.run_site is run_site and not numba.config.DISABLE_JIT  # put back


def test_a_function_whose_source_cannot_be_rewritten_is_refused_by_name() -> None:
    scale = np.float32(2)

    def closure(a, b):
        return (a @ b) * scale

    with pytest.raises(ValueError, match="closure.*closes over variables"):
        native_op_seconds(mixpert.jit(closure), operands(), np)


def test_floors_follow_the_level() -> None:
    native, ran = OpSeconds(2, 0.5), OpSeconds(2, 0.3)
    assert floor_seconds("IV", native, ran, 20.0) == pytest.approx(0.5 * 8 / 20)
    assert floor_seconds("T6", native, ran, 20.0) == pytest.approx(0.5 * 6 / 20)
    assert floor_seconds("auto", native, ran, 20.0) == pytest.approx(0.5 * 8 / 20)
    assert floor_seconds("auto", native, ran, 4.0) == 0.5  # INT8 no faster: native
    assert floor_seconds("fp32", native, ran, 20.0) == 0.3  # a native level: as it ran
    assert floor_seconds("tf32", native, None, 20.0) == 0.5


def test_bounds_are_amdahls_with_products_free_and_at_the_boards_rate() -> None:
    native = {"f:0": OpSeconds(1, 0.6), "f:1": OpSeconds(2, 0.2)}
    ran = {"f:0": OpSeconds(1, 0.1), "f:1": OpSeconds(2, 0.2)}
    b = bounds(1.0, native, ran, {"f:0": "IV", "f:1": "fp32"}, 20.0)
    assert b.rest_seconds == pytest.approx(0.2) and b.product_share == pytest.approx(0.8)
    assert b.product_speedup == pytest.approx(0.8 / 0.3)
    assert b.free_bound == pytest.approx(1.0 / 0.2)
    assert b.board_bound == pytest.approx(1.0 / (0.2 + 0.6 * 8 / 20 + 0.2))
    assert bounds(1.0, native, ran, {}, None).board_bound is None  # no INT8 rate (a CPU)


def test_a_sample_all_products_has_no_free_bound_but_a_board_bound() -> None:
    native = {"g:0": OpSeconds(1, 1.02)}  # the marks may cover a little more than the call
    b = bounds(1.0, native, {"g:0": OpSeconds(1, 0.35)}, {"g:0": "IV"}, 25.0)
    assert b.free_bound is None
    assert b.board_bound == pytest.approx(1.0 / (1.02 * 8 / 25))
