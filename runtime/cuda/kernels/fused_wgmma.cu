// fused_wgmma.cu -- mixpert's fused INT8 products for Hopper (sm_90a), one kernel per level
// (I, T6, IV, V): every slice product of the level on wgmma, the INT32 class sums in registers,
// and combine's formula in the epilogue, writing float32. Same bits as the Triton kernel
// fused_kernel.py (fused.product) for each of these levels.
//
// Operands are packs (packs.PackedOperand): int8 (lines, S slots, k_pad), k contiguous, line
// stride ld = S * k_pad bytes, S = the level's slices (as many for A as for B). A's slice i is
// slot i; B's slice j is slot S - 1 - j (reversed). Pair z of a stack: A lines z*m.., B lines
// z*n.., C z*m*n.. (row-major, n).
//
//   S_g[r, c] = sum_{(i, j) in L, i + j = g} sum_k A_i[r, k] B_j[c, k]        (INT32, exact)
//   v = 0; for g = G-1..0: v = v + S_g * 2^-(w0 + step*g); v *= 2^(a_exp[r] + b_exp[c])
//   C[r, c] = saturate(v): float32 nearest even with subnormals kept, +-FLT_MAX within k_slack
//
// The levels' pairs L, in issue order: levels.triangle(S, S, G - 1), i + j < G by class, then i.
//   fused_wgmma_I   S = 2, G = 3: (0,0) | (0,1) (1,0) | (1,1)
//   fused_wgmma_T6  S = 3, G = 3: (0,0) | (0,1) (1,0) | (0,2) (1,1) (2,0)
//   fused_wgmma_IV  S = 3, G = 4: (0,0) | (0,1) (1,0) | (0,2) (1,1) (2,0) | (1,2) (2,1)
//   fused_wgmma_V   S = 4, G = 4: (0,0) | (0,1) (1,0) | (0,2) (1,1) (2,0) | (0,3) (1,2) (2,1) (3,0)
//   V's kernel is on 64-byte k-blocks: 96 KB stages would leave room for a ring of 2, its
//     48 KB ones leave room for 4. fused_wgmma_V_k128, V on 128-byte k-blocks, is a variant
//     kept to measure that choice again, not routed.
//
// Machinery from wgmma_gemm.cu (verified on the H200), PTX wrappers shared in hopper.cuh:
//   * persistent grid, 384 threads: WG0 producer (setmaxnreg.dec 40, one thread issues TMA),
//     WG1/WG2 consumers (setmaxnreg.inc 232). Two schedules (TILE_M):
//       cooperative (128): both consumers on one 128 x 64 output tile, 64 rows each, every
//         stage read by both; the tensor cores idle while they run the epilogue.
//       ping-pong (64): each consumer on its own 64 x 64 tiles, the CTA's tiles taken in turn,
//         every stage one consumer's; the producer loads tile after tile, so one consumer's
//         main loop runs while the other runs its epilogue (CUTLASS's KernelTmaWarpSpecialized-
//         Pingpong; a turn barrier a consumer keeps the main loops in turn). A variant: it
//         measured slower (docs/performance.md).
//   * each consumer holds G class accumulators of m64n64 INT32: G x 32 registers (128 at G = 4).
//   * the epilogue's line exponents: each consumer thread loads one (of its 64 rows, or of the
//     tile's 64 columns) before the main loop, which hides the load, and writes it to shared
//     memory after it for the warpgroup (loaded in the epilogue, they cost a tile's time a
//     third at k = 1024).
//   * stage = one BK-byte k-block of A's S slices (S x TILE_M rows) and B's S slices (S x 64
//     rows): S x (TILE_M + 64) BK bytes, as many stages as fit in the 227 KB beside 2 KB of tile
//     exponents (cooperative below; ping-pong: S x 16 KB, 4 stages at S = 3 (T6, IV), V's 4 x 8
//     KB on 64-byte k-blocks 6). Cooperative, BK = 128 (I, T6, IV): S x 24 KB,
//     STAGES = 4 | 3 for S = 2 | 3 (192 | 216 KB); BK = 64 (V): 4 x 12 KB, STAGES = 4 (192 KB),
//     where 128 would give 2.
//   * TMA: one 3-D map per operand, dims {k_pad, S slots, lines} (innermost first), strides
//     {k_pad, ld} bytes, box {BK, 1, rows}, BK-byte swizzle, zero fill. The innermost dimension
//     is k_pad, so k >= k_pad of the last k-block reads as zeros (not the next slot's digits).
//     Lines past the pair's m (n) read the next pair's lines (or zeros past the last line):
//     such rows (columns) only feed outputs the epilogue does not store.
//   * per k-block and consumer: |L| pairs x BK/32 k-steps of wgmma m64n64k32 s32.s8.s8, both
//     operands from smem descriptors (SS, K-major, BK-byte swizzle), into accumulator class
//     i + j. Over a tile the wgmma run in the same order for either BK (k-step, then pair).
//
// Compiles with nvcc (-arch=sm_90a) and NVRTC (--gpu-architecture=sm_90a, -std=c++17,
// --include-path=<this directory>); its one include is hopper.cuh (the PTX wrappers it shares
// with wgmma_gemm.cu).

#include "hopper.cuh"

namespace {

constexpr int COOPERATIVE = 128;          // TILE_M of the cooperative schedule (2 WGs x 64 rows)
constexpr int PINGPONG = 64;              // TILE_M of the ping-pong schedule (1 WG a tile)
constexpr int BLOCK_N = 64;               // output tile cols (one wgmma N)
constexpr int WGMMA_K = 32;               // k per wgmma for 8-bit types
constexpr int ACC_REGS = 64 * BLOCK_N / 128;   // 32 INT32 per thread per m64n64 accumulator
constexpr int NUM_THREADS = 384;
constexpr int NUM_CONSUMER_WARPS = 8;
constexpr int SMEM_LIMIT = 227 * 1024;    // dynamic smem a block may opt in to on sm_90

// A level's pairs in issue order. The first pair of each class overwrites its accumulator at
// the tile's first k-step (scale_d = 0), the others add.
constexpr int MAX_PAIRS = 10;
struct PairTable {
  int count;
  int a[MAX_PAIRS];
  int b[MAX_PAIRS];
  bool first[MAX_PAIRS];
};

// levels.triangle(s, s, classes - 1): the pairs (i, j) with i + j < classes, by class g = i + j,
// then by i (the order of the level's pairs, and of fused_kernel.py's class sums).
__host__ __device__ constexpr PairTable triangle(int s, int classes) {
  PairTable t{};
  for (int g = 0; g < classes; ++g) {
    bool first = true;
    for (int i = 0; i < s; ++i) {
      if (g - i < 0 || g - i >= s) continue;
      t.a[t.count] = i;
      t.b[t.count] = g - i;
      t.first[t.count] = first;
      first = false;
      ++t.count;
    }
  }
  return t;
}

// Whether table t holds exactly the pairs {i, j} given, in their order.
template <int N>
__host__ __device__ constexpr bool lists(const PairTable& t, const int (&pairs)[N][2]) {
  if (t.count != N) return false;
  for (int p = 0; p < N; ++p)
    if (t.a[p] != pairs[p][0] || t.b[p] != pairs[p][1]) return false;
  return true;
}
static_assert(lists(triangle(2, 3), {{0, 0}, {0, 1}, {1, 0}, {1, 1}}), "level I's pairs");
static_assert(lists(triangle(3, 3), {{0, 0}, {0, 1}, {1, 0}, {0, 2}, {1, 1}, {2, 0}}),
              "level T6's pairs");
static_assert(lists(triangle(3, 4), {{0, 0}, {0, 1}, {1, 0}, {0, 2}, {1, 1}, {2, 0}, {1, 2},
                                     {2, 1}}), "level IV's pairs");
static_assert(lists(triangle(4, 4), {{0, 0}, {0, 1}, {1, 0}, {0, 2}, {1, 1}, {2, 0}, {0, 3},
                                     {1, 2}, {2, 1}, {3, 0}}), "level V's pairs");

// One level's kernel: S slices per operand (S slots a line), G weight classes g = 0..G-1 (the
// pairs: triangle(S, G)), k-blocks of BK bytes (one row of the BK-byte swizzle: 128 or 64),
// output tiles of TILE_M rows (its schedule), and its shared-memory layout.
template <int S, int G, int BK, int TILE_M = COOPERATIVE>
struct Level {
  static constexpr int SLICES = S;
  static constexpr int CLASSES = G;
  static constexpr int BLOCK_K = BK;                         // k bytes per stage
  static constexpr int BLOCK_M = TILE_M;                     // output tile rows
  static constexpr bool PING_PONG = TILE_M == PINGPONG;
  // Consumer warps that read (and release) each stage: both consumers' or one's.
  static constexpr int STAGE_READERS = PING_PONG ? 4 : NUM_CONSUMER_WARPS;
  static constexpr int A_SLICE_BYTES = BLOCK_M * BK;         // 16384 | 8192 cooperative
  static constexpr int B_SLICE_BYTES = BLOCK_N * BK;         //  8192 | 4096
  static constexpr int A_STAGE_BYTES = S * A_SLICE_BYTES;
  static constexpr int B_STAGE_BYTES = S * B_SLICE_BYTES;
  static constexpr int STAGE_TX_BYTES = A_STAGE_BYTES + B_STAGE_BYTES;   // < 2^20 (tx-count)
  static constexpr int SMEM_ALIGN_SLACK = 1024;   // the kernel aligns the dynamic smem base itself
  // Ping-pong's two turn barriers (each consumer's "the other's main loop is issued").
  static constexpr int TURN_BYTES = PING_PONG ? 2 * 8 : 0;
  // Each consumer's tile exponents (64 of A's rows, 64 of B's columns), two tiles' worth.
  static constexpr int EXP_BYTES = 2 * 2 * 128 * 4;
  // As many stages (and their two mbarriers) as fit in the 227 KB beside the rest.
  static constexpr int STAGES = (SMEM_LIMIT - SMEM_ALIGN_SLACK - TURN_BYTES - EXP_BYTES) /
                                (STAGE_TX_BYTES + 2 * 8);
  // Dynamic smem layout (offsets from a 1024-byte aligned base: the swizzle pattern repeats
  // every 8 rows x BK B (1024 | 512 B), and TMA and the descriptors (base_offset 0) assume it).
  static constexpr int SMEM_A_OFF = 0;
  static constexpr int SMEM_B_OFF = SMEM_A_OFF + STAGES * A_STAGE_BYTES;
  static constexpr int SMEM_BAR_OFF = SMEM_B_OFF + STAGES * B_STAGE_BYTES;
  static constexpr int SMEM_TURN_OFF = SMEM_BAR_OFF + 2 * STAGES * 8;
  static constexpr int SMEM_EXP_OFF = SMEM_TURN_OFF + TURN_BYTES;
  static constexpr int SMEM_USED = SMEM_EXP_OFF + EXP_BYTES;
  // The launch's dynamic smem (fused_wgmma.py): I 199,744; T6 and IV 224,304; V 199,744;
  // V_k128 199,712; T6_pingpong and IV_pingpong 199,760; V_pingpong 199,824.
  static constexpr int SMEM_BYTES = SMEM_USED + SMEM_ALIGN_SLACK;
  static_assert(2 <= S && S <= 4 && (G == 3 || G == 4), "levels I, T6, IV, V");
  static_assert(TILE_M == COOPERATIVE || TILE_M == PINGPONG, "the two schedules");
  static_assert(BK == 128 || BK == 64, "k-blocks of one 128B or 64B swizzle row");
  static_assert(A_SLICE_BYTES % 1024 == 0 && B_SLICE_BYTES % 1024 == 0 && SMEM_B_OFF % 1024 == 0,
                "tiles must be 1024B aligned");
  static_assert(STAGES >= 2, "a ring of one stage would leave the tensor cores waiting on loads");
  static_assert(SMEM_BYTES <= SMEM_LIMIT, "exceeds 227 KB dynamic smem");
  static_assert(STAGE_TX_BYTES < (1 << 20), "mbarrier tx-count");
};
static_assert(Level<2, 3, 128>::STAGES == 4 && Level<3, 3, 128>::STAGES == 3 &&
              Level<3, 4, 128>::STAGES == 3 && Level<4, 4, 64>::STAGES == 4 &&
              Level<4, 4, 128>::STAGES == 2 && Level<3, 4, 128, PINGPONG>::STAGES == 4 &&
              Level<3, 3, 128, PINGPONG>::STAGES == 4 && Level<4, 4, 64, PINGPONG>::STAGES == 6,
              "the rings fused_wgmma.py sizes the launches for");

// ---------------------------------------------------------------- wgmma (rest: hopper.cuh)

// D[64 x 64] (+)= A[64 x 32] * B[64 x 32]^T, both operands from smem descriptors (the
// m64n256k32 wrapper of wgmma_gemm.cu cut to N = 64: 32 accumulator registers).
// scale_d == 0 overwrites D, 1 accumulates.
__device__ __forceinline__ void wgmma_m64n64k32_s8(u32 (&d)[ACC_REGS], u64 desc_a, u64 desc_b,
                                                   u32 scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k32.s32.s8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "%32, %33, p;\n"
      "}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]),
        "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]),
        "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]),
        "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]),
        "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// ---------------------------------------------------------------- combine (fused_kernel.py)
// The formulas of fused_kernel.py / device.cuh, so the bits match the Triton kernel.

constexpr double OVERFLOW_THRESHOLD = 340282346638528859811704183484516925440.0 +
                                      10141204801825835211973625643008.0;  // 2^128 - 2^103
// (FLT_MAX = 2^128 - 2^104; the sum above is exact in double.)
constexpr u32 FLT_MAX_BITS = 0x7f7fffffu;

// 2^e as a double from its bits (device.cuh pow2, fused_kernel.py _pow2): exact for
// -1022 <= e <= 1023. Computed on 64 bits as Triton does (e + 1023 never wraps in int32,
// and the shift is on unsigned: the same bits as Triton's int64 shift for any int32 e).
__device__ __forceinline__ double pow2(int e) {
  return __longlong_as_double(static_cast<long long>(
      static_cast<unsigned long long>(static_cast<long long>(e) + 1023) << 52));
}

// float64 -> float32, nearest even, subnormal results kept (fused_kernel.py _round_to_float;
// device.cuh round_to_float, but the sign taken as d < 0 as Triton does: differs only for
// d = -0.0, which the combine never produces).
__device__ __forceinline__ float round_to_float(double d) {
  if (!(fabs(d) < pow2(-126))) return static_cast<float>(d);   // cvt.rn.f32.f64, no ftz
  const int frac = __double2int_rn(fabs(d) * pow2(149));       // rint: nearest even
  return __uint_as_float((d < 0.0 ? 0x80000000u : 0u) | static_cast<u32>(frac));
}

// combine.saturate (fused_kernel.py's epilogue): float32(v), or +-FLT_MAX where v would
// overflow by less than the error bound k_slack * 2^scale.
__device__ __forceinline__ float saturate(double v, int scale, double k_slack) {
  if (fabs(v) >= OVERFLOW_THRESHOLD && fabs(v) - k_slack * pow2(scale) < OVERFLOW_THRESHOLD)
    return __uint_as_float((v < 0.0 ? 0x80000000u : 0u) | FLT_MAX_BITS);
  return round_to_float(v);
}

// a b + c for int32 a and b (a's bits) and int64 c: one IMAD.WIDE (written as int64 products,
// the compiler split each into three multiplies).
__device__ __forceinline__ long long mad_wide(u32 a, int b, long long c) {
  long long d;
  asm("mad.wide.s32 %0, %1, %2, %3;" : "=l"(d) : "r"(a), "r"(b), "l"(c));
  return d;
}

// The level's class weights as one integer each: class g's sum counts 2^(step (G - 1 - g)) units
// of the smallest weight 2^-(w0 + step (G - 1)), and unit_exponent is that weight's exponent.
template <int G>
struct ClassUnits {
  int mult[G];
  int unit_exponent;
};

template <int G>
__device__ __forceinline__ ClassUnits<G> class_units(int w0, int step) {
  ClassUnits<G> u;
#pragma unroll
  for (int g = 0; g < G; ++g) u.mult[g] = 1 << (step * (G - 1 - g));
  u.unit_exponent = -(w0 + step * (G - 1));
  return u;
}

// One output: its class sums added from the smallest weight (g = G - 1) to the largest in
// float64, as fused_kernel.py adds them, then scaled. Every partial sum but the last is exact
// there (|S_g| < 2^31 and step (G - 2) <= 21: below 2^53), so that value is the exact total
// rounded once: the total in units, an int64 (step (G - 1) <= 30: below 2^62), converted
// (rounded to nearest even) and scaled by powers of two (exact: the exponents stay in
// float64's normal range). One conversion an output, not one a class. (Both bounds on step
// are checked at launch.)
template <int G>
__device__ __forceinline__ double combined(const u32 (&acc)[G][ACC_REGS], int r,
                                           const ClassUnits<G>& units, int scale) {
  long long total = static_cast<int>(acc[G - 1][r]);
#pragma unroll
  for (int g = G - 2; g >= 0; --g) total = mad_wide(acc[g][r], units.mult[g], total);
  return static_cast<double>(total) * pow2(units.unit_exponent + scale);
}

// ... saturated: combine's value.
template <int G>
__device__ __forceinline__ float combine_one(const u32 (&acc)[G][ACC_REGS], int r,
                                             const ClassUnits<G>& units, int scale,
                                             double k_slack) {
  return saturate(combined(acc, r, units, scale), scale, k_slack);
}

// ... converted alone, straight-line: combine_one's value wherever it is finite, since
// round_to_float is the plain conversion (no ftz) and saturate changes only values that
// convert to +-Inf (|v| >= OVERFLOW_THRESHOLD), where the caller calls combine_one instead.
// (The epilogue issues every output's instructions from 8 warps a tile: combine_one's branches
// per output cost more of it than the arithmetic.)
template <int G>
__device__ __forceinline__ float combine_finite(const u32 (&acc)[G][ACC_REGS], int r,
                                                const ClassUnits<G>& units, int scale) {
  return static_cast<float>(combined(acc, r, units, scale));
}

// ---------------------------------------------------------------- the kernel
// One consumer thread's outputs in C (m64nNk32 s32 fragment, PTX ISA; CUTLASS CLayout_64xN, per
// class accumulator: acc[g][4i + 0/1] -> row 16 warp + lane/4, cols 8i + 2 (lane % 4) + 0/1;
// acc[g][4i + 2/3] -> row 8 below, same cols): rows row0 (lo) and row0 + 8 (hi) from c_lo and
// c_hi, columns col0 + 8i, + 1; their rows' exponents row_exps[0] and [8], their columns'
// col_exps[8i], [8i + 1].
struct Outputs {
  float* c_lo;
  float* c_hi;
  const int* row_exps;
  const int* col_exps;
  int col0, n;
  bool lo_ok, hi_ok, pairs_aligned;
};

// Stores the thread's outputs: each as combine_finite gives it, or (SATURATING) as combine_one
// does; returns whether one came out +-Inf. CHECKED: rows and columns compared with C's edges
// and pairs stored one by one where unaligned; unchecked, every output is inside C and each pair
// one 8-byte store.
template <bool SATURATING, bool CHECKED, int G>
__device__ __forceinline__ bool store_outputs(const Outputs& o, const u32 (&acc)[G][ACC_REGS],
                                              const ClassUnits<G>& units, double k_slack) {
  bool overflowed = false;
#pragma unroll
  for (int i = 0; i < BLOCK_N / 8; ++i) {
    const int col = o.col0 + 8 * i;
    const bool c0_ok = !CHECKED || col < o.n;
    const bool c1_ok = !CHECKED || col + 1 < o.n;
    const int eb0 = o.col_exps[8 * i];
    const int eb1 = o.col_exps[8 * i + 1];
#pragma unroll
    for (int h = 0; h < 2; ++h) {   // h = 0: row0, h = 1: row0 + 8
      const bool row_ok = !CHECKED || (h == 0 ? o.lo_ok : o.hi_ok);
      if (!row_ok || !c0_ok) continue;
      const int ea = o.row_exps[8 * h];
      float* p = (h == 0 ? o.c_lo : o.c_hi) + 8 * i;
      const int r = 4 * i + 2 * h;
      const float v0 = SATURATING ? combine_one(acc, r, units, ea + eb0, k_slack)
                                  : combine_finite(acc, r, units, ea + eb0);
      overflowed |= isinf(v0);
      if (c1_ok) {
        const float v1 = SATURATING ? combine_one(acc, r + 1, units, ea + eb1, k_slack)
                                    : combine_finite(acc, r + 1, units, ea + eb1);
        overflowed |= isinf(v1);
        // Streaming stores: C is written once, keep L2 for the packs.
        if (!CHECKED || o.pairs_aligned) {
          __stcs(reinterpret_cast<float2*>(p), make_float2(v0, v1));
        } else {
          __stcs(p, v0);
          __stcs(p + 1, v1);
        }
      } else {
        __stcs(p, v0);
      }
    }
  }
  return overflowed;
}

// Waits until `threads` threads (whole warps) have reached barrier `id` (1-15: 0 is
// __syncthreads'), their shared-memory writes before it visible to each other after it.
__device__ __forceinline__ void named_barrier_sync(int id, int threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// The i-th output tile of this block's sequence, the order in which the producer loads them:
// cooperative, every gridDim.x-th tile; ping-pong, tiles two by two (adjacent in the raster
// order, so the two consumers share B's tile and a band of A in L2), one for each consumer.
template <class L>
__device__ __forceinline__ long long block_tile(int i) {
  const long long grid = gridDim.x;
  if constexpr (L::PING_PONG) return 2 * (blockIdx.x + (i / 2) * grid) + i % 2;
  return blockIdx.x + i * grid;
}

// The kernel of level L = Level<S, G, BK, TILE_M>; the extern "C" entry points below are its
// wrappers.
// Launch: grid = min(#SMs, batch * ceil(m/TILE_M) * ceil(n/64), halved rounding up for
// ping-pong), block = 384 (NUM_THREADS),
// dynamic smem = L::SMEM_BYTES. k_pad > 0, a multiple of 16, small enough that no class sum
// leaves INT32 (combine.int32_k_block(level)).
template <class L>
__device__ __forceinline__ void fused_wgmma(
    const TensorMap& tmap_a,                    // A: dims {k_pad, S, batch*m}, box {BK, 1, 128}
    const TensorMap& tmap_b,                    // B: dims {k_pad, S, batch*n}, box {BK, 1, 64}
    const int* __restrict__ a_exp,              // batch*m line exponents
    const int* __restrict__ b_exp,              // batch*n line exponents
    float* __restrict__ C,                      // batch x m x n, row-major
    double k_slack, int m, int n, int k_pad, int batch, int w0, int step, int raster_group) {
  constexpr int SLICES = L::SLICES;
  constexpr int CLASSES = L::CLASSES;
  constexpr int STAGES = L::STAGES;
  constexpr int BLOCK_K = L::BLOCK_K;
  constexpr int A_SLICE_BYTES = L::A_SLICE_BYTES;
  constexpr int B_SLICE_BYTES = L::B_SLICE_BYTES;
  constexpr PairTable PAIRS = triangle(SLICES, CLASSES);

  // A launch the kernel was not built for would hang or corrupt memory: fail loudly.
  if (blockDim.x != NUM_THREADS || dynamic_smem_size() < static_cast<u32>(L::SMEM_BYTES)) __trap();
  // combined's premises: the class sums' partial sums but the last exact in float64, and
  // their total in int64.
  if (step < 0 || step * (L::CLASSES - 2) > 21 || step * (L::CLASSES - 1) > 30) __trap();
  if (m <= 0 || n <= 0 || k_pad <= 0 || batch <= 0 || raster_group <= 0) return;

  extern __shared__ unsigned char smem_raw[];
  const u32 base = smem_base_1024(smem_raw);
  const u32 sA = base + L::SMEM_A_OFF;
  const u32 sB = base + L::SMEM_B_OFF;
  const u32 bar_full = base + L::SMEM_BAR_OFF;     // STAGES x 8 B
  const u32 bar_empty = bar_full + STAGES * 8;     // STAGES x 8 B
  const u32 bar_turn = base + L::SMEM_TURN_OFF;    // ping-pong: 2 x 8 B, one a consumer
  // [tile parity][consumer][128]: rows' exponents, then columns'
  int* const tile_exps = reinterpret_cast<int*>(smem_raw + (base - smem_u32(smem_raw)) +
                                                L::SMEM_EXP_OFF);

  constexpr int BLOCK_M = L::BLOCK_M;
  const int tiles_m = (m + BLOCK_M - 1) / BLOCK_M;
  const int tiles_n = (n + BLOCK_N - 1) / BLOCK_N;
  const int num_tiles = batch * tiles_m * tiles_n;
  const int num_kb = (k_pad + BLOCK_K - 1) / BLOCK_K;   // the last block zero-filled past k_pad

  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    init_ring<STAGES>(&tmap_a, &tmap_b, bar_full, bar_empty, L::STAGE_READERS);
    if constexpr (L::PING_PONG) {   // one arrival a warp of the other consumer
      mbar_init(bar_turn, 4);
      mbar_init(bar_turn + 8, 4);
      fence_barrier_init();
    }
  }
  __syncthreads();

  if (warpgroup == 0) {
    // ------------------------------------------------------------ producer
    setmaxnreg_dec<40>();   // all 128 threads of the warpgroup must execute this
    if (threadIdx.x == 0) {
      int stage = 0;
      u32 phase = 0;
      for (int i = 0; block_tile<L>(i) < num_tiles; ++i) {
        int tb, tm, tn;
        tile_coords(static_cast<int>(block_tile<L>(i)), tiles_m, tiles_n, raster_group, tb, tm,
                    tn);
        const int a_line = tb * m + tm * BLOCK_M;   // < batch * m <= 2^31 - 1 (host checks)
        const int b_line = tb * n + tn * BLOCK_N;
        for (int kb = 0; kb < num_kb; ++kb) {
          mbar_wait(bar_empty + 8 * stage, phase ^ 1);   // passes at once on the first lap
          const u32 full = bar_full + 8 * stage;
          // Full box bytes even for boxes partly out of bounds (TMA writes the zeros too).
          mbar_arrive_expect_tx(full, L::STAGE_TX_BYTES);
          const u32 a_dst = sA + stage * L::A_STAGE_BYTES;
          const u32 b_dst = sB + stage * L::B_STAGE_BYTES;
#pragma unroll
          for (int s = 0; s < SLICES; ++s) {
            // A slice s is slot s; B slice s is slot SLICES - 1 - s (reversed in the pack).
            tma_load_3d(a_dst + s * A_SLICE_BYTES, &tmap_a, full, kb * BLOCK_K, s, a_line);
            tma_load_3d(b_dst + s * B_SLICE_BYTES, &tmap_b, full, kb * BLOCK_K, SLICES - 1 - s,
                        b_line);
          }
          if (++stage == STAGES) {
            stage = 0;
            phase ^= 1;
          }
        }
      }
    }
    // Other producer threads simply exit; nothing below needs a CTA-wide barrier.
  } else {
    // ------------------------------------------------------------ consumers
    setmaxnreg_inc<232>();
    const int cw = warpgroup - 1;            // consumer index: rows [64*cw, 64*cw+64) of the tile
    const int t = threadIdx.x % 128;
    const int warp = t / 32;
    const int lane = t % 32;
    // float2 stores need 8-byte aligned pairs: C 8-aligned and n even (then m*n is even too).
    const bool pairs_aligned = ((reinterpret_cast<u64>(C) & 7) == 0) && ((n & 1) == 0);
    const ClassUnits<CLASSES> units = class_units<CLASSES>(w0, step);

    u32 acc[CLASSES][ACC_REGS];
#pragma unroll
    for (int g = 0; g < CLASSES; ++g)
#pragma unroll
      for (int i = 0; i < ACC_REGS; ++i) acc[g][i] = 0;

    // Cooperative: every tile of the block's sequence, rows 64 cw.. of it. Ping-pong: every
    // other one, all its rows.
    const int first = L::PING_PONG ? cw : 0;
    const int stride = L::PING_PONG ? 2 : 1;
    const int tile_row = L::PING_PONG ? 0 : cw * 64;
    u32 turn_phase = 0;
    int tiles_done = 0;
    for (int i = first; block_tile<L>(i) < num_tiles; i += stride, ++tiles_done) {
      int tb, tm, tn;
      tile_coords(static_cast<int>(block_tile<L>(i)), tiles_m, tiles_n, raster_group, tb, tm,
                  tn);
      // The epilogue's line exponents, one a thread (threads 0-63 this consumer's rows of A,
      // 64-127 the tile's columns of B), loaded now so the main loop hides their latency.
      const bool row_side = t < 64;
      const int exp_line = row_side ? tm * BLOCK_M + tile_row + t : tn * BLOCK_N + t - 64;
      const int* exp_base = row_side ? a_exp + static_cast<long long>(tb) * m
                                     : b_exp + static_cast<long long>(tb) * n;
      const int my_exp = exp_line < (row_side ? m : n) ? __ldg(exp_base + exp_line) : 0;
      // Where the producer put this tile's first k-block: the tiles before it in the sequence
      // took num_kb stages each.
      const unsigned long long first_load = static_cast<unsigned long long>(i) * num_kb;
      int stage = static_cast<int>(first_load % STAGES);
      u32 phase = static_cast<u32>(first_load / STAGES) & 1u;
      if constexpr (L::PING_PONG) {
        // A stage's full barrier tells its phases apart by parity only: wait on it only once
        // every load before this tile's has landed, i.e. once the other consumer has waited on
        // all of the previous tile's (its turn barrier); that also keeps the main loops in turn.
        if (i > 0) {
          mbar_wait(bar_turn + 8 * cw, turn_phase);
          turn_phase ^= 1;
        }
      }

      int prev_stage = -1;
      for (int kb = 0; kb < num_kb; ++kb) {
        mbar_wait(bar_full + 8 * stage, phase);

        // This consumer's rows of each A slice start tile_row BK bytes into it (8 | 4 KB: a
        // whole number of swizzle patterns, phase unchanged).
        const u32 a_base = sA + stage * L::A_STAGE_BYTES + tile_row * BLOCK_K;
        const u32 b_base = sB + stage * L::B_STAGE_BYTES;

#pragma unroll
        for (int g = 0; g < CLASSES; ++g)
#pragma unroll
          for (int i = 0; i < ACC_REGS; ++i) fence_operand(acc[g][i]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BLOCK_K / WGMMA_K; ++kk) {
          // k-step kk reads bytes [32 kk, 32 kk + 32) of each row: start address + 32 B.
          const u64 off = static_cast<u64>((kk * WGMMA_K) >> 4);
#pragma unroll
          for (int p = 0; p < PAIRS.count; ++p) {
            const u64 desc_a = make_smem_desc_k<BLOCK_K>(a_base + PAIRS.a[p] * A_SLICE_BYTES) + off;
            const u64 desc_b = make_smem_desc_k<BLOCK_K>(b_base + PAIRS.b[p] * B_SLICE_BYTES) + off;
            const u32 scale_d = (kb > 0 || kk > 0 || !PAIRS.first[p]) ? 1u : 0u;
            wgmma_m64n64k32_s8(acc[PAIRS.a[p] + PAIRS.b[p]], desc_a, desc_b, scale_d);
          }
        }
        wgmma_commit();
        // Keep this k-block's group in flight; the previous one has retired: release it.
        wgmma_wait<1>();
#pragma unroll
        for (int g = 0; g < CLASSES; ++g)
#pragma unroll
          for (int i = 0; i < ACC_REGS; ++i) fence_operand(acc[g][i]);
        if (prev_stage >= 0 && lane == 0) mbar_arrive(bar_empty + 8 * prev_stage);
        prev_stage = stage;
        if (++stage == STAGES) {
          stage = 0;
          phase ^= 1;
        }
      }
      // Ping-pong: the whole main loop is issued; the other consumer's may begin.
      if constexpr (L::PING_PONG)
        if (lane == 0) mbar_arrive(bar_turn + 8 * (1 - cw));
      wgmma_wait<0>();
#pragma unroll
      for (int g = 0; g < CLASSES; ++g)
#pragma unroll
        for (int i = 0; i < ACC_REGS; ++i) fence_operand(acc[g][i]);
      // Release the last stage before the epilogue: the producer prefetches meanwhile.
      if (lane == 0) mbar_arrive(bar_empty + 8 * prev_stage);
      // The exponents to the whole warpgroup. Two buffers: a thread writes this one again two
      // tiles on, after every thread has passed the next tile's barrier, so done reading it.
      int* const exps = tile_exps + ((tiles_done & 1) * 2 + cw) * 128;
      exps[t] = my_exp;
      named_barrier_sync(1 + cw, 128);

      // ---------------------------------------------------------- epilogue
      // (the accumulators' fragment: Outputs)
      const int row = warp * 16 + lane / 4;   // of this consumer's rows (exps[row])
      const int row0 = tm * BLOCK_M + tile_row + row;   // < m + 128
      const int col0 = tn * BLOCK_N + 2 * (lane % 4);
      const bool lo_ok = row0 < m;
      const bool hi_ok = row0 + 8 < m;
      const int* const col_exps = exps + 64 + 2 * (lane % 4);   // column col0's, col0 + 1's, ...
      float* c_lo = C + static_cast<long long>(tb) * m * n + static_cast<long long>(row0) * n + col0;
      float* c_hi = c_lo + 8LL * n;
      // Every output as combine_finite gives it, by the unchecked way where the thread's
      // outputs lie inside C; where one came out +-Inf, all of them again as combine_one gives
      // them (saturate's case: rare, so not worth a branch per output).
      const Outputs out{c_lo, c_hi, exps + row, col_exps, col0, n, lo_ok, hi_ok, pairs_aligned};
      const bool inside = hi_ok && tn * BLOCK_N + BLOCK_N <= n && pairs_aligned;
      const bool overflowed = inside ? store_outputs<false, false>(out, acc, units, k_slack)
                                     : store_outputs<false, true>(out, acc, units, k_slack);
      if (overflowed) store_outputs<true, true>(out, acc, units, k_slack);
    }
  }
}

}  // namespace

// The entry points, one a level (S slices, G classes), k-block (BK bytes) and schedule (TILE_M),
// and the variants: the same parameters for all; the host builds the maps with S slots, boxes
// of BK bytes x TILE_M | 64 lines and the BK-byte swizzle, and launches with that kernel's
// SMEM_BYTES.
#define FUSED_WGMMA_KERNEL(NAME, S, G, BK, TILE_M)                                              \
  extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)                                  \
  NAME(const __grid_constant__ TensorMap tmap_a, const __grid_constant__ TensorMap tmap_b,      \
       const int* __restrict__ a_exp, const int* __restrict__ b_exp, float* __restrict__ C,     \
       double k_slack, int m, int n, int k_pad, int batch, int w0, int step,                    \
       int raster_group) {                                                                      \
    fused_wgmma<Level<S, G, BK, TILE_M>>(tmap_a, tmap_b, a_exp, b_exp, C, k_slack, m, n, k_pad, \
                                         batch, w0, step, raster_group);                        \
  }

FUSED_WGMMA_KERNEL(fused_wgmma_I, 2, 3, 128, COOPERATIVE)
FUSED_WGMMA_KERNEL(fused_wgmma_T6, 3, 3, 128, COOPERATIVE)
FUSED_WGMMA_KERNEL(fused_wgmma_IV, 3, 4, 128, COOPERATIVE)
FUSED_WGMMA_KERNEL(fused_wgmma_V, 4, 4, 64, COOPERATIVE)
// The variants (fused_wgmma.VARIANTS), built only where asked for: each kernel lengthens the
// module's build at first use.
#ifdef FUSED_WGMMA_VARIANTS
// Level V on 128-byte k-blocks, a ring of 2 stages.
FUSED_WGMMA_KERNEL(fused_wgmma_V_k128, 4, 4, 128, COOPERATIVE)
// The ping-pong schedule: T6 and IV, rings of 4; V on 64-byte k-blocks.
FUSED_WGMMA_KERNEL(fused_wgmma_T6_pingpong, 3, 3, 128, PINGPONG)
FUSED_WGMMA_KERNEL(fused_wgmma_IV_pingpong, 3, 4, 128, PINGPONG)
FUSED_WGMMA_KERNEL(fused_wgmma_V_pingpong, 4, 4, 64, PINGPONG)
#endif
