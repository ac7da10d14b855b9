"""Operands that are not two matrices, with ``np.matmul``'s semantics.

- 1-D operands (matrix-vector, vector-matrix, dot products) run natively: there is nothing for
  slices to gain, and the result is np.matmul's (float32 for float32 operands).
- Stacks (3-D and higher) broadcast their leading dimensions as np.matmul does. When one side is
  a single matrix shared by the whole stack (weights applied to a batch), the stack is folded
  into one product: A's batch into the rows (``(..., m, k) @ (k, n)``), B's into the columns
  (``(m, k) @ (..., k, n)``). Otherwise each pair of the broadcast stacks is one product; on
  the CPU at an INT8 level all pairs go through ``cpu.int8_product_stack`` at once.

Both backends take the same route, so every batch element has the same bits on CPU and GPU.
(Folding lets the equilibration along k see the whole stack: a folded element may differ in its
last bits from the same product alone.) ``dispatch`` passes a ``stack_product`` that runs all
pairs in one call: on the GPU a few launches for the whole stack
(``cuda.backend.stack_product_at_level``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from . import device
from .validation import check_operand

Matmul2D = Callable[[Any, Any], Any]


def broadcast_products(
    a: Any, b: Any, product: Matmul2D, stack_product: Matmul2D | None = None
) -> Any:
    """``np.matmul(a, b)`` for operands that are not both 2-D; ``product`` multiplies two
    matrices (the caller's level and backend); ``stack_product``, where given, multiplies two
    float32 stacks of one length, (s, m, k) @ (s, k, n), in one call: at a concrete level
    with the bits ``product`` gives each pair ("auto" resolves on the stack's shape, which may
    pick another level than a single pair would)."""
    check_operand("a", a, matrix=False)
    check_operand("b", b, matrix=False)
    xp = device.cupy_module() if device.is_cupy_array(a) or device.is_cupy_array(b) else np
    k_a = a.shape[-1]
    k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k_a != k_b:
        raise ValueError(
            f"a.shape[-1] = {k_a} must equal b's contracted dimension {k_b} to form a @ b "
            f"(a is {tuple(a.shape)}, b is {tuple(b.shape)})"
        )
    if a.ndim == 1 or b.ndim == 1:  # vectors: native, np.matmul's result
        return xp.matmul(_as_float32(xp, a), _as_float32(xp, b))
    try:
        batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    except ValueError:
        raise ValueError(
            f"the stack dimensions of a {tuple(a.shape[:-2])} and b {tuple(b.shape[:-2])} do "
            "not broadcast (np.matmul's rule)"
        ) from None
    m, n = a.shape[-2], b.shape[-1]
    if b.ndim == 2:  # shared B: A's batch folds into its rows
        c = product(a.reshape(-1, k_a), b)
        return c.reshape(*a.shape[:-2], m, n)
    if a.ndim == 2:  # shared A: B's batch folds into its columns
        columns = xp.moveaxis(b, -2, 0).reshape(k_a, -1)
        c = product(a, columns)
        return xp.moveaxis(c.reshape(m, *b.shape[:-2], n), 0, -2)
    a_all = xp.broadcast_to(a, (*batch, m, k_a))
    b_all = xp.broadcast_to(b, (*batch, k_a, n))
    if stack_product is not None:  # the pairs in one call (same bits as one at a time)
        count = math.prod(batch)  # not -1: a product may have no entries
        pairs = (_as_float32(xp, x).reshape(count, *x.shape[-2:]) for x in (a_all, b_all))
        return stack_product(*pairs).reshape(*batch, m, n)
    out = xp.empty((*batch, m, n), dtype=xp.float32)
    for index in np.ndindex(*batch):
        out[index] = product(a_all[index], b_all[index])
    return out


def _as_float32(xp: Any, x: Any) -> Any:
    if xp is np:
        return x.astype(np.float32, copy=False)
    from .cuda.convert import as_float32

    return as_float32(x)
