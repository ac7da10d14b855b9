"""Level "auto"'s fallback after packing: a float32 GEMM in place of an INT8 level where the
route's ``auto.Fallback`` says so of the lines the packs flag as unresolved (to recompute
exactly). Decided on the GPU where graphs take conditional nodes (``conditional``: the decide
kernel of ``decide.cu`` counts the lines itself), else on the host (``mostly_exact``, two
counts read back). The GEMM is cuBLASLt's (``tn_gemm.sgemm``) either way, which a graph
captures too, so a replayed call, an uncached one and the host-decided way give the same bits.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TYPE_CHECKING

import cupy as cp
import numpy as np

from . import build, conditional, tn_gemm
from .packs import PackedOperand

if TYPE_CHECKING:  # (the rule comes with the route: this module never asks auto)
    from ..auto import Fallback


def fallback_sgemm(a: cp.ndarray, b: cp.ndarray, c: cp.ndarray) -> cp.ndarray:
    """ "auto"'s float32 GEMM in place of an INT8 level, into ``c``: cuBLASLt's, which a graph
    captures too, so a replayed call gives the direct call's bits (``tn_gemm.sgemm``)."""
    prepared_sgemm(a, b, c)()
    return c


def prepared_sgemm(a: cp.ndarray, b: cp.ndarray, c: cp.ndarray) -> Callable[[], None]:
    """``fallback_sgemm``'s GEMM with what it needs made now, on the current stream: the
    operands as cuBLASLt takes them (C-contiguous, aligned) and its workspace. The call then
    allocates nothing, as a graph captured now and launched later needs."""
    (m, k), n = a.shape, b.shape[1]
    a, b = (x if tn_gemm.sgemm_ready(x) else x.copy(order="C") for x in (a, b))
    workspace = cp.empty(tn_gemm.sgemm_workspace_bytes(m, k, n), dtype=cp.uint8)
    return functools.partial(tn_gemm.sgemm, a, b, c, workspace)


def sgemm_where_the_gpu_decides(
    a: cp.ndarray,
    b: cp.ndarray,
    c: cp.ndarray,
    a_pack: PackedOperand,
    b_pack: PackedOperand,
    fallback: Fallback,
) -> None:
    """C overwritten by the float32 GEMM where "auto"'s ``fallback`` takes it, decided on the
    GPU: a small graph, captured for this call, of the decide kernel and a conditional node
    holding the GEMM, launched behind the level's product (already in C). No host
    synchronisation; where the GEMM runs, the level's work was spent for nothing (data whose
    unresolved lines would cover most of C are rare). The GEMM is prepared before the capture
    (``prepared_sgemm``), so the graph allocates nothing."""
    (m, k), n = a.shape, b.shape[1]
    sgemm = prepared_sgemm(a, b, c)

    def decide(handle: int) -> None:
        launch_decide("decide_sgemm", (handle,), a_pack, b_pack, fallback)

    conditional.decided(("int8 fallback", m, k, n), decide, sgemm)


DECIDE_THREADS = 1024  # decide.cu's block: it counts the flagged lines itself


def launch_decide(
    kernel: str,
    handles: tuple[int, ...],
    a_pack: PackedOperand,
    b_pack: PackedOperand,
    fallback: Fallback,
) -> None:
    """``decide.cu``'s ``kernel``: sets ``handles`` from the packs' flags (NaN/Inf lines told
    apart by ``PackedOperand.nan_inf``, which the packs made here always have)."""
    if a_pack.nan_inf is None or b_pack.nan_inf is None:
        raise ValueError("the GPU decides from packs that know their NaN/Inf lines")
    m, n = a_pack.lines, b_pack.lines
    build.decide_module().get_function(kernel)(
        (1,), (DECIDE_THREADS,),
        (*map(np.uint64, handles), a_pack.flagged, b_pack.flagged, a_pack.nonfinite,
         a_pack.nan_inf, np.int32(m), b_pack.nonfinite, b_pack.nan_inf, np.int32(n),
         np.float64(fallback.exact_share), np.float64(fallback.row_entries)),
    )  # fmt: skip


def warm_deciding(a: cp.ndarray, b: cp.ndarray) -> None:
    """Builds, uncaptured, what ``int8_product_deciding_on_gpu`` runs beyond ``int8_product``:
    the decide module and the float32 GEMM's algorithm."""
    build.decide_module().get_function("decide_sgemm")
    fallback_sgemm(a, b, cp.empty((a.shape[0], b.shape[1]), dtype=cp.float32))


def mostly_exact(
    a: cp.ndarray,
    b: cp.ndarray,
    a_pack: PackedOperand,
    b_pack: PackedOperand,
    flagged: tuple[int, int],
    fallback: Fallback,
) -> bool:
    """Whether ``fallback`` takes SGEMM for this product's unresolved lines. The packs' flag
    counts, ``flagged`` (NaN/Inf or unresolved lines), come first; only where they alone would
    take it are NaN/Inf lines told apart (one pass over A and B, synchronising)."""
    m, n = a_pack.lines, b_pack.lines
    if not fallback.takes_sgemm(*flagged, m, n):
        return False
    return fallback.takes_sgemm(*unresolved_counts(a, b, a_pack, b_pack), m, n)


def unresolved_counts(
    a: cp.ndarray, b: cp.ndarray, a_pack: PackedOperand, b_pack: PackedOperand
) -> tuple[int, int]:
    """(rows, columns) the packs flag that hold no NaN/Inf: the unresolved ones."""
    rows, cols = _unresolved(a, b, a_pack, b_pack)
    return int(rows), int(cols)


def _unresolved(
    a: cp.ndarray, b: cp.ndarray, a_pack: PackedOperand, b_pack: PackedOperand
) -> tuple[cp.ndarray, cp.ndarray]:
    """``unresolved_counts`` left on the device (two int64 scalars): from the packs' NaN/Inf
    lines where they know them (``PackedOperand.nan_inf``), else from a pass over A and B
    (a column reduction of a row-major B costs more than a whole small product)."""
    if a_pack.nan_inf is not None and b_pack.nan_inf is not None:
        rows = (a_pack.nonfinite != 0) & (a_pack.nan_inf == 0)
        cols = (b_pack.nonfinite != 0) & (b_pack.nan_inf == 0)
    else:
        rows = (a_pack.nonfinite != 0) & cp.isfinite(a).all(axis=1)
        cols = (b_pack.nonfinite != 0) & cp.isfinite(b).all(axis=0)
    return rows.sum(), cols.sum()
