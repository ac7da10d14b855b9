"""Plan files get the permissions the user's umask gives any new file (0644 under umask 022), so
a plan tuned offline can be shared; they are still written atomically (a temporary file beside
the plan file, renamed over it, none left behind)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from mixpert.plans.plan import plan_from_json, read_plans


def plan_for(function: str):
    return plan_from_json({
        "levels": {f"{function}:0": "IV"}, "function": function, "op_hash": "0" * 16,
        "signature": ["float32[8x8]"], "device": "cpu", "tol": 1e-5, "error": 1e-7,
        "predicted_speedup": 1.0,
    })  # fmt: skip


@pytest.fixture
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


@pytest.mark.parametrize(
    ("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)], indirect=["umask"]
)
def test_a_plan_file_has_the_umasks_mode(tmp_path: Path, umask: int, mode: int) -> None:
    path = tmp_path / "model.plan.json"
    plan_for("f").save(path)
    assert stat.S_IMODE(path.stat().st_mode) == mode
    plan_for("g").save(path)  # replaced by a new file: the same mode again
    assert stat.S_IMODE(path.stat().st_mode) == mode
    assert [p.function for p in read_plans(path)] == ["f", "g"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.plan.json"]  # no temporaries


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "model.plan.json"
    plan_for("f").save(path)
    before = path.read_text()

    def refused(source: str | Path, target: str | Path) -> None:
        assert Path(source).parent == tmp_path and Path(source).read_text() != before
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(os, "replace", refused)  # the rename fails after the data is written
    with pytest.raises(OSError, match="Read-only"):
        plan_for("g").save(path)
    assert path.read_text() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.plan.json"]
