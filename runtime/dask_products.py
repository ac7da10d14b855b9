"""Products of Dask arrays: the same emulation, one mixpert product per pair of chunks.

``blockwise_product(a, b, product)`` for 2-D Dask arrays (NumPy or CuPy chunks; a NumPy or
CuPy operand beside a Dask one is wrapped in chunks that match). The k chunks of A's columns and
B's rows are unified first (``dask.array.core.unify_chunks``); chunks travel as float32, never as
slices. Output block (i, j) is one task:

    C_ij = fl32( sum over k-chunks q, in q order, of float64(product(A_iq, B_qj)) )

where ``product`` is ``mixpert.matmul`` at the requested level on the chunk's own backend (a
CuPy chunk on its worker's GPU). No task sums partials from other tasks, so the bits depend only
on the chunking, never on which worker ran what or when. With one k chunk, C_ij has the bits of
the chunk product itself.

Bound, per entry: each chunk product keeps its level's bound (README "What each level
promises") on its k_q terms and rounds once (u |C_q|, u = 2^-24); the float64 additions add
at most (Q - 1) 2^-53 sum_q |C_q| and the final rounding u |C|. For the float32-grade levels
|C - C64| <= 2 k u |A||B| + u (sum_q |C_q| + |C|) + ..., which stays within about twice SGEMM's
bound 2 k u |A||B| whenever k >= Q.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from .device import is_dask_array
from .validation import check_operand

Matmul2D = Callable[[Any, Any], Any]


def blockwise_product(a: Any, b: Any, product: Matmul2D) -> Any:
    """``a @ b`` as a Dask array (float32), each block from per-chunk ``product`` calls."""
    import dask.array as da
    from dask.array.utils import meta_from_array

    if not is_dask_array(a):  # columns cut where B's rows are
        a = da.from_array(a, chunks=(-1, b.chunks[0]) if _pairs(a, b) else -1)
    if not is_dask_array(b):  # rows cut where A's columns are
        b = da.from_array(b, chunks=(a.chunks[1], -1) if _pairs(a, b) else -1)
    for name, x in (("a", a), ("b", b)):
        check_operand(name, x, matrix=False)  # real floating-point dtypes, as for any array
        if x.ndim != 2:
            raise ValueError(
                f"operand {name} is a {x.ndim}-D Dask array; mixpert multiplies 2-D Dask "
                "arrays (for stacks, map mixpert.matmul over the blocks)"
            )
        if any(np.isnan(d) for d in x.shape):
            raise ValueError(
                f"operand {name} has unknown chunk sizes {x.chunks}; call "
                f"{name}.compute_chunk_sizes() first"
            )
    if a.shape[1] != b.shape[0]:
        raise ValueError(
            f"a.shape[1] = {a.shape[1]} must equal b.shape[0] = {b.shape[0]} to form a @ b "
            f"(a is {a.shape}, b is {b.shape})"
        )
    a, b = a.astype(np.float32), b.astype(np.float32)  # chunks travel as float32
    _, (a, b) = da.core.unify_chunks(a, "ij", b, "jk")
    return da.blockwise(
        _block_sum,
        "ik",
        a,
        "ij",
        b,
        "jk",
        concatenate=False,
        dtype=np.float32,
        meta=meta_from_array(a, ndim=2, dtype=np.float32),
        product=product,
    )


def _pairs(a: Any, b: Any) -> bool:
    """Two 2-D operands whose inner dimensions agree (chunks can follow the partner's)."""
    return getattr(a, "ndim", 0) == 2 and getattr(b, "ndim", 0) == 2 and a.shape[1] == b.shape[0]


def _block_sum(a_chunks: list[Any], b_chunks: list[Any], product: Matmul2D) -> Any:
    """One output block: the chunk products added in k order in float64, rounded once."""
    pairs = list(zip(a_chunks, b_chunks, strict=True))  # unify_chunks leaves at least one
    if len(pairs) == 1:  # fl32(float64(p)) is p: skip the two copies (4 + 8 bytes an entry)
        out = product(*pairs[0]).astype(np.float32, copy=False)
    else:
        total = product(*pairs[0]).astype(np.float64)
        for x, y in pairs[1:]:
            total += product(x, y)  # (float32 -> float64 inside the add: the same sum)
        out = total.astype(np.float32)
    device = getattr(out, "device", None)  # a CuPy block: finish its kernels inside the task,
    if hasattr(device, "synchronize"):  # so Dask balances and times real work, not a queue
        device.synchronize()
    return out
