// The packers (``packer``, ``equilibrate``, ``bypass``; launched from packs.py): the operands'
// tops, the k-exponents, and each line's scale, flag and digits. They implement ``packer`` with
// the same IEEE operations, so the integers they produce are the CPU oracle's, bit for bit.
// Layout: a packed operand is (lines, slots, k_pad) int8, one row of A or one column of B per
// line, the line's slices side by side along k. B's slices are stored in reverse order, so the
// slices (i, g - i) of one weight class g are two contiguous spans and one GEMM over
// K = count * k_pad sums the whole class.

#include "device.cuh"

// equilibrate: an entry at k-index q, scaled by 2^(sign * f[q]) exactly; a dead k-index and a
// non-finite entry give 0 (the entry's NaN/Inf is flagged separately, from its own bits).
__device__ __forceinline__ double rebalanced(float v, int f, int sign)
{
    return (f == DEAD || !finite_bits(v)) ? 0.0 : exact_double(v) * pow2(sign * f);
}

// The maxima of rebalanced magnitudes without float64 arithmetic per entry: |x| 2^(sign f) as
// the 64-bit key (E + sign f) 2^23 + fraction, E its binade's biased exponent (a subnormal's
// normalised), which orders as the value does; NO_KEY for a zero, a NaN/Inf or a dead
// k-index (rebalanced's 0). key_value gives the value back, exactly.
#define NO_KEY (-0x7fffffffffffffffLL - 1)

__device__ __forceinline__ long long rebalanced_key(float x, int f, int sign)
{
    const unsigned int m = magnitude_bits(x);
    if (f == DEAD || m == 0u || m >= 0x7f800000u) return NO_KEY;
    const long long moved = (long long)(sign * f) * 0x800000LL;
    if (m >= 0x800000u) return (long long)m + moved;
    const int lead = 31 - __clz(m);  // a subnormal, m 2^-149: its leading bit, below 23
    return (long long)(lead - 22) * 0x800000LL + ((m << (23 - lead)) & 0x7fffffu) + moved;
}

__device__ __forceinline__ double key_value(long long key)
{
    if (key == NO_KEY) return 0.0;
    const long long e = key >> 23;  // floor: the biased exponent, beyond float32's range too
    return (double)(0x800000LL + (key - e * 0x800000LL)) * pow2((int)e - 150);
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
    int bad = 0;
    unsigned int bits = 0u;  // no k-index moves: magnitudes compare as bits
    long long key = NO_KEY;  // else as rebalanced_key
    const bool moves = kexp[k] != 0;
    for (int c = 4 * threadIdx.x; c < k; c += 4 * blockDim.x) {
        float v[4];
        load_row4(row, c, k, v);
        for (int t = 0; t < 4 && c + t < k; ++t) {
            if (moves) {
                bad |= !finite_bits(v[t]);
                key = max(key, rebalanced_key(v[t], kexp[c + t], sign));
            } else {
                const unsigned int m = magnitude_bits(v[t]);
                if (m < 0x7f800000u) bits = max(bits, m); else bad = 1;
            }
        }
    }
    const double top = fmax(key_value(key), exact_double(__uint_as_float(bits)));
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

// equilibrate.k_exponents, step 2, for k-index q: f_q = floor(gap / 2) when the binades of A's
// column q and B's row q lie more than IMBALANCE apart, 0 within the band, DEAD when either is
// all zero.
__device__ __forceinline__ int k_exponent(unsigned int a_top, unsigned int b_top)
{
    if (a_top == 0u || b_top == 0u) return DEAD;
    int ea, eb;
    frexp(exact_double(__uint_as_float(a_top)), &ea);
    frexp(exact_double(__uint_as_float(b_top)), &eb);
    const int gap = ea - eb;
    return abs(gap) > IMBALANCE ? (gap >> 1) : 0;  // >> 1 floors, like Python's // 2
}

// f[0 .. k) of one pair, and f[k] (one past the exponents) = 1 when any k-index moves or is
// dead: the packers read it once per block and, when 0, skip the rebalancing arithmetic. By
// grids (a thread a k-index: k_exponents, with f[k] zeroed) or by one block (strip_max_bits's
// last: a block reduction).
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
    const int fq = k_exponent(a_top[q], b_top[q]);
    f[q] = fq;
    if (fq != 0) atomicOr(f + k, 1);
}

// ... by the block that calls it (t: its thread's index among `threads`); the tops are read
// from L2 (__ldcg), where the other blocks' atomics left them.
// A thread loads K_EXPONENT_BATCH k-indices' tops before it computes any: __ldcg is volatile
// asm, which the compiler keeps in order with the stores to f, so one k-index after another
// cost an L2 round trip each. This block is the last of its launch, on the critical path of
// small products. Not inlined: inlined, an unrolled loop here changed strip_max_bits' register
// allocation, fewer of its main loop's loads were in flight, and the stack's strip maxima ran
// slower.
#define K_EXPONENT_BATCH 4
__device__ __noinline__ void k_exponents_by_block(
    const unsigned int* __restrict__ a_top, const unsigned int* __restrict__ b_top, int k,
    int* __restrict__ f, int t, int threads)
{
    int moves = 0;
    for (int q0 = t; q0 < k; q0 += K_EXPONENT_BATCH * threads) {
        unsigned int a[K_EXPONENT_BATCH], b[K_EXPONENT_BATCH];
#pragma unroll
        for (int i = 0; i < K_EXPONENT_BATCH; ++i) {
            const int q = q0 + i * threads;
            a[i] = q < k ? __ldcg(a_top + q) : 0u;
            b[i] = q < k ? __ldcg(b_top + q) : 0u;
        }
#pragma unroll
        for (int i = 0; i < K_EXPONENT_BATCH; ++i) {
            const int q = q0 + i * threads;
            if (q >= k) break;
            const int fq = k_exponent(a[i], b[i]);
            f[q] = fq;
            moves |= fq != 0;
        }
    }
    moves = __syncthreads_or(moves);
    if (t == 0) f[k] = moves;
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
// Where arrivals is given (KExponentsStep), the launches over A and over B (side by side) also
// give the k-exponents: the last of a pair's blocks, over both launches, computes them (one
// launch and one dependency less than k_exponents after both).
#define STRIP_WIDTH (32 * STRIP_LANE_COLUMNS)

// The k-exponents step of strip_max_bits: arrivals (per pair, zeroed) counts the blocks of the
// pair done, blocks of the two launches; pair z's k-tops at z * k in a_top and b_top, its
// exponents at z * (k + 1) in f. arrivals null: no step.
struct KExponentsStep {
    unsigned int* arrivals;
    unsigned int blocks;
    const unsigned int* a_top;
    const unsigned int* b_top;
    int* f;
    int k;
};

// Called by every thread of each block once its maxima are merged: the pair's last block
// computes the pair's k-exponents (threadFenceReduction's pattern: each block's atomics are
// made visible before it counts itself).
__device__ void k_exponents_if_last(const KExponentsStep& step, long long z, int t)
{
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (t == 0) last = atomicAdd(step.arrivals + z, 1u) == step.blocks - 1u;
    __syncthreads();
    if (!last) return;
    __threadfence();
    k_exponents_by_block(step.a_top + z * step.k, step.b_top + z * step.k, step.k,
                         step.f + z * (step.k + 1), t, blockDim.x * blockDim.y);
}

extern "C" __global__ void strip_max_bits(
    const float* __restrict__ x, long long row_stride, int rows, int cols, int rows_per_block,
    long long batch_stride, int batch0, unsigned int* __restrict__ col_top,
    unsigned int* __restrict__ col_bad, unsigned int* __restrict__ row_top,
    unsigned int* __restrict__ row_bad, unsigned int* __restrict__ arrivals,
    unsigned int pair_blocks, const unsigned int* __restrict__ a_k_top,
    const unsigned int* __restrict__ b_k_top, int* __restrict__ f, int k)
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
    if (arrivals != nullptr)
        k_exponents_if_last({arrivals, pair_blocks, a_k_top, b_k_top, f, k}, z, ty * 32 + tx);
}

// packer.scale_exponents: the smallest e with top < (127/128) 2^e.
__device__ __forceinline__ int scale_exponent(double top)
{
    int e;
    frexp(top, &e);
    return top * (double)HEADROOM_DEN >= ldexp((double)HEADROOM_NUM, e) ? e + 1 : e;
}

// packer.fraction_bits: P(s) = FIRST + LATER (s - 1).
__device__ __forceinline__ int fraction_bits(int slices)
{
    return FIRST_SLICE_BITS + LATER_SLICE_BITS * (slices - 1);
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
    if (!finite_bits(x) || f == DEAD || (u & 0x7fffffffu) == 0u) return 0;
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
    if (!finite_bits(x) || f == DEAD) return 0;
    const int sig = significand(u), t = limit - scaled_up(u, f, sign, shift);
    return sig != 0 && t > 0 && (t >= 24 || sig < (1 << t));
}

// How a line's entries become packer integers. The quick way, when no k-index moves and 2^shift
// is a normal float32: x 2^shift in float32 is exact for a normal x (or below 2^-126, where rint
// gives 0 anyway), F2I rounds half to even like rint, and deep entries are those whose
// magnitude bits lie below floor_bits, the bits of 2^(e - deep - 1). A line whose k-indices
// move takes the same way entry by entry, with 2^(sign f + shift) and the deep entries' bound
// per k-index. Subnormal entries (flushed by -ftz) and scales beyond float32's take the exact way
// above. The exact way for every entry (and float64 before it) kept the packers busy issuing
// ~100 instructions per entry (ncu on an H100: integer pipe 77% busy, DRAM 40%); the quick way
// made pack A 1.4x faster at n = 8192.
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
    s.limit = deep == NO_BYPASS ? DEEP_NEVER : fraction_bits(slices) - deep - 1;
    s.quick = !moves && s.shift >= -126 && s.shift <= 127;
    s.scale = __uint_as_float((unsigned int)(s.shift + 127) << 23);
    const int floor = deep == NO_BYPASS ? -150 : e - deep - 1;  // bits of 2^floor, clamped
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
    const unsigned int m = magnitude_bits(x);
    if (s.quick) {
        if (m >= 0x7f800000u) return 0;
        *deep_count += m != 0u && m < s.floor_bits;
        if (m >= 0x800000u || m == 0u) return __float2int_rn(x * s.scale);
        return scaled_integer(x, 0, sign, s.shift);  // subnormal
    }
    // A line whose k-indices move, the quick way entry by entry where x is normal and
    // 2^up = 2^(sign f + shift) a normal float32; deep where |x| < 2^t, t = limit - up
    // (= e - deep - 1 - sign f; far below any entry where the level bypasses no line): x's
    // bits below 2^t's. (|f| stays below 150: float32 binades halved.)
    if (f == DEAD || m == 0u || m >= 0x7f800000u) return 0;
    if (m >= 0x800000u) {
        const int up = s.shift + sign * f;
        if (up >= -126 && up <= 127) {
            const int t = s.limit - s.shift - sign * f;  // limit - up
            *deep_count += t > 127 || (t > -126 && m < (unsigned int)(t + 127) << 23);
            return __float2int_rn(x * __uint_as_float((unsigned int)(up + 127) << 23));
        }
    }
    *deep_count += deep_entry(x, f, sign, s.shift, s.limit);
    return scaled_integer(x, f, sign, s.shift);
}

__device__ __forceinline__ int unresolved(int count, int k)
{
    return (long long)count * DEEP_FRACTION > k;
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
    long long key = NO_KEY;  // else as rebalanced_key
    for (int q0 = q_begin + threadIdx.y; q0 < q_end; q0 += 8 * 16) {
#pragma unroll
        for (int r = 0; r < 16; ++r) {
            const int q = q0 + 8 * r;
            if (q < q_end) {
                const float v = x[q * row_stride + col];
                if (moves) {
                    *bad |= !finite_bits(v);
                    key = max(key, rebalanced_key(v, kexp[q], 1));
                } else {
                    const unsigned int m = magnitude_bits(v);
                    if (m < 0x7f800000u) bits = max(bits, m); else *bad = 1;
                }
            }
        }
    }
    *top = fmax(*top, fmax(key_value(key), exact_double(__uint_as_float(bits))));
}

// The digits of the strip's columns col0 .. col0 + 31 for k-indices [q_begin, q_end) (both
// multiples of 16, q_begin of the tile), a tile of COLUMN_TILE_K at a time: the block reads
// the tile into shared memory, column by column, each warp load 4 rows x 8 consecutive floats
// (lane 8 g + j: row g, column j), so that its 32 stores into the tile's columns fall in 32
// banks (a warp load of 32 floats of one row stored 4 lanes to a bank); then warp w writes
// columns 4 w .. 4 w + 3, lane l the digits of k-indices 4 l .. 4 l + 3, so each warp store
// fills 128 consecutive bytes of a slot. count[c4]: this thread's deep entries of column
// 4 w + c4. The next tile's loads are in flight (in registers) while a tile is sliced.
__device__ void strip_digits(
    const float* __restrict__ x, long long row_stride, int k, int n, int k_pad, int col0,
    int q_begin, int q_end, const int* __restrict__ kexp, const LineScale* scale, int slices,
    int reversed, signed char* __restrict__ out, int (&count)[4])
{
    __shared__ __align__(16) float tile[32][COLUMN_TILE_K + 4];  // [column][k]: 16-byte rows
    __shared__ __align__(16) int tile_kexp[COLUMN_TILE_K];
    constexpr int LOADS = COLUMN_TILE_K / 8;  // a thread's entries of a tile (a warp's rows)
    // (lane l writes k-indices 4 l .. 4 l + 3; a row of the tile is 4 banks past the one before)
    static_assert(4 * 32 == COLUMN_TILE_K && (COLUMN_TILE_K + 4) % 32 == 4, "tile layout");
    const int tx = threadIdx.x, ty = threadIdx.y, t = ty * 32 + tx;
    const int g = tx >> 3, j = tx & 7;  // the row and column of this lane's loads in a 4 x 8
    float next[LOADS];  // entry r: row LOADS ty + 4 (r / 4) + g, column 8 (r % 4) + j
    const auto row = [&](int r) { return LOADS * ty + 4 * (r >> 2) + g; };
    const auto fetch = [&](int q0) {
#pragma unroll
        for (int r = 0; r < LOADS; ++r) {
            const int q = q0 + row(r), column = col0 + 8 * (r & 3) + j;
            next[r] = (q < k && column < n) ? x[q * row_stride + column] : 0.0f;
        }
    };
    fetch(q_begin);
    for (int q0 = q_begin; q0 < q_end; q0 += COLUMN_TILE_K) {
#pragma unroll
        for (int r = 0; r < LOADS; ++r) tile[8 * (r & 3) + j][row(r)] = next[r];
        if (t < COLUMN_TILE_K) tile_kexp[t] = q0 + t < k ? kexp[q0 + t] : 0;
        __syncthreads();
        if (q0 + COLUMN_TILE_K < q_end) fetch(q0 + COLUMN_TILE_K);
        const int first = q0 + 4 * tx;
        if (first < q_end) {
            const int4 f = *reinterpret_cast<const int4*>(&tile_kexp[4 * tx]);
            const int fs[4] = {f.x, f.y, f.z, f.w};
#pragma unroll
            for (int c4 = 0; c4 < 4; ++c4) {
                const int c = 4 * ty + c4;
                if (col0 + c >= n) break;
                const float4 v = *reinterpret_cast<const float4*>(&tile[c][4 * tx]);
                const float values[4] = {v.x, v.y, v.z, v.w};
                const LineScale line = scale[c];  // (read once a column, not once an entry)
                int rest[4];
#pragma unroll
                for (int i = 0; i < 4; ++i)
                    rest[i] = packer_integer(values[i], fs[i], 1, line, &count[c4]);
                write_digits4(rest, slices, reversed,
                              out + (long long)(col0 + c) * slices * k_pad + first, k_pad);
            }
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
// COLUMN_TILE_K) x (matrices: blockIdx.z + batch0), so B's columns fill the GPU at any n.
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
// `deep_counts` (integers: exact in any order). The last of a strip's blocks (counted in the
// zeroed `arrivals`, one per strip) then sets its columns' flags: NaN/Inf (from step 1) or
// unresolved (bypass), flagged columns counted into *flagged.
// (Four blocks an SM, as before the next tile's registers: ptxas fits them in 64 without
// spilling; uncapped it took 90, two blocks an SM.)
extern "C" __global__ void __launch_bounds__(256, 4) pack_int8_column_chunks(
    const float* __restrict__ x, long long row_stride, int k, int n, int k_pad,
    const int* __restrict__ kexp, int chunk, int slices, int reversed, int deep,
    long long batch_stride, int batch0, const unsigned long long* __restrict__ tops,
    signed char* __restrict__ out, int* __restrict__ exps, int* __restrict__ deep_counts,
    unsigned int* __restrict__ arrivals, int* __restrict__ nonfinite, int* __restrict__ flagged)
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
    // The strip's last block (threadFenceReduction's pattern): every block's counts are made
    // visible before it counts itself.
    __shared__ bool last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0)
        last = atomicAdd(arrivals + z * gridDim.x + blockIdx.x, 1u) == gridDim.y - 1u;
    __syncthreads();
    if (!last || threadIdx.y != 0 || col >= n) return;
    __threadfence();
    int* line_flag = nonfinite + z * n + col;
    const int flag = *line_flag | unresolved(__ldcg(deep_counts + col), k);
    *line_flag = flag;
    if (flag) atomicAdd(flagged, 1);
}

// fp16split: hi = fp16(x 2^(TOP - e)), lo = fp16((x 2^(TOP - e) - hi) 2^LO_SHIFT) of the
// rebalanced values; slots (hi, lo), or (lo, hi) when reversed. Lines with a NaN/Inf flagged,
// and counted into *flagged.
extern "C" __global__ void pack_fp16(
    const float* __restrict__ x, long long line_stride, int k, int k_pad,
    const int* __restrict__ kexp, int sign, int reversed,
    __half* __restrict__ out, int* __restrict__ exps, int* __restrict__ nonfinite,
    int* __restrict__ flagged)
{
    const long long line = blockIdx.x;
    const float* row = x + line * line_stride;
    int bad;
    const double top = line_max(row, k, kexp, sign, &bad);
    int e;
    frexp(top, &e);
    if (threadIdx.x == 0) {
        exps[line] = e;
        nonfinite[line] = bad;
        if (bad) atomicAdd(flagged, 1);
    }
    __half* dst = out + line * 2LL * k_pad;
    for (int c = threadIdx.x; c < k_pad; c += blockDim.x) {
        const double scaled =
            c < k ? ldexp(rebalanced(row[c], kexp[c], sign), ROW_TOP_EXPONENT - e) : 0.0;
        const __half hi = __double2half(scaled);
        const double hi_value = __half2float(hi);  // half -> float is exact and never subnormal
        const __half lo = __double2half(ldexp(scaled - hi_value, LO_SHIFT));
        dst[(long long)(reversed ? 1 : 0) * k_pad + c] = hi;
        dst[(long long)(reversed ? 0 : 1) * k_pad + c] = lo;
    }
}
