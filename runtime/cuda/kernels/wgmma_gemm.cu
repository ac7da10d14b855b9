// wgmma_gemm.cu -- INT8 x INT8 -> INT32 GEMM for Hopper (sm_90a), the engine of mixpert's
// INT8 class sums. Built from the first probe (commit 4dc20f9, benchmarks/wgmma_int8/): the same
// persistent, warp-specialised design, plus tails, depth tails, leading dimensions, batch
// and accumulate.
//
//   C[b][i, j] (+)= sum_{p < depth} A[b][i, p] * B[b][j, p]    i < m, j < n, b < batch
//   A[b]: m rows of int8, row stride lda bytes, batch stride stride_a bytes  (TMA map tmap_a)
//   B[b]: n rows of int8, row stride ldb bytes, batch stride stride_b bytes  (TMA map tmap_b)
//   C[b]: int32, row-major, row stride ldc elements, batch stride stride_c elements
//
// The host builds both operands' 3-D tensor maps: dims {depth, rows, batch} (innermost
// first), strides {ld, stride} bytes, box {128, 128 | 256, 1}, 128B swizzle, OOB fill zero.
// TMA zero-fills every box element past depth, past m / n rows, so the k tail and the row
// tails contribute 0 to the sums; the epilogue masks its stores to the m x n window.
//
// Design (persistent, warp-specialised, one CTA per SM), unchanged from the probe:
//   * 384 threads = 3 warpgroups. WG0 = producer (setmaxnreg.dec 40; one thread issues TMA
//     into a 4-stage smem ring). WG1, WG2 = consumers (setmaxnreg.inc 232): each owns 64 rows
//     of the 128 x 256 output tile, wgmma m64n256k32 s32.s8.s8, 128 INT32 accumulators.
//   * Stage = A tile 128 x 128 B + B tile 256 x 128 B, 128B swizzle; 4 stages = 192 KB.
//   * full[s]: producer arrive.expect_tx(48 KB) + TMA complete_tx (a box partly out of
//     bounds still delivers all its bytes, the missing ones as zeros). empty[s]: one arrive
//     per consumer warp after its wgmma reading the stage retired.
//   * Tiles are enumerated over batch x tiles_m x tiles_n (batch outermost); producer and
//     consumers walk the same sequence, ring phases carry across tiles.
//
// Compiles with nvcc (-arch=sm_90a) and NVRTC (--gpu-architecture=sm_90a, --include-path=<this
// directory>); its one include is hopper.cuh (the PTX wrappers it shares with fused_wgmma.cu).

#include "hopper.cuh"

namespace {

constexpr int BLOCK_M = 128;              // output tile rows (2 consumer WGs x 64)
constexpr int BLOCK_N = 256;              // output tile cols (one wgmma N)
constexpr int BLOCK_K = 128;              // k bytes per stage = one 128B swizzle row
constexpr int WGMMA_K = 32;               // k per wgmma for 8-bit types
constexpr int STAGES = 4;
constexpr int NUM_THREADS = 384;
constexpr int NUM_CONSUMER_WARPS = 8;

constexpr int A_STAGE_BYTES = BLOCK_M * BLOCK_K;   // 16384
constexpr int B_STAGE_BYTES = BLOCK_N * BLOCK_K;   // 32768
constexpr int STAGE_TX_BYTES = A_STAGE_BYTES + B_STAGE_BYTES;

// Dynamic smem layout (offsets from a 1024-byte aligned base: the 128B swizzle pattern
// repeats every 8 rows x 128 B, and TMA and the descriptors (base_offset 0) assume it).
constexpr int SMEM_A_OFF = 0;
constexpr int SMEM_B_OFF = SMEM_A_OFF + STAGES * A_STAGE_BYTES;
constexpr int SMEM_BAR_OFF = SMEM_B_OFF + STAGES * B_STAGE_BYTES;
constexpr int SMEM_USED = SMEM_BAR_OFF + 2 * STAGES * 8;
static_assert(SMEM_A_OFF % 1024 == 0 && SMEM_B_OFF % 1024 == 0, "tiles must be 1024B aligned");
static_assert(A_STAGE_BYTES % 1024 == 0 && B_STAGE_BYTES % 1024 == 0, "tiles must be 1024B aligned");
constexpr int SMEM_ALIGN_SLACK = 1024;    // the kernel aligns the dynamic smem base itself
constexpr int SMEM_BYTES = SMEM_USED + SMEM_ALIGN_SLACK;   // 197,696: wgmma_gemm.py SMEM_BYTES
static_assert(SMEM_BYTES <= 227 * 1024, "exceeds 227 KB dynamic smem");

// ---------------------------------------------------------------- wgmma (rest: hopper.cuh)

// D[64 x 256] (+)= A[64 x 32] * B[256 x 32]^T, both operands from smem descriptors.
// scale_d == 0 overwrites D (first k-step of a tile), 1 accumulates.
__device__ __forceinline__ void wgmma_m64n256k32_s8(u32 (&d)[128], u64 desc_a, u64 desc_b,
                                                    u32 scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %130, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n256k32.s32.s8.s8 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, "
      "%20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, "
      "%38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, "
      "%56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, "
      "%74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, "
      "%92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, "
      "%108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, "
      "%123, %124, %125, %126, %127}, "
      "%128, %129, p;\n"
      "}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]),
        "+r"(d[7]), "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]),
        "+r"(d[14]), "+r"(d[15]), "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]),
        "+r"(d[21]), "+r"(d[22]), "+r"(d[23]), "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]),
        "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]), "+r"(d[32]), "+r"(d[33]), "+r"(d[34]),
        "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]), "+r"(d[40]), "+r"(d[41]),
        "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]), "+r"(d[48]),
        "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
        "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]),
        "+r"(d[63]), "+r"(d[64]), "+r"(d[65]), "+r"(d[66]), "+r"(d[67]), "+r"(d[68]), "+r"(d[69]),
        "+r"(d[70]), "+r"(d[71]), "+r"(d[72]), "+r"(d[73]), "+r"(d[74]), "+r"(d[75]), "+r"(d[76]),
        "+r"(d[77]), "+r"(d[78]), "+r"(d[79]), "+r"(d[80]), "+r"(d[81]), "+r"(d[82]), "+r"(d[83]),
        "+r"(d[84]), "+r"(d[85]), "+r"(d[86]), "+r"(d[87]), "+r"(d[88]), "+r"(d[89]), "+r"(d[90]),
        "+r"(d[91]), "+r"(d[92]), "+r"(d[93]), "+r"(d[94]), "+r"(d[95]), "+r"(d[96]), "+r"(d[97]),
        "+r"(d[98]), "+r"(d[99]), "+r"(d[100]), "+r"(d[101]), "+r"(d[102]), "+r"(d[103]),
        "+r"(d[104]), "+r"(d[105]), "+r"(d[106]), "+r"(d[107]), "+r"(d[108]), "+r"(d[109]),
        "+r"(d[110]), "+r"(d[111]), "+r"(d[112]), "+r"(d[113]), "+r"(d[114]), "+r"(d[115]),
        "+r"(d[116]), "+r"(d[117]), "+r"(d[118]), "+r"(d[119]), "+r"(d[120]), "+r"(d[121]),
        "+r"(d[122]), "+r"(d[123]), "+r"(d[124]), "+r"(d[125]), "+r"(d[126]), "+r"(d[127])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// One pair of adjacent outputs (columns col, col + 1 of one row): acc (+ old C). The add
// is done on u32: int32 wrap-around, defined (signed overflow would be UB).
__device__ __forceinline__ int2 combine(const int* p, u32 a0, u32 a1, int accumulate) {
  if (accumulate) {
    const int2 old = __ldcs(reinterpret_cast<const int2*>(p));
    a0 += static_cast<u32>(old.x);
    a1 += static_cast<u32>(old.y);
  }
  return make_int2(static_cast<int>(a0), static_cast<int>(a1));
}

// The same for one column, for the masked / unaligned epilogue.
__device__ __forceinline__ void store1(int* p, u32 a, int accumulate) {
  if (accumulate) a += static_cast<u32>(__ldcs(p));
  __stcs(p, static_cast<int>(a));
}

}  // namespace

// Launch: grid = min(#SMs, batch * ceil(m/128) * ceil(n/256)), block = 384 (NUM_THREADS),
// dynamic smem = SMEM_BYTES (197,696). depth > 0 (a multiple of 16 on the host side).
extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
wgmma_gemm(const __grid_constant__ TensorMap tmap_a,   // A: dims {depth, m, batch}, box {128, 128, 1}
           const __grid_constant__ TensorMap tmap_b,   // B: dims {depth, n, batch}, box {128, 256, 1}
           int* __restrict__ C, long long ldc, long long stride_c,
           int m, int n, int depth, int batch, int accumulate, int raster_group) {
  // A launch the kernel was not built for would hang or corrupt memory: fail loudly.
  if (blockDim.x != NUM_THREADS || dynamic_smem_size() < static_cast<u32>(SMEM_BYTES)) __trap();
  if (m <= 0 || n <= 0 || depth <= 0 || batch <= 0 || raster_group <= 0) return;

  extern __shared__ unsigned char smem_raw[];
  const u32 base = smem_base_1024(smem_raw);
  const u32 sA = base + SMEM_A_OFF;
  const u32 sB = base + SMEM_B_OFF;
  const u32 bar_full = base + SMEM_BAR_OFF;        // STAGES x 8 B
  const u32 bar_empty = bar_full + STAGES * 8;     // STAGES x 8 B

  const int tiles_m = (m + BLOCK_M - 1) / BLOCK_M;
  const int tiles_n = (n + BLOCK_N - 1) / BLOCK_N;
  const int num_tiles = batch * tiles_m * tiles_n;
  const int num_kb = (depth + BLOCK_K - 1) / BLOCK_K;   // the last block zero-filled past depth

  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    init_ring<STAGES>(&tmap_a, &tmap_b, bar_full, bar_empty, NUM_CONSUMER_WARPS);
  }
  __syncthreads();

  if (warpgroup == 0) {
    // ------------------------------------------------------------ producer
    setmaxnreg_dec<40>();   // all 128 threads of the warpgroup must execute this
    if (threadIdx.x == 0) {
      int stage = 0;
      u32 phase = 0;
      for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        int tb, tm, tn;
        tile_coords(tile, tiles_m, tiles_n, raster_group, tb, tm, tn);
        for (int kb = 0; kb < num_kb; ++kb) {
          mbar_wait(bar_empty + 8 * stage, phase ^ 1);   // passes at once on the first lap
          const u32 full = bar_full + 8 * stage;
          // Full box bytes even for boxes partly out of bounds (TMA writes the zeros too).
          mbar_arrive_expect_tx(full, STAGE_TX_BYTES);
          tma_load_3d(sA + stage * A_STAGE_BYTES, &tmap_a, full, kb * BLOCK_K, tm * BLOCK_M, tb);
          tma_load_3d(sB + stage * B_STAGE_BYTES, &tmap_b, full, kb * BLOCK_K, tn * BLOCK_N, tb);
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
    // int2 stores need 8-byte aligned pairs: C 8-aligned, ldc and stride_c even (col is even).
    const bool pairs_aligned =
        ((reinterpret_cast<u64>(C) & 7) == 0) && ((ldc & 1) == 0) && ((stride_c & 1) == 0);

    u32 acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0;

    int stage = 0;
    u32 phase = 0;
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      int tb, tm, tn;
      tile_coords(tile, tiles_m, tiles_n, raster_group, tb, tm, tn);

      int prev_stage = -1;
      for (int kb = 0; kb < num_kb; ++kb) {
        mbar_wait(bar_full + 8 * stage, phase);

        // This consumer's 64 rows of A start 8 KB into the A tile (swizzle phase unchanged).
        const u64 desc_a = make_smem_desc_k<128>(sA + stage * A_STAGE_BYTES + cw * 64 * BLOCK_K);
        const u64 desc_b = make_smem_desc_k<128>(sB + stage * B_STAGE_BYTES);

#pragma unroll
        for (int i = 0; i < 128; ++i) fence_operand(acc[i]);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < BLOCK_K / WGMMA_K; ++kk) {
          // k-step kk reads bytes [32 kk, 32 kk + 32) of each row: start address + 32 B.
          const u64 off = static_cast<u64>((kk * WGMMA_K) >> 4);
          wgmma_m64n256k32_s8(acc, desc_a + off, desc_b + off, (kb > 0 || kk > 0) ? 1u : 0u);
        }
        wgmma_commit();
        // Keep this k-block's group in flight; the previous one has retired: release it.
        wgmma_wait<1>();
#pragma unroll
        for (int i = 0; i < 128; ++i) fence_operand(acc[i]);
        if (prev_stage >= 0 && lane == 0) mbar_arrive(bar_empty + 8 * prev_stage);
        prev_stage = stage;
        if (++stage == STAGES) {
          stage = 0;
          phase ^= 1;
        }
      }
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < 128; ++i) fence_operand(acc[i]);
      // Release the last stage before the epilogue: the producer prefetches meanwhile.
      if (lane == 0) mbar_arrive(bar_empty + 8 * prev_stage);

      // ---------------------------------------------------------- epilogue
      // m64nNk32 s32 fragment (PTX ISA; CUTLASS CLayout_64xN):
      //   acc[4i + 0/1] -> row 16*warp + lane/4,     cols 8i + 2*(lane%4) + 0/1
      //   acc[4i + 2/3] -> row 16*warp + lane/4 + 8, same cols
      const int row0 = tm * BLOCK_M + cw * 64 + warp * 16 + lane / 4;   // < m + 128: no overflow
      const int col0 = tn * BLOCK_N + 2 * (lane % 4);
      int* c_lo = C + tb * stride_c + static_cast<long long>(row0) * ldc + col0;
      int* c_hi = c_lo + 8 * ldc;
      // Uniform over the consumer warpgroup (same tile): no divergence in the fast path.
      const bool interior =
          pairs_aligned && (tm + 1) * BLOCK_M <= m && (tn + 1) * BLOCK_N <= n;
      if (interior && !accumulate) {
#pragma unroll
        for (int i = 0; i < BLOCK_N / 8; ++i) {
          // Streaming stores: C is written once, keep L2 for the A/B working set.
          __stcs(reinterpret_cast<int2*>(c_lo + 8 * i),
                 make_int2(static_cast<int>(acc[4 * i + 0]), static_cast<int>(acc[4 * i + 1])));
          __stcs(reinterpret_cast<int2*>(c_hi + 8 * i),
                 make_int2(static_cast<int>(acc[4 * i + 2]), static_cast<int>(acc[4 * i + 3])));
        }
      } else if (interior) {
#pragma unroll
        for (int i = 0; i < BLOCK_N / 8; ++i) {
          __stcs(reinterpret_cast<int2*>(c_lo + 8 * i),
                 combine(c_lo + 8 * i, acc[4 * i + 0], acc[4 * i + 1], 1));
          __stcs(reinterpret_cast<int2*>(c_hi + 8 * i),
                 combine(c_hi + 8 * i, acc[4 * i + 2], acc[4 * i + 3], 1));
        }
      } else {
        // Edge tile (or unaligned C): store only inside the m x n window; the old C is read
        // only where it is stored.
        const bool lo_ok = row0 < m;
        const bool hi_ok = row0 + 8 < m;
#pragma unroll
        for (int i = 0; i < BLOCK_N / 8; ++i) {
          const int col = col0 + 8 * i;
          const bool c0_ok = col < n;
          const bool c1_ok = col + 1 < n;
          if (pairs_aligned && c1_ok) {
            if (lo_ok)
              __stcs(reinterpret_cast<int2*>(c_lo + 8 * i),
                     combine(c_lo + 8 * i, acc[4 * i + 0], acc[4 * i + 1], accumulate));
            if (hi_ok)
              __stcs(reinterpret_cast<int2*>(c_hi + 8 * i),
                     combine(c_hi + 8 * i, acc[4 * i + 2], acc[4 * i + 3], accumulate));
          } else {
            if (lo_ok && c0_ok) store1(c_lo + 8 * i, acc[4 * i + 0], accumulate);
            if (lo_ok && c1_ok) store1(c_lo + 8 * i + 1, acc[4 * i + 1], accumulate);
            if (hi_ok && c0_ok) store1(c_hi + 8 * i, acc[4 * i + 2], accumulate);
            if (hi_ok && c1_ok) store1(c_hi + 8 * i + 1, acc[4 * i + 3], accumulate);
          }
        }
      }
    }
  }
}
