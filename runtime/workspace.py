"""How much memory one emulated product may take, and the refusal when it cannot fit.

The CPU oracle packs B whole (its INT8 digits: at most the bytes of B as float32) and works
through A in row blocks and k blocks whose float64 and int64 temporaries stay within
``block_budget``: the bytes of the operands and the output. The whole call then needs about
3x the operands and output (the digits, one block, the result), below the 4x the contract
allows.

The CUDA backend packs both operands whole (at most their float32 bytes) and computes the
class sums of a block of A's rows (of a stack's pairs) at a time, in one buffer whose bytes
stay within ``SUMS_BUDGET`` times the operands and output: about 3-4x in all, with the result.

A product whose workspace does not fit in the memory available is refused with a MemoryError
naming the level, the shape and the bytes, before anything is allocated.
"""

from __future__ import annotations

from pathlib import Path

from .levels import Level

FLOAT64_TEMPORARIES = 40  # bytes per entry of a block: float64 copy, ldexp, int64 digits, ...


def block_budget(m: int, k: int, n: int) -> int:
    """Bytes one block's temporaries may take: those of the float32 operands and output."""
    return 4 * (m * k + k * n + m * n)


def rows_per_block(k: int, n: int, budget: int, classes: int = 4) -> int:
    """Rows of A whose slicing temporaries and ``classes`` float64 class sums fit."""
    return max(1, budget // (FLOAT64_TEMPORARIES * k + 8 * classes * n))


def cpu_bytes(level: Level, m: int, k: int, n: int) -> int:
    """Workspace of one CPU product: B's digits, one block's temporaries, the result."""
    return level.b_slices * n * k + 2 * block_budget(m, k, n) + 4 * m * n


SUMS_BUDGET = 2  # GPU class sums: at most twice the bytes of the operands and the output
# Rows of A per INT8 GEMM and per block of class sums on the GPU (``gemm_row_block``): blocks
# of GEMM_ROW_BLOCK rows for outputs at least GEMM_ROW_BLOCK_MIN_N wide, else blocks of up to
# NARROW_BLOCK_ENTRIES outputs (so a GEMM's output stays far below 2^31 entries, and a block's
# class sums within 1 GiB at level IV). H100, level IV against SGEMM in one run, blocks of 4096
# rows against blocks of all rows (within SUMS_BUDGET): 2.97x / 2.75x at 8192^3, but 0.61x /
# 1.07x at 16384 x 1024 x 1024, 0.69x / 1.57x at 65536 x 1024 x 1024, 1.97x / 2.14x at 16384 x
# 2048 x 2048, 1.40x / 1.69x at 131072 x 768 x 3072, 1.62x / 2.05x at 131072 x 3072 x 768,
# 2.59x / 2.62x at 16384 x 4096 x 4096, 1.79x either way at 8192 x 1024 x 8192.
GEMM_ROW_BLOCK = 4096
GEMM_ROW_BLOCK_MIN_N = 8192
NARROW_BLOCK_ENTRIES = 1 << 26


def gemm_row_block(n: int) -> int:
    """Rows of A per INT8 GEMM (and the most per block of class sums) for outputs ``n`` wide."""
    if n >= GEMM_ROW_BLOCK_MIN_N:
        return GEMM_ROW_BLOCK
    return max(GEMM_ROW_BLOCK, NARROW_BLOCK_ENTRIES // max(n, 1))


GEMM_WORKSPACE = 32 << 20  # the most workspace one cuBLASLt GEMM may take (tn_gemm)


def sum_bytes(level: Level, long_k: bool) -> int:
    """Bytes of one output entry's class sums on the GPU: INT32 (FP32) per class, or float64
    per class plus one block's partial sums when k is long."""
    classes = 2 if level.kind == "fp16" else len(level.groups)
    return classes * (12 if long_k else 4)


def sum_blocking(
    level: Level, m: int, k: int, n: int, count: int, long_k: bool, most_rows: int
) -> tuple[int, int]:
    """(units per block, bytes of the class-sum buffer) of ``count`` INT8 products on the GPU:
    units are A's rows (at most ``most_rows``) when count is 1, else the stack's pairs."""
    units, entries, most = (m, n, most_rows) if count == 1 else (count, m * n, count)
    unit_bytes = entries * sum_bytes(level, long_k)
    size = gpu_block(units, unit_bytes, most, SUMS_BUDGET * count * block_budget(m, k, n))
    return size, size * unit_bytes


def gpu_block(units: int, unit_bytes: int, most: int, budget: int) -> int:
    """Units (A's rows, or a stack's pairs) per block of class sums: at most ``most``, halved
    until a block's sums fit ``budget``."""
    size = max(1, min(units, most))
    while size > 1 and size * unit_bytes > budget:
        size = -(-size // 2)
    return size


def gpu_bytes(level: Level, m: int, k: int, n: int, k_pad: int, long_k: bool, count: int = 1,
              sums: int | None = None) -> int:  # fmt: skip
    """Workspace of ``count`` CUDA products: packed A and B, the class sums (``sums`` bytes;
    all of them at once when None), the results."""
    slots_a, slots_b = (2, 2) if level.kind == "fp16" else (level.a_slices, level.b_slices)
    item = 2 if level.kind == "fp16" else 1
    if sums is None:
        sums = count * m * n * sum_bytes(level, long_k)
    # per line: its exponent and flag; per column of B: the packing's maxima and deep counts
    lines = 8 * (m + n) + 12 * n
    packs = item * k_pad * (slots_a * m + slots_b * n) + lines
    return count * (packs + 4 * m * n + 16 * k) + sums + GEMM_WORKSPACE


def available_host_bytes() -> int | None:
    """MemAvailable from /proc/meminfo (None where it cannot be read)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_fits(level: Level, m: int, k: int, n: int, needed: int, available: int | None,
               where: str) -> None:  # fmt: skip
    """MemoryError naming the level, the shape and the bytes when ``needed`` > ``available``."""
    if available is not None and needed > available:
        raise MemoryError(
            f"level {level.name}: a ({m} x {k}) @ ({k} x {n}) product needs about {needed:,} bytes "
            f"of {where} workspace; {available:,} are available (use a smaller product, a "
            "native level, or split the operands)"
        )
