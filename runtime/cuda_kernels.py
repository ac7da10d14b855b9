"""CUDA C source of the packer and combine kernels (compiled by CuPy at first use; the combine
module also holds level fp32-ordered's kernels, from ``ordered_kernels``, and the pack module
level IV-blocks's, from ``blocks_kernels``).

They implement ``packer`` and ``combine`` with the same IEEE operations, so the integers they
produce and the float32 results are the CPU oracle's, bit for bit. Layout: a packed operand is
(lines, slots, k_pad) int8, one row of A or one column of B per line, the line's slices side by
side along k. B's slices are stored in reverse order, so the slices (i, g - i) of one weight class
g are two contiguous spans and one GEMM over K = count * k_pad sums the whole class.
"""

from __future__ import annotations

from string import Template

from . import blocks, bypass, combine, equilibrate, fp16split, ordered, packer
from .blocks_kernels import (
    BLOCKS_BYPASS_THREADS,
    BLOCKS_ROW_PAD,
    BLOCKS_SOURCE,
    BLOCKS_THREADS,
    BLOCKS_TILE_ROWS,
)
from .levels import LEVELS
from .ordered_kernels import (
    ORDERED_ROWS_SOURCE,
    ORDERED_SOURCE,
    ORDERED_THIN_SOURCE,
    ROWS_THREADS,
    THIN_STAGES,
    THIN_THREADS,
    TOTALS_THREADS,
    TOTALS_WIDTH,
)

COLUMN_TILE_K = 128  # k-indices per shared tile of B's column packing (8 warps x 16)
STRIP_LANE_COLUMNS = 8  # columns per lane of strip_max_bits: a block takes 32 x 8 of them
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
    "THIN_STAGES": THIN_STAGES,
    "TOTALS_WIDTH": TOTALS_WIDTH,
    "TOTALS_THREADS": TOTALS_THREADS,
    "COLUMN_TILE_K": COLUMN_TILE_K,
    "STRIP_LANE_COLUMNS": STRIP_LANE_COLUMNS,
    "BLOCKS_K": blocks.BLOCK_K,
    "BLOCKS_SLICES": LEVELS[blocks.LEVEL].a_slices,
    "BLOCKS_MAX_SUM": max(LEVELS[blocks.LEVEL].groups),
    "BLOCKS_ROW_PAD": BLOCKS_ROW_PAD,
    "BLOCKS_TILE_ROWS": BLOCKS_TILE_ROWS,
    "BLOCKS_THREADS": BLOCKS_THREADS,
    "BLOCKS_BYPASS_THREADS": BLOCKS_BYPASS_THREADS,
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

// Asynchronous copies into shared memory (cp.async, sm_80 and later; on older GPUs plain loads
// and stores, so the module still builds there). A copy of 0 source bytes writes zeros.
template <int BYTES>
__device__ __forceinline__ void copy_async(void* dst, const void* src, bool inside)
{
#if __CUDA_ARCH__ >= 800
    const unsigned to = (unsigned)__cvta_generic_to_shared(dst);
    static_assert(BYTES == 4 || BYTES == 8 || BYTES == 16, "cp.async copies 4, 8 or 16 bytes");
    if constexpr (BYTES == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                     :: "r"(to), "l"(src), "r"(inside ? 16 : 0) : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;"
                     :: "r"(to), "l"(src), "n"(BYTES), "r"(inside ? BYTES : 0) : "memory");
#else
    if constexpr (BYTES == 16)
        *reinterpret_cast<float4*>(dst) =
            inside ? *reinterpret_cast<const float4*>(src) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    else if constexpr (BYTES == 8)
        *reinterpret_cast<double*>(dst) = inside ? *reinterpret_cast<const double*>(src) : 0.0;
    else
        *reinterpret_cast<float*>(dst) = inside ? *reinterpret_cast<const float*>(src) : 0.0f;
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

// The largest of a warp's 32 values, in every lane.
__device__ __forceinline__ unsigned int warp_max(unsigned int v)
{
#if __CUDA_ARCH__ >= 800
    return __reduce_max_sync(0xffffffffu, v);
#else
    for (int offset = 16; offset > 0; offset >>= 1)
        v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
    return v;
#endif
}

// The largest finite |x| along both axes of a row-major (rows, cols) matrix in one read, as
// float32 magnitude bits (unsigned order is magnitude order) merged with atomicMax into zeroed
// outputs: each column's into col_top and, where row_top is given, each row's into row_top;
// col_bad / row_bad (where given) get 1 for a column / row that holds a NaN or Inf. The
// k-exponents (equilibrate.k_exponents, step 1) take the maxima along the k-indices (A's
// columns, B's rows); the packers take those along the lines (A's rows, B's columns) as their
// scales wherever no k-index moves, and need not read the operand a second time for them.
// A block of 32 x 8 threads takes rows_per_block rows of a strip of STRIP_WIDTH columns, lane
// l the strip's columns l, l + 32, ..., a warp a row at a time: one atomicMax per row, block
// and strip. The grid's x runs over the blocks of rows, so the blocks running at once update
// different rows (with strips of 32 columns on x, the blocks of one set of rows ran side by
// side and their row atomics collided: 3.5x slower than the column maxima alone at n = 8192
// on an H100); its y over the strips (a block takes several in turn beyond gridDim.y's
// limit). Stacks: matrix z = blockIdx.z + batch0 starts z * batch_stride floats into x; its
// column outputs start at z * cols, its row outputs at z * rows.
#define STRIP_LANE_COLUMNS ${STRIP_LANE_COLUMNS}
#define STRIP_WIDTH (32 * STRIP_LANE_COLUMNS)

extern "C" __global__ void strip_max_bits(
    const float* __restrict__ x, long long row_stride, int rows, int cols, int rows_per_block,
    long long batch_stride, int batch0, unsigned int* __restrict__ col_top,
    unsigned int* __restrict__ col_bad, unsigned int* __restrict__ row_top,
    unsigned int* __restrict__ row_bad)
{
    __shared__ unsigned int part[8][STRIP_WIDTH], part_bad[8][32];
    const long long z = blockIdx.z + (long long)batch0;
    x += z * batch_stride;
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int first = blockIdx.x * rows_per_block;
    const int last = min(rows, first + rows_per_block);
    const int strips = (cols + STRIP_WIDTH - 1) / STRIP_WIDTH;  // more than gridDim.y: in turn
    for (int strip = blockIdx.y; strip < strips; strip += gridDim.y) {
        const int col0 = strip * STRIP_WIDTH + tx;
        unsigned int top[STRIP_LANE_COLUMNS] = {}, bad = 0u;  // bad: bit j, column col0 + 32 j
        for (int r = first + ty; r < last; r += 8) {  // every lane of a warp: the same rows
            const float* row = x + r * row_stride;
            unsigned int row_max = 0u, row_nonfinite = 0u;
#pragma unroll
            for (int j = 0; j < STRIP_LANE_COLUMNS; ++j) {
                const int col = col0 + 32 * j;
                const unsigned int v = col < cols ? magnitude_bits(row[col]) : 0u;
                const unsigned int finite = v < 0x7f800000u ? v : 0u, nonfinite = finite != v;
                top[j] = max(top[j], finite);
                row_max = max(row_max, finite);
                bad |= nonfinite << j;
                row_nonfinite |= nonfinite;
            }
            if (row_top != nullptr) {
                row_max = warp_max(row_max);
                row_nonfinite = __any_sync(0xffffffffu, row_nonfinite);
                if (tx == 0 && row_max) atomicMax(row_top + z * rows + r, row_max);
                if (tx == 0 && row_nonfinite && row_bad != nullptr) row_bad[z * rows + r] = 1u;
            }
        }
#pragma unroll
        for (int j = 0; j < STRIP_LANE_COLUMNS; ++j) part[ty][tx + 32 * j] = top[j];
        part_bad[ty][tx] = bad;
        __syncthreads();
        if (ty == 0) {
            for (int i = 1; i < 8; ++i) bad |= part_bad[i][tx];
#pragma unroll
            for (int j = 0; j < STRIP_LANE_COLUMNS; ++j) {
                const int col = col0 + 32 * j;
                if (col >= cols) break;
                unsigned int column_max = top[j];
                for (int i = 1; i < 8; ++i) column_max = max(column_max, part[i][tx + 32 * j]);
                atomicMax(col_top + z * cols + col, column_max);
                if (col_bad != nullptr && (bad >> j & 1u)) col_bad[z * cols + col] = 1u;
            }
        }
        __syncthreads();  // part is read before the next strip writes it
    }
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

// packer.fraction_bits: P(s) = FIRST + LATER (s - 1).
__device__ __forceinline__ int fraction_bits(int slices)
{
    return ${FIRST_SLICE_BITS} + ${LATER_SLICE_BITS} * (slices - 1);
}

// packer.slice_rows and bypass.unresolved for one entry, the exact way: integer arithmetic on
// its bits (no float32 instruction, which -ftz would flush on a subnormal entry). The rebalanced
// entry x 2^(sign f) times 2^shift (shift = P(s) - e) is significand * 2^up, and its packer
// integer rint(x 2^(sign f + shift)) is the significand shifted by up, rounded half to even:
// float64's integer (every scaling there is exact). A dead k-index (f == DEAD) and a NaN or Inf
// give 0.
__device__ __forceinline__ int scaled_up(unsigned int u, int f, int sign, int shift)
{
    return max((int)((u >> 23) & 0xffu), 1) - 150 + sign * f + shift;
}

__device__ __forceinline__ int significand(unsigned int u)
{
    return (int)(u & 0x7fffffu) | ((u & 0x7f800000u) ? 0x800000 : 0);
}

__device__ __forceinline__ int scaled_integer(float x, int f, int sign, int shift)
{
    const unsigned int u = __float_as_uint(x);
    if (!finite_bits(x) || f == ${DEAD} || (u & 0x7fffffffu) == 0u) return 0;
    const int sig = significand(u), up = scaled_up(u, f, sign, shift);
    int q;
    if (up >= 0) {
        q = sig << up;  // up <= 7: the scale's headroom keeps |q| < 2^31
    } else if (up < -25) {
        q = 0;  // sig < 2^24 is below half of 2^-up
    } else {
        const int r = -up, rem = sig & ((1 << r) - 1), half = 1 << (r - 1);
        q = sig >> r;
        q += rem > half || (rem == half && (q & 1));
    }
    return (u >> 31) ? -q : q;
}

// Deep: 0 < |x 2^(sign f)| < 2^(e - deep - 1), i.e. significand < 2^(limit - up) with
// limit = P(s) - deep - 1 (DEEP_NEVER: the level bypasses no line).
#define DEEP_NEVER (-(1 << 30))

__device__ __forceinline__ int deep_entry(float x, int f, int sign, int shift, int limit)
{
    const unsigned int u = __float_as_uint(x);
    if (!finite_bits(x) || f == ${DEAD}) return 0;
    const int sig = significand(u), t = limit - scaled_up(u, f, sign, shift);
    return sig != 0 && t > 0 && (t >= 24 || sig < (1 << t));
}

// How a line's entries become packer integers. The quick way, when no k-index moves and 2^shift
// is a normal float32: x 2^shift in float32 is exact for a normal x (or below 2^-126, where rint
// gives 0 anyway), F2I rounds half to even like rint, and deep entries are those whose
// magnitude bits lie below floor_bits, the bits of 2^(e - deep - 1). Subnormal entries (flushed
// by -ftz) and the other lines take the exact way above. The exact way for every entry (and
// float64 before it) kept the packers busy issuing ~100 instructions per entry (ncu on an H100:
// integer pipe 77% busy, DRAM 40%); the quick way made pack A 1.4x faster at n = 8192.
struct LineScale {
    int shift, limit;
    bool quick;
    float scale;
    unsigned int floor_bits;
};

__device__ __forceinline__ LineScale line_scale(int e, int slices, int deep, bool moves)
{
    LineScale s;
    s.shift = fraction_bits(slices) - e;
    s.limit = deep == ${NO_BYPASS} ? DEEP_NEVER : fraction_bits(slices) - deep - 1;
    s.quick = !moves && s.shift >= -126 && s.shift <= 127;
    s.scale = __uint_as_float((unsigned int)(s.shift + 127) << 23);
    const int floor = deep == ${NO_BYPASS} ? -150 : e - deep - 1;  // bits of 2^floor, clamped
    s.floor_bits = floor < -149  ? 0u
                 : floor >= 128  ? 0x7f800000u
                 : floor >= -126 ? (unsigned int)(floor + 127) << 23
                                 : 1u << (floor + 149);
    return s;
}

// One entry's packer integer; counts it into *deep_count when deep.
__device__ __forceinline__ int packer_integer(float x, int f, int sign, const LineScale& s,
                                              int* deep_count)
{
    if (s.quick) {
        const unsigned int m = magnitude_bits(x);
        if (m >= 0x7f800000u) return 0;
        *deep_count += m != 0u && m < s.floor_bits;
        if (m >= 0x800000u || m == 0u) return __float2int_rn(x * s.scale);
        return scaled_integer(x, 0, sign, s.shift);  // subnormal
    }
    *deep_count += deep_entry(x, f, sign, s.shift, s.limit);
    return scaled_integer(x, f, sign, s.shift);
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

// The balanced base-256 digits of packer integers, as bytes: adding digit_bias(s) = 128 (1 +
// 256 + ...) (s - 1 terms) turns the lower digits d_i in [-128, 127] into the plain bytes
// d_i + 128 (byte s - 1 - i of the sum) and leaves the leading digit (|d_0| <= 127) in the byte
// above them, two's complement. So slot i's word for four integers is three byte selects, the
// lower slots' bytes shifted back by 128 (^ 0x80).
__device__ __forceinline__ unsigned int digit_bias(int slices)
{
    return 0x808080u & ((1u << (8 * (slices - 1))) - 1u);
}

__device__ __forceinline__ unsigned int slot_word(const unsigned int* biased, int slot, int slices)
{
    const unsigned int byte = slices - 1 - slot, select = byte | (byte + 4) << 4;
    const unsigned int low = __byte_perm(biased[0], biased[1], select);
    const unsigned int high = __byte_perm(biased[2], biased[3], select);
    const unsigned int word = __byte_perm(low, high, 0x5410);  // little-endian: entry t in byte t
    return slot ? word ^ 0x80808080u : word;
}

// The digits of four packer integers, one 4-byte word per slot, slots slot_stride bytes apart
// (dst 4-aligned; reversed: slot i at position slices - 1 - i).
__device__ __forceinline__ void write_digits4(const int (&rest)[4], int slices, int reversed,
                                              signed char* dst, long long slot_stride)
{
    unsigned int biased[4];
    for (int t = 0; t < 4; ++t) biased[t] = (unsigned int)rest[t] + digit_bias(slices);
    for (int i = 0; i < slices; ++i)
        *reinterpret_cast<unsigned int*>(dst + (reversed ? slices - 1 - i : i) * slot_stride) =
            slot_word(biased, i, slices);
}

// Whether the line maxima strip_max_bits found (float32 bits, and NaN/Inf flags in line_bad:
// both given, or line_top null) are the packers' own: where no k-index moves (kexp[k] == 0).
__device__ __forceinline__ bool line_tops_hold(const unsigned int* __restrict__ line_top,
                                               const int* __restrict__ kexp, int k)
{
    return line_top != nullptr && kexp[k] == 0;
}

// ... and if so, *top and *bad set from them and true returned.
__device__ __forceinline__ bool known_line_top(
    const unsigned int* __restrict__ line_top, const unsigned int* __restrict__ line_bad,
    long long line, const int* __restrict__ kexp, int k, double* top, int* bad)
{
    if (!line_tops_hold(line_top, kexp, k)) return false;
    *top = exact_double(__uint_as_float(line_top[line]));
    *bad = line_bad[line] != 0u;
    return true;
}

// One line per block: A's rows (sign -1) or B's columns read as rows of B^T (sign +1); flagged
// lines (NaN/Inf or unresolved) counted into *flagged. Stacks: lines_per_batch consecutive
// lines share one pair's k-exponents (k + 1 entries each). line_top / line_bad: the lines'
// maxima from strip_max_bits, or null (the block finds them itself: one more pass over x).
extern "C" __global__ void pack_int8(
    const float* __restrict__ x, long long line_stride, int k, int k_pad,
    const int* __restrict__ kexp, int lines_per_batch, int sign, int slices, int reversed,
    int deep, const unsigned int* __restrict__ line_top,
    const unsigned int* __restrict__ line_bad, signed char* __restrict__ out,
    int* __restrict__ exps, int* __restrict__ nonfinite, int* __restrict__ flagged)
{
    const long long line = blockIdx.x;
    const float* row = x + line * line_stride;
    kexp += (line / lines_per_batch) * (k + 1LL);
    int bad;
    double top;
    if (!known_line_top(line_top, line_bad, line, kexp, k, &top, &bad))
        top = line_max(row, k, kexp, sign, &bad);

    const int e = scale_exponent(top);
    const bool moves = kexp[k] != 0;  // else every f is 0: no loads
    const LineScale scale = line_scale(e, slices, deep, moves);
    int count = 0;
    signed char* dst = out + line * (long long)slices * k_pad;
    // Each thread's next four entries are loaded before it slices the current ones (H100, n =
    // 8192: 180 -> 168 us, 75% -> 80% of the DRAM bandwidth).
    const int step = 4 * blockDim.x;
    float x4[4];
    if (4 * (int)threadIdx.x < k_pad) load_row4(row, 4 * threadIdx.x, k, x4);
    for (int c = 4 * threadIdx.x; c < k_pad; c += step) {  // k_pad % 16 == 0
        float next[4] = {};
        if (c + step < k_pad) load_row4(row, c + step, k, next);  // entries past k read as 0
        int rest[4];
        for (int t = 0; t < 4; ++t) {
            const int f = moves && c + t < k ? kexp[c + t] : 0;
            rest[t] = packer_integer(x4[t], f, sign, scale, &count);
        }
        write_digits4(rest, slices, reversed, dst + c, k_pad);
        for (int t = 0; t < 4; ++t) x4[t] = next[t];
    }
    count = block_sum(count);
    if (threadIdx.x == 0) {
        const int flag = bad | unresolved(count, k);
        exps[line] = e;
        nonfinite[line] = flag;
        if (flag) atomicAdd(flagged, 1);
    }
}

// pack_int8 for the columns of a row-major (k, n) B without a transposed copy (row q of B is
// k-index q: scaled by 2^f[q]). A block of 32 x 8 threads takes a strip of 32 columns and
// chunks of k (strip_digits).
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

// The digits of the strip's columns col0 .. col0 + 31 for k-indices [q_begin, q_end) (both
// multiples of 16, q_begin of the tile), a tile of ${COLUMN_TILE_K} at a time: the block reads
// the tile's rows (each warp load 32 consecutive floats of a row) into shared memory, column
// by column; then warp w writes columns 4 w .. 4 w + 3, lane l the digits of k-indices 4 l ..
// 4 l + 3, so each warp store fills 128 consecutive bytes of a slot. count[j]: this thread's
// deep entries of column 4 w + j. The next tile's loads are in flight (in registers) while a
// tile is sliced.
__device__ void strip_digits(
    const float* __restrict__ x, long long row_stride, int k, int n, int k_pad, int col0,
    int q_begin, int q_end, const int* __restrict__ kexp, const LineScale* scale, int slices,
    int reversed, signed char* __restrict__ out, int (&count)[4])
{
    __shared__ __align__(16) float tile[32][${COLUMN_TILE_K} + 4];  // [column][k]: 16-byte rows
    __shared__ int tile_kexp[${COLUMN_TILE_K}];
    constexpr int ROWS_PER_THREAD = ${COLUMN_TILE_K} / 8;
    const int tx = threadIdx.x, ty = threadIdx.y, t = ty * 32 + tx, column = col0 + tx;
    float next[ROWS_PER_THREAD];  // this thread's entries of a tile: rows ty, ty + 8, ...
    const auto fetch = [&](int q0) {
#pragma unroll
        for (int r = 0; r < ROWS_PER_THREAD; ++r) {
            const int q = q0 + ty + 8 * r;
            next[r] = (q < k && column < n) ? x[q * row_stride + column] : 0.0f;
        }
    };
    fetch(q_begin);
    for (int q0 = q_begin; q0 < q_end; q0 += ${COLUMN_TILE_K}) {
#pragma unroll
        for (int r = 0; r < ROWS_PER_THREAD; ++r) tile[tx][ty + 8 * r] = next[r];
        if (t < ${COLUMN_TILE_K}) tile_kexp[t] = q0 + t < k ? kexp[q0 + t] : 0;
        __syncthreads();
        if (q0 + ${COLUMN_TILE_K} < q_end) fetch(q0 + ${COLUMN_TILE_K});
        const int first = q0 + 4 * tx;
        if (first < q_end)
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const int c = 4 * ty + j;
                if (col0 + c >= n) break;
                const float4 v = *reinterpret_cast<const float4*>(&tile[c][4 * tx]);
                const float values[4] = {v.x, v.y, v.z, v.w};
                int rest[4];
                for (int i = 0; i < 4; ++i)
                    rest[i] = packer_integer(values[i], tile_kexp[4 * tx + i], 1, scale[c],
                                             &count[j]);
                write_digits4(rest, slices, reversed,
                              out + (long long)(col0 + c) * slices * k_pad + first, k_pad);
            }
        __syncthreads();
    }
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
// `tops` (non-negative doubles order as their bits), NaN/Inf into the zeroed `bad`; taken
// from line_top / line_bad (strip_max_bits's, or null) without reading x where they hold.
extern "C" __global__ void column_tops(
    const float* __restrict__ x, long long row_stride, int k, int n,
    const int* __restrict__ kexp, int chunk, long long batch_stride, int batch0,
    const unsigned int* __restrict__ line_top, const unsigned int* __restrict__ line_bad,
    unsigned long long* __restrict__ tops, int* __restrict__ bad)
{
    const long long z = blockIdx.z + (long long)batch0;
    x += z * batch_stride;
    kexp += z * (k + 1);
    __shared__ double part_top[8][32];
    const int tx = threadIdx.x, ty = threadIdx.y, col = blockIdx.x * 32 + tx;
    if (line_tops_hold(line_top, kexp, k)) {
        double known;
        int known_bad;
        if (blockIdx.y == 0 && ty == 0 && col < n  // the whole column's: one block writes
            && known_line_top(line_top, line_bad, z * n + col, kexp, k, &known, &known_bad)) {
            tops[z * n + col] = (unsigned long long)__double_as_longlong(known);
            if (known_bad) bad[z * n + col] = 1;
        }
        return;
    }
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
// (Four blocks an SM, as before the next tile's registers: ptxas fits them in 64 without
// spilling; uncapped it took 90, two blocks an SM.)
extern "C" __global__ void __launch_bounds__(256, 4) pack_int8_column_chunks(
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
    const bool moves = kexp[k] != 0;
    if (col < n && blockIdx.y == 0 && threadIdx.y == 0)
        exps[col] = scale_exponent(__longlong_as_double((long long)tops[col]));
    __shared__ LineScale scale[32];  // of the strip's columns
    if (threadIdx.y == 0) {
        const double top = col < n ? __longlong_as_double((long long)tops[col]) : 0.0;
        scale[threadIdx.x] = line_scale(scale_exponent(top), slices, deep, moves);
    }
    __syncthreads();
    int count[4] = {0, 0, 0, 0};
    for (int q0 = blockIdx.y * chunk; q0 < k_pad; q0 += gridDim.y * chunk)
        strip_digits(x, row_stride, k, n, k_pad, col0, q0, min(k_pad, q0 + chunk), kexp, scale,
                     slices, reversed, out, count);
    for (int j = 0; j < 4; ++j) {  // the warp's count of column 4 w + j
        int total = count[j];
        for (int offset = 16; offset > 0; offset >>= 1)
            total += __shfl_xor_sync(0xffffffffu, total, offset);
        const int c = col0 + 4 * threadIdx.y + j;
        if (threadIdx.x == 0 && c < n && total) atomicAdd(deep_counts + c, total);
    }
}

// Step 3: a column's flag: NaN/Inf (from step 1) or unresolved (bypass); flagged columns
// counted into *flagged.
extern "C" __global__ void finish_columns(
    const int* __restrict__ deep_counts, long long lines, int k, int* __restrict__ nonfinite,
    int* __restrict__ flagged)
{
    const long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i >= lines) return;
    const int flag = nonfinite[i] | unresolved(deep_counts[i], k);
    nonfinite[i] = flag;
    if (flag) atomicAdd(flagged, 1);
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

PACK_SOURCE += BLOCKS_SOURCE

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
