"""One product each way at n (default 8192) per level (default IV), for Nsight Compute: the
fused kernel (MIXPERT_FUSED=always: on Hopper the wgmma kernel of the levels fused_wgmma
routes, else Triton's) and the class-sum pipeline (cuBLAS INT8 GEMMs and the combine); with
``--variant``, also a build of a level's kernel fused_wgmma does not route (on the same packs).

    ncu --clock-control none --kernel-name regex:'fused|i8|imma|combine' \\
        --metrics gpu__time_duration.sum,launch__registers_per_thread,\\
    sm__pipe_tensor_op_imma_cycles_active.avg.pct_of_peak_sustained_active,\\
    sm__warps_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,dram__bytes_write.sum \\
        python benchmarks/fused_profile.py [n] [--levels IV V] [--variant V_k128]

(``bash benchmarks/device_run.sh ncu`` runs that, IV and V at 8192 and V_k128, into $OUT.)
"""

from __future__ import annotations

import argparse

from mixpert.runtime import device

device.exit_without_gpu("benchmarks/fused_profile.py")

import cupy as cp

import mixpert
from mixpert.runtime import get_level, pack_reuse
from mixpert.runtime.cuda import fused, fused_wgmma, sliced

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("n", nargs="?", type=int, default=8192)
parser.add_argument("--levels", nargs="+", default=["IV"])
parser.add_argument("--variant", choices=sorted(fused_wgmma.VARIANTS), default=None)
args = parser.parse_args()
rng = cp.random.default_rng(0)
a, b = (rng.standard_normal((args.n, args.n), dtype=cp.float32) for _ in range(2))
for name in args.levels:
    for to in ("always", "0"):
        with fused.switched(to):
            mixpert.matmul(a, b, level=name)
if args.variant:  # (not routed: launched on packs built as the runtime builds them)
    variant = fused_wgmma.VARIANTS[args.variant]
    level = get_level(fused_wgmma.level_of(variant))
    a_pack, b_pack = sliced._packs(a, b, level, pack_reuse.KEEP_NOTHING)
    c = cp.empty((1, args.n, args.n), dtype=cp.float32)
    fused_wgmma.product(a_pack, b_pack, level, c, variant)
cp.cuda.Device().synchronize()
