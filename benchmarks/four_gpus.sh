#!/usr/bin/env bash
# Issue 40 on a lent 4-GPU machine (no registry there), one command from the repository root:
#   bash benchmarks/four_gpus.sh
# installs the carried wheels (.whl/: dask, distributed and their pure-Python dependencies),
# puts the repository on PYTHONPATH, then runs the GPU Dask tests, the samples on Dask arrays
# and the scaling benchmark (1, 2 and 4 GPUs) in what is left of BUDGET seconds (default 555).
# One log ($OUT/four-gpus.log) and the results ($OUT/results/scaling.{json,md,png},
# dask-samples.{json,md}) come back; copy the results to benchmarks/results/<gpu>x4/.
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${OUT:-/tmp/out}
budget=${BUDGET:-555}
py=${PYTHON:-python3}
mkdir -p "$out/results"
log=$out/four-gpus.log
step() { echo "== $1 ($SECONDS s of $budget)" | tee -a "$log"; }

step "wheels"
$py -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site "$repo"/.whl/*.whl 2>&1 | tee -a "$log"
export PYTHONPATH=$repo:/tmp/site${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1 NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=index,name,pci.bus_id,memory.total,memory.used,clocks.max.sm \
  --format=csv,noheader 2>&1 | tee -a "$log"
$py -c "import dask, distributed, cupy; print('dask', dask.__version__, 'distributed',
distributed.__version__, 'cupy', cupy.__version__)" 2>&1 | tee -a "$log"
cd /tmp || exit 1

step "GPU Dask tests"
timeout 150 $py -m pytest -q -m gpu "$repo/tests/runtime/test_dask_gpus.py" -p no:cacheprovider \
  2>&1 | tail -n 40 | tee -a "$log"

step "samples on Dask arrays"
timeout 150 $py "$repo/benchmarks/dask_samples.py" --out "$out/results" 2>&1 \
  | grep -v -E ' - (INFO|DEBUG) - ' | tee -a "$log"

left=$((budget - SECONDS))
step "scaling, $left s left"
timeout "$left" $py "$repo/benchmarks/dask_scaling.py" --gpus 1 2 4 --out "$out/results" \
  --deadline $((left - 50)) 2>&1 \
  | grep -v -E ' - (INFO|DEBUG) - ' | tee -a "$log"
step "done"
ls -la "$out/results" | tee -a "$log"
