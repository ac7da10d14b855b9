// The pack module (built by build.py, with the prelude of sources.py in front): the operands'
// tops, the k-exponents, the INT8 and FP16 packers, and level IV-blocks's kernels.

#include "device.cuh"
#include "packs.cuh"
#include "iv_blocks.cuh"
