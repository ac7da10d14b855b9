"""GPU time of each stage of a replayed INT8 product (GPU only): each stage captured as a graph
of its own and replayed back to back, beside the whole plan's call, its graph alone (also with
"auto"'s fallback decided in it), and cuBLAS SGEMM; microseconds a call. Where a replayed call
loses to SGEMM at small n, this says which kernels the time goes to.

    python benchmarks/replay_stages.py [--sizes 1024 2048] [--level IV]
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import cupy as cp

from mixpert.runtime.auto import EMULATED_FALLBACK
from mixpert.runtime.cuda import fused, sliced
from mixpert.runtime.cuda.captured import CapturedProduct
from mixpert.runtime.cuda.packs import pack_a, pack_b, tops_and_exponents
from mixpert.runtime.levels import get_level

CALLS = 200


def per_call_us(work: Callable[[], object], calls: int = CALLS) -> float:
    """Microseconds a call of ``work`` queued back to back (the GPU's, where it is longer)."""
    for _ in range(3):
        work()
    cp.cuda.get_current_stream().synchronize()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(calls):
        work()
    end.record()
    end.synchronize()
    return cp.cuda.get_elapsed_time(start, end) * 1e3 / calls


def as_graph(work: Callable[[], object]) -> Callable[[], object]:
    """``work`` captured once on a non-blocking stream; replaying it on the current stream."""
    work()  # first-use costs outside the capture
    capture = cp.cuda.Stream(non_blocking=True)
    with capture:
        capture.begin_capture()
        work()
        graph = capture.end_capture()
    stream = cp.cuda.get_current_stream()
    return lambda: graph.launch(stream)


def stages(n: int, level_name: str) -> dict[str, float]:
    level = get_level(level_name)
    rng = cp.random.default_rng(n)
    a = rng.standard_normal((n, n), dtype=cp.float32)
    b = rng.standard_normal((n, n), dtype=cp.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    rows = {}
    with stream:
        a_top, b_top, kexp = tops_and_exponents(a, b)
        a_pack, b_pack = pack_a(a, kexp, level, a_top), pack_b(b, kexp, level, b_top)
        c = cp.empty((n, n), dtype=cp.float32)
        plan = CapturedProduct(n, n, n, level)
        auto_plan = CapturedProduct(n, n, n, level, EMULATED_FALLBACK)
        work = {
            "SGEMM (cupy a @ b)": lambda: a @ b,
            "plan call (copies + graph)": lambda: plan(a, b),
            "plan graph alone": lambda: plan._graph.launch(stream),
            "plan graph alone, with auto's fallback": lambda: auto_plan._graph.launch(stream),
            "3 copies alone": as_graph(lambda: (plan.a.__setitem__(Ellipsis, a),
                                                plan.b.__setitem__(Ellipsis, b),
                                                c.__setitem__(Ellipsis, plan.c))),
            "tops + k-exponents": as_graph(lambda: tops_and_exponents(a, b)),
            "pack A": as_graph(lambda: pack_a(a, kexp, level, a_top)),
            "pack B": as_graph(lambda: pack_b(b, kexp, level, b_top)),
            "products + combine (fused or sums)": as_graph(
                lambda: sliced._emulate_into(c, a_pack, b_pack, a, b, level)),
            "bypass": as_graph(
                lambda: sliced._bypass_lines(a_pack, b_pack, a[None], b[None], c[None])),
        }  # fmt: skip
        for name, run in work.items():
            rows[name] = per_call_us(run)
        rows["fused serves"] = float(fused.serves(level, n, n, a_pack.k_pad))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048])
    parser.add_argument("--level", default="IV")
    args = parser.parse_args()
    out = {}
    for n in args.sizes:
        out[n] = stages(n, args.level)
        print(f"n = {n}, level {args.level}")
        for name, us in out[n].items():
            print(f"  {name:40s} {us:9.1f}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
