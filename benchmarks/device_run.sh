#!/usr/bin/env bash
# Run on the lent GPU machine (no registry there): put the repo on PYTHONPATH in the installed
# layout (mixpert, mixpert.runtime, mixpert.passes), run the GPU tests, then the benchmark.
#   bash benchmarks/device_run.sh [tests|bench|quick|all]   (results land in $OUT)
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
site=/tmp/mixpert-site
rm -rf "$site" && mkdir -p "$site"
cp -r "$repo/mixpert" "$site/mixpert"
cp -r "$repo/runtime" "$site/mixpert/runtime"
cp -r "$repo/passes" "$site/mixpert/passes"
export PYTHONPATH=$site PYTHONUNBUFFERED=1
out=${OUT:-/tmp/out}
mkdir -p "$out"
what=${1:-all}
nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.max.sm --format=csv,noheader
cd /tmp
if [[ $what == tests || $what == all ]]; then
  python -m pytest -q -m gpu "$repo/tests" -p no:cacheprovider 2>&1 | tee "$out/gpu-tests.log"
fi
if [[ $what == bench || $what == all || $what == quick ]]; then
  flag=""; [[ $what == quick ]] && flag="--quick"
  python -m mixpert.cli bench $flag --out "$out/results" 2>&1 | tee "$out/bench.log"
fi
