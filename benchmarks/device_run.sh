#!/usr/bin/env bash
# Run on the lent GPU machine (no registry there): put the repo on PYTHONPATH (mixpert/passes and
# mixpert/runtime are links to passes/ and runtime/: the installed layout), run the GPU tests,
# then the benchmark.
#   bash benchmarks/device_run.sh [tests|bench|quick|all] [pytest args]   (results land in $OUT)
#   bash benchmarks/device_run.sh e2e [sample names] [--size-key KEY]     (samples end to end)
#   bash benchmarks/device_run.sh batched|skinny [--quick]                 (stacks / memory-bound shapes)
#   bash benchmarks/device_run.sh pack-once                                (kept packs, samples)
#   bash benchmarks/device_run.sh blocked                                  (blocks, wide-range cost)
#   bash benchmarks/device_run.sh flagged [--quick]                        (IV-blocks, unresolved rows)
#   bash benchmarks/device_run.sh wgmma [levels]                           (the wgmma fused kernels:
#        tests, then each level's bits against Triton's kernel and both timed; default I T6 IV V;
#        a variant (fused_wgmma.VARIANTS, e.g. V_k128) is checked and timed beside its level's own)
#   bash benchmarks/device_run.sh ncu [n]                                  (Nsight Compute: the fused
#        kernels of IV and V, V_k128, and the class sums' GEMMs at n, default 8192)
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
export PYTHONPATH=$repo${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}
mkdir -p "$out"
what=${1:-all}
shift || true
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
cd /tmp
if [[ $what == tests || $what == all ]]; then
  python -m pytest -q -m gpu "$repo/tests" -p no:cacheprovider "$@" 2>&1 | tee "$out/gpu-tests.log"
fi
if [[ $what == bench || $what == all || $what == quick ]]; then
  flag=""; [[ $what == quick ]] && flag="--quick"
  python -m mixpert.cli bench $flag --out "$out/results" 2>&1 | tee "$out/bench.log"
fi
if [[ $what == batched || $what == skinny ]]; then
  python -m mixpert.cli bench --$what "$@" --out "$out/results" 2>&1 | tee "$out/$what.log"
fi
if [[ $what == e2e ]]; then
  python "$repo/benchmarks/samples_e2e.py" "$@" --out "$out/results" 2>&1 | tee "$out/e2e.log"
fi
if [[ $what == blocked ]]; then
  python "$repo/benchmarks/blocked_pipeline.py" "$@" --out "$out/results" 2>&1 | tee "$out/blocked.log"
fi
if [[ $what == flagged ]]; then
  python "$repo/benchmarks/blocks_flagged_rows.py" "$@" --out "$out/results" 2>&1 | tee "$out/flagged.log"
fi
if [[ $what == pack-once ]]; then
  python "$repo/benchmarks/pack_once.py" "$@" --out "$out/results" 2>&1 | tee "$out/pack-once.log"
fi
if [[ $what == wgmma ]]; then
  python -m pytest -q -m gpu "$repo/tests/runtime/test_fused_wgmma.py" \
    "$repo/tests/runtime/test_fused_wgmma_forms.py" -p no:cacheprovider 2>&1 | tee "$out/wgmma-tests.log"
  for level in ${@:-I T6 IV V}; do
    # variants are named <level>_<change> (V_k128): three kernels to check and time, not two
    kind=--level limit=240; [[ $level == *_* ]] && kind=--variant limit=400
    timeout -s INT $limit python "$repo/benchmarks/wgmma_int8/fused_iv/check_gpu.py" $kind "$level" \
      --quick --out "$out/wgmma-$level.json" 2>&1 | tee "$out/wgmma-$level.log"
  done
fi
if [[ $what == ncu ]]; then
  metrics=gpu__time_duration.sum,launch__registers_per_thread,dram__bytes_read.sum,dram__bytes_write.sum
  metrics=$metrics,sm__pipe_tensor_op_imma_cycles_active.avg.pct_of_peak_sustained_active
  metrics=$metrics,sm__warps_active.avg.pct_of_peak_sustained_active
  timeout -s INT 500 ncu --clock-control none --kernel-name regex:'fused|i8|imma|combine' \
    --metrics "$metrics" python "$repo/benchmarks/fused_profile.py" "${1:-8192}" --levels IV V \
    --variant V_k128 2>&1 | tee "$out/fused-ncu-wgmma.txt"
fi
