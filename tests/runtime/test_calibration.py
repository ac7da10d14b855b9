""" "auto"'s crossovers measured on the GPU at hand (``runtime.calibration``): the thresholds
derived from fake timings, the file kept per GPU model, the calibration settled once per device
at the first product that needs it; on a GPU, the real calibration and "auto" against SGEMM."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

from mixpert.runtime import auto, calibration
from mixpert.runtime.calibration import NEVER, Calibration, Identity, Measurement, Row

H200 = Identity("NVIDIA H200", "90", 12080, 12080, "14.2.0", "0.1.0")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test its own cache folder, and calibration on (the suite turns it off)."""
    monkeypatch.setenv(calibration.CACHE_DIR, str(tmp_path / "cache"))
    monkeypatch.setenv(calibration.SWITCH, "1")
    return tmp_path / "cache"


def rows(form: str, times: dict[int, tuple[float, float | None, float | None]]) -> list[Row]:
    """Rows of one ladder: side -> (SGEMM, IV replayed, auto's IV route) in ms."""
    long = calibration.LONG
    m, k, n = {"square": (1, 1, 1), "long k": (1, long, 1), "tall": (long, 1, 1)}[form]
    return [Row(m * s, k * s, n * s, *t) for s, t in times.items()]


# One H200's figures (issue 46: SGEMM, IV replayed, IV as the direct call with its host check).
SQUARES = {
    1024: (0.057, 0.079, 0.654),
    1536: (0.150, 0.140, 0.660),
    2048: (0.342, 0.230, 0.681),
    3072: (1.282, 0.545, 0.697),
    4096: (2.679, 1.200, 1.081),
}
LARGE = {1024: (0.45, None, 0.70), 1536: (1.30, None, 0.95), 2048: (2.70, None, 1.40)}


def measurement(
    squares: dict = SQUARES, large: dict = LARGE, ratio: float = 28.0, replays: bool = False
) -> Measurement:
    found = rows("square", squares) + rows("long k", large) + rows("tall", large)
    return Measurement(ratio, 51.0, 51.0 * ratio, tuple(found), replays, 2.5)


def test_the_thresholds_are_where_level_iv_beats_sgemm_by_the_margin() -> None:
    found = calibration.derive(measurement())
    # the direct call (host check) wins from 3072 (1.84x, 2.48x); at 2048 it is 0.50x
    assert found["min_dim"] == 3072
    # replayed, level IV wins from 2048 (1.49x); 1536 is 1.07x, under the margin
    assert found["replayed_min_dim"] == 2048
    # the large ladder: 1.37x at 1536 on both forms, 0.64x at 1024
    assert found["large_min_dim"] == 1536
    assert found["large_min_work"] == calibration.LONG * 1536**3
    assert "stack_min_dim" not in found and "blocks_min_m" not in found  # kept as shipped


def test_where_the_route_replays_both_square_rules_follow_it() -> None:
    """Where "auto"'s own route replays one graph, its times set both square rules."""
    replayed = {s: (t[0], t[1], t[1]) for s, t in SQUARES.items()}
    found = calibration.derive(measurement(squares=replayed, replays=True))
    assert found["min_dim"] == found["replayed_min_dim"] == 2048


def test_the_direct_route_sets_the_rule_for_products_that_do_not_replay() -> None:
    """Measured apart (``direct_ms``), the route as a direct call sets ``min_dim`` and the
    replayed route ``replayed_min_dim``, so a file measured with plans on serves plans off."""
    both = tuple(Row(s, s, s, t[0], t[1], t[1], t[2]) for s, t in SQUARES.items()) + tuple(
        rows("long k", LARGE) + rows("tall", LARGE)
    )
    found = calibration.derive(dataclasses.replace(measurement(replays=True), rows=both))
    assert (found["min_dim"], found["replayed_min_dim"]) == (3072, 2048)
    saved = calibration.to_json(Calibration(H200, measurement(), {}, "2026-11-29T00:00:00Z"))
    saved["rows"] = [dataclasses.asdict(row) for row in both]
    saved["auto_replays"] = True
    assert calibration.from_json(saved).thresholds["min_dim"] == 3072  # (the rows kept)


def test_a_side_is_taken_only_if_every_longer_one_wins_too() -> None:
    """A win by less than the margin does not count, nor one below a longer side that loses;
    a level not measured (None) loses."""
    base = {s: (1.0, 1.0, 1.0) for s in calibration.LADDER}

    def min_dim(**auto_ms: float | None) -> int:
        squares = {s: (1.0, 1.0, auto_ms.get(f"s{s}", 1.0)) for s in base}
        return calibration.derive(measurement(squares=squares))["min_dim"]

    margin = calibration.MARGIN
    assert min_dim(s4096=0.999 / margin) == 4096  # just past the margin: taken
    assert min_dim(s4096=1.001 / margin) == NEVER  # just under it: never
    wins = {f"s{s}": 0.5 for s in calibration.LADDER}
    assert min_dim(**wins) == 1024
    assert min_dim(**{**wins, "s2048": 1.001 / margin}) == 3072  # 1536 wins, 2048 does not
    assert min_dim(**{**wins, "s4096": None}) == NEVER  # the longest not measured


def test_large_products_need_a_long_k_and_a_tall_a_to_win() -> None:
    tall_loses = rows("tall", {s: (t[0], None, 2 * t[0]) for s, t in LARGE.items()})
    found_rows = tuple(rows("square", SQUARES) + rows("long k", LARGE) + tall_loses)
    found = calibration.derive(dataclasses.replace(measurement(), rows=found_rows))
    assert found["large_min_dim"] == NEVER
    assert "large_min_work" not in found  # (irrelevant once the side is never reached)


def test_stacks_stay_native_where_level_iv_wins_on_no_ladder() -> None:
    loses = {s: (1.0, 2.0, 2.0) for s in calibration.LADDER}
    large = {s: (1.0, None, 2.0) for s in LARGE}
    found = calibration.derive(measurement(squares=loses, large=large))
    assert found["min_dim"] == found["replayed_min_dim"] == found["large_min_dim"] == NEVER
    assert found["stack_min_dim"] == NEVER
    assert "blocks_min_m" not in found  # IV-blocks' skinny rule was not measured: kept


def gpu(crossovers: auto.Crossovers, asked: list | None = None) -> Any:
    """A stand-in GPU that runs everything and gives ``crossovers`` (noting each ask)."""

    def given(shipped: auto.Crossovers, route: auto.Route) -> auto.Crossovers:
        assert shipped is auto.CROSSOVERS and route is auto.EMULATED_ON_GPU
        if asked is not None:
            asked.append(route)
        return crossovers

    return SimpleNamespace(
        blocks_supported=lambda: True, thin_fits=lambda k, n: True,
        workspace_bytes=lambda level, m, k, n, count=1: 0, free_bytes=lambda: 1 << 40,
        replays=lambda m, k, n: True, crossovers=given,
    )  # fmt: skip


@pytest.mark.parametrize("ratio", [3.99, 0.0])  # (0: no INT8 GEMM ran at all)
def test_a_gpu_without_fast_int8_never_emulates(ratio: float) -> None:
    """Under MIN_INT8_RATIO no INT8 rule holds, however the ladder went: no level IV for
    matrices (replayed or not) or stacks, no IV-blocks; fp32-ordered (float32) still runs."""
    found = calibration.derive(measurement(ratio=ratio))
    assert set(found) == set(calibration.INT8_RULES) and set(found.values()) == {NEVER}
    slow = gpu(calibration.apply(auto.CROSSOVERS, found))
    for shape in [(8192, 8192, 8192, 1, "matrix"), (4096, 4096, 4096, 1, "matrix"),
                  (2048, 65536, 2048, 1, "matrix"), (1024, 1024, 1024, 256, "stack"),
                  (65536, 4096, 32, 1, "matrix")]:  # fmt: skip
        assert auto.on_gpu(*shape, slow).level.kind not in ("int8", "blocks"), shape
        assert auto.on_gpu(*shape, gpu(auto.CROSSOVERS)).level.kind in ("int8", "blocks")
    assert auto.on_gpu(65536, 4096, 16, 1, "matrix", slow) is auto.ORDERED_ON_GPU  # tall kernel
    split_k = (32, auto.CROSSOVERS.split_min_k, 32, 1, "matrix")
    assert auto.on_gpu(*split_k, slow) is auto.ORDERED_ON_GPU
    at_ratio = calibration.derive(measurement(ratio=calibration.MIN_INT8_RATIO))
    assert at_ratio["min_dim"] == 3072  # from the ratio on, the ladder decides


def test_auto_follows_the_measured_crossovers_and_asks_only_where_they_matter() -> None:
    here = calibration.apply(auto.CROSSOVERS, {"min_dim": 2048, "replayed_min_dim": 1536})
    asked: list[auto.Route] = []
    measured = gpu(here, asked)
    assert auto.on_gpu(2048, 2048, 2048, 1, "matrix", measured) is auto.EMULATED_ON_GPU
    assert auto.on_gpu(2048, 2048, 2048, 1, "matrix", gpu(auto.CROSSOVERS)) is auto.EMULATED_ON_GPU
    assert auto.on_gpu(1536, 1536, 1536, 1, "matrix", measured) is auto.EMULATED_ON_GPU
    assert auto.on_gpu(1024, 1536, 1536, 1, "matrix", measured) is auto.NATIVE_ON_GPU
    assert len(asked) == 3
    asked.clear()  # small and skinny products never ask (so never wait for a calibration)
    for shape in [(512, 512, 512), (1023, 4096, 4096), (32, 262144, 32), (1 << 20, 16, 16)]:
        auto.on_gpu(*shape, 1, "matrix", measured)
    auto.on_gpu(64, 64, 64, 4096, "stack", measured)
    assert asked == []
    auto.on_gpu(65536, 4096, 16, 1, "matrix", measured)  # IV-blocks' shape: its rule may change
    assert len(asked) == 1


def test_no_calibrated_threshold_is_below_the_side_auto_asks_from() -> None:
    """What lets small products skip the question: every shipped threshold a calibration may
    set, and every side it can find, is at least CALIBRATED_FROM."""
    for name in calibration.CALIBRATED[:3] + ("stack_min_dim",):
        assert getattr(auto.CROSSOVERS, name) >= calibration.CALIBRATED_FROM
    sides = {min(shape) for shape in calibration.shapes()}
    assert min(sides) == calibration.CALIBRATED_FROM
    assert max(m * k * n for m, k, n in calibration.shapes()) <= 4096**3  # all replay
    assert calibration.MIN_INT8_RATIO >= 4


# --- the file ----------------------------------------------------------------------------------


def calibrated(identity: Identity = H200, **change: Any) -> Calibration:
    m = measurement(**change)
    return Calibration(identity, m, calibration.derive(m), "2026-11-29T00:00:00Z")


def test_a_calibration_round_trips_through_its_file(_own_cache: Path) -> None:
    m = dataclasses.replace(measurement(), seconds=2.718281828, int8_ratio=27.123456789)
    saved = calibration.save(Calibration(H200, m, calibration.derive(m), "2026-11-29T00:00:00Z"))
    assert saved.path == _own_cache / "calibration-NVIDIA-H200-sm90.json"
    assert os.listdir(_own_cache) == [saved.path.name]  # written whole: no temporary left
    loaded = calibration.load(H200)
    assert loaded == saved and loaded.path == saved.path
    data = json.loads(saved.path.read_text())
    assert data["format"] == calibration.FORMAT and data["identity"]["gpu"] == "NVIDIA H200"
    assert data["thresholds"]["min_dim"] == 3072 and data["margin"] == calibration.MARGIN
    never = calibration.save(calibrated(ratio=1.0))
    assert set(json.loads(never.path.read_text())["thresholds"].values()) == {None}
    assert calibration.load(H200).thresholds == dict.fromkeys(calibration.INT8_RULES, NEVER)


def test_the_thresholds_are_derived_again_from_the_saved_times(_own_cache: Path) -> None:
    saved = calibration.save(calibrated())
    data = json.loads(saved.path.read_text())
    data["thresholds"] = {"min_dim": 128}  # (informative only: never read back)
    saved.path.write_text(json.dumps(data))
    assert calibration.load(H200).thresholds["min_dim"] == 3072


@pytest.mark.parametrize(
    "text",
    ["{not json", "[]", '{"format": 99}', '{"format": 1, "identity": {}}', ""],
)
def test_a_corrupt_file_is_ignored_with_a_warning(_own_cache: Path, text: str) -> None:
    path = calibration.path_for(H200)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.warns(RuntimeWarning, match="not a calibration mixpert can read"):
        assert calibration.load(H200) is None


def test_negative_times_are_corrupt(_own_cache: Path) -> None:
    path = calibration.save(calibrated()).path
    data = json.loads(path.read_text())
    data["rows"][0]["sgemm_ms"] = -1.0
    path.write_text(json.dumps(data))
    with pytest.warns(RuntimeWarning, match="positive"):
        assert calibration.load(H200) is None


def test_another_models_file_is_not_this_ones_and_other_versions_are_measured_again() -> None:
    calibration.save(calibrated())
    h100 = dataclasses.replace(H200, gpu="NVIDIA H100 80GB HBM3")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # another model: simply none saved, no warning
        assert calibration.load(h100) is None
    newer = dataclasses.replace(H200, driver=13000, mixpert="0.2.0")
    with pytest.warns(RuntimeWarning, match=r"other versions \(driver 12080 -> 13000, mixpert"):
        assert calibration.load(newer) is None


def test_the_backend_digest_follows_its_code_and_nothing_else(tmp_path: Path) -> None:
    """A calibration holds for the backend's code: a kernel or module edited gives another
    digest (so the next run measures again); files that are not code do not count."""
    backend = tmp_path / "cuda"
    (backend / "kernels").mkdir(parents=True)
    (backend / "fused.py").write_text("ROUTED = {'IV'}\n")
    (backend / "kernels" / "fused.cu").write_text("// kernel\n")
    first = calibration.backend_digest.__wrapped__(backend)
    (backend / "notes.md").write_text("not code\n")
    assert calibration.backend_digest.__wrapped__(backend) == first
    (backend / "kernels" / "fused.cu").write_text("// kernel, faster\n")
    assert calibration.backend_digest.__wrapped__(backend) != first
    assert len(calibration.backend_digest()) == 12  # (the shipped backend's)


def test_the_cache_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(calibration.CACHE_DIR)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert calibration.cache_dir() == tmp_path / "xdg" / "mixpert"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/path")  # ignored, as XDG says
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert calibration.cache_dir() == tmp_path / "home" / ".cache" / "mixpert"
    monkeypatch.setenv(calibration.CACHE_DIR, str(tmp_path / "own"))
    assert calibration.cache_dir() == tmp_path / "own"


# --- settled per device, lazily ------------------------------------------------------------------


class Probe:
    """A stand-in GPU for ``Calibrations``: device -> model, counting what it is asked."""

    def __init__(self, fails: bool = False) -> None:
        self.models = {0: H200, 1: H200, 2: dataclasses.replace(H200, gpu="NVIDIA L4")}
        self.measured: list[Any] = []
        self.identified = 0
        self.capture = False
        self.fails = fails

    def identity(self, device: int) -> Identity:
        self.identified += 1
        return self.models[device]

    def capturing(self) -> bool:
        return self.capture

    def measure(self, route: Any) -> Measurement:
        if self.fails:
            raise RuntimeError("out of luck")
        self.measured.append(route)
        return measurement()


SHIPPED, ROUTE = auto.CROSSOVERS, auto.EMULATED_ON_GPU


def test_measured_once_per_model_then_read_from_the_file(caplog, _own_cache: Path) -> None:
    probe = Probe()
    settled = calibration.Calibrations(probe)
    with caplog.at_level(logging.INFO, logger="mixpert"):
        first = settled.crossovers(SHIPPED, ROUTE, 0)
    assert probe.measured == [ROUTE] and first.replayed_min_dim == 2048
    assert first == calibration.apply(SHIPPED, calibration.derive(measurement()))
    announced = [r.getMessage() for r in caplog.records if r.name == "mixpert"]
    assert len(announced) == 2 and "once per GPU model" in announced[0]
    assert str(_own_cache) in announced[0] and "calibrated in 2.5 s" in announced[1]
    assert settled.crossovers(SHIPPED, ROUTE, 0) is first  # settled: no file, no probe
    assert probe.identified == 1
    assert settled.crossovers(SHIPPED, ROUTE, 1) == first  # the same model: from its file
    assert len(probe.measured) == 1
    assert calibration.Calibrations(probe).crossovers(SHIPPED, ROUTE, 0) == first  # next process
    assert len(probe.measured) == 1
    settled.crossovers(SHIPPED, ROUTE, 2)  # another model: measured
    assert len(probe.measured) == 2 and len(os.listdir(_own_cache)) == 2


def test_off_or_capturing_gives_the_shipped_crossovers_and_measures_nothing(monkeypatch) -> None:
    probe = Probe()
    settled = calibration.Calibrations(probe)
    probe.capture = True  # inside a graph capture: shipped, this once
    assert settled.crossovers(SHIPPED, ROUTE, 0) is SHIPPED
    assert probe.measured == [] and probe.identified == 0
    probe.capture = False
    assert settled.crossovers(SHIPPED, ROUTE, 0) is not SHIPPED and len(probe.measured) == 1
    monkeypatch.setenv(calibration.SWITCH, "0")
    off = calibration.Calibrations(Probe())
    assert off.crossovers(SHIPPED, ROUTE, 0) is SHIPPED
    assert off._probe.identified == 0  # (nothing asked of the GPU at all)


def test_a_failed_calibration_warns_once_and_keeps_the_shipped_crossovers() -> None:
    probe = Probe(fails=True)
    settled = calibration.Calibrations(probe)
    with pytest.warns(RuntimeWarning, match="failed .RuntimeError: out of luck.: the shipped"):
        assert settled.crossovers(SHIPPED, ROUTE, 0) is SHIPPED
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # settled: not tried again each call
        assert settled.crossovers(SHIPPED, ROUTE, 0) is SHIPPED


def test_a_folder_that_cannot_be_written_keeps_the_calibration_for_the_process(
    monkeypatch, tmp_path: Path
) -> None:
    blocker = tmp_path / "a file"
    blocker.write_text("")
    monkeypatch.setenv(calibration.CACHE_DIR, str(blocker / "cache"))  # under a file: refused
    settled = calibration.Calibrations(Probe())
    with pytest.warns(RuntimeWarning, match="cannot save"):
        found = settled.crossovers(SHIPPED, ROUTE, 0)
    assert found.min_dim == 3072  # measured, used, not saved


def test_recalibrate_measures_again_and_auto_uses_it() -> None:
    probe = Probe()
    settled = calibration.Calibrations(probe)
    first = settled.crossovers(SHIPPED, ROUTE, 0)
    found = settled.recalibrate(SHIPPED, ROUTE, 0)
    assert len(probe.measured) == 2 and found.path is not None and found.path.is_file()
    assert settled.crossovers(SHIPPED, ROUTE, 0) == first
    assert settled.saved(0) == found
    assert settled.saved(2) is None


def test_describe_says_where_level_iv_starts() -> None:
    assert calibration.describe(calibration.derive(measurement())) == (
        "level IV from 3072 a side (2048 where it replays one graph, 1536 with a long k)"
    )
    assert calibration.describe(calibration.derive(measurement(ratio=2))).startswith("never")
    loses = {s: (1.0, 2.0, 2.0) for s in calibration.LADDER}
    never = calibration.derive(
        measurement(squares=loses, large={s: (1.0, None, 2.0) for s in LARGE})
    )
    assert calibration.describe(never).startswith("level IV on no square or large product")


# --- on a GPU ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Calibration]:
    """One real calibration of this GPU, in a cache folder of its own."""
    from mixpert.runtime.cuda import calibrate

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(calibration.CACHE_DIR, str(tmp_path_factory.mktemp("calibration")))
        patch.setenv(calibration.SWITCH, "1")
        calibrate.CALIBRATIONS.forget()
        yield calibrate.recalibrate(auto.CROSSOVERS, auto.EMULATED_ON_GPU)
    calibrate.CALIBRATIONS.forget()


@pytest.mark.gpu
def test_the_real_calibration_is_short_and_saved(real: Calibration) -> None:
    m = real.measurement
    # a few seconds once the kernels are built; a fresh machine builds them first (NVRTC,
    # Triton), which the first level IV product would pay anyway
    assert 0 < m.seconds < 120 and m.sgemm_tflops > 0
    if m.int8_ratio < calibration.MIN_INT8_RATIO:  # (a GPU without fast INT8: no ladder)
        assert m.rows == () and set(real.thresholds.values()) == {NEVER}
        return
    assert [(r.m, r.k, r.n) for r in m.rows] == calibration.shapes()
    assert all(r.sgemm_ms > 0 and r.auto_ms is not None and r.auto_ms > 0 for r in m.rows)
    assert real.thresholds == calibration.derive(m)
    assert real.path is not None and json.loads(real.path.read_text())["rows"]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(calibration.CACHE_DIR, str(real.path.parent))
        assert calibration.load(real.identity) == real


@pytest.mark.gpu
def test_the_calibration_times_the_graph_mixpert_replays() -> None:
    """Its level IV plan gives the bits of ``mixpert.matmul(a, b, level="IV")``."""
    import cupy

    import mixpert
    from mixpert.runtime.cuda import calibrate, captured

    a, b = calibrate._operands(1024, 1024, 1024, 0)
    plan = captured.CapturedProduct(1024, 1024, 1024, mixpert.LEVELS["IV"])
    try:
        mine, theirs = plan(a, b), mixpert.matmul(a, b, level="IV")
        assert bool(cupy.array_equal(mine.view(cupy.uint32), theirs.view(cupy.uint32)))
    finally:
        plan.release()


@pytest.mark.gpu
@pytest.mark.parametrize("n", [1024, 2048, 2560, 3072, 4096])
def test_auto_with_the_measured_crossovers_is_at_least_097x_sgemm(
    real: Calibration, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the calibration promises: wherever "auto" goes, at least 0.97x SGEMM (the best
    of three measurements: one burst can be slowed by the machine)."""
    import cupy

    import mixpert
    from mixpert.runtime import dispatch
    from mixpert.runtime.cuda import calibrate
    from mixpert.timing import gpu_median_seconds

    monkeypatch.setenv(calibration.SWITCH, "1")
    monkeypatch.setenv(calibration.CACHE_DIR, str(real.path.parent))
    calibrate.CALIBRATIONS.forget()  # settled again, from the file the fixture saved
    rng = np.random.default_rng(n)
    a, b = (cupy.asarray(rng.standard_normal((n, n)).astype(np.float32)) for _ in range(2))
    flops = 2.0 * n**3
    ratios = []
    for _ in range(3):
        sgemm = gpu_median_seconds(lambda: cupy.matmul(a, b), flops)
        chosen = gpu_median_seconds(lambda: mixpert.matmul(a, b), flops)
        ratios.append(sgemm / chosen)
        if ratios[-1] >= 0.97:
            break
    level = dispatch.resolve_level("auto", a, b, "cuda").name
    calibrate.CALIBRATIONS.forget()
    assert max(ratios) >= 0.97, f"n = {n}: auto ran {level} at {max(ratios):.2f}x SGEMM"
