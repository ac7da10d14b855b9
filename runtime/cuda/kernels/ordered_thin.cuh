// Thin products in level fp32-ordered's order (TSM2L's shape: many rows of A, k and n at most
// a chunk; launched from fp32_ordered.py): one thread per row of A and G columns, B in shared
// memory (read by broadcast). Blocks walk tiles of THIN_THREADS rows: a tile is contiguous in A,
// copied as one run (cp.async, 16-byte pieces where k is a multiple of 4 and A aligned) into one
// of THIN_STAGES stage buffers, so that THIN_STAGES - 1 tiles are on their way while one is
// summed. Each thread runs its G FMA chains over its row's k steps (one chunk: the total is that
// chain's sum); the outputs go back through shared memory for coalesced (16-byte where n is a
// multiple of 4) stores (each thread storing its own row measured 15% slower at 1048576 x 16 x 16
// on an H100). A stage row is k floats padded so that a warp's reads of its rows hit distinct
// banks: an odd count of floats (4-byte reads) or of float4s (16-byte reads). The kernel was short
// of issue slots (ncu): its loops do no divisions (RowWalk) and read A 16 bytes at a time.

#include "device.cuh"
#include "ordered.cuh"

template <bool VEC>
__device__ __forceinline__ int thin_stride(int k)
{
    return VEC ? 4 * ((k / 4) | 1) : k | 1;
}

// Tile `tile`'s rows (rows * k floats from a + row0 k) into a stage, row r at stage + r stride,
// in pieces of 4 floats where VEC (else 1); `walk`: this thread's first piece, by rows of pieces.
template <bool VEC>
__device__ __forceinline__ void thin_copy(const float* __restrict__ a, long long m, int k,
                                          long long tile, float* stage, RowWalk walk)
{
    constexpr int ROWS = THIN_THREADS, PIECE = VEC ? 4 : 1;
    const long long row0 = tile * ROWS;
    const float* run = a + row0 * k;
    const int pieces = (int)min((long long)ROWS, m - row0) * (k / PIECE);
    const int stride = thin_stride<VEC>(k);
    for (int p = threadIdx.x; p < pieces; p += ROWS, walk.next())
        copy_async<4 * PIECE>(stage + walk.r * stride + walk.j * PIECE, run + p * PIECE, true);
    copies_commit();
}

template <int G, bool VEC>
__device__ __forceinline__ void ordered_thin_impl(
    const float* __restrict__ a, const float* __restrict__ b, long long m, int n, int k,
    float* __restrict__ c)
{
    constexpr int CH = ORDERED_CHUNK, ROWS = THIN_THREADS, STAGES = THIN_STAGES;
    extern __shared__ __align__(16) float shared[];
    float* const b_s = shared;              // [CH][G]
    float* const stages = shared + CH * G;  // [STAGES][ROWS][stride]
    const int stride = thin_stride<VEC>(k);
    // The outputs, staged [ROWS][OUT_STRIDE]: a row's G floats padded to an odd count of
    // float4s, each thread writing and reading 16 bytes at a time.
    constexpr int OUT_STRIDE = 4 * ((G / 4) | 1);
    float* const out_s = stages + STAGES * ROWS * stride;
    for (int i = threadIdx.x; i < CH * G; i += ROWS) {
        const int q = i / G, j = i % G;
        b_s[i] = (q < k && j < n) ? b[q * n + j] : 0.0f;
    }
    // This thread's first copied piece of a tile and first stored output (4 at a time where n
    // is a multiple of 4), and their steps.
    const RowWalk copy_walk(threadIdx.x, ROWS, VEC ? k / 4 : k);
    const int run = n % 4 == 0 ? 4 : 1;
    const RowWalk store_walk(run * threadIdx.x, run * ROWS, n);
    const long long tiles = (m + ROWS - 1) / ROWS;
    for (int s = 0; s < STAGES - 1; ++s) {
        const long long tile = blockIdx.x + (long long)s * gridDim.x;
        if (tile < tiles)
            thin_copy<VEC>(a, m, k, tile, stages + s * ROWS * stride, copy_walk);
        else
            copies_commit();  // (an empty group: the same waits)
    }
    int s = 0;  // the stage of this block's i-th tile: i % STAGES
    for (long long tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
        // The tile STAGES - 1 ahead goes into the stage summed last time round.
        const long long ahead = tile + (long long)(STAGES - 1) * gridDim.x;
        float* const free = stages + (s + STAGES - 1) % STAGES * ROWS * stride;
        if (ahead < tiles)
            thin_copy<VEC>(a, m, k, ahead, free, copy_walk);
        else
            copies_commit();
        copies_wait<STAGES - 1>();  // this tile has landed ...
        __syncthreads();            // ... for every thread's copies (and b_s is written)
        const long long row0 = tile * ROWS;
        const int rows = (int)min((long long)ROWS, m - row0);
        float acc[G];
#pragma unroll
        for (int j = 0; j < G; ++j) acc[j] = 0.0f;
        const float* a_row = stages + s * ROWS * stride + threadIdx.x * stride;
        if constexpr (VEC) {
            for (int q = 0; q < k; q += 4) {
                float x[4];
                load_run<4>(a_row + q, x);
#pragma unroll
                for (int u = 0; u < 4; ++u)
#pragma unroll
                    for (int j = 0; j < G; j += 4) {
                        float y[4];
                        load_run<4>(b_s + (q + u) * G + j, y);
#pragma unroll
                        for (int v = 0; v < 4; ++v) acc[j + v] = fma_ieee(x[u], y[v], acc[j + v]);
                    }
            }
        } else {
            for (int q = 0; q < k; ++q)
#pragma unroll
                for (int j = 0; j < G; ++j) acc[j] = fma_ieee(a_row[q], b_s[q * G + j], acc[j]);
        }
#pragma unroll
        for (int j = 0; j < G; j += 4) {
            const float v[4] = {one_chunk_total(acc[j]), one_chunk_total(acc[j + 1]),
                                one_chunk_total(acc[j + 2]), one_chunk_total(acc[j + 3])};
            store_run<4>(out_s + threadIdx.x * OUT_STRIDE + j, v);
        }
        __syncthreads();  // the tile is read (its stage free again), the outputs staged
        float* out = c + row0 * n;
        RowWalk at = store_walk;
        for (int e = run * threadIdx.x; e < rows * n; e += run * ROWS, at.next()) {
            const float* o = out_s + at.r * OUT_STRIDE + at.j;
            if (run == 4) {  // C is fresh (aligned) and row0 n a multiple of 4, as is at.j
                float v[4];
                load_run<4>(o, v);
                store_run<4>(out + e, v);
            } else {
                out[e] = o[0];
            }
        }
        __syncthreads();  // out_s is read
        s = (s + 1) % STAGES;
    }
}
// The exported kernels, one per column group G (4 to THIN_MAX_N = 32), 4- or 16-byte copies of
// A (_vec):
#define ORDERED_THIN_ENTRY(G, SUFFIX, VEC)                                                         \
extern "C" __global__ void __launch_bounds__(THIN_THREADS)                                         \
ordered_thin_##G##SUFFIX(const float* a, const float* b, long long m, int n, int k, float* c)      \
{                                                                                                  \
    ordered_thin_impl<G, VEC>(a, b, m, n, k, c);                                                   \
}
#define ORDERED_THIN(G) ORDERED_THIN_ENTRY(G, , false) ORDERED_THIN_ENTRY(G, _vec, true)
ORDERED_THIN(4)
ORDERED_THIN(8)
ORDERED_THIN(16)
ORDERED_THIN(32)
#undef ORDERED_THIN_ENTRY
#undef ORDERED_THIN
