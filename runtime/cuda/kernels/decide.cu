// "auto"'s fallback after packing, decided on the GPU (runtime/cuda/sliced.py and
// iv_blocks.py, through conditional.decided): one block counts the lines to recompute exactly,
// applies auto.Fallback.takes_sgemm, and sets the conditional nodes that run the level's own
// work or the float32 GEMM.
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

// The lines the packs flagged (NaN/Inf or unresolved: *flagged_rows, *flagged_cols) first,
// then the unresolved ones alone: flagged lines without a NaN/Inf (nan_inf, the tops' flags),
// counted by the whole block (DECIDE_THREADS) into shared counters; thread 0 then decides.
#define DECIDE_THREADS 1024
__device__ bool fallback_taken(const int* flagged_rows, const int* flagged_cols,
                               const int* row_flags, const unsigned int* row_nan_inf, int m,
                               const int* col_flags, const unsigned int* col_nan_inf, int n,
                               double share, double row_entries) {
    __shared__ unsigned long long unresolved[2];
    if (threadIdx.x == 0) unresolved[0] = unresolved[1] = 0ull;
    __syncthreads();
    unsigned long long rows = 0ull, cols = 0ull;
    for (int i = threadIdx.x; i < m; i += blockDim.x)
        rows += row_flags[i] != 0 && row_nan_inf[i] == 0u;
    for (int j = threadIdx.x; j < n; j += blockDim.x)
        cols += col_flags[j] != 0 && col_nan_inf[j] == 0u;
    atomicAdd(&unresolved[0], rows);
    atomicAdd(&unresolved[1], cols);
    __syncthreads();
    return takes_sgemm(*flagged_rows, *flagged_cols, m, n, share, row_entries) &&
           takes_sgemm((double)unresolved[0], (double)unresolved[1], m, n, share, row_entries);
}

// The level's result computed (or being computed beside it, in a captured product): the
// conditional node after it runs the float32 GEMM over it where the fallback is taken.
extern "C" __global__ void decide_sgemm(
    cudaGraphConditionalHandle sgemm, const int* flagged_rows, const int* flagged_cols,
    const int* row_flags, const unsigned int* row_nan_inf, int m, const int* col_flags,
    const unsigned int* col_nan_inf, int n, double share, double row_entries) {
    bool take = fallback_taken(flagged_rows, flagged_cols, row_flags, row_nan_inf, m,
                               col_flags, col_nan_inf, n, share, row_entries);
    if (threadIdx.x == 0) cudaGraphSetConditional(sgemm, take ? 1u : 0u);
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
