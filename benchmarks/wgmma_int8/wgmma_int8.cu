// wgmma_int8.cu -- INT8 x INT8 -> INT32 GEMM probe for Hopper (sm_90a).
//
//   C[i, j] = sum_p A[i, p] * B[j, p]        ("TN", as cuBLASLt takes INT8)
//   A: m x k int8, row-major (k contiguous)
//   B: n x k int8, row-major (k contiguous)
//   C: m x n int32, row-major
//
// Requires m % 128 == 0, n % 256 == 0, k % 128 == 0 (no tail handling yet;
// the host checks this, and the kernel returns without writing if violated).
//
// Design (persistent, warp-specialised, one CTA per SM):
//   * 384 threads = 3 warpgroups.
//       WG0 = producer: one thread issues TMA loads into a STAGES-deep smem
//             ring; the warpgroup gives registers back (setmaxnreg.dec 40).
//       WG1, WG2 = consumers: each owns 64 rows of the 128 x 256 output tile,
//             accumulates with wgmma m64n256k32 s32.s8.s8 (128 INT32
//             accumulators per thread), takes registers (setmaxnreg.inc 232).
//     Register budget: 128*40 + 256*232 = 64,512 <= 65,536.
//   * Stage = A tile 128 x 128 B (16 KB) + B tile 256 x 128 B (32 KB), both
//     loaded by TMA with 128-byte swizzle. 4 stages = 192 KB.
//   * full[s]  : producer arrive.expect_tx(48 KB) + TMA complete_tx -> consumers.
//   * empty[s] : one arrive per consumer warp (8) after its wgmma reading the
//                stage has retired -> producer may overwrite.
//   * Phase bits of the ring carry across output tiles; producer and consumers
//     walk the same tile sequence, so they stay in lock-step.
//   * Epilogue: accumulators go straight from registers to global C.
//
// Conventions follow CUTLASS (cute/arch/mma_sm90_desc.hpp, mma_sm90_gmma.hpp,
// copy_sm90_tma.hpp, pipeline_tma_async) and DeepGEMM.

#include <cuda.h>      // CUtensorMap
#include <stdint.h>

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

// Dynamic smem layout (offsets from a 1024-byte aligned base; the 128B swizzle
// pattern repeats every 8 rows x 128 B = 1024 B, and both TMA and the wgmma
// descriptor (base_offset = 0) assume each tile starts on that boundary).
constexpr int SMEM_A_OFF = 0;
constexpr int SMEM_B_OFF = SMEM_A_OFF + STAGES * A_STAGE_BYTES;
constexpr int SMEM_BAR_OFF = SMEM_B_OFF + STAGES * B_STAGE_BYTES;
constexpr int SMEM_USED = SMEM_BAR_OFF + 2 * STAGES * 8;
static_assert(SMEM_A_OFF % 1024 == 0 && SMEM_B_OFF % 1024 == 0, "tiles must be 1024B aligned");
static_assert(A_STAGE_BYTES % 1024 == 0 && B_STAGE_BYTES % 1024 == 0, "tiles must be 1024B aligned");
// 1024 bytes of slack so the kernel can align the dynamic smem base itself.
constexpr int SMEM_ALIGN_SLACK = 1024;
static_assert(SMEM_USED + SMEM_ALIGN_SLACK <= 227 * 1024, "exceeds 227 KB dynamic smem");

// ---------------------------------------------------------------- PTX wrappers

__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Makes the mbarrier inits visible to other threads and to the async (TMA)
// proxy before anyone uses them (CUTLASS fence_barrier_init + fence_view_async_shared).
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

__device__ __forceinline__ void mbar_arrive_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Spin until the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  uint32_t done;
  do {
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(bar), "r"(parity)
        : "memory");
  } while (!done);
}

__device__ __forceinline__ void tma_prefetch_desc(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// 2D tiled TMA load; c0 = innermost coordinate (k, in elements = bytes), c1 = row.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const CUtensorMap* map, uint32_t bar,
                                            int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(c0), "r"(c1)
      : "memory");
}

template <uint32_t N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <uint32_t N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Pins accumulator registers at this point of the instruction stream, so the
// compiler cannot move ordinary reads/writes of them across wgmma.fence /
// wgmma.wait_group (which do not name the registers). CUTLASS warpgroup_fence_operand.
__device__ __forceinline__ void fence_operand(uint32_t& r) {
  asm volatile("" : "+r"(r)::"memory");
}

// Shared-memory matrix descriptor for a K-major operand with 128-byte swizzle
// (CUTLASS GmmaDescriptor, canonical layout Sw<3,4,3> o ((8,n),(8,k)):((8T,SBO),(1,LBO))):
//   bits  0-13 start address >> 4
//   bits 16-29 leading byte offset >> 4: unused for swizzled K-major, CUTLASS sets 1
//   bits 32-45 stride byte offset >> 4: 8 rows x 128 B = 1024 B between 8-row groups
//   bits 49-51 base offset: 0 (tiles are 1024B aligned)
//   bits 62-63 layout type: 1 = SWIZZLE_128B
__device__ __forceinline__ uint64_t make_smem_desc_k128b(uint32_t smem_addr) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((smem_addr & 0x3FFFF) >> 4);
  desc |= static_cast<uint64_t>(1) << 16;
  desc |= static_cast<uint64_t>(1024 >> 4) << 32;
  desc |= static_cast<uint64_t>(1) << 62;
  return desc;
}

// D[64 x 256] (+)= A[64 x 32] * B[256 x 32]^T, both operands from smem descriptors.
// scale_d == 0 overwrites D (first k-step of a tile), 1 accumulates.
__device__ __forceinline__ void wgmma_m64n256k32_s8(uint32_t (&d)[128], uint64_t desc_a,
                                                    uint64_t desc_b, uint32_t scale_d) {
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

// Output-tile order. Tiles are visited in groups of `group` tile-rows (along m):
// inside a group the m index varies fastest, so consecutive tiles (which run
// concurrently on neighbouring SMs) share B tiles and a bounded band of A rows,
// keeping both in L2. Producer and consumers call this with the same arguments.
__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int group,
                                            int& tm, int& tn) {
  const int per_group = group * tiles_n;
  const int g = tile / per_group;
  const int first_m = g * group;
  const int gsize = min(tiles_m - first_m, group);
  const int local = tile - g * per_group;
  tm = first_m + local % gsize;
  tn = local / gsize;
}

}  // namespace

// Reports the launch configuration so the host never hard-codes it:
// out = {dynamic smem bytes, block threads, BLOCK_M, BLOCK_N, BLOCK_K, STAGES}.
// Launch with one thread.
extern "C" __global__ void wgmma_int8_config(int* out) {
  out[0] = SMEM_USED + SMEM_ALIGN_SLACK;
  out[1] = NUM_THREADS;
  out[2] = BLOCK_M;
  out[3] = BLOCK_N;
  out[4] = BLOCK_K;
  out[5] = STAGES;
}

// Launch: grid = min(#SMs, #tiles), block = 384, dynamic smem = config[0].

extern "C" __global__ void __launch_bounds__(NUM_THREADS, 1)
wgmma_int8_gemm(const __grid_constant__ CUtensorMap tmap_a,   // A: dims {k, m}, box {128, 128}
                const __grid_constant__ CUtensorMap tmap_b,   // B: dims {k, n}, box {128, 256}
                int* __restrict__ C, int m, int n, int k, int raster_group) {
  // Shapes the probe does not handle: leave C untouched (host checks first).
  if (m <= 0 || n <= 0 || k <= 0 || (m % BLOCK_M) || (n % BLOCK_N) || (k % BLOCK_K) ||
      raster_group <= 0)
    return;

  extern __shared__ uint8_t smem_raw[];
  // Align the base to 1024 B ourselves; the dynamic smem start is not guaranteed to be.
  const uint32_t raw_addr = smem_u32(smem_raw);
  const uint32_t base = (raw_addr + 1023u) & ~1023u;
  const uint32_t sA = base + SMEM_A_OFF;
  const uint32_t sB = base + SMEM_B_OFF;
  const uint32_t bar_full = base + SMEM_BAR_OFF;        // STAGES x 8 B
  const uint32_t bar_empty = bar_full + STAGES * 8;     // STAGES x 8 B

  const int tiles_m = m / BLOCK_M;
  const int tiles_n = n / BLOCK_N;
  const int num_tiles = tiles_m * tiles_n;
  const int num_kb = k / BLOCK_K;

  const int warpgroup = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    // Hide the first descriptor fetch latency.
    tma_prefetch_desc(&tmap_a);
    tma_prefetch_desc(&tmap_b);
#pragma unroll
    for (int s = 0; s < STAGES; ++s) {
      mbar_init(bar_full + 8 * s, 1);                     // the producer's arrive.expect_tx
      mbar_init(bar_empty + 8 * s, NUM_CONSUMER_WARPS);   // one arrive per consumer warp
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (warpgroup == 0) {
    // ------------------------------------------------------------ producer
    setmaxnreg_dec<40>();   // all 128 threads of the warpgroup must execute this
    if (threadIdx.x == 0) {
      int stage = 0;
      uint32_t phase = 0;
      for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
        int tm, tn;
        tile_coords(tile, tiles_m, tiles_n, raster_group, tm, tn);
        for (int kb = 0; kb < num_kb; ++kb) {
          // Slot free? (parity phase^1: passes immediately on the first lap.)
          mbar_wait(bar_empty + 8 * stage, phase ^ 1);
          const uint32_t full = bar_full + 8 * stage;
          mbar_arrive_expect_tx(full, STAGE_TX_BYTES);
          tma_load_2d(sA + stage * A_STAGE_BYTES, &tmap_a, full, kb * BLOCK_K, tm * BLOCK_M);
          tma_load_2d(sB + stage * B_STAGE_BYTES, &tmap_b, full, kb * BLOCK_K, tn * BLOCK_N);
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
    const int t = threadIdx.x % 128;         // thread within the warpgroup
    const int warp = t / 32;
    const int lane = t % 32;

    uint32_t acc[128];
#pragma unroll
    for (int i = 0; i < 128; ++i) acc[i] = 0;

    int stage = 0;
    uint32_t phase = 0;
    for (int tile = blockIdx.x; tile < num_tiles; tile += gridDim.x) {
      int tm, tn;
      tile_coords(tile, tiles_m, tiles_n, raster_group, tm, tn);

      int prev_stage = -1;
      for (int kb = 0; kb < num_kb; ++kb) {
        mbar_wait(bar_full + 8 * stage, phase);

        // This consumer's 64 rows of A start 64 * 128 B = 8 KB into the A tile
        // (a multiple of 1024 B, so the swizzle phase is unchanged).
        const uint64_t desc_a =
            make_smem_desc_k128b(sA + stage * A_STAGE_BYTES + cw * 64 * BLOCK_K);
        const uint64_t desc_b = make_smem_desc_k128b(sB + stage * B_STAGE_BYTES);

#pragma unroll
        for (int i = 0; i < 128; ++i) fence_operand(acc[i]);
        wgmma_fence();   // orders prior register accesses (epilogue reads) before wgmma
#pragma unroll
        for (int kk = 0; kk < BLOCK_K / WGMMA_K; ++kk) {
          // k-step kk reads bytes [32 kk, 32 kk + 32) of each 128 B row: advance the
          // start address by 32 B (= 2 in 16 B units). The hardware applies the
          // 128B swizzle XOR on the final address bits, matching TMA's placement.
          const uint64_t off = static_cast<uint64_t>((kk * WGMMA_K) >> 4);
          wgmma_m64n256k32_s8(acc, desc_a + off, desc_b + off, (kb > 0 || kk > 0) ? 1u : 0u);
        }
        wgmma_commit();
        // Keep this k-block's group in flight; the previous one has now retired,
        // so its stage can go back to the producer.
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
      // Release the last stage before the epilogue so the producer can already
      // prefetch the next tile while we store.
      if (lane == 0) mbar_arrive(bar_empty + 8 * prev_stage);

      // ---------------------------------------------------------- epilogue
      // m64nNk32 s32 accumulator fragment (PTX ISA "wgmma .m64nNk32 register
      // fragment D"; CUTLASS CLayout_64xN):
      //   acc[4i + 0/1] -> row 16*warp + lane/4,     cols 8i + 2*(lane%4) + 0/1
      //   acc[4i + 2/3] -> row 16*warp + lane/4 + 8, same cols
      const int row0 = tm * BLOCK_M + cw * 64 + warp * 16 + lane / 4;
      const int col0 = tn * BLOCK_N + 2 * (lane % 4);
      int* c_lo = C + static_cast<size_t>(row0) * n + col0;
      int* c_hi = c_lo + static_cast<size_t>(8) * n;
#pragma unroll
      for (int i = 0; i < BLOCK_N / 8; ++i) {
        // Streaming stores: C is written once, keep L2 for the A/B working set.
        __stcs(reinterpret_cast<int2*>(c_lo + 8 * i),
               make_int2(static_cast<int>(acc[4 * i + 0]), static_cast<int>(acc[4 * i + 1])));
        __stcs(reinterpret_cast<int2*>(c_hi + 8 * i),
               make_int2(static_cast<int>(acc[4 * i + 2]), static_cast<int>(acc[4 * i + 3])));
      }
    }
  }
}
