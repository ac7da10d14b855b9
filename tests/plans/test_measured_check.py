"""The tuner's measured check (``search._auto_where_faster``, on a GPU), its logic on the CPU
with the timings given: an op measured slower than "auto" goes to "auto", and a whole call
measured slower than every op at "auto" becomes that, where the acceptance rule allows; slower
within the margin timing noise reaches changes nothing."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import mixpert
from mixpert.tuning import search
from mixpert.tuning.acceptance import Rule
from mixpert.tuning.profiling import Profiler


def two_products(a, b):
    return (a @ b) @ b


@pytest.fixture
def checked(monkeypatch: pytest.MonkeyPatch):
    """(prof, rule, walked levels, their trial) with the check switched on for NumPy arrays."""
    monkeypatch.setattr(search, "device", SimpleNamespace(is_cupy_array=lambda x: True))
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((24, 24)).astype(np.float32) for _ in range(2))
    f = mixpert.jit(two_products)
    prof = Profiler(f, (a, b))
    walked = dict.fromkeys(f.ops, "T6")
    return prof, Rule(prof, tol=1e-3, margin=1.0), walked, prof.trial(walked)


def _timings(monkeypatch, prof, ops_tuned, ops_auto, call_tuned, call_auto) -> list[str]:
    asked: list[str] = []

    def op_seconds(levels):
        asked.append("op")
        tuned = set(levels.values()) != {"auto"}
        return dict(zip(sorted(levels), ops_tuned if tuned else ops_auto, strict=True))

    def call_seconds(levels):
        asked.append("call")
        return call_tuned if set(levels.values()) != {"auto"} else call_auto

    monkeypatch.setattr(prof, "op_seconds", op_seconds)
    monkeypatch.setattr(prof, "call_seconds", call_seconds)
    return asked


def test_ops_measured_slower_go_to_auto(checked, monkeypatch) -> None:
    prof, rule, walked, trial = checked
    _timings(monkeypatch, prof, (1.0, 3.0), (2.0, 2.0), call_tuned=4.0, call_auto=4.5)
    levels, _ = search._auto_where_faster(prof, rule, walked, trial)
    first, second = sorted(walked)
    assert levels == {first: "T6", second: "auto"}


def test_a_whole_call_slower_than_all_auto_becomes_all_auto(checked, monkeypatch) -> None:
    """Each op measured faster at its level, the whole call slower: every op at "auto"."""
    prof, rule, walked, trial = checked
    asked = _timings(monkeypatch, prof, (1.0, 1.0), (2.0, 2.0), call_tuned=5.0, call_auto=4.0)
    levels, _ = search._auto_where_faster(prof, rule, walked, trial)
    assert levels == dict.fromkeys(walked, "auto")
    assert asked == ["op", "op", "call", "call"]


def test_a_whole_call_faster_keeps_its_plan(checked, monkeypatch) -> None:
    prof, rule, walked, trial = checked
    _timings(monkeypatch, prof, (1.0, 1.0), (2.0, 2.0), call_tuned=3.0, call_auto=4.0)
    assert search._auto_where_faster(prof, rule, walked, trial)[0] == walked


def test_slower_within_the_margin_keeps_the_plan(checked, monkeypatch) -> None:
    """Ops and the whole call a few percent slower than at "auto" (timing noise between two
    close levels): the tuned plan stands; just past the margin, it does not."""
    prof, rule, walked, trial = checked
    within = (1.0 + search.MEASURED_MARGIN) / 2  # slower, by less than the margin
    _timings(monkeypatch, prof, (within, within), (1.0, 1.0), call_tuned=within, call_auto=1.0)
    assert search._auto_where_faster(prof, rule, walked, trial)[0] == walked
    past = search.MEASURED_MARGIN * 1.05
    _timings(monkeypatch, prof, (past, past), (1.0, 1.0), call_tuned=past, call_auto=1.0)
    assert search._auto_where_faster(prof, rule, walked, trial)[0] == dict.fromkeys(walked, "auto")


def test_call_seconds_times_whole_calls_after_a_warm_up(checked) -> None:
    prof, _, walked, _ = checked
    runs = prof.runs
    seconds = prof.call_seconds(walked)
    assert 0 < seconds < 60 and prof.runs == runs + 3
