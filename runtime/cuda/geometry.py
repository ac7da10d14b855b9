"""The kernels' launch geometry: the numbers compiled into the CUDA kernels (the sources'
prelude defines them: ``sources``) or naming which variants of a kernel exist, which their
launchers must match, each with its reason; and CUDA's grid limit, with the chunks a longer stack
launches in. No CuPy here: the "auto" rules read THIN_MAX_N on any machine."""

from __future__ import annotations

MAX_GRID_YZ = 65535  # CUDA's limit on gridDim.y and .z: longer stacks launch in chunks

# The packers (packs.cuh)
COLUMN_TILE_K = 128  # k-indices per shared tile of B's column packing (8 warps x 16)
STRIP_LANE_COLUMNS = 8  # columns per lane of strip_max_bits: a block takes 32 x 8 of them

# Level fp32-ordered (ordered.cuh, ordered_rows.cuh, ordered_thin.cuh). The figures behind the
# choices here and below: benchmarks/results/NVIDIA-H100-80GB-HBM3/cuda-launch-constants.txt.
ROWS_THREADS = 128  # threads (rows of A) per block of the tall kernels (ordered_rows)
ROWS_MAX_GROUP = 16  # ... and the most columns a thread of them sums (ordered_rows_<G>)
THIN_THREADS = 128  # ... and of the thin ones (ordered_thin), ...
THIN_STAGES = 2  # ... with this many tiles of rows in shared memory, all but one in flight (the
# fastest: 3 stages ran slower, 4 stages and 256 threads no faster)
THIN_MAX_N = 32  # ... and at most this many columns: one thread's column group
# Split-k for outputs of at most T x T (ordered_chunks_<T>): T -> (chunks summed at once a
# block, stages in shared memory).
CHUNKS_SHAPES = {16: (8, 2), 32: (4, 2)}
# Stacks of small pairs (ordered_pairs_<T>): T -> (the longest k a stage holds, threads of a
# block), the fastest measured: 128 threads for T = 32 (a stage of 2 pairs, 4 blocks an SM),
# PAIRS_STAGES stages (3 and 4 were slower); T = 64 (a stage of one pair) beats the tile kernel.
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
# blocks per SM that __launch_bounds__ caps the registers for): for each width the fastest
# measured, its registers under the cap. 8 n-tiles: one warp per 16 rows and all 8, which beat
# warps sharing their rows' slicing through shared memory. The bits are the same for every
# choice.
BLOCKS_SHAPES = {1: (3, 1), 2: (2, 4), 4: (2, 3), 8: (3, 1)}
# ... and a variant capped for more blocks an SM, which the host takes where its extra blocks
# save a round of row tiles (``iv_blocks._rows_launch``): faster then, slower where both take
# as many rounds.
BLOCKS_BUSY_SHAPES = {1: (2, 4), 4: (2, 4)}
assert set(BLOCKS_SHAPES) == set(BLOCKS_N_TILES) >= set(BLOCKS_BUSY_SHAPES)
BLOCKS_BYPASS_THREADS = 256  # bypass kernels: 8 listed entries or (row, 32 columns); 256 rows


def batch_chunks(count: int) -> range:
    """First indices of the chunks of a stack of ``count`` that one launch covers."""
    return range(0, count, MAX_GRID_YZ)


def chunk_length(first: int, count: int) -> int:
    """Matrices in the chunk of a stack of ``count`` that starts at ``first``."""
    return min(MAX_GRID_YZ, count - first)
