// "auto"'s fallback after packing, decided on the GPU (runtime/cuda/sliced.py,
// int8_product_deciding_on_gpu): one thread reads the lines the packs flagged and the
// unresolved ones among them, applies auto.Fallback.takes_sgemm, and sets the two conditional
// nodes of a captured product: the level's products and combine, or the float32 GEMM.
//
// cudaGraphSetConditional is declared here rather than through cuda_device_runtime_api.h, which
// NVRTC cannot open without the toolkit's crt/ headers; the driver resolves the call when it
// loads the module (no device runtime library is linked).
typedef unsigned long long cudaGraphConditionalHandle;
extern "C" __device__ void cudaGraphSetConditional(cudaGraphConditionalHandle handle,
                                                   unsigned int value);

// auto.Fallback.takes_sgemm with bypass.exact_share, in doubles: every product of two counts
// is below 2^53, so each is exact and the share rounds once, as Python's int / int does.
__device__ bool takes_sgemm(double rows, double cols, double m, double n, double share,
                            double row_entries) {
    double covered = (rows * n + cols * m - rows * cols) / (m * n);
    return covered > share || rows * n > row_entries * m;
}

extern "C" __global__ void decide_fallback(
    cudaGraphConditionalHandle emulate, cudaGraphConditionalHandle sgemm,
    const int* flagged_rows, const int* flagged_cols,
    const long long* unresolved_rows, const long long* unresolved_cols,
    double m, double n, double share, double row_entries) {
    // the flag counts first (NaN/Inf lines among them), then the unresolved lines alone
    bool take = takes_sgemm(*flagged_rows, *flagged_cols, m, n, share, row_entries) &&
                takes_sgemm((double)*unresolved_rows, (double)*unresolved_cols, m, n, share,
                            row_entries);
    cudaGraphSetConditional(emulate, take ? 0u : 1u);
    cudaGraphSetConditional(sgemm, take ? 1u : 0u);
}
