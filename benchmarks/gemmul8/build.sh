#!/usr/bin/env bash
# Build benchmarks/gemmul8/libmixpert_gemmul8.so: our C entry (driver.cu) and GEMMul8's sources.
# GEMMul8 is not vendored: point GEMMUL8_SRC at a checkout's GEMMul8/ folder (include/, src/),
# e.g. of https://github.com/RIKEN-RCCS/GEMMul8 (measured with commit 71296f9, 2026-03-29).
#   GEMMUL8_SRC=/path/to/GEMMul8 bash benchmarks/gemmul8/build.sh [sm arch, default 90]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${GEMMUL8_SRC:?set GEMMUL8_SRC to GEMMul8s GEMMul8/ folder (include/ and src/)}
arch=${1:-90}
nvcc=${NVCC:-$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)}
"$nvcc" -std=c++20 -O3 -diag-suppress 177 -shared -Xcompiler -fPIC \
  -gencode "arch=compute_${arch},code=sm_${arch}" -I"$src/include" -I"$src/src" \
  "$here/driver.cu" -lcublas -lcublasLt -lcudart -o "$here/libmixpert_gemmul8.so"
echo "built $here/libmixpert_gemmul8.so"
