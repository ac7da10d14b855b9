// Probe: does cuBLASLt offer INT8 TN algorithms faster than cublasGemmEx's own choice, on the
// GEMMs a level-IV product runs (class spans of the packed layout: lda = slots * k_pad)?
// Prints, per shape, cublasGemmEx's TOPS and each heuristic algorithm's (best of 10 timed runs).
//   nvcc -O2 -o lt_probe lt_probe.cu -lcublas -lcublasLt && ./lt_probe
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cstdio>
#include <cstdint>
#include <vector>
#include <algorithm>

#define CK(x) do { auto s_ = (x); if ((int)s_ != 0) { printf("error %d at %s:%d\n", (int)s_, __FILE__, __LINE__); return; } } while (0)

static float time_ms(cudaEvent_t e0, cudaEvent_t e1) { float ms; cudaEventElapsedTime(&ms, e0, e1); return ms; }

struct Shape { int n, m, K, lda, ldb; int batch; long long sa, sb, sc; int row_block; const char* name; };

static void probe(cublasHandle_t blas, cublasLtHandle_t lt, const Shape& s, int8_t* A, int8_t* B, int32_t* C, void* ws, size_t ws_size) {
    cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
    int32_t one = 1, zero = 0;
    double ops = 2.0 * s.n * (double)s.m * s.K * s.batch;
    auto run_ex = [&]() {
        if (s.batch > 1) {
            cublasGemmStridedBatchedEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.n, s.m, s.K, &one, A, CUDA_R_8I, s.lda, s.sa, B, CUDA_R_8I, s.ldb, s.sb, &zero, C, CUDA_R_32I, s.n, s.sc, s.batch, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
        } else {
            for (int r = 0; r < s.m; r += s.row_block) {
                int rows = std::min(s.row_block, s.m - r);
                cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.n, rows, s.K, &one, A, CUDA_R_8I, s.lda, B + (size_t)r * s.ldb, CUDA_R_8I, s.ldb, &zero, C + (size_t)r * s.n, CUDA_R_32I, s.n, CUBLAS_COMPUTE_32I, CUBLAS_GEMM_DEFAULT);
            }
        }
    };
    auto best_of = [&](auto fn) {
        fn(); cudaDeviceSynchronize();
        float best = 1e30f;
        for (int i = 0; i < 10; ++i) { cudaEventRecord(e0); fn(); cudaEventRecord(e1); cudaEventSynchronize(e1); best = std::min(best, time_ms(e0, e1)); }
        return best;
    };
    float ex = best_of(run_ex);
    printf("%s: gemmEx (row block %d) %.3f ms %.0f TOPS\n", s.name, s.row_block, ex, ops / ex / 1e9);

    for (int whole = 0; whole < 2; ++whole) {
        int rows = whole ? s.m : std::min(s.m, s.row_block);
        if (whole && rows == std::min(s.m, s.row_block)) continue;
        cublasLtMatmulDesc_t desc; CK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32I, CUDA_R_32I));
        cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
        CK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
        cublasLtMatrixLayout_t la, lb, lc;
        CK(cublasLtMatrixLayoutCreate(&la, CUDA_R_8I, s.K, s.n, s.lda));
        CK(cublasLtMatrixLayoutCreate(&lb, CUDA_R_8I, s.K, rows, s.ldb));
        CK(cublasLtMatrixLayoutCreate(&lc, CUDA_R_32I, s.n, rows, s.n));
        if (s.batch > 1) {
            for (auto [l, st] : {std::pair{la, s.sa}, {lb, s.sb}, {lc, s.sc}}) {
                CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &s.batch, sizeof(int)));
                CK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &st, sizeof(long long)));
            }
        }
        cublasLtMatmulPreference_t pref; CK(cublasLtMatmulPreferenceCreate(&pref));
        CK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_size, sizeof(ws_size)));
        cublasLtMatmulHeuristicResult_t res[32]; int got = 0;
        CK(cublasLtMatmulAlgoGetHeuristic(lt, desc, la, lb, lc, lc, pref, 32, res, &got));
        for (int i = 0; i < got; ++i) {
            auto fn = [&]() {
                for (int r = 0; r < s.m; r += rows)
                    cublasLtMatmul(lt, desc, &one, A, la, B + (size_t)r * s.ldb, lb, &zero, C + (size_t)r * s.n, lc, C + (size_t)r * s.n, lc, &res[i].algo, ws, ws_size, 0);
            };
            float t = best_of(fn);
            int tile = -1, stages = -1, splitk = -1, algo_id = -1;
            size_t w;
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id, sizeof(int), &w);
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(int), &w);
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof(int), &w);
            cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(int), &w);
            printf("  lt rows %5d algo %2d id %3d tile %3d stages %3d splitk %2d ws %8zu: %.3f ms %.0f TOPS (%.3fx gemmEx)\n", rows, i, algo_id, tile, stages, splitk, res[i].workspaceSize, t, ops / t / 1e9, ex / t);
        }
        cublasLtMatmulPreferenceDestroy(pref); cublasLtMatrixLayoutDestroy(la); cublasLtMatrixLayoutDestroy(lb); cublasLtMatrixLayoutDestroy(lc); cublasLtMatmulDescDestroy(desc);
    }
}

int main() {
    cublasHandle_t blas; cublasCreate(&blas);
    cublasLtHandle_t lt; cublasLtCreate(&lt);
    size_t ws_size = 64 << 20; void* ws; cudaMalloc(&ws, ws_size);
    size_t bytes = (size_t)3 << 30;
    int8_t *A, *B; int32_t* C;
    cudaMalloc(&A, bytes); cudaMalloc(&B, bytes); cudaMalloc(&C, (size_t)16384 * 16384 * 4 + (64 << 20));
    cudaMemset(A, 3, bytes); cudaMemset(B, 5, bytes);
    std::vector<Shape> shapes;
    for (int n : {8192, 16384}) {
        int kp = n, lda = 3 * kp;
        for (int count : {1, 2, 3}) {
            static char names[16][64];
            static int used = 0;
            snprintf(names[used], 64, "IV n=%d class K=%d*k", n, count);
            shapes.push_back({n, n, count * kp, lda, lda, 1, 0, 0, 0, 4096, names[used++]});
        }
    }
    // stacks: 16 x 4096^3 and 64 x 1024^3 (class of 2 pairs)
    shapes.push_back({4096, 4096, 2 * 4096, 3 * 4096, 3 * 4096, 16, 4096LL * 3 * 4096, 4096LL * 3 * 4096, 4096LL * 4096, 1 << 30, "stack 16 x 4096^3 K=2k"});
    shapes.push_back({1024, 1024, 2 * 1024, 3 * 1024, 3 * 1024, 64, 1024LL * 3 * 1024, 1024LL * 3 * 1024, 1024LL * 1024, 1 << 30, "stack 64 x 1024^3 K=2k"});
    for (auto& s : shapes) probe(blas, lt, s, A, B, C, ws, ws_size);
    return 0;
}
