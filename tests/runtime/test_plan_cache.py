"""The execution-plan cache's bounds and thread safety, and ``MatmulPlan`` on the CPU (the GPU's
graphs: tests/runtime/test_captured_products.py)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import numpy as np
import pytest

import mixpert
from mixpert.runtime import plan_cache
from mixpert.runtime.plan_cache import PlanCache


@dataclass
class FakePlan:
    nbytes: int
    released: list[int] = field(default_factory=list)

    def release(self) -> None:
        self.released.append(1)


def test_least_recently_used_plans_go_first_by_entries_and_bytes() -> None:
    cache = PlanCache(max_entries=3, max_bytes=100)
    plans = {key: FakePlan(30) for key in "abcd"}
    for key in "abc":
        assert cache.get(key, lambda key=key: plans[key]) is plans[key]
    cache.get("a", lambda: pytest.fail("a is cached"))  # a is now the most recent
    cache.get("d", lambda: plans["d"])  # 4 entries > 3: b, the least recent, goes
    assert plans["b"].released == [1] and not plans["a"].released
    assert len(cache) == 3 and cache.bytes == 90
    big = FakePlan(50)
    cache.get("e", lambda: big)  # 140 bytes > 100: c, then a go
    assert plans["c"].released and plans["a"].released and cache.bytes == 80
    cache.clear()
    assert len(cache) == 0 and cache.bytes == 0 and big.released and plans["d"].released


def test_a_plan_larger_than_the_cache_runs_uncached_and_is_asked_once() -> None:
    cache = PlanCache(max_entries=4, max_bytes=10)
    huge, made = FakePlan(11), []
    for _ in range(3):
        assert cache.get("k", lambda: made.append(1) or huge) is None
    assert made == [1] and huge.released == [1]


def test_a_key_that_cannot_be_planned_is_tried_once() -> None:
    cache = PlanCache(max_entries=4, max_bytes=10)
    tries: list[int] = []
    for _ in range(3):
        assert cache.get("k", lambda: tries.append(1)) is None
    assert tries == [1]


def test_the_switch_turns_the_cache_off_at_each_lookup(monkeypatch) -> None:
    cache = PlanCache(max_entries=4, max_bytes=100)
    monkeypatch.setenv(plan_cache.SWITCH, "0")
    assert cache.get("k", lambda: pytest.fail("planned while off")) is None
    monkeypatch.setenv(plan_cache.SWITCH, "8,1")
    assert plan_cache.limits() == (8, 1 << 20)
    monkeypatch.setenv(plan_cache.SWITCH, "lots")
    with pytest.raises(ValueError, match="MIXPERT_PLAN_CACHE='lots'"):
        plan_cache.limits()


def test_the_switch_is_read_as_os_environ_holds_it_now(monkeypatch) -> None:
    monkeypatch.delenv(plan_cache.SWITCH, raising=False)
    assert plan_cache.enabled()
    monkeypatch.setenv(plan_cache.SWITCH, "0")
    assert not plan_cache.enabled()
    monkeypatch.setenv(plan_cache.SWITCH, "8,1")
    assert plan_cache.enabled()
    monkeypatch.setenv(plan_cache.SWITCH, "0")
    monkeypatch.delenv(plan_cache.SWITCH)
    assert plan_cache.enabled()


def test_the_switch_follows_an_environment_mapping_put_in_os_environs_place(monkeypatch) -> None:
    monkeypatch.setattr(plan_cache.os, "environ", {plan_cache.SWITCH: "0"})
    assert not plan_cache.enabled()
    monkeypatch.setattr(plan_cache.os, "environ", {})
    assert plan_cache.enabled()


def test_find_gives_a_kept_plan_and_marks_it_used(monkeypatch) -> None:
    monkeypatch.delenv(plan_cache.SWITCH, raising=False)
    cache = PlanCache(max_entries=2, max_bytes=100)
    assert cache.find("a") is plan_cache.MISSING
    first, second = FakePlan(1), FakePlan(1)
    cache.get("a", lambda: first)
    assert cache.has_room()
    cache.get("b", lambda: second)
    assert not cache.has_room()
    assert cache.find("a") is first  # (now the most recently used: "b" goes first)
    cache.get("c", lambda: FakePlan(1))
    assert second.released == [1] and first.released == []
    assert cache.get("never", lambda: None) is None
    assert cache.find("never") is None  # (kept as one that cannot be made)
    monkeypatch.setenv(plan_cache.SWITCH, "0")
    assert cache.find("a") is None


def test_threads_asking_one_key_at_once_share_one_plan() -> None:
    cache = PlanCache(max_entries=4, max_bytes=1000)
    start = threading.Barrier(8)
    made: list[FakePlan] = []
    got: list[object] = []

    def make() -> FakePlan:
        plan = FakePlan(1)
        made.append(plan)
        return plan

    def ask() -> None:
        start.wait()
        got.append(cache.get("k", make))

    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(g) for g in got}) == 1  # one plan for all
    kept = got[0]
    assert all(p.released == [1] for p in made if p is not kept)  # the others given back
    assert len(cache) == 1 and cache.bytes == 1


def test_matmul_plan_on_the_cpu_gives_matmul_bits_and_checks_shapes() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((40, 30)).astype(np.float32)
    b = rng.standard_normal((30, 20)).astype(np.float32)
    with mixpert.MatmulPlan(a, b, level="IV", backend="cpu") as product:
        assert not product.captured and product.level.name == "IV"
        for seed in range(2):
            x = np.random.default_rng(seed).standard_normal(a.shape).astype(np.float32)
            assert np.array_equal(product(x, b), mixpert.matmul(x, b, level="IV", backend="cpu"))
        with pytest.raises(ValueError, match=r"operand a has shape \(41, 30\)"):
            product.execute(np.ones((41, 30), np.float32), b)
    assert "level IV" in repr(product)
    with pytest.raises(ValueError, match="was released"):  # (as a closed file)
        product(a, b)
    with pytest.raises(ValueError, match="operand b has shape"):
        mixpert.MatmulPlan(a, b[0], level="IV")
    with pytest.raises(ValueError, match=r"must equal b.shape\[0\]"):
        mixpert.MatmulPlan(a, a, level="IV")
    with pytest.raises(ValueError, match="level"):
        mixpert.MatmulPlan(a, b, level="VII")
    mixpert.clear_cache()  # without a GPU: nothing to release, and no error
