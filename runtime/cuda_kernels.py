"""CUDA C source of the packer and combine kernels (compiled by CuPy at first use).

They implement ``packer`` and ``combine`` with the same IEEE operations, so the integers they
produce and the float32 results are the CPU oracle's, bit for bit. Layout: a packed operand is
(lines, slots, k_pad) int8, one row of A or one column of B per line, the line's slices side by
side along k. B's slices are stored in reverse order, so the slices (i, g - i) of one weight class
g are two contiguous spans and one GEMM over K = count * k_pad sums the whole class.
"""

from __future__ import annotations

from string import Template

from . import bypass, combine, equilibrate, fp16split, ordered, packer

ROWS_THREADS = 128  # threads (rows of A) per block of the tall kernels (ordered_rows)
THIN_THREADS = 256  # ... and of the thin ones (ordered_thin)
COLUMN_TILE_K = 128  # k-indices per shared tile of B's column packing (8 warps x 16)
# The contract's constants, formatted into the sources as ${NAME}: one definition, in Python.
CONSTANTS = {
    "FIRST_SLICE_BITS": packer.FIRST_SLICE_BITS,
    "LATER_SLICE_BITS": packer.LATER_SLICE_BITS,
    "DIGIT_HALF": packer.DIGIT_HALF,
    "DIGIT_MASK": packer.DIGIT_MASK,
    "HEADROOM_NUM": packer.HEADROOM_NUMERATOR,
    "HEADROOM_DEN": packer.HEADROOM_DENOMINATOR,
    "ROW_TOP_EXPONENT": fp16split.ROW_TOP_EXPONENT,
    "LO_SHIFT": fp16split.LO_SHIFT,
    "OVERFLOW_THRESHOLD": combine.OVERFLOW_THRESHOLD.hex(),  # a C99 hex literal: exact
    "DEAD": int(equilibrate.DEAD),
    "IMBALANCE": equilibrate.IMBALANCE_BINADES,
    "DEEP_FRACTION": bypass.DEEP_FRACTION,
    "NO_BYPASS": bypass.NO_BYPASS,
    "ORDERED_CHUNK": ordered.CHUNK,
    "ORDERED_SEGMENT": ordered.SEGMENT,
    "ROWS_THREADS": ROWS_THREADS,
    "THIN_THREADS": THIN_THREADS,
    "COLUMN_TILE_K": COLUMN_TILE_K,
}

# Device helpers both modules use, defined once. CuPy compiles every kernel with -ftz=true
# (user options cannot undo it), which flushes subnormal operands and results of float32
# instructions to zero: so the kernels never do float32 arithmetic on data. They read float32
# values as bits (magnitudes compare as unsigned integers), widen them to double exactly, compute
# in double, and round back to float32 with their own subnormal-aware rounding.
DEVICE_HELPERS = r"""
#include <cuda_fp16.h>

// 2^e as a double, built from its bits (exact for -1022 <= e <= 1023); x * pow2(e) equals
// ldexp(x, e) whenever the result is a normal double, which the contract guarantees here.
__device__ __forceinline__ double pow2(int e)
{
    return __longlong_as_double((long long)(e + 1023) << 52);
}

// |x| as float32 bits: for finite values, unsigned order is magnitude order.
__device__ __forceinline__ unsigned int magnitude_bits(float x)
{
    return __float_as_uint(x) & 0x7fffffffu;
}

__device__ __forceinline__ bool finite_bits(float x)
{
    return magnitude_bits(x) < 0x7f800000u;
}

// float32 -> float64, exactly, subnormals, infinities and NaN payloads included.
__device__ __forceinline__ double exact_double(float x)
{
    const unsigned int u = __float_as_uint(x);
    const unsigned long long sign = (unsigned long long)(u >> 31) << 63;
    const unsigned int exponent = (u >> 23) & 0xffu, fraction = u & 0x7fffffu;
    if (exponent == 0) {  // zero or subnormal: fraction * 2^-149, exact in double
        const double v = (double)fraction * pow2(-149);
        return sign ? -v : v;
    }
    const unsigned long long e64 = exponent == 0xffu ? 0x7ffull : exponent - 127ull + 1023ull;
    const unsigned long long bits = sign | (e64 << 52) | ((unsigned long long)fraction << 29);
    return __longlong_as_double((long long)bits);
}

__device__ __forceinline__ double exact_double(double x) { return x; }
__device__ __forceinline__ double exact_double(int x) { return (double)x; }

// float64 -> float32, round to nearest even, subnormal results kept (NumPy's astype).
__device__ __forceinline__ float round_to_float(double d)
{
    if (!(fabs(d) < pow2(-126))) return (float)d;  // normal, overflow to inf, or NaN
    const int m = __double2int_rn(fabs(d) * pow2(149));  // < 2^23 (2^23: the smallest normal)
    return __uint_as_float((signbit(d) ? 0x80000000u : 0u) | (unsigned int)m);
}

// combine.saturate: float32(v), or +-FLT_MAX where v would overflow only by less than the
// level's error bound k_slack * 2^scale.
__device__ __forceinline__ float saturate(double v, int scale, double k_slack)
{
    if (fabs(v) >= ${OVERFLOW_THRESHOLD} && fabs(v) - k_slack * pow2(scale) < ${OVERFLOW_THRESHOLD})
        return __uint_as_float((signbit(v) ? 0x80000000u : 0u) | 0x7f7fffffu);
    return round_to_float(v);
}

// The canonical quiet NaN every backend writes (nonfinite.py).
__device__ __forceinline__ float canonical(double d)
{
    return isnan(d) ? __uint_as_float(0x7fc00000u) : round_to_float(d);
}
"""

PACK_SOURCE = r"""
// equilibrate: an entry at k-index q, scaled by 2^(sign * f[q]) exactly; a dead k-index and a
// non-finite entry give 0 (the entry's NaN/Inf is flagged separately, from its own bits).
__device__ __forceinline__ double rebalanced(float v, int f, int sign)
{
    return (f == ${DEAD} || !finite_bits(v)) ? 0.0 : exact_double(v) * pow2(sign * f);
}

// Largest |value| (of rebalanced values, so finite) over the block, returned to every thread;
// *any_bad flags a NaN/Inf among the original entries.
__device__ double block_max(double top, int bad, int* any_bad)
{
    __shared__ double block_top[32];
    __shared__ int block_bad[32];
    for (int offset = 16; offset > 0; offset >>= 1) {
        top = fmax(top, __shfl_xor_sync(0xffffffffu, top, offset));
        bad |= __shfl_xor_sync(0xffffffffu, bad, offset);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) { block_top[warp] = top; block_bad[warp] = bad; }
    __syncthreads();
    if (warp == 0) {
        const int warps = blockDim.x >> 5;
        top = lane < warps ? block_top[lane] : 0.0;
        bad = lane < warps ? block_bad[lane] : 0;
        for (int offset = 16; offset > 0; offset >>= 1) {
            top = fmax(top, __shfl_xor_sync(0xffffffffu, top, offset));
            bad |= __shfl_xor_sync(0xffffffffu, bad, offset);
        }
        if (lane == 0) { block_top[0] = top; block_bad[0] = bad; }
    }
    __syncthreads();
    *any_bad = block_bad[0];
    return block_top[0];
}

// row[c .. c + 3] (c % 4 == 0), as one 16-byte load when the row is 16-byte aligned and
// they lie within k; entries past k read as 0.
__device__ __forceinline__ void load_row4(const float* __restrict__ row, int c, int k,
                                          float (&v)[4])
{
    if (c + 3 < k && (reinterpret_cast<unsigned long long>(row) & 15u) == 0) {
        const float4 q = *reinterpret_cast<const float4*>(row + c);
        v[0] = q.x; v[1] = q.y; v[2] = q.z; v[3] = q.w;
        return;
    }
    for (int t = 0; t < 4; ++t) v[t] = c + t < k ? row[c + t] : 0.0f;
}

// Largest rebalanced |row[c]| of a line (k-index c), and its NaN/Inf flag; kexp[k] says
// whether any k-index moves (else magnitudes compare as bits, the cheap way).
__device__ double line_max(const float* __restrict__ row, int k, const int* __restrict__ kexp,
                           int sign, int* any_bad)
{
    double top = 0.0;
    int bad = 0;
    unsigned int bits = 0u;  // no k-index moves: magnitudes compare as bits
    const bool moves = kexp[k] != 0;
    for (int c = 4 * threadIdx.x; c < k; c += 4 * blockDim.x) {
        float v[4];
        load_row4(row, c, k, v);
        for (int t = 0; t < 4 && c + t < k; ++t) {
            if (moves) {
                bad |= !finite_bits(v[t]);
                top = fmax(top, fabs(rebalanced(v[t], kexp[c + t], sign)));
            } else {
                const unsigned int m = magnitude_bits(v[t]);
                if (m < 0x7f800000u) bits = max(bits, m); else bad = 1;
            }
        }
    }
    top = fmax(top, exact_double(__uint_as_float(bits)));
    return block_max(top, bad, any_bad);
}

// equilibrate.k_exponents, step 1: the largest finite |x| of each column of a row-major
// (rows, cols) matrix, as float32 magnitude bits (unsigned order is magnitude order); blocks
// of 32 columns x 8 row strips, merged with atomicMax into a zeroed out. Stacks: matrix z =
// blockIdx.z + batch0 starts z * batch_stride floats into x, its maxima z * cols into out.
extern "C" __global__ void column_max_bits(
    const float* __restrict__ x, long long row_stride, int rows, int cols, int rows_per_block,
    long long batch_stride, int batch0, unsigned int* __restrict__ out)
{
    __shared__ unsigned int part[8][32];
    const long long z = blockIdx.z + (long long)batch0;
    x += z * batch_stride;
    out += z * cols;
    const int tx = threadIdx.x, ty = threadIdx.y, col = blockIdx.x * 32 + tx;
    const int first = blockIdx.y * rows_per_block;
    const int last = min(rows, first + rows_per_block);
    unsigned int top = 0u;
    if (col < cols)
#pragma unroll 8
        for (int r = first + ty; r < last; r += 8) {
            const unsigned int v = magnitude_bits(x[r * row_stride + col]);
            if (v < 0x7f800000u) top = max(top, v);
        }
    part[ty][tx] = top;
    __syncthreads();
    if (ty == 0 && col < cols) {
        for (int j = 1; j < 8; ++j) top = max(top, part[j][tx]);
        atomicMax(out + col, top);
    }
}

// ... and of each row (one block per row).
extern "C" __global__ void row_max_bits(
    const float* __restrict__ x, long long row_stride, int cols, unsigned int* __restrict__ out)
{
    const float* row = x + blockIdx.x * row_stride;
    unsigned int bits = 0u;
    for (int c = 4 * threadIdx.x; c < cols; c += 4 * blockDim.x) {
        float v[4];
        load_row4(row, c, cols, v);  // entries past cols read as 0
        for (int t = 0; t < 4; ++t) {
            const unsigned int m = magnitude_bits(v[t]);
            if (m < 0x7f800000u) bits = max(bits, m);
        }
    }
    int bad = 0;
    const double top = block_max(exact_double(__uint_as_float(bits)), 0, &bad);
    if (threadIdx.x == 0) out[blockIdx.x] = magnitude_bits(round_to_float(top));  // exact
}

// equilibrate.k_exponents, step 2: f_q = floor(gap / 2) when the binades of A's column q and
// B's row q lie more than IMBALANCE apart, 0 within the band, DEAD when either is all zero.
// f[k] (one past the exponents) is set to 1 when any k-index moves or is dead: the packers
// read it once per block and, when 0, skip the rebalancing arithmetic. Stacks: pair z =
// blockIdx.y + batch0 has its maxima at z * k and its exponents at z * (k + 1).
extern "C" __global__ void k_exponents(
    const unsigned int* __restrict__ a_top, const unsigned int* __restrict__ b_top, int k,
    int batch0, int* __restrict__ f)
{
    const long long z = blockIdx.y + (long long)batch0;
    a_top += z * k;
    b_top += z * k;
    f += z * (k + 1);
    const int q = blockIdx.x * blockDim.x + threadIdx.x;
    if (q >= k) return;
    int fq = ${DEAD};
    if (a_top[q] != 0u && b_top[q] != 0u) {
        int ea, eb;
        frexp(exact_double(__uint_as_float(a_top[q])), &ea);
        frexp(exact_double(__uint_as_float(b_top[q])), &eb);
        const int gap = ea - eb;
        fq = abs(gap) > ${IMBALANCE} ? (gap >> 1) : 0;  // >> 1 floors, like Python's // 2
    }
    f[q] = fq;
    if (fq != 0) atomicOr(f + k, 1);
}

// packer.scale_exponents: the smallest e with top < (127/128) 2^e.
__device__ __forceinline__ int scale_exponent(double top)
{
    int e;
    frexp(top, &e);
    return top * ${HEADROOM_DEN}.0 >= ldexp(${HEADROOM_NUM}.0, e) ? e + 1 : e;
}

// bypass.unresolved: an entry is deep when 0 < |v| < 2^(e - deep - 1); a line with more than
// k / DEEP_FRACTION deep entries is unresolved. deep == NO_BYPASS: the level bypasses no line.
__device__ __forceinline__ double deep_floor(int e, int deep)
{
    return deep == ${NO_BYPASS} ? 0.0 : pow2(e - deep - 1);
}

__device__ __forceinline__ int is_deep(double v, double floor)
{
    return v != 0.0 && fabs(v) < floor;
}

__device__ __forceinline__ int unresolved(int count, int k)
{
    return (long long)count * ${DEEP_FRACTION} > k;
}

// Sum over the block (block_max's pattern), returned to every thread.
__device__ int block_sum(int value)
{
    __shared__ int block_total[32];
    for (int offset = 16; offset > 0; offset >>= 1)
        value += __shfl_xor_sync(0xffffffffu, value, offset);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    __syncthreads();  // block_total may still be read by a previous call
    if (lane == 0) block_total[warp] = value;
    __syncthreads();
    if (warp == 0) {
        value = lane < (blockDim.x >> 5) ? block_total[lane] : 0;
        for (int offset = 16; offset > 0; offset >>= 1)
            value += __shfl_xor_sync(0xffffffffu, value, offset);
        if (lane == 0) block_total[0] = value;
    }
    __syncthreads();
    return block_total[0];
}

// packer.fraction_bits: P(s) = FIRST + LATER (s - 1).
__device__ __forceinline__ int fraction_bits(int slices)
{
    return ${FIRST_SLICE_BITS} + ${LATER_SLICE_BITS} * (slices - 1);
}

// packer.slice_rows for four consecutive rebalanced values: their digits, one 4-byte word per
// slot, slots slot_stride bytes apart (dst 4-aligned). |X| < 127 * 2^24 for up to 4 slices, so
// 32-bit integers hold it; __double2int_rn rounds half to even like rint.
__device__ __forceinline__ void write_digits4(const double v[4], int shift, int slices,
                                              int reversed, signed char* dst, long long slot_stride)
{
    int rest[4];
    for (int t = 0; t < 4; ++t) rest[t] = __double2int_rn(v[t] * pow2(shift));
    for (int i = slices - 1; i >= 0; --i) {
        char4 word;
        signed char* bytes = reinterpret_cast<signed char*>(&word);
        for (int t = 0; t < 4; ++t) {
            const int low = i > 0 ? ((rest[t] + ${DIGIT_HALF}) & ${DIGIT_MASK}) - ${DIGIT_HALF}
                                  : rest[t];
            bytes[t] = (signed char)low;
            rest[t] = (rest[t] - low) >> ${LATER_SLICE_BITS};
        }
        *reinterpret_cast<char4*>(dst + (reversed ? slices - 1 - i : i) * slot_stride) = word;
    }
}

// One line per block: A's rows (sign -1) or B's columns read as rows of B^T (sign +1). Stacks:
// lines_per_batch consecutive lines share one pair's k-exponents (k + 1 entries each).
extern "C" __global__ void pack_int8(
    const float* __restrict__ x, long long line_stride, int k, int k_pad,
    const int* __restrict__ kexp, int lines_per_batch, int sign, int slices, int reversed,
    int deep, signed char* __restrict__ out, int* __restrict__ exps, int* __restrict__ nonfinite)
{
    const long long line = blockIdx.x;
    const float* row = x + line * line_stride;
    kexp += (line / lines_per_batch) * (k + 1LL);
    int bad;
    const double top = line_max(row, k, kexp, sign, &bad);

    const int e = scale_exponent(top);
    const double floor = deep_floor(e, deep);
    int count = 0;
    const int shift = fraction_bits(slices) - e;
    signed char* dst = out + line * (long long)slices * k_pad;
    for (int c = 4 * threadIdx.x; c < k_pad; c += 4 * blockDim.x) {  // k_pad % 16 == 0
        float x4[4];
        load_row4(row, c, k, x4);
        double v[4];
        for (int t = 0; t < 4; ++t) {
            v[t] = c + t < k ? rebalanced(x4[t], kexp[c + t], sign) : 0.0;
            count += is_deep(v[t], floor);
        }
        write_digits4(v, shift, slices, reversed, dst + c, k_pad);
    }
    count = block_sum(count);
    if (threadIdx.x == 0) { exps[line] = e; nonfinite[line] = bad | unresolved(count, k); }
}

// pack_int8 for the columns of a row-major (k, n) B without a transposed copy (row q of B is
// k-index q: scaled by 2^f[q]). A block of 32 x 8 threads takes a strip of 32 columns: thread
// (tx, ty) reads column tx at rows ty, ty + 8, ... (coalesced along B's rows) and writes the
// digits of column tx for k-indices 16 ty .. 16 ty + 15 of each tile of ${COLUMN_TILE_K}: one
// 16-byte store per slot; the block's eight warps fill 128 bytes of each column together.
// Stacks: matrix z starts z * batch_stride floats into x; its n lines follow those of the
// matrices before it.

// The largest rebalanced |value| of column col over rows [q_begin, q_end) into *top, NaN/Inf
// into *bad; up to 16 loads in flight per thread.
__device__ __forceinline__ void strip_max(
    const float* __restrict__ x, long long row_stride, int col, int q_begin, int q_end,
    const int* __restrict__ kexp, bool moves, double* top, int* bad)
{
    unsigned int bits = 0u;  // no k-index moves: magnitudes compare as bits
    for (int q0 = q_begin + threadIdx.y; q0 < q_end; q0 += 8 * 16) {
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            const int q = q0 + 8 * r;
            if (q < q_end) {
                const float v = x[q * row_stride + col];
                if (moves) {
                    *bad |= !finite_bits(v);
                    *top = fmax(*top, fabs(rebalanced(v, kexp[q], 1)));
                } else {
                    const unsigned int m = magnitude_bits(v);
                    if (m < 0x7f800000u) bits = max(bits, m); else *bad = 1;
                }
            }
        }
    }
    *top = fmax(*top, exact_double(__uint_as_float(bits)));
}

// write_digits4 for 16 consecutive values: one 16-byte word per slot (dst 16-byte aligned).
__device__ __forceinline__ void write_digits16(const double (&v)[16], int shift, int slices,
                                               int reversed, signed char* dst,
                                               long long slot_stride)
{
    int rest[16];
#pragma unroll
    for (int t = 0; t < 16; ++t) rest[t] = __double2int_rn(v[t] * pow2(shift));
    for (int i = slices - 1; i >= 0; --i) {
        unsigned int word[4] = {0u, 0u, 0u, 0u};
#pragma unroll
        for (int t = 0; t < 16; ++t) {
            const int low = i > 0 ? ((rest[t] + ${DIGIT_HALF}) & ${DIGIT_MASK}) - ${DIGIT_HALF}
                                  : rest[t];
            word[t >> 2] |= ((unsigned int)low & 0xffu) << (8 * (t & 3));  // little-endian
            rest[t] = (rest[t] - low) >> ${LATER_SLICE_BITS};
        }
        *reinterpret_cast<uint4*>(dst + (reversed ? slices - 1 - i : i) * slot_stride) =
            make_uint4(word[0], word[1], word[2], word[3]);
    }
}

// The digits of the strip's columns col0 .. col0 + 31 for k-indices [q_begin, q_end) (both
// multiples of 16, q_begin of the tile): this thread's column is col0 + threadIdx.x; returns
// how many of its values are deep (bypass).
__device__ int strip_digits(
    const float* __restrict__ x, long long row_stride, int k, int n, int k_pad, int col0,
    int q_begin, int q_end, const int* __restrict__ kexp, int shift, double floor, int slices,
    int reversed, signed char* __restrict__ out)
{
    __shared__ float tile[${COLUMN_TILE_K}][33];  // raw values, rebalanced below
    __shared__ int tile_kexp[${COLUMN_TILE_K}];
    const int tx = threadIdx.x, ty = threadIdx.y, t = ty * 32 + tx;
    const int col = col0 + tx;
    int count = 0;
    for (int q0 = q_begin; q0 < q_end; q0 += ${COLUMN_TILE_K}) {
        for (int i = t; i < ${COLUMN_TILE_K} * 32; i += 256) {
            const int row = i >> 5, c = col0 + (i & 31), q = q0 + row;
            tile[row][i & 31] = (q < k && c < n) ? x[q * row_stride + c] : 0.0f;
        }
        if (t < ${COLUMN_TILE_K}) tile_kexp[t] = q0 + t < k ? kexp[q0 + t] : 0;
        __syncthreads();
        const int first = q0 + 16 * ty;
        if (col < n && first < q_end) {
            double v[16];
#pragma unroll
            for (int i = 0; i < 16; ++i) {
                v[i] = rebalanced(tile[16 * ty + i][tx], tile_kexp[16 * ty + i], 1);
                count += is_deep(v[i], floor);
            }
            write_digits16(v, shift, slices, reversed,
                           out + (long long)col * slices * k_pad + first, k_pad);
        }
        __syncthreads();
    }
    return count;
}

// Sum of the 8 threads of each column (threadIdx.y), to threadIdx.y == 0.
__device__ __forceinline__ int column_sum(int value)
{
    __shared__ int part[8][32];
    __syncthreads();  // part may still be read by a previous call
    part[threadIdx.y][threadIdx.x] = value;
    __syncthreads();
    if (threadIdx.y == 0)
        for (int j = 1; j < 8; ++j) value += part[j][threadIdx.x];
    return value;
}

// Three steps over a grid of (strips) x (chunks of `chunk` k-indices, a multiple of
// ${COLUMN_TILE_K}) x (matrices: blockIdx.z + batch0), so B's columns fill the GPU at any n.
//
// Step 1: the largest rebalanced |value| of each column, merged with atomicMax into the zeroed
// `tops` (non-negative doubles order as their bits), NaN/Inf into the zeroed `bad`.
extern "C" __global__ void column_tops(
    const float* __restrict__ x, long long row_stride, int k, int n,
    const int* __restrict__ kexp, int chunk, long long batch_stride, int batch0,
    unsigned long long* __restrict__ tops, int* __restrict__ bad)
{
    const long long z = blockIdx.z + (long long)batch0;
    x += z * batch_stride;
    kexp += z * (k + 1);
    __shared__ double part_top[8][32];
    const int tx = threadIdx.x, ty = threadIdx.y, col = blockIdx.x * 32 + tx;
    double top = 0.0;
    int any_bad = 0;
    if (col < n)
        for (int q0 = blockIdx.y * chunk; q0 < k; q0 += gridDim.y * chunk)
            strip_max(x, row_stride, col, q0, min(k, q0 + chunk), kexp, kexp[k] != 0, &top,
                      &any_bad);
    part_top[ty][tx] = top;
    any_bad = column_sum(any_bad);
    if (ty == 0 && col < n) {
        for (int j = 1; j < 8; ++j) top = fmax(top, part_top[j][tx]);
        atomicMax(tops + z * n + col, (unsigned long long)__double_as_longlong(top));
        if (any_bad) atomicOr(bad + z * n + col, 1);
    }
}

// Step 2: the digits of a chunk of each column; deep entries counted into the zeroed
// `deep_counts` (integers: exact in any order).
extern "C" __global__ void pack_int8_column_chunks(
    const float* __restrict__ x, long long row_stride, int k, int n, int k_pad,
    const int* __restrict__ kexp, int chunk, int slices, int reversed, int deep,
    long long batch_stride, int batch0, const unsigned long long* __restrict__ tops,
    signed char* __restrict__ out, int* __restrict__ exps, int* __restrict__ deep_counts)
{
    const long long z = blockIdx.z + (long long)batch0;
    x += z * batch_stride;
    kexp += z * (k + 1);
    out += z * n * (long long)slices * k_pad;
    exps += z * n;
    tops += z * n;
    deep_counts += z * n;
    const int col0 = blockIdx.x * 32, col = col0 + threadIdx.x;
    const int e = scale_exponent(col < n ? __longlong_as_double((long long)tops[col]) : 0.0);
    if (col < n && blockIdx.y == 0 && threadIdx.y == 0) exps[col] = e;
    int count = 0;
    for (int q0 = blockIdx.y * chunk; q0 < k_pad; q0 += gridDim.y * chunk)
        count += strip_digits(x, row_stride, k, n, k_pad, col0, q0, min(k_pad, q0 + chunk),
                              kexp, fraction_bits(slices) - e, deep_floor(e, deep), slices,
                              reversed, out);
    count = column_sum(count);
    if (threadIdx.y == 0 && col < n && count) atomicAdd(deep_counts + col, count);
}

// Step 3: a column's flag: NaN/Inf (from step 1) or unresolved (bypass).
extern "C" __global__ void finish_columns(
    const int* __restrict__ deep_counts, long long lines, int k, int* __restrict__ nonfinite)
{
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < lines) nonfinite[i] |= unresolved(deep_counts[i], k);
}

// fp16split: hi = fp16(x 2^(TOP - e)), lo = fp16((x 2^(TOP - e) - hi) 2^LO_SHIFT) of the
// rebalanced values; slots (hi, lo), or (lo, hi) when reversed.
extern "C" __global__ void pack_fp16(
    const float* __restrict__ x, long long line_stride, int k, int k_pad,
    const int* __restrict__ kexp, int sign, int reversed,
    __half* __restrict__ out, int* __restrict__ exps, int* __restrict__ nonfinite)
{
    const long long line = blockIdx.x;
    const float* row = x + line * line_stride;
    int bad;
    const double top = line_max(row, k, kexp, sign, &bad);
    int e;
    frexp(top, &e);
    if (threadIdx.x == 0) { exps[line] = e; nonfinite[line] = bad; }
    __half* dst = out + line * 2LL * k_pad;
    for (int c = threadIdx.x; c < k_pad; c += blockDim.x) {
        const double scaled =
            c < k ? ldexp(rebalanced(row[c], kexp[c], sign), ${ROW_TOP_EXPONENT} - e) : 0.0;
        const __half hi = __double2half(scaled);
        const double hi_value = __half2float(hi);  // half -> float is exact and never subnormal
        const __half lo = __double2half(ldexp(scaled - hi_value, ${LO_SHIFT}));
        dst[(long long)(reversed ? 1 : 0) * k_pad + c] = hi;
        dst[(long long)(reversed ? 0 : 1) * k_pad + c] = lo;
    }
}
"""

COMBINE_SOURCE = r"""
// Four consecutive class sums as one 16-byte load (p 16-byte aligned), widened exactly.
__device__ __forceinline__ void load4(const int* p, double (&v)[4])
{
    const int4 x = *reinterpret_cast<const int4*>(p);
    v[0] = x.x; v[1] = x.y; v[2] = x.z; v[3] = x.w;
}

__device__ __forceinline__ void load4(const float* p, double (&v)[4])
{
    const float4 x = *reinterpret_cast<const float4*>(p);
    v[0] = exact_double(x.x); v[1] = exact_double(x.y);
    v[2] = exact_double(x.z); v[3] = exact_double(x.w);
}

__device__ __forceinline__ void load4(const double* p, double (&v)[4])
{
    const double2 x = reinterpret_cast<const double2*>(p)[0];
    const double2 y = reinterpret_cast<const double2*>(p)[1];
    v[0] = x.x; v[1] = x.y; v[2] = y.x; v[3] = y.y;
}

// C = float32(2^(row_exp + col_exp + exp_offset) * sum_g sums[g] * 2^-(w0 + step * g)),
// summed from the largest g (smallest weight) down. Stacks: product z = blockIdx.z + batch0
// has its sums and output z * m * n entries in, its lines' scales and flags z * m and z * n.
// VEC = 4: each thread takes four neighbouring entries with vector loads and one float4 store
// (n % 4 == 0, sums and c 16-byte aligned); entries of flagged lines get a value too, which
// bypass_lines, launched after, overwrites.
template <typename Sum, int VEC>
__device__ void combine_impl(
    const Sum* __restrict__ sums, int groups, long long group_stride, int w0, int step,
    int exp_offset, double k_slack,
    const int* __restrict__ row_exp, const int* __restrict__ col_exp,
    const int* __restrict__ row_bad, const int* __restrict__ col_bad,
    int m, int n, int batch0, float* __restrict__ c)
{
    const long long z = blockIdx.z + (long long)batch0;
    sums += z * m * n;
    c += z * m * n;
    row_exp += z * m;
    row_bad += z * m;
    col_exp += z * n;
    col_bad += z * n;
    for (int r = blockIdx.y; r < m; r += gridDim.y) {
        for (int col = VEC * (blockIdx.x * blockDim.x + threadIdx.x); col < n;
             col += VEC * gridDim.x * blockDim.x) {
            const long long idx = (long long)r * n + col;
            if constexpr (VEC == 1) {
                if (row_bad[r] | col_bad[col]) continue;  // bypass_lines writes it
                double acc = 0.0;
                for (int g = groups - 1; g >= 0; --g)  // smallest weight first (combine.combine)
                    acc = acc + exact_double(sums[g * group_stride + idx]) * pow2(-(w0 + step * g));
                const int scale = row_exp[r] + col_exp[col];
                c[idx] = saturate(acc * pow2(scale + exp_offset), scale, k_slack);
            } else {
                double acc[4] = {0.0, 0.0, 0.0, 0.0};
                for (int g = groups - 1; g >= 0; --g) {
                    double v[4];
                    load4(sums + g * group_stride + idx, v);
                    const double weight = pow2(-(w0 + step * g));
                    for (int t = 0; t < 4; ++t) acc[t] = acc[t] + v[t] * weight;
                }
                const int4 col_e = *reinterpret_cast<const int4*>(col_exp + col);
                const int scales[4] = {row_exp[r] + col_e.x, row_exp[r] + col_e.y,
                                       row_exp[r] + col_e.z, row_exp[r] + col_e.w};
                float out[4];
                for (int t = 0; t < 4; ++t)
                    out[t] = saturate(acc[t] * pow2(scales[t] + exp_offset), scales[t], k_slack);
                *reinterpret_cast<float4*>(c + idx) = make_float4(out[0], out[1], out[2], out[3]);
            }
        }
    }
}

"""

IN_ORDER_SOURCE = r"""
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
// cheap launch. Stacks: pair z = blockIdx.z + batch0 starts z * a_bs into a, z * b_bs into b.
extern "C" __global__ void bypass_lines(
    const int* __restrict__ row_bad, const int* __restrict__ col_bad,
    const float* __restrict__ a, long long a_rs, long long a_cs, long long a_bs,
    const float* __restrict__ b, long long b_rs, long long b_cs, long long b_bs,
    int m, int n, int k, int batch0, float* __restrict__ c)
{
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

"""

# Level fp32-ordered (runtime/ordered.py): IEEE float32 FMAs in k order within chunks of CHUNK
# steps, each chunk's sum added into a float64 total, rounded once. Inline PTX keeps subnormals
# (CuPy's -ftz=true would flush them in C float arithmetic).
ORDERED_SOURCE = r"""
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
    static_assert(${ORDERED_CHUNK} % 16 == 0, "chunks end at steps of 16");
    for (int s = 0; s < depth; s += 16) {
        if (depth - s >= 16) {  // a whole step of 16, unrolled
#pragma unroll
            for (int q = 0; q < 16; ++q) ordered_step<R, T + PAD>(a_tile[0], b_tile[0], s + q, acc);
        } else {  // the last, short step: no padded steps (-0.0 + 0.0 would turn signs)
            for (int q = s; q < depth; ++q) ordered_step<R, T + PAD>(a_tile[0], b_tile[0], q, acc);
        }
        if ((q0 + s + 16) % ${ORDERED_CHUNK} == 0 || q0 + s + 16 >= q_end) {  // chunk ends
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
    static_assert(${ORDERED_SEGMENT} % ${ORDERED_CHUNK} == 0, "segments are whole chunks");
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
            for (int s0 = 0; s0 < k; s0 += ${ORDERED_SEGMENT}) {
                double segment[R][R];
#pragma unroll
                for (int i = 0; i < R; ++i)
#pragma unroll
                    for (int j = 0; j < R; ++j) segment[i][j] = 0.0;
                ordered_span<R, STEP>(a, b, m, n, k, r0, c0, s0,
                                    min(k, s0 + ${ORDERED_SEGMENT}), a_tile, b_tile, segment);
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
    const int s0 = (int)z * ${ORDERED_SEGMENT};
    double total[R][R];
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int j = 0; j < R; ++j) total[i][j] = 0.0;
    ordered_span<R, STEP, A_T>(a, b, m, n, k, r0, c0, s0, min(k, s0 + ${ORDERED_SEGMENT}), a_tile,
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

// Split-k, step 1, for outputs of at most 16 x 16 (Gram-like X^T Y of few columns), where one
// thread per output would load two shared values per FMA: a block of 128 threads per segment
// z = blockIdx.x + segment0 works on 8 chunks at once, one chunk per group of 16 threads, each
// thread a 4 x 4 block of outputs (two 16-byte shared loads per 16 FMAs). The chunk sums are
// then added into the segment's float64 totals in chunk order: the bits of one thread walking
// the segment. A_T: A is stored transposed (ordered_fetch).
template <bool A_T>
__device__ __forceinline__ void ordered_gram_impl(
    const float* __restrict__ a, const float* __restrict__ b, int m, int n, int k,
    long long segment0, double* __restrict__ segments)
{
    constexpr int CH = ${ORDERED_CHUNK}, GROUPS = 8, HALF = GROUPS * CH, T = 16;
    static_assert(${ORDERED_SEGMENT} % HALF == 0, "a segment is whole stages");
    __shared__ __align__(16) float a_s[HALF][T + 4];  // [q][row]; rows of 80 bytes
    __shared__ __align__(16) float b_s[HALF][T];      // [q][col]
    __shared__ float sums[GROUPS][T][T + 1];
    const int tid = threadIdx.x, group = tid / 16, r4 = (tid % 4) * 4, c4 = (tid % 16 / 4) * 4;
    const long long z = blockIdx.x + segment0;
    const long long s0 = z * ${ORDERED_SEGMENT}, s_end = min((long long)k, s0 + ${ORDERED_SEGMENT});
    double total[2] = {0.0, 0.0};  // outputs tid and tid + 128 of the 16 x 16
    for (long long h0 = s0; h0 < s_end; h0 += HALF) {
        const int depth = (int)min((long long)HALF, s_end - h0);
        for (int i = tid; i < HALF * T; i += 128) {
            const int q = i / T, j = i % T;
            b_s[q][j] = (q < depth && j < n) ? b[(h0 + q) * n + j] : 0.0f;
            if constexpr (A_T) a_s[q][j] = (q < depth && j < m) ? a[(h0 + q) * m + j] : 0.0f;
        }
        if constexpr (!A_T) {
            for (int i = tid; i < HALF * T; i += 128) {  // along each row of A: coalesced
                const int j = i / HALF, q = i % HALF;
                a_s[q][j] = (q < depth && j < m) ? a[(long long)j * k + h0 + q] : 0.0f;
            }
        }
        __syncthreads();
        const int c0 = group * CH, steps = min(CH, depth - c0);  // steps <= 0: no such chunk
        float acc[4][4];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = 0.0f;
        for (int s = 0; s < steps; ++s) {
            const float4 x = *reinterpret_cast<const float4*>(&a_s[c0 + s][r4]);
            const float4 y = *reinterpret_cast<const float4*>(&b_s[c0 + s][c4]);
            const float av[4] = {x.x, x.y, x.z, x.w}, bv[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) acc[i][j] = fma_ieee(av[i], bv[j], acc[i][j]);
        }
        if (steps > 0) {
#pragma unroll
            for (int i = 0; i < 4; ++i)
#pragma unroll
                for (int j = 0; j < 4; ++j) sums[group][r4 + i][c4 + j] = acc[i][j];
        }
        __syncthreads();
        const int chunks = (depth + CH - 1) / CH;
#pragma unroll
        for (int o = 0; o < 2; ++o) {
            const int e = tid + 128 * o;
            for (int c = 0; c < chunks; ++c)
                total[o] = total[o] + widen_ieee(sums[c][e / T][e % T]);
        }
        __syncthreads();  // the stage and the sums are read
    }
#pragma unroll
    for (int o = 0; o < 2; ++o) {
        const int e = tid + 128 * o, row = e / T, col = e % T;
        if (row < m && col < n) segments[z * m * n + row * n + col] = total[o];
    }
}

// Split-k, step 2: each entry's segment totals added in segment order, rounded once. A block
// of 256 threads takes 8 entries: all its threads load 256 segments of them into shared memory
// at a time, then 8 threads add them up, one per entry, in order.
extern "C" __global__ void ordered_segment_totals(
    const double* __restrict__ segments, int count, long long entries, float* __restrict__ c)
{
    constexpr int E = 8, DEPTH = 256;
    __shared__ double part[DEPTH][E + 1];
    const long long e0 = blockIdx.x * (long long)E;
    const int column = threadIdx.x % E, row = threadIdx.x / E, rows = blockDim.x / E;
    const bool mine = e0 + column < entries;
    double total = 0.0;
    for (int s0 = 0; s0 < count; s0 += DEPTH) {
        const int depth = min(DEPTH, count - s0);
        for (int s = row; s < depth; s += rows)
            part[s][column] = mine ? segments[(s0 + s) * entries + e0 + column] : 0.0;
        __syncthreads();
        if (row == 0)
            for (int s = 0; s < depth; ++s) total = total + part[s][column];
        __syncthreads();
    }
    if (row == 0 && mine) c[e0 + column] = canonical(total);
}
"""
# One exported entry per tile size (CuPy's RawModule looks kernels up by name).
ORDERED_SOURCE += "".join(
    f"""
extern "C" __global__ void __launch_bounds__(256, {min_blocks}) ordered_product_{r}{suffix}(
    const float* a, const float* b, int m, int n, int k, int batch0, float* c)
{{
    ordered_impl<{r}, 32, {segments}>(a, b, m, n, k, batch0, c);
}}
"""
    for r, min_blocks in ((1, 4), (2, 4), (4, 2))
    for suffix, segments in (("", "false"), ("_segments", "true"))
)
ORDERED_SOURCE += "".join(
    f"""
extern "C" __global__ void __launch_bounds__(256, {min_blocks}) ordered_stack_{r}_{step}(
    const float* a, const float* b, int m, int n, int k, long long count, float* c)
{{
    ordered_stack_impl<{r}, {step}>(a, b, m, n, k, count, c);
}}
"""
    for r, min_blocks in ((1, 4), (2, 4), (4, 2))
    for step in (16, 32)
)
ORDERED_SOURCE += "".join(
    f"""
extern "C" __global__ void __launch_bounds__(128) ordered_gram{suffix}(
    const float* a, const float* b, int m, int n, int k, long long segment0, double* segments)
{{
    ordered_gram_impl<{a_t}>(a, b, m, n, k, segment0, segments);
}}
"""
    for suffix, a_t in (("", "false"), ("_at", "true"))
)
ORDERED_SOURCE += "".join(
    f"""
extern "C" __global__ void __launch_bounds__(256, {min_blocks}) ordered_segments_{r}{suffix}(
    const float* a, const float* b, int m, int n, int k, int segment0, double* segments)
{{
    ordered_segments_impl<{r}, {a_t}>(a, b, m, n, k, segment0, segments);
}}
"""
    for r, min_blocks in ((1, 4), (2, 4), (4, 2))
    for suffix, a_t in (("", "false"), ("_at", "true"))
)
# Tall products in level fp32-ordered's order (TSM2R's shape: many rows of A, few columns of
# B): one thread per (row of A, group of G columns) runs the row's G dot products as G FMA
# chains in k order. Each warp copies its next tile of 32 rows x one chunk of A into shared
# memory asynchronously (cp.async; 16-byte copies where k is a multiple of 4 and A is aligned)
# while it works on the current tile, whose rows its lanes read 4 steps at a time; a slab of B's
# rows sits in shared memory and every thread reads the same address (broadcast). Blocks of one
# row block run their column groups one after another (grid x = group), so A comes from DRAM
# once for n <= G and from L2 for the other groups. (Two threads per row, halving each one's
# registers, measured slower in a probe: 0.91x against 1.32x SGEMM at 65536 x 4096 x 16.)
ORDERED_ROWS_SOURCE = r"""
template <int G>
__device__ __forceinline__ void rows_step(float x, const float* b_row, float (&acc)[G])
{
#pragma unroll
    for (int j = 0; j < G; j += 4) {
        const float4 y = *reinterpret_cast<const float4*>(b_row + j);
        acc[j] = fma_ieee(x, y.x, acc[j]);
        acc[j + 1] = fma_ieee(x, y.y, acc[j + 1]);
        acc[j + 2] = fma_ieee(x, y.z, acc[j + 2]);
        acc[j + 3] = fma_ieee(x, y.w, acc[j + 3]);
    }
}

template <int G>
__device__ __forceinline__ void rows_flush(float (&acc)[G], double (&total)[G])
{
#pragma unroll
    for (int j = 0; j < G; ++j) {
        total[j] = total[j] + widen_ieee(acc[j]);
        acc[j] = 0.0f;
    }
}

// The warp's tile of rows row0.. row0 + 31 and k-steps q0.. q0 + 31, copied asynchronously
// (cp.async: no registers held) into tile[row][q], zeros past m and k. VEC: lane l copies 16
// bytes (4 steps) of rows 4 i + l / 8 (k % 4 == 0, A 16-byte aligned); else lane l copies
// step q0 + l of every row.
// Asynchronous copies into shared memory (cp.async, sm_80 and later; on older GPUs plain loads
// and stores, so the module still builds there). A copy of 0 source bytes writes zeros.
template <int BYTES>
__device__ __forceinline__ void copy_async(void* dst, const float* src, bool inside)
{
#if __CUDA_ARCH__ >= 800
    const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
    if constexpr (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     :: "r"(to), "l"(src), "r"(inside ? 16 : 0) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                     :: "r"(to), "l"(src), "r"(inside ? 4 : 0) : "memory");
#else
    if constexpr (BYTES == 16)
        *reinterpret_cast<float4*>(dst) =
            inside ? *reinterpret_cast<const float4*>(src) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    else
        *reinterpret_cast<float*>(dst) = inside ? *src : 0.0f;
#endif
}

__device__ __forceinline__ void copies_commit()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

template <int PENDING>  // wait until at most PENDING committed groups are still in flight
__device__ __forceinline__ void copies_wait()
{
#if __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_group %0;" :: "n"(PENDING) : "memory");
#endif
}

template <bool VEC, int W>
__device__ __forceinline__ void rows_copy(const float* __restrict__ a, long long m, int k,
                                          long long row0, int q0, int lane, float (*tile)[W])
{
    if constexpr (VEC) {
        const int q = (lane & 7) * 4;
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            const int r = 4 * i + (lane >> 3);
            const bool inside = row0 + r < m && q0 + q < k;
            copy_async<16>(&tile[r][q], inside ? a + (row0 + r) * k + q0 + q : a, inside);
        }
    } else {
        const bool step_inside = q0 + lane < k;
#pragma unroll 8
        for (int r = 0; r < 32; ++r) {
            const bool inside = row0 + r < m && step_inside;
            copy_async<4>(&tile[r][lane], inside ? a + (row0 + r) * k + q0 + lane : a, inside);
        }
    }
    copies_commit();
}

template <int G, bool SEGMENTS, bool VEC>
__device__ __forceinline__ void ordered_rows_impl(
    const float* __restrict__ a, const float* __restrict__ b, int m, int n, int k,
    float* __restrict__ c)
{
    constexpr int KS = 128, CH = ${ORDERED_CHUNK}, W = CH + 4;  // B's k-steps per slab
    static_assert(CH == 32, "a tile is 32 rows x one chunk");
    static_assert(${ORDERED_SEGMENT} % KS == 0 && KS % CH == 0, "segments end with a slab");
    constexpr int WARPS = ${ROWS_THREADS} / 32;
    __shared__ __align__(16) float b_s[KS][G];
    // [warp][buffer][row][q]: two tiles per warp, the next one arriving while the warp works
    // on this one. Rows of W = 36 floats keep 16-byte copies aligned, and each quarter warp's
    // 16-byte reads of its own rows (stride 36 words) on distinct banks.
    __shared__ __align__(16) float a_s[WARPS][2][32][W];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int c0 = blockIdx.x * G;
    for (long long block_row = (long long)blockIdx.y * ${ROWS_THREADS}; block_row < m;
         block_row += (long long)gridDim.y * ${ROWS_THREADS}) {  // grid y: at most 65535
        const long long row0 = block_row + warp * 32;
        float acc[G];
        double total[G], segment[G];  // segment: SEGMENTS only (k may exceed a segment)
#pragma unroll
        for (int j = 0; j < G; ++j) { acc[j] = 0.0f; total[j] = 0.0; segment[j] = 0.0; }
        __syncwarp();  // the previous row block's last tile is read
        rows_copy<VEC, W>(a, m, k, row0, 0, lane, a_s[warp][0]);
        int chunk = 0;
        for (int s0 = 0; s0 < k; s0 += KS) {
            const int depth = min(KS, k - s0);
            __syncthreads();  // the previous slab is read
            for (int i = threadIdx.x; i < KS * G; i += blockDim.x) {
                const int q = i / G, j = i % G;
                b_s[q][j] = (q < depth && c0 + j < n) ? b[(long long)(s0 + q) * n + c0 + j] : 0.0f;
            }
            __syncthreads();
            for (int t0 = 0; t0 < depth; t0 += CH, ++chunk) {  // a tile of 32 rows x CH steps
                const int steps = min(CH, depth - t0);
                __syncwarp();  // the other buffer's tile is read: it may be overwritten
                if (s0 + t0 + CH < k)
                    rows_copy<VEC, W>(a, m, k, row0, s0 + t0 + CH, lane,
                                      a_s[warp][(chunk + 1) & 1]);
                else
                    copies_commit();  // (an empty group: the same waits)
                copies_wait<1>();  // this chunk's tile has landed
                __syncwarp();  // ... for every lane's copies
                const float* a_row = a_s[warp][chunk & 1][lane];
                const float* b_chunk = b_s[t0];
                if (steps == CH) {  // a whole chunk: 16-byte reads of 4 steps, unrolled
#pragma unroll 2
                    for (int t = 0; t < CH; t += 4) {
                        const float4 x = *reinterpret_cast<const float4*>(a_row + t);
                        rows_step<G>(x.x, b_chunk + t * G, acc);
                        rows_step<G>(x.y, b_chunk + (t + 1) * G, acc);
                        rows_step<G>(x.z, b_chunk + (t + 2) * G, acc);
                        rows_step<G>(x.w, b_chunk + (t + 3) * G, acc);
                    }
                } else {
                    for (int t = 0; t < steps; ++t) rows_step<G>(a_row[t], b_chunk + t * G, acc);
                }
                rows_flush<G>(acc, SEGMENTS ? segment : total);  // each tile is one chunk
            }
            if (SEGMENTS && ((s0 + KS) % ${ORDERED_SEGMENT} == 0 || s0 + KS >= k)) {
#pragma unroll
                for (int j = 0; j < G; ++j) {  // a segment ends: its total joins, in order
                    total[j] = total[j] + segment[j];
                    segment[j] = 0.0;
                }
            }
        }
        copies_wait<0>();
        if (row0 + lane < m) {
#pragma unroll
            for (int j = 0; j < G; ++j)
                if (c0 + j < n) c[(row0 + lane) * n + c0 + j] = canonical(total[j]);
        }
    }
}
"""
ORDERED_ROWS_SOURCE += "".join(
    f"""
extern "C" __global__ void __launch_bounds__(${{ROWS_THREADS}}, {min_blocks})
ordered_rows_{g}{suffix}{vec_suffix}(
    const float* a, const float* b, int m, int n, int k, float* c)
{{
    ordered_rows_impl<{g}, {segments}, {vec}>(a, b, m, n, k, c);
}}
"""
    for g, min_blocks in ((4, 4), (8, 4), (16, 4))
    for suffix, segments in (("", "false"), ("_segments", "true"))
    for vec_suffix, vec in (("", "false"), ("_vec", "true"))
)
# Thin products in level fp32-ordered's order (TSM2L's shape: many rows of A, k and n at most a
# chunk): one thread per row of A and G columns; B sits in shared memory (read by broadcast).
# A block of rows is contiguous in A, so the block reads it as one run (16-byte loads where k
# is a multiple of 4 and A aligned) into registers while it works on the previous block of
# rows, which it has staged through shared memory; each thread runs its G FMA chains over its
# row's k steps (one chunk: the total is that chain's sum), and the outputs go back through
# shared memory for coalesced (16-byte where n is a multiple of 4) stores.
ORDERED_THIN_SOURCE = r"""
// Rows row0.. of A (rows * k floats from a + row0 k) into registers: VEC, float4 l of thread t
// is element 4 (t + ROWS l); else float l is element t + ROWS l. Zeros past the rows.
template <bool VEC>
__device__ __forceinline__ void thin_fetch(const float* __restrict__ a, long long row0, int rows,
                                           int k, float (&next)[${ORDERED_CHUNK}])
{
    constexpr int CH = ${ORDERED_CHUNK}, ROWS = ${THIN_THREADS};
    const float* run = a + row0 * k;
    const int size = rows * k, t = threadIdx.x;
    if constexpr (VEC) {
#pragma unroll
        for (int l = 0; l < CH / 4; ++l) {
            const int e = 4 * (t + ROWS * l);
            float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            if (e < size) v = *reinterpret_cast<const float4*>(run + e);
            next[4 * l] = v.x; next[4 * l + 1] = v.y; next[4 * l + 2] = v.z; next[4 * l + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int l = 0; l < CH; ++l) {
            const int e = t + ROWS * l;
            next[l] = e < size ? run[e] : 0.0f;
        }
    }
}

template <bool VEC>
__device__ __forceinline__ void thin_stage(float (*a_s)[${ORDERED_CHUNK} + 1], int rows, int k,
                                           const float (&next)[${ORDERED_CHUNK}])
{
    constexpr int CH = ${ORDERED_CHUNK}, ROWS = ${THIN_THREADS};
    const int size = rows * k, t = threadIdx.x;
    if constexpr (VEC) {  // k % 4 == 0: a float4 never straddles two rows
#pragma unroll
        for (int l = 0; l < CH / 4; ++l) {
            const int e = 4 * (t + ROWS * l);
            if (e < size) {
                const int r = e / k, q = e % k;
#pragma unroll
                for (int j = 0; j < 4; ++j) a_s[r][q + j] = next[4 * l + j];
            }
        }
    } else {
#pragma unroll
        for (int l = 0; l < CH; ++l) {
            const int e = t + ROWS * l;
            if (e < size) a_s[e / k][e % k] = next[l];
        }
    }
}

template <int G, bool VEC>
__device__ __forceinline__ void ordered_thin_impl(
    const float* __restrict__ a, const float* __restrict__ b, long long m, int n, int k,
    float* __restrict__ c)
{
    constexpr int CH = ${ORDERED_CHUNK}, ROWS = ${THIN_THREADS};
    __shared__ __align__(16) float b_s[CH][G];
    static_assert(G <= CH, "the output rows fit where the rows of A were");
    __shared__ float a_s[ROWS][CH + 1];  // padded: each thread reads its own row
    for (int i = threadIdx.x; i < CH * G; i += blockDim.x) {
        const int q = i / G, j = i % G;
        b_s[q][j] = (q < k && j < n) ? b[q * n + j] : 0.0f;
    }
    const long long stride = (long long)gridDim.x * ROWS;
    long long row0 = (long long)blockIdx.x * ROWS;
    float next[CH];
    if (row0 < m) thin_fetch<VEC>(a, row0, (int)min((long long)ROWS, m - row0), k, next);
    for (; row0 < m; row0 += stride) {
        const int rows = (int)min((long long)ROWS, m - row0);
        __syncthreads();  // b_s written; a_s free again
        thin_stage<VEC>(a_s, rows, k, next);
        __syncthreads();
        const long long next_row0 = row0 + stride;
        if (next_row0 < m)
            thin_fetch<VEC>(a, next_row0, (int)min((long long)ROWS, m - next_row0), k, next);
        float acc[G];
#pragma unroll
        for (int j = 0; j < G; ++j) acc[j] = 0.0f;
        if (threadIdx.x < rows)
            for (int q = 0; q < k; ++q) {
                const float x = a_s[threadIdx.x][q];
#pragma unroll
                for (int j = 0; j < G; ++j) acc[j] = fma_ieee(x, b_s[q][j], acc[j]);
            }
        __syncthreads();  // a_s read: it now stages the outputs, for coalesced stores
#pragma unroll
        for (int j = 0; j < G; ++j) a_s[threadIdx.x][j] = canonical(0.0 + widen_ieee(acc[j]));
        __syncthreads();
        float* out = c + row0 * n;
        if (n % 4 == 0) {  // C is fresh (aligned) and row0 n a multiple of 4
            for (int e = 4 * threadIdx.x; e < rows * n; e += 4 * ROWS) {
                const int r = e / n, j = e % n;
                *reinterpret_cast<float4*>(out + e) =
                    make_float4(a_s[r][j], a_s[r][j + 1], a_s[r][j + 2], a_s[r][j + 3]);
            }
        } else {
            for (int e = threadIdx.x; e < rows * n; e += ROWS) out[e] = a_s[e / n][e % n];
        }
    }
}
"""
ORDERED_THIN_SOURCE += "".join(
    f"""
extern "C" __global__ void ordered_thin_{g}{vec_suffix}(
    const float* a, const float* b, long long m, int n, int k, float* c)
{{
    ordered_thin_impl<{g}, {vec}>(a, b, m, n, k, c);
}}
"""
    for g in (4, 8, 16, 32)
    for vec_suffix, vec in (("", "false"), ("_vec", "true"))
)
COMBINE_SOURCE += IN_ORDER_SOURCE + ORDERED_SOURCE + ORDERED_ROWS_SOURCE + ORDERED_THIN_SOURCE

# Exported combine kernels per class-sum type and width (CuPy's RawModule looks them up by name).
_COMBINE_ENTRY = """
extern "C" __global__ void combine{vec}_{name}(
    const {sum}* sums, int groups, long long group_stride, int w0, int step, int exp_offset,
    double k_slack, const int* row_exp, const int* col_exp, const int* row_bad, const int* col_bad,
    int m, int n, int batch0, float* c)
{{
    combine_impl<{sum}, {vec}>(sums, groups, group_stride, w0, step, exp_offset, k_slack, row_exp,
                               col_exp, row_bad, col_bad, m, n, batch0, c);
}}
"""
COMBINE_SOURCE += "".join(
    _COMBINE_ENTRY.format(name=name, sum=sum_type, vec=vec).replace("combine1_", "combine_")
    for name, sum_type in (("int32", "int"), ("float64", "double"), ("float32", "float"))
    for vec in (1, 4)
)


def render(source: str) -> str:
    """``source`` with the device helpers in front and the contract's constants filled in."""
    return Template(DEVICE_HELPERS + source).substitute(CONSTANTS)


# Elementwise conversions for the native float64 level (CuPy's astype flushes subnormals).
WIDEN = ("float32 x", "float64 y", "y = exact_double(x)")
NARROW = ("float64 d", "float32 y", "y = canonical(d)")
ROUND = ("float64 d", "float32 y", "y = round_to_float(d)")  # float64 operands -> float32
ACCUMULATE = ("float32 x", "float64 total", "total = total + exact_double(x)")  # FP16 k blocks
