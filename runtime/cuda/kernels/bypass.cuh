// The exact recomputation of flagged lines (``bypass``; launched from sliced.py): each entry
// of a row or column flagged by the packers, summed in order in float64 and rounded once.

#include "device.cuh"

// The in-order float64 product of one output tile: acc[i][j] = sum over q in order of the exact
// products a_rq b_qc (float32 x float32 is exact in float64, so FMA and multiply-add agree) for
// row r0 + R ty + i and column c0 + R tx + j: R x R neighbouring entries per thread of a 16 x 16
// block (tiles of 16 R). k runs in steps of 16 through shared memory, where each thread's R
// values of a step lie side by side (vector loads: the FP64 units, not shared memory, set the
// pace). Global loads are coalesced for row-major operands.
template <int R>
__device__ __forceinline__ void in_order_tile(  // inlined: acc stays in registers
    const float* __restrict__ a, long long a_rs, long long a_cs,
    const float* __restrict__ b, long long b_rs, long long b_cs,
    int m, int n, int k, int r0, int c0, double (&acc)[R][R])
{
    constexpr int T = 16 * R;
    constexpr int PAD = R == 1 ? 1 : 2;  // fewer bank conflicts; rows stay 16-byte aligned
    __shared__ __align__(16) double a_tile[16][T + PAD];  // [q][row]
    __shared__ __align__(16) double b_tile[16][T + PAD];  // [q][col]
    const int tx = threadIdx.x, ty = threadIdx.y, t = ty * 16 + tx;
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int j = 0; j < R; ++j) acc[i][j] = 0.0;
    for (int q0 = 0; q0 < k; q0 += 16) {
        for (int i = t; i < 16 * T; i += 256) {
            const int a_line = i >> 4, a_q = q0 + (i & 15);  // threads along A's rows
            a_tile[i & 15][a_line] = (a_q < k && r0 + a_line < m)
                ? exact_double(a[(r0 + a_line) * a_rs + a_q * a_cs]) : 0.0;
            const int b_q = q0 + i / T, b_line = i % T;  // threads along B's rows
            b_tile[i / T][b_line] = (b_q < k && c0 + b_line < n)
                ? exact_double(b[b_q * b_rs + (c0 + b_line) * b_cs]) : 0.0;
        }
        __syncthreads();
        const int depth = min(16, k - q0);  // no padded steps: -0.0 + 0.0 would turn signs
        for (int q = 0; q < depth; ++q) {
            double av[R], bv[R];
            if constexpr (R == 1) {
                av[0] = a_tile[q][ty];
                bv[0] = b_tile[q][tx];
            } else {  // R values as R / 2 aligned double2 loads
                const double2* a_row = reinterpret_cast<const double2*>(&a_tile[q][R * ty]);
                const double2* b_row = reinterpret_cast<const double2*>(&b_tile[q][R * tx]);
#pragma unroll
                for (int h = 0; h < R / 2; ++h) {
                    const double2 x = a_row[h], y = b_row[h];
                    av[2 * h] = x.x; av[2 * h + 1] = x.y;
                    bv[2 * h] = y.x; bv[2 * h + 1] = y.y;
                }
            }
#pragma unroll
            for (int i = 0; i < R; ++i)
#pragma unroll
                for (int j = 0; j < R; ++j) acc[i][j] = fma(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
}

// bypass.recompute_lines: every entry whose row of A or column of B is flagged (NaN/Inf, or
// unresolved) becomes canonical(its in-order sum). A block takes a 64 x 64 output tile and
// leaves at once when no line of the tile is flagged, so data without bypassed lines pay one
// cheap launch; where the packs' counts of flagged lines (rows_flagged, cols_flagged) are both
// 0, before reading a flag (a stack's thousands of tiles each read 128 flags otherwise).
// Stacks: pair z = blockIdx.z + batch0 starts z * a_bs into a, z * b_bs into b.
extern "C" __global__ void bypass_lines(
    const int* __restrict__ row_bad, const int* __restrict__ col_bad,
    const int* __restrict__ rows_flagged, const int* __restrict__ cols_flagged,
    const float* __restrict__ a, long long a_rs, long long a_cs, long long a_bs,
    const float* __restrict__ b, long long b_rs, long long b_cs, long long b_bs,
    int m, int n, int k, int batch0, float* __restrict__ c)
{
    if (*rows_flagged == 0 && *cols_flagged == 0) return;
    const long long z = blockIdx.z + (long long)batch0;
    a += z * a_bs;
    b += z * b_bs;
    c += z * m * n;
    row_bad += z * m;
    col_bad += z * n;
    const int tx = threadIdx.x, ty = threadIdx.y, t = ty * 16 + tx;
    const int c0 = blockIdx.x * 64;
    for (int r0 = blockIdx.y * 64; r0 < m; r0 += gridDim.y * 64) {  // grid y: at most 65535
        int mine = 0;
        if (t < 64) mine = (r0 + t < m && row_bad[r0 + t]) | (c0 + t < n && col_bad[c0 + t]);
        if (!__syncthreads_or(mine)) continue;

        double acc[4][4];
        in_order_tile<4>(a, a_rs, a_cs, b, b_rs, b_cs, m, n, k, r0, c0, acc);
        for (int i = 0; i < 4; ++i) {
            const int r = r0 + 4 * ty + i;
            if (r >= m) continue;
            for (int j = 0; j < 4; ++j) {
                const int col = c0 + 4 * tx + j;
                if (col < n && (row_bad[r] | col_bad[col]))
                    c[(long long)r * n + col] = canonical(acc[i][j]);
            }
        }
    }
}

