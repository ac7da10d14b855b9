"""CUDA C source of the packer and combine kernels (compiled by CuPy at first use).

They implement ``packer`` and ``combine`` with the same IEEE operations, so the integers they
produce and the float32 results are the CPU oracle's, bit for bit. Layout: a packed operand is
(lines, slots, k_pad) int8, one row of A or one column of B per line, the line's slices side by
side along k. B's slices are stored in reverse order, so the slices (i, g - i) of one weight class
g are two contiguous spans and one GEMM over K = count * k_pad sums the whole class.
"""

from __future__ import annotations

from string import Template

from . import fp16split, packer

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
}

# Device helpers both modules use, defined once.
DEVICE_HELPERS = r"""
#include <cuda_fp16.h>

// 2^e as a double, built from its bits (exact for -1022 <= e <= 1023); x * pow2(e) equals
// ldexp(x, e) whenever the result is a normal double, which the contract guarantees here.
__device__ __forceinline__ double pow2(int e)
{
    return __longlong_as_double((long long)(e + 1023) << 52);
}
"""

PACK_SOURCE = r"""
// Largest finite |row[c]| over the block (returned to every thread); *any_bad flags NaN/Inf.
__device__ float line_finite_max(const float* __restrict__ row, int k, int* any_bad)
{
    __shared__ float block_max[32];
    __shared__ int block_bad[32];

    float top = 0.0f;
    int bad = 0;
    for (int c = threadIdx.x; c < k; c += blockDim.x) {
        float v = fabsf(row[c]);
        if (isfinite(v)) top = fmaxf(top, v); else bad = 1;
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
        bad |= __shfl_xor_sync(0xffffffffu, bad, offset);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) { block_max[warp] = top; block_bad[warp] = bad; }
    __syncthreads();
    if (warp == 0) {
        const int warps = blockDim.x >> 5;
        top = lane < warps ? block_max[lane] : 0.0f;
        bad = lane < warps ? block_bad[lane] : 0;
        for (int offset = 16; offset > 0; offset >>= 1) {
            top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
            bad |= __shfl_xor_sync(0xffffffffu, bad, offset);
        }
        if (lane == 0) { block_max[0] = top; block_bad[0] = bad; }
    }
    __syncthreads();
    *any_bad = block_bad[0];
    return block_max[0];
}

// packer.scale_exponents: the smallest e with top < (127/128) 2^e.
__device__ __forceinline__ int scale_exponent(float top)
{
    int e;
    frexp((double)top, &e);
    return (double)top * ${HEADROOM_DEN}.0 >= ldexp(${HEADROOM_NUM}.0, e) ? e + 1 : e;
}

// packer.fraction_bits: P(s) = FIRST + LATER (s - 1).
__device__ __forceinline__ int fraction_bits(int slices)
{
    return ${FIRST_SLICE_BITS} + ${LATER_SLICE_BITS} * (slices - 1);
}

// packer.slice_rows for one value: its digits, written slot_stride bytes apart. |X| < 127 * 2^24
// for up to 4 slices, so 32-bit integers hold it; __double2int_rn rounds half to even like rint.
__device__ __forceinline__ int rounded_scaled(float v, int shift)
{
    return isfinite(v) ? __double2int_rn((double)v * pow2(shift)) : 0;
}

__device__ __forceinline__ void write_digits(float v, int shift, int slices, int reversed,
                                             signed char* dst, long long slot_stride)
{
    int rest = rounded_scaled(v, shift);
    for (int i = slices - 1; i > 0; --i) {
        const int low = ((rest + ${DIGIT_HALF}) & ${DIGIT_MASK}) - ${DIGIT_HALF};
        dst[(reversed ? slices - 1 - i : i) * slot_stride] = (signed char)low;
        rest = (rest - low) >> ${LATER_SLICE_BITS};
    }
    dst[(reversed ? slices - 1 : 0) * slot_stride] = (signed char)rest;
}

// The same for four consecutive values, stored as one 4-byte word per slot (dst 4-aligned).
__device__ __forceinline__ void write_digits4(const float v[4], int shift, int slices,
                                              int reversed, signed char* dst, long long slot_stride)
{
    int rest[4];
    for (int t = 0; t < 4; ++t) rest[t] = rounded_scaled(v[t], shift);
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

extern "C" __global__ void pack_int8(
    const float* __restrict__ x, long long line_stride, int k, int k_pad, int slices,
    int reversed, signed char* __restrict__ out, int* __restrict__ exps,
    int* __restrict__ nonfinite)
{
    const long long line = blockIdx.x;
    const float* row = x + line * line_stride;
    int bad;
    const float top = line_finite_max(row, k, &bad);

    const int e = scale_exponent(top);
    if (threadIdx.x == 0) { exps[line] = e; nonfinite[line] = bad; }

    const int shift = fraction_bits(slices) - e;
    signed char* dst = out + line * (long long)slices * k_pad;
    for (int c = 4 * threadIdx.x; c < k_pad; c += 4 * blockDim.x) {  // k_pad % 16 == 0
        float v[4];
        for (int t = 0; t < 4; ++t) v[t] = c + t < k ? row[c + t] : 0.0f;
        write_digits4(v, shift, slices, reversed, dst + c, k_pad);
    }
}

// pack_int8 for the columns of a row-major (k, n) matrix without a transposed copy: a block
// takes 32 columns; reads are coalesced along rows, and a shared tile turns them so the digit
// writes run along k.
extern "C" __global__ void pack_int8_columns(
    const float* __restrict__ x, long long row_stride, int k, int n, int k_pad, int slices,
    int reversed, signed char* __restrict__ out, int* __restrict__ exps,
    int* __restrict__ nonfinite)
{
    __shared__ float tile[32][33];
    __shared__ float col_max[8][32];
    __shared__ int col_bad[8][32];
    __shared__ int shift_of[32];
    const int tx = threadIdx.x, ty = threadIdx.y;
    const int col0 = blockIdx.x * 32;
    const int col = col0 + tx;

    float top = 0.0f;
    int bad = 0;
    if (col < n) {
        for (int q = ty; q < k; q += 8) {
            float v = fabsf(x[q * row_stride + col]);
            if (isfinite(v)) top = fmaxf(top, v); else bad = 1;
        }
    }
    col_max[ty][tx] = top;
    col_bad[ty][tx] = bad;
    __syncthreads();
    if (ty == 0) {
        for (int j = 1; j < 8; ++j) { top = fmaxf(top, col_max[j][tx]); bad |= col_bad[j][tx]; }
        const int e = scale_exponent(top);
        shift_of[tx] = fraction_bits(slices) - e;
        if (col < n) { exps[col] = e; nonfinite[col] = bad; }
    }
    __syncthreads();

    for (int q0 = 0; q0 < k_pad; q0 += 32) {
        for (int j = ty; j < 32; j += 8) {
            const int q = q0 + j;
            tile[j][tx] = (q < k && col < n) ? x[q * row_stride + col] : 0.0f;
        }
        __syncthreads();
        for (int j = ty; j < 32; j += 8) {  // j: column within the block, tx: k within the tile
            const int c = col0 + j;
            if (c < n && q0 + tx < k_pad) {
                signed char* dst = out + (long long)c * slices * k_pad + q0 + tx;
                write_digits(tile[tx][j], shift_of[j], slices, reversed, dst, k_pad);
            }
        }
        __syncthreads();
    }
}

// fp16split: hi = fp16(x 2^(TOP - e)), lo = fp16((x 2^(TOP - e) - hi) 2^LO_SHIFT); slots
// (hi, lo), or (lo, hi) when reversed.
extern "C" __global__ void pack_fp16(
    const float* __restrict__ x, long long line_stride, int k, int k_pad, int reversed,
    __half* __restrict__ out, int* __restrict__ exps, int* __restrict__ nonfinite)
{
    const long long line = blockIdx.x;
    const float* row = x + line * line_stride;
    int bad;
    const float top = line_finite_max(row, k, &bad);
    int e;
    frexp((double)top, &e);
    if (threadIdx.x == 0) { exps[line] = e; nonfinite[line] = bad; }
    __half* dst = out + line * 2LL * k_pad;
    for (int c = threadIdx.x; c < k_pad; c += blockDim.x) {
        double scaled = 0.0;
        if (c < k && isfinite(row[c])) scaled = ldexp((double)row[c], ${ROW_TOP_EXPONENT} - e);
        const __half hi = __double2half(scaled);
        const __half lo = __double2half(ldexp(scaled - (double)__half2float(hi), ${LO_SHIFT}));
        dst[(long long)(reversed ? 1 : 0) * k_pad + c] = hi;
        dst[(long long)(reversed ? 0 : 1) * k_pad + c] = lo;
    }
}
"""

COMBINE_SOURCE = r"""
// C = float32(2^(row_exp + col_exp + exp_offset) * sum_g sums[g] * 2^-(w0 + step * g)),
// summed from the largest g (smallest weight) down.
template <typename Sum>
__device__ void combine_impl(
    const Sum* __restrict__ sums, int groups, long long group_stride, int w0, int step,
    int exp_offset,
    const int* __restrict__ row_exp, const int* __restrict__ col_exp,
    const int* __restrict__ row_bad, const int* __restrict__ col_bad,
    const float* __restrict__ a, long long a_rs, long long a_cs,
    const float* __restrict__ b, long long b_rs, long long b_cs,
    int m, int n, int k, float* __restrict__ c)
{
    for (int r = blockIdx.y; r < m; r += gridDim.y) {
        for (int col = blockIdx.x * blockDim.x + threadIdx.x; col < n;
             col += gridDim.x * blockDim.x) {
            const long long idx = (long long)r * n + col;
            double acc = 0.0;
            if (row_bad[r] | col_bad[col]) {
                // A NaN or Inf reaches this entry: its value is the same in any order.
                for (int q = 0; q < k; ++q)
                    acc += (double)a[r * a_rs + q * a_cs] * (double)b[q * b_rs + col * b_cs];
                c[idx] = isnan(acc) ? __int_as_float(0x7fc00000) : (float)acc;  // canonical
                continue;
            }
            for (int g = groups - 1; g >= 0; --g)  // smallest weight first (combine.combine)
                acc = acc + (double)sums[g * group_stride + idx] * pow2(-(w0 + step * g));
            c[idx] = (float)(acc * pow2(row_exp[r] + col_exp[col] + exp_offset));
        }
    }
}

"""

# One exported combine kernel per class-sum type (CuPy's RawModule looks kernels up by name).
_COMBINE_ENTRY = """
extern "C" __global__ void combine_{name}(
    const {sum}* sums, int groups, long long group_stride, int w0, int step, int exp_offset,
    const int* row_exp, const int* col_exp, const int* row_bad, const int* col_bad,
    const float* a, long long a_rs, long long a_cs, const float* b, long long b_rs, long long b_cs,
    int m, int n, int k, float* c)
{{
    combine_impl<{sum}>(sums, groups, group_stride, w0, step, exp_offset, row_exp, col_exp,
                        row_bad, col_bad, a, a_rs, a_cs, b, b_rs, b_cs, m, n, k, c);
}}
"""
COMBINE_SOURCE += "".join(
    _COMBINE_ENTRY.format(name=name, sum=sum_type)
    for name, sum_type in (("int32", "int"), ("float64", "double"), ("float32", "float"))
)


def render(source: str) -> str:
    """``source`` with the device helpers in front and the contract's constants filled in."""
    return Template(DEVICE_HELPERS + source).substitute(CONSTANTS)
