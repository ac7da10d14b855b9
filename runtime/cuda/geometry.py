"""The kernels' launch geometry: the numbers compiled into the CUDA kernels (the sources'
prelude defines them: ``sources``) or naming which variants of a kernel exist, which their
launchers must match, each with its reason; and CUDA's grid limit, with the chunks a longer stack
launches in. No CuPy here: the "auto" rules read THIN_MAX_N on any machine."""

from __future__ import annotations

MAX_GRID_YZ = 65535  # CUDA's limit on gridDim.y and .z: longer stacks launch in chunks

# The packers (packs.cuh)
COLUMN_TILE_K = 128  # k-indices per shared tile of B's column packing (8 warps x 16)
STRIP_LANE_COLUMNS = 8  # columns per lane of strip_max_bits: a block takes 32 x 8 of them

# Level fp32-ordered (ordered.cuh, ordered_rows.cuh, ordered_thin.cuh)
ROWS_THREADS = 128  # threads (rows of A) per block of the tall kernels (ordered_rows)
ROWS_MAX_GROUP = 16  # ... and the most columns a thread of them sums (ordered_rows_<G>)
THIN_THREADS = 128  # ... and of the thin ones (ordered_thin), ...
THIN_STAGES = 2  # ... with this many tiles of rows in shared memory, all but one in flight
# (H100, GPU time, 2 stages against 3: 121.6 -> 116.9 us at 1048576 x 32 x 32, 59.0 -> 58.3 at
# 1048576 x 16 x 16, 52.9 -> 50.9 at 4194304 x 4 x 4; 4 stages and 256 threads no better)
THIN_MAX_N = 32  # ... and at most this many columns: one thread's column group
# Split-k for outputs of at most T x T (ordered_chunks_<T>): T -> (chunks summed at once a
# block, stages in shared memory).
CHUNKS_SHAPES = {16: (8, 2), 32: (4, 2)}
# Stacks of small pairs (ordered_pairs_<T>): T -> (the longest k a stage holds, threads of a
# block). H100: T = 32 with 128 threads (a stage of 2 pairs, 4 blocks an SM) ran 1.07-1.54x
# faster than with 256, the copies and stores as now (4096 x 32^3 25.5 -> 23.4 us, 4096 x 24^3
# 18.8 -> 13.3 us, 8192 x 20x32x20 38.5 -> 28.9 us); 3 and 4 stages were slower. T = 64 (a
# stage of one pair) ran 1024 x 64^3 in 32 us against the tile kernel's 42 (cuBLAS 27).
PAIRS_SHAPES = {32: (32, 128), 64: (64, 256)}
PAIRS_STAGES = 2
TOTALS_WIDTH = 4  # entries a block of the split-k totals (ordered_segment_totals) chains ...
TOTALS_THREADS = 64  # ... and the threads that copy them

# Level IV-blocks (iv_blocks.cuh)
BLOCKS_THREADS = 128  # 4 warps, 16 rows of A each
BLOCKS_TILE_ROWS = 16 * BLOCKS_THREADS // 32  # rows of A per block of threads
BLOCKS_ROW_PAD = 16  # floats after each staged row of A: conflict-free 16-byte reads
BLOCKS_N_TILES = (1, 2, 4, 8)  # n-tiles of 8 columns a block of threads may take
# n-tiles a block -> (stages: tiles of A in shared memory, the one in use and the rest arriving;
# blocks per SM that __launch_bounds__ caps the registers for). H100, same run against (3, 1):
# (2, 3) gave 1.60x -> 1.67x SGEMM at 65536 x 4096 x 16 (2 n-tiles) and 1.37x -> 1.59x at
# 262144 x 1024 x 32 (4): 4 and 3 blocks an SM instead of 3 and 2; at 8 n-tiles it took 1.00x ->
# 0.93x at 65536 x 4096 x 64 and 1.24x -> 1.18x at 16384^2 x 64 (0.95x -> 1.00x at n = 128).
# Later, 2 n-tiles at (2, 4) against (2, 3), GPU time: 430 -> 391 us at 65536 x 4096 x 16 (the
# registers, 121-123, fit under either cap), 397 -> 400 at 262144 x 1024 x 16. 1 n-tile keeps
# (3, 1), 4 n-tiles (2, 3), each beside a variant below. The bits are the same for every choice.
# 8 n-tiles: one warp per 16 rows and all 8 (240-254 registers: 8 warps an SM, issuing in 48% of
# the cycles, ncu) beat warps sharing their rows' slicing through shared memory, each summing
# 4 or 2 of the n-tiles at 128 registers (same bits), H100: 695 -> 854 us (4 n-tiles a warp, 2
# warps a row group) and 1268 (2 n-tiles, 4 warps) at 65536 x 4096 x 64; 16 n-tiles a block (4
# a warp, 4 warps) 1346 -> 1732 us at x 128.
BLOCKS_SHAPES = {1: (3, 1), 2: (2, 4), 4: (2, 3), 8: (3, 1)}
# ... and a variant capped for more blocks an SM, which the host takes where its extra blocks
# save a round of row tiles (``iv_blocks._rows_launch``): 4 n-tiles squeezed into 128
# registers (from 156) ran 496 -> 449 us at 65536 x 4096 x 32 (1024 row tiles: 2 rounds, not 3)
# and 922 -> 907 at 1048576 x 512 x 32, but 495 -> 533 at 16384^2 x 32 (256 row tiles: one
# round either way) and 335 -> 350 at 40000 x 4096 x 24 (two rounds either way); 1 n-tile at
# (2, 4) against (3, 1): 418 -> 385 us at 65536 x 4096 x 8 (and x 4), 389 -> 388 at 262144 x
# 1024 x 8, but 381 -> 400 at 16384^2 x 8 and 149 -> 155 at 40000 x 2048 x 8.
BLOCKS_BUSY_SHAPES = {1: (2, 4), 4: (2, 4)}
assert set(BLOCKS_SHAPES) == set(BLOCKS_N_TILES) >= set(BLOCKS_BUSY_SHAPES)
BLOCKS_BYPASS_THREADS = 256  # bypass kernels: 8 listed entries or (row, 32 columns); 256 rows


def batch_chunks(count: int) -> range:
    """First indices of the chunks of a stack of ``count`` that one launch covers."""
    return range(0, count, MAX_GRID_YZ)


def chunk_length(first: int, count: int) -> int:
    """Matrices in the chunk of a stack of ``count`` that starts at ``first``."""
    return min(MAX_GRID_YZ, count - first)
