// A C entry to GEMMul8's float32 emulation (Ozaki scheme II on INT8) for Python's ctypes:
// row-major float32 C = A @ B on device pointers, on a caller's cuBLAS handle and workspace.
// cuBLAS is column-major, so the row-major product is its C^T = B^T A^T. GEMMul8's headers are
// included as its own src/gemmul8.cu includes them (its internals live in the global namespace)
// and only the float INT8 path is instantiated: the whole library took nvcc over 7 minutes.
#include <cuda_runtime.h>
#include <cublas_v2.h>
#include <cublasLt.h>
#include <cuComplex.h>
#include <cuda_fp8.h>
#include <dlfcn.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "../include/gemmul8.hpp"
#include "self_hipify.hpp"
#include "template_type.hpp"
#include "common.hpp"
#include "template_math.hpp"
#include "table.hpp"
#include "find_max.hpp"
#include "mod.hpp"
#include "matmult.hpp"
#include "scaling.hpp"
#include "scaling_fast_real.hpp"
#include "scaling_accu_real.hpp"
#include "conv_hi2mid_real.hpp"
#include "inverse_scaling_real.hpp"
#include "gemmul8_real.hpp"

extern "C" {

size_t mixpert_gemmul8_work_bytes(size_t m, size_t n, size_t k, unsigned moduli)
{
    return real::workSize<gemmul8::Backend::INT8>(n, m, k, moduli, false, false, nullptr,
                                                  nullptr);
}

int mixpert_gemmul8_sgemm(void* handle, size_t m, size_t n, size_t k, const float* a,
                          const float* b, float* c, unsigned moduli, int fast, void* work)
{
    const float one = 1.0f, zero = 0.0f;
    const cublasHandle_t blas = static_cast<cublasHandle_t>(handle);
    cudaStream_t stream;
    cublasGetStream(blas, &stream);
    real::gemm<float, gemmul8::Backend::INT8>(
        Handle_t(CublasTag{}, blas), CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one,
        b, n, a, k, &zero, c, n, moduli, fast != 0, work, nullptr, nullptr, false, false, false,
        false, stream);
    return static_cast<int>(cudaGetLastError());
}

}  // extern "C"
