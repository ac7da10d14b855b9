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

// the flag counts first (NaN/Inf lines among them), then the unresolved lines alone
__device__ bool fallback_taken(const int* flagged_rows, const int* flagged_cols,
                               const long long* unresolved_rows,
                               const long long* unresolved_cols, double m, double n,
                               double share, double row_entries) {
    return takes_sgemm(*flagged_rows, *flagged_cols, m, n, share, row_entries) &&
           takes_sgemm((double)*unresolved_rows, (double)*unresolved_cols, m, n, share,
                       row_entries);
}

// A captured product: one node runs the level's products, the other the float32 GEMM.
extern "C" __global__ void decide_fallback(
    cudaGraphConditionalHandle emulate, cudaGraphConditionalHandle sgemm,
    const int* flagged_rows, const int* flagged_cols,
    const long long* unresolved_rows, const long long* unresolved_cols,
    double m, double n, double share, double row_entries) {
    bool take = fallback_taken(flagged_rows, flagged_cols, unresolved_rows, unresolved_cols, m,
                               n, share, row_entries);
    cudaGraphSetConditional(emulate, take ? 0u : 1u);
    cudaGraphSetConditional(sgemm, take ? 1u : 0u);
}

// A product run uncaptured (the level's result already computed): a small graph whose one
// node runs the float32 GEMM over it where the fallback is taken.
extern "C" __global__ void decide_sgemm(
    cudaGraphConditionalHandle sgemm, const int* flagged_rows, const int* flagged_cols,
    const long long* unresolved_rows, const long long* unresolved_cols,
    double m, double n, double share, double row_entries) {
    bool take = fallback_taken(flagged_rows, flagged_cols, unresolved_rows, unresolved_cols, m,
                               n, share, row_entries);
    cudaGraphSetConditional(sgemm, take ? 1u : 0u);
}

// Level IV-blocks (runtime/cuda/iv_blocks.py, blocks_product): A's unresolved rows estimated
// from the sampled ones (times rows_per_sample), B's flagged columns counted; one node runs the
// exact recomputation of the listed lines, the other the float32 GEMM. Rounded step by step as
// the host's float64 does (no contraction into fused multiply-adds: the estimate is not an
// integer).
extern "C" __global__ void decide_blocks(
    cudaGraphConditionalHandle bypass, cudaGraphConditionalHandle sgemm,
    const int* sampled_rows, const int* flagged_cols, double rows_per_sample, double m,
    double n, double share, double row_entries) {
    const double rows = __dmul_rn((double)*sampled_rows, rows_per_sample);
    const double cols = (double)*flagged_cols;
    const double covered = __ddiv_rn(
        __dsub_rn(__dadd_rn(__dmul_rn(rows, n), __dmul_rn(cols, m)), __dmul_rn(rows, cols)),
        __dmul_rn(m, n));
    const bool take = covered > share || __dmul_rn(rows, n) > __dmul_rn(row_entries, m);
    cudaGraphSetConditional(bypass, take ? 0u : 1u);
    cudaGraphSetConditional(sgemm, take ? 1u : 0u);
}
