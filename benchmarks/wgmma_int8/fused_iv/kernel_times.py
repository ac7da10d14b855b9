#!/usr/bin/env python3
"""Kernel-only times of the wgmma kernels (runtime/cuda/fused_wgmma.py; H100 / H200) on the
shapes where a tile's fixed costs show (k = 1024: stacks, a 1024^3 product) and on large ones:
each level's own kernel beside its ping-pong variant, on the same packs (phi = 0.5), bits
compared. Small shapes are host-bound here (one Python launch a call): read them from the
replayed plans (benchmarks/replay_stages.py), not from this.

    PYTHONPATH=/path/to/mixpert-repo python kernel_times.py [IV,T6,V] [--out DIR] [--tag TAG]

Times are mixpert.timing.gpu_median_seconds's (CUDA events, medians of bursts of launches back
to back). Writes DIR/kernel-times-<levels><TAG>.json; a tree without the ping-pong variants
times its levels' own kernels only (a "before" run)."""

import argparse
import functools
import json
import os

import check_gpu as cg
import cupy as cp

from mixpert.runtime.cuda import fused_wgmma
from mixpert.runtime.levels import LEVELS
from mixpert.timing import gpu_median_seconds

# (count, m, n, k)
SHAPES = [(1, 1024, 1024, 1024), (64, 1024, 1024, 1024), (16, 2048, 2048, 1024),
          (1, 2048, 2048, 2048), (1, 3072, 3072, 3072), (1, 4096, 4096, 4096),
          (1, 8192, 8192, 8192), (256, 256, 256, 256)]  # fmt: skip


def launch_ms(fn, ops: float) -> float:
    """ms a launch of ``fn``, whose work is ``ops`` integer operations."""
    return gpu_median_seconds(fn, ops) * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("levels", nargs="?", default="IV,T6,V")
    ap.add_argument("--out", default=".")
    ap.add_argument("--tag", default="")
    args = ap.parse_args()
    levels = args.levels.split(",")
    rs, rows = cp.random.RandomState(7), []
    for name in levels:
        cg.LEVEL = level = LEVELS[name]
        pingpong = fused_wgmma.VARIANTS.get(f"{name}_pingpong")
        for count, m, n, k in SHAPES:
            a, b = cg.make_data(rs, "phi", count, m, n, k)
            a_pack, b_pack = cg.build_packs(a, b)
            del a, b
            own = cp.full((count, m, n), cp.nan, cp.float32)
            ops = 2.0 * len(level.pairs) * count * m * n * k
            ms = launch_ms(functools.partial(fused_wgmma.product, a_pack, b_pack, level, own), ops)
            row = {"level": name, "count": count, "m": m, "n": n, "k": k, "own_ms": ms,
                   "own_tops": ops / ms / 1e9}  # fmt: skip
            line = (
                f"{name:3s} {count}x{m}x{n}x{k}: own {ms * 1e3:9.1f} us {ops / ms / 1e9:6.0f} TOPS"
            )
            if pingpong is not None:
                pp = cp.full((count, m, n), cp.nan, cp.float32)
                pp_ms = launch_ms(
                    functools.partial(fused_wgmma.product, a_pack, b_pack, level, pp, pingpong),
                    ops,
                )
                same = bool((own.view(cp.uint32) == pp.view(cp.uint32)).all())
                row.update(pingpong_ms=pp_ms, pingpong_tops=ops / pp_ms / 1e9, same_bits=same)
                line += (f" | ping-pong {pp_ms * 1e3:9.1f} us {ops / pp_ms / 1e9:6.0f} TOPS"
                         f" | own / ping-pong {ms / pp_ms:.3f} | same bits {same}")  # fmt: skip
                del pp
            rows.append(row)
            print(line, flush=True)
            del a_pack, b_pack, own
            cp.get_default_memory_pool().free_all_blocks()
    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    path = os.path.join(args.out, f"kernel-times-{'-'.join(levels)}{args.tag}.json")
    with open(path, "w") as f:
        json.dump({"device": device, "rows": rows}, f, indent=1)
    print(f"JSON written to {os.path.abspath(path)}")


if __name__ == "__main__":
    main()
