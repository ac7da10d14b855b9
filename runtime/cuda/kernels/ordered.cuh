// Level fp32-ordered (``ordered``; launched from fp32_ordered.py): the tile, small-stack,
// pairs and split-k kernels, each computing every output entry in the level's one fixed order
// (``ordered.ordered_product`` is their CPU model): IEEE float32 FMAs in k order within chunks of
// ORDERED_CHUNK steps, each chunk's sum added into a float64 total, rounded once. Inline PTX keeps
// subnormals (CuPy's -ftz=true would flush them in C float arithmetic).

#include "device.cuh"

__device__ __forceinline__ float fma_ieee(float a, float b, float c)
{
    float d;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
    return d;
}

__device__ __forceinline__ double widen_ieee(float x)  // exact, subnormals included
{
    double d;
    asm("cvt.f64.f32 %0, %1;" : "=d"(d) : "f"(x));
    return d;
}

// The rounded total of an entry whose k is one chunk, from its float32 chunk sum x: as
// canonical(0.0 + widen(x)) rounds it, -0.0 becomes +0.0 (an IEEE add, subnormals kept) and a
// NaN the canonical one.
__device__ __forceinline__ float one_chunk_total(float x)
{
    float y;
    asm("add.rn.f32 %0, %1, 0f00000000;" : "=f"(y) : "f"(x));
    return y != y ? __uint_as_float(0x7fc00000u) : y;
}

// R consecutive floats from 16-byte aligned shared memory (R = 1, 2 or 4).
template <int R>
__device__ __forceinline__ void load_run(const float* p, float (&v)[R])
{
    if constexpr (R == 4) {
        const float4 x = *reinterpret_cast<const float4*>(p);
        v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
    } else if constexpr (R == 2) {
        const float2 x = *reinterpret_cast<const float2*>(p);
        v[0] = x.x; v[1] = x.y;
    } else {
        v[0] = p[0];
    }
}

// R consecutive floats to R-aligned global memory in one store (R = 1, 2 or 4).
template <int R>
__device__ __forceinline__ void store_run(float* p, const float (&v)[R])
{
    if constexpr (R == 4) {
        *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
    } else if constexpr (R == 2) {
        *reinterpret_cast<float2*>(p) = make_float2(v[0], v[1]);
    } else {
        p[0] = v[0];
    }
}

// acc[i][j] = fma(a[q][R ty + i], b[q][R tx + j], acc[i][j]) from the shared tiles (row length
// W floats).
template <int R, int W>
__device__ __forceinline__ void ordered_step(const float* a_tile, const float* b_tile, int q,
                                             float (&acc)[R][R])
{
    float av[R], bv[R];
    load_run<R>(a_tile + q * W + R * threadIdx.y, av);
    load_run<R>(b_tile + q * W + R * threadIdx.x, bv);
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int j = 0; j < R; ++j) acc[i][j] = fma_ieee(av[i], bv[j], acc[i][j]);
}

// One stage of k-steps [q0, q0 + STEP) of the A and B tiles (rows r0.., columns c0..), from
// global memory into registers: thread t takes elements t, t + 256, ... (coalesced loads),
// zeros past q_end and the matrices' edges. A_T: A is stored transposed (column-major: entry
// (row, q) at a[q m + row], e.g. X.T of a C-ordered X), read along its rows instead.
template <int R, int STEP, bool A_T = false>
__device__ __forceinline__ void ordered_fetch(
    const float* __restrict__ a, const float* __restrict__ b, int m, int n, int k, int r0,
    int c0, int q0, int q_end, float (&a_next)[STEP * R / 16], float (&b_next)[STEP * R / 16])
{
    constexpr int T = 16 * R;
    const int t = threadIdx.y * 16 + threadIdx.x;
#pragma unroll
    for (int l = 0; l < STEP * R / 16; ++l) {
        const int i = t + 256 * l;
        if constexpr (A_T) {
            const int a_line = i % T, a_q = q0 + i / T;
            a_next[l] =
                (a_q < q_end && r0 + a_line < m) ? a[(long long)a_q * m + r0 + a_line] : 0.0f;
        } else {
            const int a_line = i / STEP, a_q = q0 + i % STEP;
            a_next[l] =
                (a_q < q_end && r0 + a_line < m) ? a[(long long)(r0 + a_line) * k + a_q] : 0.0f;
        }
        const int b_q = q0 + i / T, b_line = i % T;
        b_next[l] = (b_q < q_end && c0 + b_line < n) ? b[(long long)b_q * n + c0 + b_line] : 0.0f;
    }
}

// A stage fetched by ordered_fetch, from registers into the shared tiles ([q][row], [q][col]).
template <int R, int STEP, bool A_T = false>
__device__ __forceinline__ void ordered_stage(
    float (*a_tile)[16 * R + 4], float (*b_tile)[16 * R + 4], const float (&a_next)[STEP * R / 16],
    const float (&b_next)[STEP * R / 16])
{
    constexpr int T = 16 * R;
    const int t = threadIdx.y * 16 + threadIdx.x;
#pragma unroll
    for (int l = 0; l < STEP * R / 16; ++l) {
        const int i = t + 256 * l;
        if constexpr (A_T)
            a_tile[i / T][i % T] = a_next[l];
        else
            a_tile[i % STEP][i / STEP] = a_next[l];
        b_tile[i / T][i % T] = b_next[l];
    }
}

// The FMAs of one staged stage, k-steps [q0, q0 + depth): chunk sums go into total, in order,
// where a chunk ends (at multiples of the chunk, and at q_end).
template <int R>
__device__ __forceinline__ void ordered_steps(
    const float (*a_tile)[16 * R + 4], const float (*b_tile)[16 * R + 4], int q0, int depth,
    int q_end, float (&acc)[R][R], double (&total)[R][R])
{
    constexpr int T = 16 * R, PAD = 4;
    static_assert(ORDERED_CHUNK % 16 == 0, "chunks end at steps of 16");
    for (int s = 0; s < depth; s += 16) {
        if (depth - s >= 16) {  // a whole step of 16, unrolled
#pragma unroll
            for (int q = 0; q < 16; ++q) ordered_step<R, T + PAD>(a_tile[0], b_tile[0], s + q, acc);
        } else {  // the last, short step: no padded steps (-0.0 + 0.0 would turn signs)
            for (int q = s; q < depth; ++q) ordered_step<R, T + PAD>(a_tile[0], b_tile[0], q, acc);
        }
        if ((q0 + s + 16) % ORDERED_CHUNK == 0 || q0 + s + 16 >= q_end) {  // chunk ends
#pragma unroll
            for (int i = 0; i < R; ++i)
#pragma unroll
                for (int j = 0; j < R; ++j) {
                    total[i][j] = total[i][j] + widen_ieee(acc[i][j]);
                    acc[i][j] = 0.0f;
                }
        }
    }
}

// The chunk sums of k-steps [q_begin, q_end) of one 16 R x 16 R output tile (rows r0.., columns
// c0..), added in order into total (R x R neighbouring entries per thread of 16 x 16). k runs
// in stages of STEP (a multiple of 16) through shared memory (coalesced global loads, vector
// shared loads); the next stage's loads are in flight while this one's FMAs run. q_begin is a
// multiple of the chunk.
template <int R, int STEP, bool A_T = false>
__device__ __forceinline__ void ordered_span(
    const float* __restrict__ a, const float* __restrict__ b, int m, int n, int k, int r0,
    int c0, int q_begin, int q_end, float (*a_tile)[16 * R + 4], float (*b_tile)[16 * R + 4],
    double (&total)[R][R])
{
    static_assert(STEP % 16 == 0, "stages are whole steps of 16");
    float acc[R][R];
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int j = 0; j < R; ++j) acc[i][j] = 0.0f;
    float a_next[STEP * R / 16], b_next[STEP * R / 16];
    ordered_fetch<R, STEP, A_T>(a, b, m, n, k, r0, c0, q_begin, q_end, a_next, b_next);
    for (int q0 = q_begin; q0 < q_end; q0 += STEP) {
        ordered_stage<R, STEP, A_T>(a_tile, b_tile, a_next, b_next);
        __syncthreads();
        if (q0 + STEP < q_end)
            ordered_fetch<R, STEP, A_T>(a, b, m, n, k, r0, c0, q0 + STEP, q_end, a_next, b_next);
        ordered_steps<R>(a_tile, b_tile, q0, min(STEP, q_end - q0), q_end, acc, total);
        __syncthreads();
    }
}

// Row r0 + R ty + i, columns c0 + R tx.. of the tile's totals, rounded once, into C.
template <int R>
__device__ __forceinline__ void ordered_store(float* __restrict__ c, int m, int n, int r0, int c0,
                                              const double (&total)[R][R])
{
    const int tx = threadIdx.x, ty = threadIdx.y;
    const bool whole = c0 + R * tx + R <= n && n % R == 0;  // R aligned floats: one store
#pragma unroll
    for (int i = 0; i < R; ++i) {
        const int r = r0 + R * ty + i;
        if (whole && r < m) {
            float out[R];
#pragma unroll
            for (int j = 0; j < R; ++j) out[j] = canonical(total[i][j]);
            store_run<R>(c + (long long)r * n + c0 + R * tx, out);
            continue;
        }
#pragma unroll
        for (int j = 0; j < R; ++j) {
            const int col = c0 + R * tx + j;
            if (r < m && col < n) c[(long long)r * n + col] = canonical(total[i][j]);
        }
    }
}

// Small stacks (m, n <= 16 R, k <= STEP): a block walks pairs blockIdx.x, + gridDim.x, ...,
// one tile each, with the next pair's operands in flight while it works on this one's.
template <int R, int STEP>
__device__ __forceinline__ void ordered_stack_impl(
    const float* __restrict__ a, const float* __restrict__ b, int m, int n, int k,
    long long count, float* __restrict__ c)
{
    constexpr int T = 16 * R, PAD = 4;
    __shared__ __align__(16) float a_tile[STEP][T + PAD];  // [q][row]
    __shared__ __align__(16) float b_tile[STEP][T + PAD];  // [q][col]
    float a_next[STEP * R / 16], b_next[STEP * R / 16];
    long long z = blockIdx.x;
    if (z < count)
        ordered_fetch<R, STEP>(a + z * m * k, b + z * k * n, m, n, k, 0, 0, 0, k, a_next, b_next);
    for (; z < count; z += gridDim.x) {
        ordered_stage<R, STEP>(a_tile, b_tile, a_next, b_next);
        __syncthreads();
        const long long z_next = z + gridDim.x;
        if (z_next < count)
            ordered_fetch<R, STEP>(a + z_next * m * k, b + z_next * k * n, m, n, k, 0, 0, 0, k,
                                   a_next, b_next);
        float acc[R][R];
        double total[R][R];
#pragma unroll
        for (int i = 0; i < R; ++i)
#pragma unroll
            for (int j = 0; j < R; ++j) { acc[i][j] = 0.0f; total[i][j] = 0.0; }
        ordered_steps<R>(a_tile, b_tile, 0, k, k, acc, total);
        ordered_store<R>(c + z * m * n, m, n, 0, 0, total);
        __syncthreads();
    }
}

// One 16 R x 16 R output tile per block of 16 x 16 threads; pair z = blockIdx.z + batch0 of
// two C-contiguous stacks. SEGMENTS: k may exceed a segment, so each segment's total is
// summed apart and added in order (without, the one segment's total is the total).
template <int R, int STEP, bool SEGMENTS>
__device__ __forceinline__ void ordered_impl(
    const float* __restrict__ a, const float* __restrict__ b, int m, int n, int k, int batch0,
    float* __restrict__ c)
{
    constexpr int T = 16 * R, PAD = 4;  // PAD floats: fewer bank conflicts, 16-byte rows
    static_assert(ORDERED_SEGMENT % ORDERED_CHUNK == 0, "segments are whole chunks");
    __shared__ __align__(16) float a_tile[STEP][T + PAD];  // [q][row]
    __shared__ __align__(16) float b_tile[STEP][T + PAD];  // [q][col]
    const long long z = blockIdx.z + (long long)batch0;
    a += z * m * k;
    b += z * k * n;
    c += z * m * n;
    const int c0 = blockIdx.x * T;
    for (int r0 = blockIdx.y * T; r0 < m; r0 += gridDim.y * T) {  // grid y: at most 65535
        double total[R][R];
#pragma unroll
        for (int i = 0; i < R; ++i)
#pragma unroll
            for (int j = 0; j < R; ++j) total[i][j] = 0.0;
        if constexpr (SEGMENTS) {
            for (int s0 = 0; s0 < k; s0 += ORDERED_SEGMENT) {
                double segment[R][R];
#pragma unroll
                for (int i = 0; i < R; ++i)
#pragma unroll
                    for (int j = 0; j < R; ++j) segment[i][j] = 0.0;
                ordered_span<R, STEP>(a, b, m, n, k, r0, c0, s0,
                                    min(k, s0 + ORDERED_SEGMENT), a_tile, b_tile, segment);
#pragma unroll
                for (int i = 0; i < R; ++i)
#pragma unroll
                    for (int j = 0; j < R; ++j) total[i][j] = total[i][j] + segment[i][j];
            }
        } else {
            ordered_span<R, STEP>(a, b, m, n, k, r0, c0, 0, k, a_tile, b_tile, total);
        }
        ordered_store<R>(c, m, n, r0, c0, total);
    }
}

// Split-k, step 1: segment z = blockIdx.z + segment0 of one output tile per block (as
// ordered_impl, in larger stages: a block walks one segment), its float64 total to
// segments[z][row][col]. A_T: A is stored transposed (ordered_fetch).
template <int R, bool A_T>
__device__ __forceinline__ void ordered_segments_impl(
    const float* __restrict__ a, const float* __restrict__ b, int m, int n, int k, int segment0,
    double* __restrict__ segments)
{
    constexpr int T = 16 * R, PAD = 4, STEP = 32;
    __shared__ __align__(16) float a_tile[STEP][T + PAD];
    __shared__ __align__(16) float b_tile[STEP][T + PAD];
    const int r0 = blockIdx.y * T, c0 = blockIdx.x * T;
    const long long z = blockIdx.z + (long long)segment0;
    const int s0 = (int)z * ORDERED_SEGMENT;
    double total[R][R];
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int j = 0; j < R; ++j) total[i][j] = 0.0;
    ordered_span<R, STEP, A_T>(a, b, m, n, k, r0, c0, s0, min(k, s0 + ORDERED_SEGMENT), a_tile,
                               b_tile, total);
    segments += z * m * n;
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int j = 0; j < R; ++j) {
            const int r = r0 + R * threadIdx.y + i, col = c0 + R * threadIdx.x + j;
            if (r < m && col < n) segments[(long long)r * n + col] = total[i][j];
        }
}

// Split-k, step 1, for outputs of at most T x T (T = 16 or 32: few rows against few columns
// over a long k, as in the Gram-like X^T Y), near DRAM speed: a block walks a run of whole
// segments, a stage of GROUPS chunks at a time, copied asynchronously into one of STAGES
// buffers (the next stages arrive while this one is summed). A group of T^2 / 16 threads sums
// one chunk, each thread a 4 x 4 block of outputs (16 FMAs per two 16-byte shared reads); the
// chunk sums are then added into the segment's float64 totals in chunk order: the bits of one
// thread walking the segment. Shared memory (dynamic; ``fp32_ordered.chunks_shared_bytes``
// computes the same): STAGES stages of A and B, B staged [q][col]; A stored transposed (A_T:
// a[q m + row]) staged [q][row] likewise, a C-ordered A [row][q] (rows of STAGE + 4 floats: a
// warp's 16-byte reads of 8 rows T / 4 apart fall on distinct banks). VEC: 16-byte copies (A's
// and B's lines a multiple of 4 floats, 16-byte aligned); else 4-byte ones.
template <int T, int GROUPS, bool A_T>
struct ChunksLayout {
    static constexpr int CH = ORDERED_CHUNK, GROUP = T * T / 16, THREADS = GROUPS * GROUP;
    static constexpr int STAGE = GROUPS * CH, A_ROW = STAGE + 4;  // k-steps a stage
    static constexpr int A_FLOATS = A_T ? STAGE * T : T * A_ROW, B_FLOATS = STAGE * T;
};

// Copies of one stage of a k-major operand (B, or A stored transposed: k-row q at x + q ld,
// its first `lines` floats wanted) into x_s[q][T]: copy l of a thread takes k-row
// q_first + Q_STEP l, floats j.. (each thread keeps its j); zeros past depth and lines.
template <int T, int THREADS, int STAGE, int W>
__device__ __forceinline__ void chunks_copy_k_rows(const float* __restrict__ x, int lines,
                                                   long long ld, int q0, int depth, float* x_s)
{
    constexpr int PIECES = T / W, Q_STEP = THREADS / PIECES;  // pieces a k-row
    static_assert(THREADS % PIECES == 0 && STAGE % Q_STEP == 0, "whole k-rows a pass");
    const int j = threadIdx.x % PIECES * W, q_first = threadIdx.x / PIECES;
    const float* const src = x + (q0 + q_first) * ld + j;
#pragma unroll
    for (int l = 0; l < STAGE / Q_STEP; ++l) {
        const int q = q_first + Q_STEP * l;
        const bool inside = q < depth && j < lines;
        copy_async<4 * W>(x_s + q * T + j, inside ? src + Q_STEP * l * ld : x, inside);
    }
}

// Copies of one stage of a C-ordered A (row r at a + r k) into a_s[row][A_ROW]: each thread
// keeps its pieces' steps p.. and walks rows; zeros past depth and m.
template <int T, int THREADS, int STAGE, int A_ROW, int W>
__device__ __forceinline__ void chunks_copy_rows(const float* __restrict__ a, int m, int k, int q0,
                                                 int depth, float* a_s)
{
    constexpr int PIECES = STAGE / W;  // pieces a row
    if constexpr (PIECES <= THREADS) {
        constexpr int R_STEP = THREADS / PIECES;
        static_assert(THREADS % PIECES == 0 && T % R_STEP == 0, "whole rows a pass");
        const int p = threadIdx.x % PIECES * W, r_first = threadIdx.x / PIECES;
        const float* const src = a + (long long)r_first * k + q0 + p;
#pragma unroll
        for (int l = 0; l < T / R_STEP; ++l) {
            const int r = r_first + R_STEP * l;
            const bool inside = r < m && p < depth;
            copy_async<4 * W>(a_s + r * A_ROW + p, inside ? src + (long long)R_STEP * l * k : a,
                              inside);
        }
    } else {
        static_assert(PIECES % THREADS == 0, "whole rows a pass");
#pragma unroll 4
        for (int r = 0; r < T; ++r) {
#pragma unroll
            for (int l = 0; l < PIECES / THREADS; ++l) {
                const int p = (threadIdx.x + THREADS * l) * W;
                const bool inside = r < m && p < depth;
                copy_async<4 * W>(a_s + r * A_ROW + p,
                                  inside ? a + (long long)r * k + q0 + p : a, inside);
            }
        }
    }
}

// Stage [q0, q0 + depth) of A's rows < m and B's columns < n into one buffer (a_s, b_s),
// asynchronously, zeros elsewhere; commits one group of copies.
template <int T, int GROUPS, bool A_T, bool VEC>
__device__ __forceinline__ void chunks_copy(const float* __restrict__ a,
                                            const float* __restrict__ b, int m, int n, int k,
                                            int q0, int depth, float* a_s, float* b_s)
{
    using L = ChunksLayout<T, GROUPS, A_T>;
    constexpr int W = VEC ? 4 : 1;  // floats a copy
    chunks_copy_k_rows<T, L::THREADS, L::STAGE, W>(b, n, n, q0, depth, b_s);
    if constexpr (A_T)
        chunks_copy_k_rows<T, L::THREADS, L::STAGE, W>(a, m, m, q0, depth, a_s);
    else
        chunks_copy_rows<T, L::THREADS, L::STAGE, L::A_ROW, W>(a, m, k, q0, depth, a_s);
    copies_commit();
}

// One chunk of a staged stage, steps [c0, c0 + steps) of the buffer, into acc (rows
// 4 rsel + i for A_T, else rsel + T / 4 i (rows A_ROW floats apart); columns c4 + j), FMAs in
// k order from +0.
template <int T, int A_ROW, bool A_T>
__device__ __forceinline__ void chunks_sum(const float* a_s, const float* b_s, int c0, int steps,
                                           int rsel, int c4, float (&acc)[4][4])
{
    constexpr int CH = ORDERED_CHUNK;
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
    if (A_T || steps < CH) {  // one step at a time (A_T: rows 4 rsel.. in one read)
        for (int q = c0; q < c0 + steps; ++q) {
            float av[4];
            if constexpr (A_T) {
                const float4 x = *reinterpret_cast<const float4*>(a_s + q * T + 4 * rsel);
                av[0] = x.x; av[1] = x.y; av[2] = x.z; av[3] = x.w;
            } else {
#pragma unroll
                for (int i = 0; i < 4; ++i) av[i] = a_s[(rsel + T / 4 * i) * A_ROW + q];
            }
            const float4 y = *reinterpret_cast<const float4*>(b_s + q * T + c4);
            const float bv[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fma_ieee(av[i], bv[j], acc[i][j]);
        }
        return;
    }
    if constexpr (!A_T) {  // a whole chunk, C-ordered A: 4 steps a read
#pragma unroll 2
        for (int q = c0; q < c0 + CH; q += 4) {
            float av[4][4], bv[4][4];  // [row][step], [step][col]
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const float4 x =
                    *reinterpret_cast<const float4*>(a_s + (rsel + T / 4 * i) * A_ROW + q);
                av[i][0] = x.x; av[i][1] = x.y; av[i][2] = x.z; av[i][3] = x.w;
                const float4 y = *reinterpret_cast<const float4*>(b_s + (q + i) * T + c4);
                bv[i][0] = y.x; bv[i][1] = y.y; bv[i][2] = y.z; bv[i][3] = y.w;
            }
#pragma unroll
            for (int u = 0; u < 4; ++u)
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        acc[i][j] = fma_ieee(av[i][u], bv[u][j], acc[i][j]);
        }
    }
}

// Segments [z_begin, z_end) of this block (count segments shared out evenly over the grid),
// each one's float64 totals to segments[z][row][col].
template <int T, int GROUPS, int STAGES, bool A_T, bool VEC>
__device__ __forceinline__ void ordered_chunks_impl(
    const float* __restrict__ a, const float* __restrict__ b, int m, int n, int k, int count,
    double* __restrict__ segments)
{
    using L = ChunksLayout<T, GROUPS, A_T>;
    static_assert(STAGES >= 2, "a stage in flight while one is summed");
    constexpr int SEGMENT = ORDERED_SEGMENT, OUTS = T * T / L::THREADS;
    static_assert(SEGMENT % L::STAGE == 0, "a segment is whole stages");
    extern __shared__ __align__(16) float shared[];
    float* const a_s = shared;                          // [STAGES][A_FLOATS]
    float* const b_s = shared + STAGES * L::A_FLOATS;  // [STAGES][STAGE][T]
    float(*const sums)[T][T + 1] =
        reinterpret_cast<float(*)[T][T + 1]>(shared + STAGES * (L::A_FLOATS + L::B_FLOATS));
    const int tid = threadIdx.x, group = tid / L::GROUP, g = tid % L::GROUP;
    const int rsel = g % (T / 4), c4 = g / (T / 4) * 4;
    const int z_begin = (int)((long long)blockIdx.x * count / gridDim.x);
    const int z_end = (int)((long long)(blockIdx.x + 1) * count / gridDim.x);
    const int q_begin = z_begin * SEGMENT;
    const int q_end = (int)min((long long)k, (long long)z_end * SEGMENT);
    const int stages = (q_end - q_begin + L::STAGE - 1) / L::STAGE;
    for (int t = 0; t < STAGES; ++t) {
        if (t < stages) {
            const int q0 = q_begin + t * L::STAGE;
            chunks_copy<T, GROUPS, A_T, VEC>(a, b, m, n, k, q0, min(L::STAGE, q_end - q0),
                                             a_s + t * L::A_FLOATS, b_s + t * L::B_FLOATS);
        } else {
            copies_commit();  // (an empty group: the same waits)
        }
    }
    double total[OUTS];
#pragma unroll
    for (int o = 0; o < OUTS; ++o) total[o] = 0.0;
    for (int t = 0; t < stages; ++t) {
        const int q0 = q_begin + t * L::STAGE, depth = min(L::STAGE, q_end - q0);
        const int c0 = group * L::CH, steps = min(L::CH, depth - c0);  // <= 0: no such chunk
        float* const a_buf = a_s + t % STAGES * L::A_FLOATS;
        float* const b_buf = b_s + t % STAGES * L::B_FLOATS;
        copies_wait<STAGES - 1>();  // this stage has landed ...
        __syncthreads();   // ... for every thread's copies
        if (steps > 0) {
            float acc[4][4];
            chunks_sum<T, L::A_ROW, A_T>(a_buf, b_buf, c0, steps, rsel, c4, acc);
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j)
                    sums[group][A_T ? 4 * rsel + i : rsel + T / 4 * i][c4 + j] = acc[i][j];
        }
        __syncthreads();  // the stage is read, the chunk sums written
        if (t + STAGES < stages) {  // into the buffer just read
            const int q2 = q0 + STAGES * L::STAGE;
            chunks_copy<T, GROUPS, A_T, VEC>(a, b, m, n, k, q2, min(L::STAGE, q_end - q2), a_buf,
                                             b_buf);
        } else {
            copies_commit();
        }
        const int chunks = (depth + L::CH - 1) / L::CH;
#pragma unroll
        for (int o = 0; o < OUTS; ++o) {
            const int e = tid + L::THREADS * o;
            for (int c = 0; c < chunks; ++c)
                total[o] = total[o] + widen_ieee(sums[c][e / T][e % T]);
        }
        if ((q0 + L::STAGE) % SEGMENT == 0 || q0 + L::STAGE >= q_end) {  // a segment ends
            const long long z = q0 / SEGMENT;
#pragma unroll
            for (int o = 0; o < OUTS; ++o) {
                const int e = tid + L::THREADS * o, row = e / T, col = e % T;
                if (row < m && col < n) segments[(z * m + row) * n + col] = total[o];
                total[o] = 0.0;
            }
        }
    }
}

// Where element e of rows `width` long lies (row r, column j) as e steps by `step`: the
// divisions once, then an add and a carry a step.
struct RowWalk {
    int r, j, step_r, step_j, width;
    __device__ RowWalk(int e, int step, int width)
        : r(e / width), j(e % width), step_r(step / width), step_j(step % width), width(width) {}
    __device__ __forceinline__ void next()
    {
        r += step_r;
        j += step_j;
        if (j >= width) { j -= width; ++r; }
    }
};

// ... and in a stack of matrices of `rows` such rows (matrix z, its row at.r, column at.j).
struct StackWalk {
    RowWalk at;
    int z, step_z, rows;
    __device__ StackWalk(int e, int step, int rows, int width)
        : at(e, step, width), z(at.r / rows), step_z(at.step_r / rows), rows(rows)
    {
        at.r %= rows;
        at.step_r %= rows;
    }
    __device__ __forceinline__ void next()
    {
        at.next();  // at.r < 2 rows: at most one carry into z
        z += step_z;
        if (at.r >= rows) { at.r -= rows; ++z; }
    }
};

// Stacks of small pairs (m, n <= T, k <= KMAX; C-contiguous): a block walks groups of PAIRS
// consecutive pairs (group blockIdx.x, + gridDim.x, ...), each group's operands copied
// asynchronously into one of STAGES stages while the previous group is summed: as the split-k
// kernel above, with pairs in place of chunks. Each thread takes a 4 x 4 block of one pair's
// outputs (rows T / 4 apart, 4 neighbouring columns; a warp's stores are whole rows) and walks
// its k in chunks, each chunk's float32 sum added into a float64 total, rounded once: the
// level's order for k within a segment (for k <= KMAX <= CHUNK the one chunk's sums give the
// totals). The copies' shared-memory offsets are worked out once (CopyPlan): ncu counted 33
// instructions a 16-byte copy when each copy divided its way to them, and the float64 totals
// cost 23 instructions an output, against 32 FMAs.
template <int T, int KMAX, int W, int THREADS_>
struct PairsLayout {
    static constexpr int THREADS = THREADS_;
    static constexpr int GROUP = T * T / 16, PAIRS = THREADS / GROUP;
    // A's rows padded by 4 floats (from when a quarter-warp read 8 rows; it now reads one row,
    // by broadcast, and kept as measured)
    static constexpr int A_ROW = KMAX + 4;
    static constexpr int A_PAIR = T * A_ROW, B_PAIR = KMAX * T;
    // A thread's copies of a group's A and B, at most (pieces of W floats)
    static constexpr int A_COPIES = (PAIRS * T * KMAX / W + THREADS - 1) / THREADS;
    static constexpr int B_COPIES = (PAIRS * KMAX * T / W + THREADS - 1) / THREADS;
    static_assert(PAIRS * A_PAIR <= 0xffff && PAIRS * B_PAIR <= 0xffff, "CopyPlan's offsets");
};

// Where a thread's copies of a group go in a stage: copy l takes piece threadIdx.x + THREADS l
// of the group's A (or B), one contiguous run of the stack, to float offset (*this)[l] of the
// stage's A (B). The same for every group, so worked out once (a StackWalk over [pair][line]
// [piece]) and kept in registers, two 16-bit offsets a word.
template <int COPIES>
struct CopyPlan {
    unsigned int packed[(COPIES + 1) / 2];
    __device__ CopyPlan(StackWalk walk, int line_floats, int pair_floats, int piece)
    {
#pragma unroll
        for (int l = 0; l < COPIES; ++l, walk.next()) {
            // (pieces past the stage, never copied, may wrap: masked to their half)
            const int to = walk.z * pair_floats + walk.at.r * line_floats + walk.at.j * piece;
            if (l % 2 == 0)
                packed[l / 2] = to & 0xffffu;
            else
                packed[l / 2] |= (to & 0xffffu) << 16;
        }
    }
    __device__ __forceinline__ int operator[](int l) const
    {
        return (packed[l / 2] >> (16 * (l % 2))) & 0xffff;
    }
};

// Group z0's pairs (those below count) into one stage, in pieces of W floats: A's rows to
// a_s[pair][row][A_ROW], B's k-rows to b_s[pair][q][T] (the plans: PairsLayout's); commits one
// group of copies.
template <class L, int W>
__device__ __forceinline__ void pairs_copy(const float* __restrict__ a, const float* __restrict__ b,
                                           int m, int n, int k, long long z0, int pairs,
                                           float* a_s, float* b_s,
                                           const CopyPlan<L::A_COPIES>& a_plan,
                                           const CopyPlan<L::B_COPIES>& b_plan)
{
    const float* const a_run = a + z0 * m * k + threadIdx.x * W;
    const int a_left = pairs * m * (k / W) - threadIdx.x;  // pieces from this thread's first
#pragma unroll
    for (int l = 0; l < L::A_COPIES; ++l)
        if (l * L::THREADS < a_left)
            copy_async<4 * W>(a_s + a_plan[l], a_run + l * L::THREADS * W, true);
    const float* const b_run = b + z0 * k * n + threadIdx.x * W;
    const int b_left = pairs * k * (n / W) - threadIdx.x;
#pragma unroll
    for (int l = 0; l < L::B_COPIES; ++l)
        if (l * L::THREADS < b_left)
            copy_async<4 * W>(b_s + b_plan[l], b_run + l * L::THREADS * W, true);
    copies_commit();
}

template <int T, int KMAX, bool VEC, int THREADS, int STAGES>
__device__ __forceinline__ void ordered_pairs_impl(
    const float* __restrict__ a, const float* __restrict__ b, int m, int n, int k,
    long long count, float* __restrict__ c)
{
    constexpr int CH = ORDERED_CHUNK, W = VEC ? 4 : 1;
    using L = PairsLayout<T, KMAX, W, THREADS>;
    extern __shared__ __align__(16) float shared[];  // [STAGES][PAIRS][A_PAIR], ...[B_PAIR]
    float* const a_s = shared;
    float* const b_s = shared + STAGES * L::PAIRS * L::A_PAIR;
    const int p = threadIdx.x / L::GROUP, g = threadIdx.x % L::GROUP;
    // A warp takes whole rows (T / 4 threads a row): its stores of C are whole 128-byte lines
    const int rsel = g / (T / 4), c4 = g % (T / 4) * 4;
    const long long groups = (count + L::PAIRS - 1) / L::PAIRS;
    const CopyPlan<L::A_COPIES> a_plan(StackWalk(threadIdx.x, THREADS, m, k / W), L::A_ROW,
                                       L::A_PAIR, W);
    const CopyPlan<L::B_COPIES> b_plan(StackWalk(threadIdx.x, THREADS, k, n / W), T, L::B_PAIR,
                                       W);
    const auto copy_group = [&](long long group, int buffer) {
        const long long z0 = group * L::PAIRS;
        pairs_copy<L, W>(a, b, m, n, k, z0, (int)min((long long)L::PAIRS, count - z0),
                         a_s + buffer * L::PAIRS * L::A_PAIR, b_s + buffer * L::PAIRS * L::B_PAIR,
                         a_plan, b_plan);
    };
    for (int t = 0; t < STAGES; ++t) {
        if (blockIdx.x + t * (long long)gridDim.x < groups)
            copy_group(blockIdx.x + t * (long long)gridDim.x, t);
        else
            copies_commit();  // (an empty group: the same waits)
    }
    int slot = 0;
    for (long long group = blockIdx.x; group < groups; group += gridDim.x) {
        const float* const a_pair = a_s + slot * L::PAIRS * L::A_PAIR + p * L::A_PAIR;
        const float* const b_pair = b_s + slot * L::PAIRS * L::B_PAIR + p * L::B_PAIR;
        const long long z = group * L::PAIRS + p;
        copies_wait<STAGES - 1>();  // this group has landed ...
        __syncthreads();   // ... for every thread's copies
        if (z < count) {
            float out[4][4];
            if constexpr (KMAX <= CH) {  // k is one chunk: its sums give the totals
                float acc[4][4];
                chunks_sum<T, L::A_ROW, false>(a_pair, b_pair, 0, k, rsel, c4, acc);
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) out[i][j] = one_chunk_total(acc[i][j]);
            } else {
                double total[4][4];
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) total[i][j] = 0.0;
                for (int c0 = 0; c0 < k; c0 += CH) {
                    float acc[4][4];
                    chunks_sum<T, L::A_ROW, false>(a_pair, b_pair, c0, min(CH, k - c0), rsel, c4,
                                                   acc);
#pragma unroll
                    for (int i = 0; i < 4; ++i)
#pragma unroll
                        for (int j = 0; j < 4; ++j)
                            total[i][j] = total[i][j] + widen_ieee(acc[i][j]);
                }
#pragma unroll
                for (int i = 0; i < 4; ++i)
#pragma unroll
                    for (int j = 0; j < 4; ++j) out[i][j] = canonical(total[i][j]);
            }
            float* const c_pair = c + z * m * n;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                const int row = rsel + T / 4 * i;
                if (row >= m) continue;
                if (VEC && c4 + 4 <= n) {
                    store_run<4>(c_pair + row * n + c4, out[i]);
                } else {
#pragma unroll
                    for (int j = 0; j < 4; ++j)
                        if (c4 + j < n) c_pair[row * n + c4 + j] = out[i][j];
                }
            }
        }
        __syncthreads();  // the stage is read: it may take the group STAGES on
        const long long next = group + STAGES * (long long)gridDim.x;
        if (next < groups)
            copy_group(next, slot);
        else
            copies_commit();
        if (++slot == STAGES) slot = 0;
    }
}

// Split-k, step 2: each entry's segment totals added in segment order, rounded once. A block
// takes TOTALS_WIDTH neighbouring entries, a lane of its first warp chaining each; its threads
// copy rounds of DEPTH segments of them into a ring of STAGES buffers in shared memory, all but
// one round in flight while the chains add the oldest (V = 2: 16-byte copies, where the entry
// count is even). Few entries a block spread the reads over many SMs, and deep rounds keep the
// chains fed: H100, 1024 entries, against 32 entries a block with one round of 64 in flight:
// 27.3 -> 14.6 us at 2048 segments, 52.5 -> 26.5 at 4096 (256 entries), about 10 cycles an
// addition (a chain from shared memory alone: 8); in whole split-k calls, 43.0 -> 39.6 us at
// 32 x 262144 x 32, 142 -> 127 at 32 x 2^20 x 32. Deeper rounds or rings, 1 to 16 entries a
// block and 32 to 256 threads measured no better.
template <int V>
__device__ __forceinline__ void segment_totals(const double* __restrict__ segments, int count,
                                               long long entries, float* __restrict__ c)
{
    constexpr int W = TOTALS_WIDTH, DEPTH = 128, STAGES = 4, THREADS = TOTALS_THREADS;
    static_assert(W <= 32 && W % V == 0 && DEPTH * W % (THREADS * V) == 0, "whole rounds a pass");
    __shared__ __align__(16) double part[STAGES][DEPTH][W];
    const long long e0 = blockIdx.x * (long long)W;
    const int lane = threadIdx.x % 32, rounds = (count + DEPTH - 1) / DEPTH;
    const auto copy_round = [&](int r) {  // (past the last round: an empty group)
        if (r < rounds) {
#pragma unroll
            for (int i = threadIdx.x * V; i < DEPTH * W; i += THREADS * V) {
                const int s = r * DEPTH + i / W, j = i % W;  // (V entries from j: all or none)
                const bool inside = s < count && e0 + j < entries;
                const double* src = inside ? segments + s * entries + e0 + j : segments;
                copy_async<8 * V>(&part[r % STAGES][i / W][j], src, inside);
            }
        }
        copies_commit();
    };
    for (int r = 0; r < STAGES - 1; ++r) copy_round(r);
    double total = 0.0;
    for (int r = 0; r < rounds; ++r) {
        copies_wait<STAGES - 2>();  // round r has landed ...
        __syncthreads();  // ... for every thread's copies, and round r - 1 is read
        copy_round(r + STAGES - 1);  // (into round r - 1's buffer)
        if (threadIdx.x < W) {
            const double(&round)[DEPTH][W] = part[r % STAGES];
            const int depth = min(DEPTH, count - r * DEPTH);
            if (depth == DEPTH) {
#pragma unroll
                for (int s = 0; s < DEPTH; ++s) total = total + round[s][lane];
            } else {
                for (int s = 0; s < depth; ++s) total = total + round[s][lane];
            }
        }
    }
    if (threadIdx.x < W && e0 + lane < entries) c[e0 + lane] = canonical(total);
}

extern "C" __global__ void __launch_bounds__(TOTALS_THREADS) ordered_segment_totals(
    const double* __restrict__ segments, int count, long long entries, float* __restrict__ c)
{
    segment_totals<1>(segments, count, entries, c);
}

extern "C" __global__ void __launch_bounds__(TOTALS_THREADS) ordered_segment_totals_vec(
    const double* __restrict__ segments, int count, long long entries, float* __restrict__ c)
{
    segment_totals<2>(segments, count, entries, c);
}
// The exported kernels (CuPy's RawModule looks them up by name). The tile kernels, one per tile
// size R (16 R x 16 R outputs a block), k within one segment or not:
#define ORDERED_PRODUCT(R, MIN_BLOCKS, SUFFIX, SEGMENTS)                                           \
extern "C" __global__ void __launch_bounds__(256, MIN_BLOCKS) ordered_product_##R##SUFFIX(         \
    const float* a, const float* b, int m, int n, int k, int batch0, float* c)                     \
{                                                                                                  \
    ordered_impl<R, 32, SEGMENTS>(a, b, m, n, k, batch0, c);                                       \
}
ORDERED_PRODUCT(1, 4, , false)
ORDERED_PRODUCT(1, 4, _segments, true)
ORDERED_PRODUCT(2, 4, , false)
ORDERED_PRODUCT(2, 4, _segments, true)
ORDERED_PRODUCT(4, 2, , false)
ORDERED_PRODUCT(4, 2, _segments, true)
#undef ORDERED_PRODUCT

// ... the small-stack kernels, staging 16 or 32 k-steps:
#define ORDERED_STACK(STEP)                                                                        \
extern "C" __global__ void __launch_bounds__(256, 4) ordered_stack_##STEP(                         \
    const float* a, const float* b, int m, int n, int k, long long count, float* c)                \
{                                                                                                  \
    ordered_stack_impl<1, STEP>(a, b, m, n, k, count, c);                                          \
}
ORDERED_STACK(16)
ORDERED_STACK(32)
#undef ORDERED_STACK

// ... the split-k kernels, one per shape of CHUNKS_SHAPES (from geometry.py: T, chunks summed at
// once, stages), A row-major or transposed (_at), 4- or 16-byte copies (_vec):
#define ORDERED_CHUNKS_ENTRY(T, GROUPS, STAGES, SUFFIX, A_T, VEC)                                  \
extern "C" __global__ void __launch_bounds__(GROUPS * T * T / 16)                                  \
ordered_chunks_##T##SUFFIX(                                                                        \
    const float* a, const float* b, int m, int n, int k, int count, double* segments)              \
{                                                                                                  \
    ordered_chunks_impl<T, GROUPS, STAGES, A_T, VEC>(a, b, m, n, k, count, segments);              \
}
#define ORDERED_CHUNKS(T, GROUPS, STAGES)                                                          \
    ORDERED_CHUNKS_ENTRY(T, GROUPS, STAGES, , false, false)                                        \
    ORDERED_CHUNKS_ENTRY(T, GROUPS, STAGES, _vec, false, true)                                     \
    ORDERED_CHUNKS_ENTRY(T, GROUPS, STAGES, _at, true, false)                                      \
    ORDERED_CHUNKS_ENTRY(T, GROUPS, STAGES, _at_vec, true, true)
CHUNKS_SHAPES(ORDERED_CHUNKS)
#undef ORDERED_CHUNKS_ENTRY
#undef ORDERED_CHUNKS

// ... the small-pairs kernels, one per shape of PAIRS_SHAPES (from geometry.py: T, the longest
// k, threads), 4- or 16-byte copies (_vec):
#define ORDERED_PAIRS_ENTRY(T, KMAX, THREADS, SUFFIX, VEC)                                         \
extern "C" __global__ void __launch_bounds__(THREADS)                                              \
ordered_pairs_##T##SUFFIX(                                                                         \
    const float* a, const float* b, int m, int n, int k, long long count, float* c)                \
{                                                                                                  \
    ordered_pairs_impl<T, KMAX, VEC, THREADS, PAIRS_STAGES>(a, b, m, n, k, count, c);              \
}
#define ORDERED_PAIRS(T, KMAX, THREADS)                                                            \
    ORDERED_PAIRS_ENTRY(T, KMAX, THREADS, , false)                                                 \
    ORDERED_PAIRS_ENTRY(T, KMAX, THREADS, _vec, true)
PAIRS_SHAPES(ORDERED_PAIRS)
#undef ORDERED_PAIRS_ENTRY
#undef ORDERED_PAIRS

// ... and the split-k kernels of a block per 64 x 64 output tile and segment:
#define ORDERED_SEGMENTS(SUFFIX, A_T)                                                              \
extern "C" __global__ void __launch_bounds__(256, 2) ordered_segments##SUFFIX(                     \
    const float* a, const float* b, int m, int n, int k, int segment0, double* segments)           \
{                                                                                                  \
    ordered_segments_impl<4, A_T>(a, b, m, n, k, segment0, segments);                              \
}
ORDERED_SEGMENTS(, false)
ORDERED_SEGMENTS(_at, true)
#undef ORDERED_SEGMENTS
