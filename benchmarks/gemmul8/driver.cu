// A C entry to GEMMul8's float32 emulation (Ozaki scheme II on INT8) for Python's ctypes:
// row-major float32 C = A @ B on device pointers, on a caller's cuBLAS handle and workspace.
// cuBLAS is column-major, so the row-major product is its C^T = B^T A^T.
#include "gemmul8.hpp"

extern "C" {

size_t mixpert_gemmul8_work_bytes(size_t m, size_t n, size_t k, unsigned moduli)
{
    return gemmul8::workSize<false, gemmul8::Backend::INT8>(n, m, k, moduli);
}

int mixpert_gemmul8_sgemm(void* handle, size_t m, size_t n, size_t k, const float* a,
                          const float* b, float* c, unsigned moduli, int fast, void* work)
{
    const float one = 1.0f, zero = 0.0f;
    gemmul8::gemm<float, gemmul8::Backend::INT8>(
        static_cast<cublasHandle_t>(handle), CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one, b, n, a, k,
        &zero, c, n, moduli, fast != 0, work);
    return static_cast<int>(cudaGetLastError());
}

}  // extern "C"
