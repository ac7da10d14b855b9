""" "auto"'s crossovers measured on the GPU model at hand, not taken from one H100.

A short calibration (``cuda.calibrate`` measures; a few seconds) times cuBLAS SGEMM against
level IV on a ladder of square products and of large ones (a long k, a tall A), and an INT8
GEMM against SGEMM.
This module holds what needs no GPU: the thresholds derived from those times (``derive``), the
file they are kept in per GPU model (``load``, ``save``: JSON in the user's cache folder), and
``Calibrations``, which gives "auto" its crossovers per device: read from that file, measured at
the first decision that needs them, or the shipped ones where calibration is off
(``MIXPERT_CALIBRATE=0``), fails, or would run inside a CUDA graph capture.

Only the thresholds of square and large products are measured (``CALIBRATED``); the rules of
skinny shapes, stacks and the fallback after packing keep the shipped figures, except that on
a GPU whose INT8 rate is not ``MIN_INT8_RATIO`` times its float32 rate no rule emulates.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import os
import tempfile
import threading
import time
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar

SWITCH: Final = "MIXPERT_CALIBRATE"  # "0": the shipped crossovers, never measured
CACHE_DIR: Final = "MIXPERT_CACHE_DIR"  # overrides $XDG_CACHE_HOME/mixpert
FORMAT: Final = 2  # the file's layout and the ladders: a file of another format is redone

# Square sides measured, and the sides of the ladder of large products ("auto"'s
# large_min_dim with large_min_work multiply-adds): side x LONG side x side (a long k) and
# LONG side x side x side (a tall A, whose output, LONG times larger, costs level IV more).
# Every product here has at most 4096^3 multiply-adds, as many as the backend replays.
LADDER: Final = (1024, 1536, 2048, 3072, 4096)
LONG: Final = 8
LONG_LADDER: Final = (1024, 1536, 2048)
# No calibrated threshold is below this side: "auto" asks for the calibration only for
# products with every side this long (or IV-blocks' shapes), so others never wait for it.
CALIBRATED_FROM: Final = min(LADDER + LONG_LADDER)
FORMS: Final = ("square", "long k", "tall")
# The INT8 GEMM timed against SGEMM for the two rates (both near their peak at this size).
RATE_SIDE: Final = 4096
# Level IV is taken from a ladder side only where it runs at least MARGIN times as fast as
# SGEMM there and at every longer side. Two promises bound it: "auto" at least 0.97x SGEMM
# (ratios of calls under a millisecond move between runs, and sides between two rungs run a
# few percent slower than the rungs: a margin above 1), and at least 0.9x of the fastest
# level where one beats SGEMM (where "auto" keeps SGEMM, IV may be up to MARGIN times faster:
# 1 / MARGIN >= 0.9).
MARGIN: Final = 1.10
# The cheapest INT8 level (I) runs 4 INT8 GEMMs where SGEMM runs one, level IV 8: below 4x the
# INT8 products alone take longer than SGEMM, so no INT8 level can win, whatever the ladder
# says (some GPUs, and newer ones that cut INT8, are there). Such a GPU never emulates.
MIN_INT8_RATIO: Final = 4.0
NEVER: Final = 1 << 62  # a threshold no product reaches ("auto" never takes the rule)
# The thresholds calibration sets; the last two only ever to NEVER (level IV won nowhere, or
# the GPU has no fast INT8).
CALIBRATED: Final = ("min_dim", "replayed_min_dim", "large_min_dim", "large_min_work")
INT8_RULES: Final = (*CALIBRATED, "stack_min_dim", "blocks_min_m")

_log = logging.getLogger("mixpert")
C = TypeVar("C")  # auto's Crossovers (this module does not import auto: auto imports it)


BACKEND: Final = Path(__file__).resolve().parent / "cuda"  # the code a calibration measures


@functools.cache
def backend_digest(folder: Path = BACKEND) -> str:
    """A short digest of the CUDA backend's code (its modules and kernel sources): part of the
    software a calibration holds for, so one measured with other kernels or routes is measured
    again, whatever the version number says."""
    digest = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.suffix in (".py", ".cu", ".cuh")):
        digest.update(path.relative_to(folder).as_posix().encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


@dataclass(frozen=True)
class Identity:
    """What a calibration holds for: the GPU model and the software that ran it. A file of the
    same model saved under other versions is measured again."""

    gpu: str  # "NVIDIA H200"
    compute_capability: str  # "90"
    driver: int  # cudaDriverGetVersion
    cuda_runtime: int  # cudaRuntimeGetVersion
    cupy: str
    mixpert: str  # its version, "+" the backend's code digest (``backend_digest``)

    def file_name(self) -> str:
        """``calibration-NVIDIA-H200-sm90.json``: one file per model (name and capability)."""
        name = "".join(c if c.isalnum() else "-" for c in self.gpu).strip("-") or "gpu"
        return f"calibration-{name}-sm{self.compute_capability}.json"


@dataclass(frozen=True)
class Row:
    """One product of a ladder: ms per call of SGEMM, of level IV replayed as one graph (what
    ``mixpert.matmul(a, b, level="IV")`` runs; None: not measured), of "auto"'s level IV route
    as this GPU runs it with the plan cache on (its fallback after packing included; None: it
    failed), and of that route as a direct call, where that differs (no graph: the plan cache
    off; None: not measured apart, the same as ``auto_ms``)."""

    m: int
    k: int
    n: int
    sgemm_ms: float
    iv_ms: float | None
    auto_ms: float | None
    direct_ms: float | None = None

    @property
    def uncached_ms(self) -> float | None:
        """ "auto"'s level IV route where no graph replays it."""
        return self.auto_ms if self.direct_ms is None else self.direct_ms

    @property
    def form(self) -> str:
        """Its ladder: "square", "long k", "tall" (``shapes``) or "other"."""
        m, k, n = self.m, self.k, self.n
        if m == k == n:
            return "square"
        if k == LONG * m == LONG * n:
            return "long k"
        return "tall" if m == LONG * k == LONG * n else "other"


def shapes() -> list[tuple[int, int, int]]:
    """The products a calibration times (m, k, n): the square ladder, then the large ones."""
    large = [shape for s in LONG_LADDER for shape in ((s, LONG * s, s), (LONG * s, s, s))]
    return [(s, s, s) for s in LADDER] + large


@dataclass(frozen=True)
class Measurement:
    """What one calibration measured."""

    int8_ratio: float  # INT8 GEMM rate over SGEMM's at RATE_SIDE^3 (0: no INT8 GEMM here)
    sgemm_tflops: float
    int8_tops: float
    rows: tuple[Row, ...]  # empty where int8_ratio is below MIN_INT8_RATIO (not measured)
    auto_replays: bool  # whether "auto"'s level IV route replays one graph on this GPU (plans on)
    seconds: float = 0.0  # how long the measuring took


@dataclass(frozen=True)
class Calibration:
    """A measurement, where and when it was taken, and the thresholds derived from it."""

    identity: Identity
    measurement: Measurement
    thresholds: Mapping[str, int]  # auto.Crossovers field -> value (NEVER: never)
    measured_at: str  # ISO 8601, UTC
    path: Path | None = field(default=None, compare=False)  # where it is saved, if it is


# --- the thresholds --------------------------------------------------------------------------


def crossover(rows: Iterable[Row], time_of: Callable[[Row], float | None]) -> int:
    """The shortest side s of ``rows`` (one ladder) such that at s and every longer side the
    level (``time_of``) runs at least MARGIN times as fast as SGEMM; NEVER where it does not
    at the longest. A level not measured (None) loses."""
    found = NEVER
    for row in sorted(rows, key=lambda r: min(r.m, r.k, r.n), reverse=True):
        level = time_of(row)
        if level is None or not row.sgemm_ms >= MARGIN * level:
            break
        found = min(row.m, row.k, row.n)
    return found


def derive(measurement: Measurement) -> dict[str, int]:
    """The thresholds of ``auto.Crossovers`` this measurement sets (the others stay shipped):

    - ``min_dim``: "auto"'s level IV route against SGEMM on the square ladder, as a direct call
      (what runs where no graph replays: the plan cache off, or products past its sizes);
    - ``replayed_min_dim`` (the rule for products that replay one graph): the route replayed
      where it can be (the GPU decides the fallback on the device); else from level IV
      replayed, what the route will run once it can replay;
    - ``large_min_dim`` with ``large_min_work``: the route on the large ladder, from the side
      where it wins with a long k and with a tall A alike; the work of those products there;
    - every INT8 rule NEVER where the INT8 rate is under MIN_INT8_RATIO times float32's, and
      level IV for stacks too where it wins on neither ladder.
    """
    if not measurement.int8_ratio >= MIN_INT8_RATIO:
        return dict.fromkeys(INT8_RULES, NEVER)
    ladder = {form: [r for r in measurement.rows if r.form == form] for form in FORMS}
    min_dim = crossover(ladder["square"], lambda r: r.uncached_ms)
    replayed_time = (lambda r: r.auto_ms) if measurement.auto_replays else (lambda r: r.iv_ms)
    replayed = crossover(ladder["square"], replayed_time)
    large = max(crossover(ladder[form], lambda r: r.auto_ms) for form in ("long k", "tall"))
    found = {"min_dim": min_dim, "replayed_min_dim": replayed, "large_min_dim": large}
    if large != NEVER:
        found["large_min_work"] = LONG * large**3
    if min_dim == large == NEVER:  # (stacks of large pairs were never measured to win here)
        found["stack_min_dim"] = NEVER
    return found


def apply(shipped: C, thresholds: Mapping[str, int]) -> C:
    """``shipped`` (auto's Crossovers) with ``thresholds`` in place of its own."""
    return dataclasses.replace(shipped, **thresholds)  # type: ignore[type-var]


def describe(thresholds: Mapping[str, int]) -> str:
    """One line: where "auto" takes level IV, e.g. "level IV from 3072 a side (2048 where it
    replays one graph, 2048 with a long k)"."""
    if all(thresholds.get(name) == NEVER for name in INT8_RULES):
        return "never emulates (INT8 is not fast enough here)"
    sides = [
        thresholds.get(name, NEVER) for name in ("min_dim", "replayed_min_dim", "large_min_dim")
    ]
    if min(sides) == NEVER:
        return "level IV on no square or large product (it never won by the margin here)"
    side, replayed, large = (shown(s) for s in sides)
    where = f"{replayed} where it replays one graph, {large} with a long k"
    return f"level IV from {side} a side ({where})"


def shown(value: int) -> str:
    return "never" if value >= NEVER else str(value)


# --- the file --------------------------------------------------------------------------------


def cache_dir() -> Path:
    """$MIXPERT_CACHE_DIR, else $XDG_CACHE_HOME/mixpert, else ~/.cache/mixpert (the XDG
    default; a relative XDG_CACHE_HOME is ignored, as the specification says)."""
    own = os.environ.get(CACHE_DIR)
    if own:
        return Path(own).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache"
    return base / "mixpert"


def path_for(identity: Identity) -> Path:
    return cache_dir() / identity.file_name()


def to_json(calibration: Calibration) -> dict[str, Any]:
    m = calibration.measurement
    return {
        "format": FORMAT,
        "identity": dataclasses.asdict(calibration.identity),
        "measured_at": calibration.measured_at,
        "seconds": m.seconds,
        "margin": MARGIN,
        "min_int8_ratio": MIN_INT8_RATIO,
        "int8_ratio": m.int8_ratio,
        "sgemm_tflops": m.sgemm_tflops,
        "int8_tops": m.int8_tops,
        "auto_replays": m.auto_replays,
        "rows": [dataclasses.asdict(row) for row in m.rows],
        # (null: never; informative only: ``from_json`` derives them again from the rows)
        "thresholds": {k: None if v >= NEVER else v for k, v in calibration.thresholds.items()},
    }


def from_json(data: Mapping[str, Any], path: Path | None = None) -> Calibration:
    """The calibration a file holds, its thresholds derived again from its rows (so a file
    stays right when only the derivation changes); ValueError where it is not one."""
    if not isinstance(data, Mapping) or data.get("format") != FORMAT:
        found = data.get("format") if isinstance(data, Mapping) else None
        raise ValueError(f"format {found!r}, not {FORMAT}")
    try:
        identity = Identity(**data["identity"])
        rows = tuple(Row(**row) for row in data["rows"])
        measurement = Measurement(
            float(data["int8_ratio"]), float(data["sgemm_tflops"]), float(data["int8_tops"]),
            rows, bool(data["auto_replays"]), float(data.get("seconds", 0.0)),
        )  # fmt: skip
        measured_at = str(data["measured_at"])
    except (KeyError, TypeError) as error:
        raise ValueError(f"not a calibration: {type(error).__name__}: {error}") from None
    for row in rows:
        times = (row.sgemm_ms, row.iv_ms, row.auto_ms, row.direct_ms)
        if not all(t is None or (isinstance(t, int | float) and t > 0) for t in times):
            raise ValueError(f"row {row}: times must be positive numbers")
    return Calibration(identity, measurement, derive(measurement), measured_at, path)


def load(identity: Identity) -> Calibration | None:
    """The saved calibration of ``identity``'s model, or None: no file, or one that is
    unreadable, of another format, or saved under other versions (each with a warning)."""
    path = path_for(identity)
    try:
        text = path.read_text()
    except (FileNotFoundError, NotADirectoryError):  # (none saved there)
        return None
    except OSError as error:
        _warn(f"cannot read {path} ({error}): measuring again")
        return None
    try:
        saved = from_json(json.loads(text), path)
    except ValueError as error:  # (json.JSONDecodeError is a ValueError)
        _warn(f"{path} is not a calibration mixpert can read ({error}): measuring again")
        return None
    if saved.identity != identity:
        differ = [
            f"{f.name} {getattr(saved.identity, f.name)!r} -> {getattr(identity, f.name)!r}"
            for f in dataclasses.fields(Identity)
            if getattr(saved.identity, f.name) != getattr(identity, f.name)
        ]
        _warn(f"{path} was measured under other versions ({', '.join(differ)}): measuring again")
        return None
    return saved


def save(calibration: Calibration) -> Calibration:
    """Writes ``calibration`` to its model's file atomically (a temporary file in the same
    folder, then renamed over it: a reader sees the old file or the new one, never half of
    one); returns it with its path. OSError where the folder cannot be written."""
    path = path_for(calibration.identity)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(to_json(calibration), indent=2) + "\n"
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    return dataclasses.replace(calibration, path=path)


def _warn(message: str) -> None:
    warnings.warn(f"mixpert calibration: {message}", RuntimeWarning, stacklevel=2)


def enabled() -> bool:
    """Whether "auto" may measure (``$MIXPERT_CALIBRATE`` is not "0", "off" or "false")."""
    return os.environ.get(SWITCH, "").strip().lower() not in ("0", "off", "false", "no")


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# --- per device, lazily ----------------------------------------------------------------------


class Probe(Protocol):
    """What ``Calibrations`` asks of the GPU (``cuda.calibrate``; a stand-in in CPU tests)."""

    def identity(self, device: int) -> Identity: ...

    def capturing(self) -> bool: ...  # whether the current stream is capturing a graph

    def measure(self, route: Any) -> Measurement: ...  # on the current device


class Calibrations:
    """ "auto"'s crossovers per device, settled at the first decision that asks: the saved
    calibration of the device's model, else one measured now and saved (a one-line INFO log
    says so: the first such product waits a few seconds), else, where calibration is off,
    fails or the stream is capturing a graph, the shipped ones. Thread-safe: one thread
    measures, the others wait for it."""

    def __init__(self, probe: Probe) -> None:
        self._probe = probe
        self._settled: dict[int, Any] = {}  # device -> its crossovers
        self._lock = threading.Lock()

    def crossovers(self, shipped: C, route: Any, device: int) -> C:
        """The crossovers for ``device`` (the current one), ``shipped`` with the thresholds
        measured on its model; ``route``: "auto"'s level IV route, the one measured."""
        settled = self._settled.get(device)
        if settled is not None:
            return settled  # type: ignore[no-any-return]
        if not enabled():  # (kept: the switch is read once per device, not every call)
            self._settled[device] = shipped
            return shipped
        if self._probe.capturing():  # (measuring would synchronise and break the capture)
            _log.debug("mixpert: a graph is being captured: the shipped crossovers, this once")
            return shipped
        with self._lock:
            if device not in self._settled:
                self._settled[device] = self._settle(shipped, route, device)
            return self._settled[device]  # type: ignore[no-any-return]

    def _settle(self, shipped: C, route: Any, device: int) -> C:
        try:
            identity = self._probe.identity(device)
            calibration = load(identity) or self.measure(identity, route, announce=True)
        except Exception as error:  # (any failure: "auto" keeps working, as shipped)
            _warn(f"failed ({type(error).__name__}: {error}): the shipped crossovers")
            return shipped
        return apply(shipped, calibration.thresholds)

    def measure(self, identity: Identity, route: Any, announce: bool = False) -> Calibration:
        """Measures now on the current device and saves it (a folder that cannot be written:
        a warning, and the calibration holds for this process only)."""
        where = path_for(identity)
        if announce:
            _log.info(
                "mixpert: measuring where \"auto\" emulates on this %s, once per GPU model "
                "(a few seconds; saved in %s; `mixpert calibrate` redoes it, %s=0 skips it)",
                identity.gpu, where, SWITCH,
            )  # fmt: skip
        measurement = self._probe.measure(route)
        calibration = Calibration(identity, measurement, derive(measurement), now())
        try:
            calibration = save(calibration)
        except OSError as error:
            _warn(f"cannot save to {where} ({error}): kept for this process only")
        _log.info(
            "mixpert: calibrated in %.1f s: %s (INT8 %.1fx float32)",
            measurement.seconds, describe(calibration.thresholds), measurement.int8_ratio,
        )  # fmt: skip
        return calibration

    def recalibrate(self, shipped: C, route: Any, device: int) -> Calibration:
        """Measures the current device now (``mixpert calibrate``), saves it and, where
        calibration is on, gives "auto" its thresholds from now on."""
        calibration = self.measure(self._probe.identity(device), route)
        with self._lock:
            self._settled[device] = apply(shipped, calibration.thresholds) if enabled() else shipped
        return calibration

    def saved(self, device: int) -> Calibration | None:
        """The calibration saved for ``device``'s model, if any (``mixpert calibrate --show``)."""
        return load(self._probe.identity(device))

    def forget(self) -> None:
        """Settles every device again at its next decision (tests, a changed switch)."""
        with self._lock:
            self._settled.clear()
