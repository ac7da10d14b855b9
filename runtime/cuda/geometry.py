"""The kernels' launch geometry: CUDA's grid limit, and the chunks a longer stack launches in.
No CuPy here."""

from __future__ import annotations

MAX_GRID_YZ = 65535  # CUDA's limit on gridDim.y and .z: longer stacks launch in chunks


def batch_chunks(count: int) -> range:
    """First indices of the chunks of a stack of ``count`` that one launch covers."""
    return range(0, count, MAX_GRID_YZ)


def chunk_length(first: int, count: int) -> int:
    """Matrices in the chunk of a stack of ``count`` that starts at ``first``."""
    return min(MAX_GRID_YZ, count - first)
