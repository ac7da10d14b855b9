// hopper.cuh -- the Hopper (sm_90a) device helpers shared by mixpert's warp-specialised wgmma
// kernels (wgmma_gemm.cu, fused_wgmma.cu): inline-PTX wrappers for mbarriers, TMA loads, wgmma,
// setmaxnreg and fences, the wgmma shared-memory descriptor, and the persistent tile order.
// Only what both kernels use sits here; a kernel's own helpers (its wgmma shape, its epilogue)
// stay in its file.
//
// NVRTC compiles the kernels with no CUDA headers (no cuda.h, no cuda_runtime.h): this header
// includes nothing, and the loader passes --include-path=<this directory> so that
// `#include "hopper.cuh"` resolves; nvcc finds it next to the .cu file.
//
// Everything is __forceinline__ and, like the kernels' own helpers, in an unnamed namespace
// (each kernel is its own translation unit): moving the helpers here leaves the SASS of both
// kernels unchanged, instruction for instruction (checked when they moved).

#pragma once

namespace {

typedef unsigned int u32;
typedef unsigned long long u64;

// CUtensorMap (cuda.h) is an opaque 64-byte-aligned 128-byte struct; NVRTC has no cuda.h.
struct alignas(64) TensorMap {
  u64 v[16];
};

// The 32-bit shared-window address that mbarrier, TMA and wgmma descriptors take; generic
// pointers are 64-bit.
__device__ __forceinline__ u32 smem_u32(const void* p) {
  return static_cast<u32>(__cvta_generic_to_shared(p));
}

// The launch's dynamic shared memory in bytes: the kernels check it against the layout they
// were built for (a smaller one would overrun), which no CUDA builtin exposes.
__device__ __forceinline__ u32 dynamic_smem_size() {
  u32 r;
  asm volatile("mov.u32 %0, %%dynamic_smem_size;" : "=r"(r));
  return r;
}

// One thread sets a barrier's expected arrival count (before any thread or TMA uses it).
__device__ __forceinline__ void mbar_init(u32 bar, u32 count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

// Makes the mbarrier inits visible to other threads and to the async (TMA) proxy.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

// The producer's arrival on a stage's full barrier, announcing the bytes its TMA loads will
// deliver: the phase completes only when they all have landed (complete_tx).
__device__ __forceinline__ void mbar_arrive_expect_tx(u32 bar, u32 bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

// A plain arrival (a consumer warp releasing a stage); the state token is not needed.
__device__ __forceinline__ void mbar_arrive(u32 bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// Spin until the phase with the given parity has completed.
__device__ __forceinline__ void mbar_wait(u32 bar, u32 parity) {
  u32 done;
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

// Pulls a (__grid_constant__) tensor map into the TMA unit's cache ahead of the first load.
__device__ __forceinline__ void tma_prefetch_desc(const TensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<u64>(map)) : "memory");
}

// 3-D tiled TMA load of one box into smem at dst, counted on barrier bar (complete_tx);
// c0, c1, c2 = the box's start coordinates, innermost first (c0 = k in elements = bytes).
__device__ __forceinline__ void tma_load_3d(u32 dst, const TensorMap* map, u32 bar, int c0,
                                            int c1, int c2) {
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5}], [%2];" ::"r"(dst),
      "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1), "r"(c2)
      : "memory");
}

// Warpgroup register reallocation: the producer gives registers up (dec) so the consumers
// can hold their accumulators (inc). N is an immediate; every thread of the warpgroup runs it.
template <u32 N>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(N));
}
template <u32 N>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(N));
}

// Orders the accumulator registers' prior accesses before the wgmma that follow.
__device__ __forceinline__ void wgmma_fence() {
  asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
}
// Closes the wgmma issued since the last commit into one group, for wgmma_wait to count.
__device__ __forceinline__ void wgmma_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
}
// Waits until at most N committed groups are in flight (their smem reads and accumulators done).
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

// Pins accumulator registers at this point of the instruction stream (CUTLASS
// warpgroup_fence_operand): wgmma.fence / wait_group do not name the registers.
__device__ __forceinline__ void fence_operand(u32& r) {
  asm volatile("" : "+r"(r)::"memory");
}

// Shared-memory matrix descriptor of a K-major tile whose rows are SWIZZLE bytes (128 or 64),
// swizzled as TMA's SWIZZLE_128B / SWIZZLE_64B writes them (CUTLASS GmmaDescriptor,
// cute/arch/mma_sm90_desc.hpp; make_gmma_desc in cute/atom/mma_traits_sm90_gmma.hpp):
//   bits 0-13 start >> 4; 16-29 LBO >> 4 = 1 (unused); 32-45 SBO >> 4 = (8 rows x SWIZZLE) >> 4;
//   49-51 base offset 0 (tiles aligned to the pattern); 62-63 layout 1 = SWIZZLE_128B,
//   2 = SWIZZLE_64B.
template <int SWIZZLE>
__device__ __forceinline__ u64 make_smem_desc_k(u32 smem_addr) {
  static_assert(SWIZZLE == 128 || SWIZZLE == 64, "128B or 64B swizzle");
  u64 desc = 0;
  desc |= static_cast<u64>((smem_addr & 0x3FFFF) >> 4);
  desc |= static_cast<u64>(1) << 16;
  desc |= static_cast<u64>(8 * SWIZZLE >> 4) << 32;
  desc |= static_cast<u64>(SWIZZLE == 128 ? 1 : 2) << 62;
  return desc;
}

// The dynamic shared memory's base rounded up to 1024 B (the start is not guaranteed to be; the
// 128B swizzle pattern repeats every 1024 B, and TMA and the descriptors assume its phase).
__device__ __forceinline__ u32 smem_base_1024(const void* smem_raw) {
  return (smem_u32(smem_raw) + 1023u) & ~1023u;
}

// A TMA ring's set-up, by thread 0 before the block's __syncthreads: both tensor maps
// prefetched, and per stage a "full" barrier (the producer's one arrive.expect_tx) and an
// "empty" one (one arrive per consumer warp).
template <int STAGES>
__device__ __forceinline__ void init_ring(const TensorMap* tmap_a, const TensorMap* tmap_b,
                                          u32 bar_full, u32 bar_empty, u32 consumer_warps) {
  tma_prefetch_desc(tmap_a);
  tma_prefetch_desc(tmap_b);
#pragma unroll
  for (int s = 0; s < STAGES; ++s) {
    mbar_init(bar_full + 8 * s, 1);
    mbar_init(bar_empty + 8 * s, consumer_warps);
  }
  fence_barrier_init();
}

// Output-tile order: batch outermost; inside a problem, groups of `group` tile-rows (along
// m) with m varying fastest, so tiles running at the same time share B tiles and a bounded
// band of A in L2. Producer and consumers call this with the same arguments.
__device__ __forceinline__ void tile_coords(int tile, int tiles_m, int tiles_n, int group,
                                            int& tb, int& tm, int& tn) {
  const int per_problem = tiles_m * tiles_n;
  tb = tile / per_problem;
  const int t = tile - tb * per_problem;
  const int per_group = group * tiles_n;
  const int g = t / per_group;
  const int first_m = g * group;
  const int gsize = min(tiles_m - first_m, group);
  const int local = t - g * per_group;
  tm = first_m + local % gsize;
  tn = local / gsize;
}

}  // namespace
