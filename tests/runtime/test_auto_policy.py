"""The "auto" policy's one home (``runtime.auto``): its table of crossovers, the route on both
sides of them, a level name parsed once, and one route per call. CPU only: the rules are pure
functions of the shape, and what they ask of a GPU is a stand-in here."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest

import mixpert
from mixpert.execution import record_calls
from mixpert.runtime import auto, calibration, dispatch

ROOT = Path(__file__).resolve().parents[2]  # the repository
C = auto.CROSSOVERS


def gpu(blocks: bool = True, thin: bool = True, free: int = 1 << 62, replays: bool = False) -> Any:
    """A stand-in for the CUDA backend's answers (``auto.Gpu``)."""
    return SimpleNamespace(
        blocks_supported=lambda: blocks,
        thin_fits=lambda k, n: thin,
        workspace_bytes=lambda level, m, k, n, count=1: 1000 * count,
        free_bytes=lambda: free,
        replays=lambda m, k, n: replays,
        crossovers=lambda shipped, route: shipped,  # (as shipped: no calibration)
    )


def shaped(*shape: int) -> np.ndarray:
    """A float32 array of ``shape`` that takes no memory (routing reads only shapes)."""
    return np.broadcast_to(np.float32(0), shape)


def test_every_crossover_names_its_figures_in_the_repository() -> None:
    measured = [f for f in dataclasses.fields(auto.Crossovers) if auto.figures(f.name)]
    assert len(measured) == len(dataclasses.fields(auto.Crossovers)) - 1  # all but the offload
    assert auto.figures("offload_min_flops") is None
    for f in measured:
        path = auto.figures(f.name)
        assert path is not None and not Path(path).is_absolute() and ".." not in path
        assert (ROOT / path).is_file(), f"{f.name}: {path}"


SIDE, LONG = C.large_min_dim, C.large_min_work // C.large_min_dim**2  # just enough work
ROWS = 2 * C.blocks_fill_m  # IV-blocks: rows enough, A of blocks_min_mk entries
IV, SGEMM, ORDERED, BLOCKS = (
    auto.EMULATED_ON_GPU, auto.NATIVE_ON_GPU, auto.ORDERED_ON_GPU, auto.BLOCKS_ON_GPU
)  # fmt: skip


@pytest.mark.parametrize(
    ("m", "k", "n", "expected"),
    [
        (C.min_dim, C.min_dim, C.min_dim, IV),  # every side at least min_dim ...
        (C.min_dim, C.min_dim, C.min_dim - 1, SGEMM),
        (SIDE, LONG, SIDE, IV),  # ... or at least large_min_dim with large_min_work
        (SIDE, LONG - 1, SIDE, SGEMM),
        (C.split_max_mn, C.split_min_k, C.split_max_mn, ORDERED),  # split-k
        (C.split_max_mn, C.split_min_k - 1, C.split_max_mn, SGEMM),
        (1, C.split_min_k, C.split_max_mn, SGEMM),  # a matrix-vector product: cuBLAS's own
        (C.tall_min_m, C.tall_min_k, C.tall_max_n, ORDERED),  # the tall kernel
        (C.tall_min_m, C.tall_min_k, C.tall_max_n + 1, SGEMM),
        (C.thin_min_m, 16, 16, ORDERED),  # the thin kernel
        (C.thin_min_m - 1, 16, 16, SGEMM),
        (ROWS, C.blocks_min_mk // ROWS, C.blocks_max_n, BLOCKS),
        (ROWS, C.blocks_min_mk // ROWS, C.blocks_max_n + 1, SGEMM),
        (ROWS, C.blocks_min_mk // ROWS - 1, C.blocks_max_n, SGEMM),
    ],
)
def test_the_route_on_each_side_of_a_crossover(m, k, n, expected) -> None:
    route = auto.on_gpu(m, k, n, 1, "matrix", gpu())
    assert route is expected  # "auto"'s routes are built once: no allocation a call


def test_level_iv_from_a_lower_side_where_its_product_replays_one_graph() -> None:
    """Where the GPU replays the product as one graph (``Gpu.replays``: no host time to
    repay), "auto" takes level IV from replayed_min_dim a side, with its fallback; elsewhere,
    or one side shorter, native float32 as before."""
    side = C.replayed_min_dim
    assert side < C.min_dim
    replayed = auto.on_gpu(side, side, side, 1, "matrix", gpu(replays=True))
    assert replayed is auto.EMULATED_ON_GPU and replayed.fallback is not None
    assert auto.on_gpu(side, side, side, 1, "matrix", gpu()) is auto.NATIVE_ON_GPU
    short = auto.on_gpu(side, side - 1, side, 1, "matrix", gpu(replays=True))
    assert short is auto.NATIVE_ON_GPU
    stack = auto.on_gpu(side, side, side, 2, "stack", gpu(replays=True))
    assert stack is auto.NATIVE_ON_GPU  # stacks keep their own rule (no graphs for them)


def test_the_fallback_after_packing_travels_with_the_route() -> None:
    """Level IV's route carries the share-of-C rule, IV-blocks's also the entries-a-row rule;
    stacks and native routes carry none."""
    iv = auto.on_gpu(4096, 4096, 4096, 1, "matrix", gpu())
    assert iv.level.name == "IV" and iv.fallback == auto.Fallback(C.exact_share)
    stack = auto.on_gpu(4096, 4096, 4096, 4, "stack", gpu())
    assert stack.level.name == "IV" and stack.fallback is None
    m = 65536
    blocks = auto.on_gpu(m, 4096, 32, 1, "matrix", gpu())
    assert blocks.level.name == "IV-blocks" and blocks.fallback.row_entries == C.row_entries
    share = auto.EMULATED_FALLBACK
    assert not share.takes_sgemm(10, 0, 100, 100) and share.takes_sgemm(11, 0, 100, 100)
    per_row = C.row_entries * m / 32  # rows of A at n = 32: long before a tenth of C
    assert not blocks.fallback.takes_sgemm(per_row, 0, m, 32)
    assert blocks.fallback.takes_sgemm(per_row + 1, 0, m, 32)
    assert not share.takes_sgemm(per_row + 1, 0, m, 32)  # (level IV: the share alone)
    assert blocks.fallback.takes_sgemm(0, 4, m, 32)  # 4 of 32 columns: past the share


def test_what_only_the_gpu_can_tell_decides_last() -> None:
    """IV where its workspace fits (else native), IV-blocks and the thin kernel only where the
    GPU runs them; without a GPU the shape rules alone (``gpu`` None)."""
    big = (4096, 4096, 4096, 1, "matrix")
    assert auto.on_gpu(*big, gpu(free=1000)) is auto.EMULATED_ON_GPU
    assert auto.on_gpu(*big, gpu(free=999)) is auto.NATIVE_ON_GPU
    assert auto.on_gpu(*big, None) is auto.EMULATED_ON_GPU
    tall = (65536, 4096, 16, 1, "matrix")
    assert auto.on_gpu(*tall, gpu(blocks=True)) is auto.BLOCKS_ON_GPU
    assert auto.on_gpu(*tall, gpu(blocks=False)) is auto.ORDERED_ON_GPU  # the tall kernel
    thin = (C.thin_wide_min_m, 16, 16, 1, "matrix")
    assert auto.on_gpu(*thin, gpu(thin=True)) is auto.ORDERED_ON_GPU
    assert auto.on_gpu(*thin, gpu(thin=False)) is auto.on_gpu(*thin, None) is auto.NATIVE_ON_GPU


def test_stacks_route_by_the_stack() -> None:
    small, pairs = C.ordered_max_dim, C.pairs_max_dim
    assert auto.on_gpu(small, small, small, 4096, "stack", None) is auto.ORDERED_ON_GPU
    assert auto.on_gpu(pairs, pairs, pairs, 4096, "stack", None) is auto.ORDERED_ON_GPU
    assert auto.on_gpu(pairs, pairs, 17, 4096, "stack", None) is auto.NATIVE_ON_GPU  # 4-byte
    side = C.stack_min_dim
    enough = C.stack_min_work // side**3
    assert auto.on_gpu(side, side, side, enough, "stack", None) is auto.EMULATED_STACK_ON_GPU
    assert auto.on_gpu(side, side, side, enough - 1, "stack", None) is auto.NATIVE_ON_GPU
    # the 2-D kernels are not the stack's: split-k's shape in a stack stays native
    assert auto.on_gpu(2, C.split_min_k, 2, 2, "stack", None) is auto.NATIVE_ON_GPU


def test_auto_on_the_cpu_is_native_float32() -> None:
    a, b = shaped(4096, 4096), shaped(4096, 4096)
    assert dispatch.route(a, b, "auto", "cpu") is auto.NATIVE_ON_CPU
    assert dispatch.resolve_level("auto", a, b, "cpu").name == "fp32"
    assert dispatch.route(a, b, "IV", "cpu") == auto.Route("cpu", mixpert.LEVELS["IV"])


def test_a_bad_level_name_is_refused_once_before_anything_else(monkeypatch) -> None:
    parsed: list[Any] = []
    get_level = dispatch.get_level
    monkeypatch.setattr(dispatch, "get_level", lambda x: parsed.append(x) or get_level(x))
    a = np.ones((3, 4), np.float32)
    with pytest.raises(ValueError, match=r"level='VI' is not a known level; the known levels"):
        mixpert.matmul(a, "not an array", level="VI")  # the name fails before the operand
    assert parsed == ["VI"]
    parsed.clear()
    mixpert.matmul(np.ones((5, 3, 4), np.float32), np.ones((5, 4, 2), np.float32), level="iv")
    assert [x for x in parsed if isinstance(x, str)] == ["iv"]  # then Level objects only


def counted(monkeypatch) -> list[auto.Route]:
    """Every route ``auto.route`` gives, in order."""
    routes: list[auto.Route] = []
    route = auto.route

    def counting(*args: Any) -> auto.Route:
        routes.append(route(*args))
        return routes[-1]

    monkeypatch.setattr(auto, "route", counting)
    return routes


def two(a, b):  # compiled below: one product site
    return a @ b


def test_one_route_per_call(monkeypatch) -> None:
    routes = counted(monkeypatch)
    a, b = np.ones((6, 5), np.float32), np.ones((5, 4), np.float32)
    mixpert.matmul(a, b)
    mixpert.matmul(np.ones((3, 6, 5), np.float32), np.ones((3, 5, 4), np.float32), level="IV")
    assert len(routes) == 2
    f = mixpert.jit(two)
    routes.clear()
    f.with_plan(dict.fromkeys(f.ops, "IV"))(a, b)
    assert len(routes) == 1  # the hook routes; the runtime runs that route
    ran: list[auto.Route] = []
    run = dispatch.run
    monkeypatch.setattr(
        dispatch, "run", lambda x, y, r, *rest, **kw: ran.append(r) or run(x, y, r, *rest, **kw)
    )
    routes.clear()
    with record_calls() as calls:  # recorded calls too: one route, carried to the runtime
        f.with_plan(dict.fromkeys(f.ops, "auto"))(a, b)
    assert len(routes) == 1 and ran == routes and ran[0] is auto.NATIVE_ON_CPU
    assert [c.level for c in calls] == ["fp32"]


def test_a_kept_route_that_no_longer_fits_is_asked_again(monkeypatch) -> None:
    """ "auto" keeps its route of a shape while plans are kept; where that route's INT8 product
    then runs out of memory (its plan evicted, the memory taken since), the rules are asked
    again and their route now (native here) runs; an error of a route asked afresh is the
    caller's."""
    ran: list[str] = []
    free = [1 << 62]

    class Matrix:
        def __init__(self, *shape: int) -> None:
            self.shape, self.ndim, self.dtype = shape, len(shape), np.dtype(np.float32)

        def dot(self, other: Matrix) -> str:
            ran.append("sgemm")
            return "C"

    def product_at_level(a: Any, b: Any, level: Any, *rest: Any, **kw: Any) -> str:
        ran.append(level.name)
        if free[0] < 1000:
            raise MemoryError(f"level {level.name}: out of memory")
        return "C"

    Matrix.__module__ = "cupy._core.core"
    cp = SimpleNamespace(
        ndarray=Matrix, cuda=SimpleNamespace(runtime=SimpleNamespace(getDevice=int))
    )
    backend = vars(gpu())
    backend["free_bytes"] = lambda: free[0]
    cuda = SimpleNamespace(
        clear_plans=lambda: None,
        product_at_level=product_at_level,
        captured_product=lambda a, b, level, fallback=None: None,  # (no graphs: direct)
        replayed_sgemm=lambda a, b: None,
        **backend,
    )
    monkeypatch.setattr(dispatch.device, "cupy_module", lambda: cp)
    monkeypatch.setattr(dispatch.device, "gpu_available", lambda: True)
    monkeypatch.setattr(dispatch, "_cuda", lambda: cuda)
    mixpert.clear_cache()
    a, b = Matrix(4096, 4096), Matrix(4096, 4096)
    mixpert.matmul(a, b)
    free[0] = 10  # (now nothing fits)
    assert mixpert.matmul(a, b) == "C"
    assert ran == ["IV", "IV", "sgemm"]  # the kept route failed; asked again: native
    assert mixpert.matmul(a, b) == "C" and ran[-1] == "sgemm"  # (and kept so)
    mixpert.clear_cache()
    free[0] = 1 << 62
    mixpert.matmul(a, b)  # IV kept again
    monkeypatch.setattr(auto, "_emulation_fits", lambda *args: True)  # (the rules misjudge)
    mixpert.clear_cache()
    free[0] = 10
    with pytest.raises(MemoryError, match="level IV"):
        mixpert.matmul(a, b)  # (asked again, the rules take IV again: its error is the caller's)


def test_the_cupy_hot_path_asks_auto_once(monkeypatch) -> None:
    """Two float32 CuPy matrices under "auto" skip the general checks but not the rules: a
    shape no rule takes goes to CuPy's product at once (``auto.native_by_shape``), any other
    asks ``auto.on_gpu`` once a shape while plans are kept, whose route says what runs (a
    stand-in CuPy here)."""
    ran: list[str] = []

    class Matrix:  # what the hot path reads of a CuPy array
        def __init__(self, *shape: int) -> None:
            self.shape, self.ndim, self.dtype = shape, len(shape), np.dtype(np.float32)

        def dot(self, other: Matrix) -> str:  # (each stand-in returns a result)
            ran.append("sgemm")
            return "C"

    Matrix.__module__ = "cupy._core.core"
    cp = SimpleNamespace(
        ndarray=Matrix, cuda=SimpleNamespace(runtime=SimpleNamespace(getDevice=int))
    )
    cuda = SimpleNamespace(
        clear_plans=lambda: None,
        ordered_product=lambda a, b: ran.append("fp32-ordered") or "C",
        product_at_level=lambda a, b, level, *rest, **kw: ran.append(level.name) or "C",
        captured_product=lambda a, b, level, fallback=None: None,  # (a stand-in: no graphs)
        replayed_sgemm=lambda a, b: None,
        **vars(gpu()),
    )
    monkeypatch.setattr(dispatch.device, "cupy_module", lambda: cp)
    monkeypatch.setattr(dispatch.device, "gpu_available", lambda: True)
    monkeypatch.setattr(dispatch, "_cuda", lambda: cuda)
    mixpert.clear_cache()  # (no route kept from another test)
    asked: list[auto.Route] = []
    on_gpu = auto.on_gpu
    monkeypatch.setattr(auto, "on_gpu", lambda *args: asked.append(on_gpu(*args)) or asked[-1])
    shapes = ((128, 128, 128), (4096, 4096, 4096), (65536, 4096, 16), (32, 1 << 18, 32))
    for m, k, n in shapes:
        dispatch.np_matmul_at_level(Matrix(m, k), Matrix(k, n), "auto")
    assert [r.level.name for r in asked] == ["IV", "IV-blocks", "fp32-ordered"]
    assert ran == ["sgemm", "IV", "IV-blocks", "fp32-ordered"]
    asked.clear()
    for m, k, n in shapes:  # mixpert.matmul: the same way, the same routes, kept
        mixpert.matmul(Matrix(m, k), Matrix(k, n))
    assert asked == []
    assert ran[4:] == ["sgemm", "IV", "IV-blocks", "fp32-ordered"]
    mixpert.clear_cache()  # (routes go with the plans)
    mixpert.matmul(Matrix(4096, 4096), Matrix(4096, 4096))
    assert [r.level.name for r in asked] == ["IV"]


class _AnswersYes:
    """A GPU on which every GPU-side condition of ``auto.on_gpu`` holds."""

    def blocks_supported(self) -> bool:
        return True

    def thin_fits(self, k: int, n: int) -> bool:
        return True

    def workspace_bytes(self, level: Any, m: int, k: int, n: int, count: int = 1) -> int:
        return 0

    def free_bytes(self) -> int:
        return 1 << 62

    def replays(self, m: int, k: int, n: int) -> bool:
        return True

    def crossovers(self, shipped: auto.Crossovers, route: auto.Route) -> auto.Crossovers:
        return dataclasses.replace(shipped, min_dim=1, replayed_min_dim=1, large_min_dim=1)


SIDES = (1, 2, 16, 17, 32, 100, 255, 256, 512, 1000, 1024, 2047, 2048, 4096, 1 << 14, 1 << 17)


@pytest.mark.parametrize("m", SIDES)
def test_a_shape_settled_native_is_native_on_any_gpu(m: int) -> None:
    """``native_by_shape`` (the hot path's shortcut) never says native where ``on_gpu``, asked
    of a GPU that answers yes to everything and calibrated thresholds as low as can be, would
    run anything but cuBLAS SGEMM; and it does say so for small products."""
    for k in SIDES:
        for n in SIDES:
            if auto.native_by_shape(m, k, n):
                assert auto.on_gpu(m, k, n, 1, "matrix", _AnswersYes()) is auto.NATIVE_ON_GPU
    assert auto.native_by_shape(m, m, m) == (m < calibration.CALIBRATED_FROM)
