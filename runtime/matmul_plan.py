"""``MatmulPlan``: one product planned once and executed many times (the stateful form of
``mixpert.matmul``, after nvmath-python's ``Matmul`` and cuBLASLt's descriptor and algorithm).

Planning checks the operands, resolves the level ("auto" included) and the backend once and,
on a GPU at an INT8 level, captures the whole product as one CUDA graph on buffers the plan
owns (``cuda.captured``). ``execute`` then checks only that the operands have the planned
shapes and runs the product: the graph replayed, or the planned route. ``release`` (or leaving
the ``with`` block) gives the device memory back.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from . import device, dispatch
from .auto import Route
from .levels import Level, get_level
from .precision import get_default_level
from .validation import Backend

_FLOAT32 = np.dtype(np.float32)


class MatmulPlan:
    """``a @ b`` for 2-D operands of ``a``'s and ``b``'s shapes and dtypes, planned once.

    >>> with MatmulPlan(a, b, level="IV") as product:
    ...     for a_i in batches:
    ...         c = product.execute(a_i, b)
    """

    def __init__(
        self, a: Any, b: Any, level: str | Level | None = None, backend: Backend = "auto"
    ) -> None:
        requested = get_level(get_default_level() if level is None else level)
        for name, x in (("a", a), ("b", b)):
            if getattr(x, "ndim", None) != 2:
                raise ValueError(
                    f"MatmulPlan plans one 2-D product: operand {name} has shape "
                    f"{getattr(x, 'shape', None)}; use mixpert.matmul for vectors and stacks"
                )
        self.route: Route = dispatch.route(a, b, requested, backend)
        self.level = self.route.level  # "auto" resolved
        self.shapes = (tuple(a.shape), tuple(b.shape))
        self._captured: Any = None
        self.released = False
        if self.route.backend == "cuda" and _float32_cupy(a, b):
            from .cuda.captured import CapturedProduct, capturable

            (m, k), n = a.shape, b.shape[1]
            fallback = self.route.fallback  # "auto"'s, decided on the GPU in the graph
            if capturable(self.level, fallback) and 0 not in (m, k, n):
                self._captured = CapturedProduct(m, k, n, self.level, fallback)

    @property
    def captured(self) -> bool:
        """Whether calls replay one CUDA graph."""
        return self._captured is not None

    def execute(self, a: Any, b: Any) -> Any:
        """``a @ b`` as planned, a new array each call (the operands are only read)."""
        if self.released:
            (m, k), n = self.shapes[0], self.shapes[1][1]
            raise ValueError(
                f"this MatmulPlan ({m} x {k} @ {k} x {n}, level {self.level.name}) was released "
                "(release() or the end of its with block): make a new one, or call mixpert.matmul"
            )
        for name, x, shape in (("a", a, self.shapes[0]), ("b", b, self.shapes[1])):
            if tuple(getattr(x, "shape", ())) != shape:
                raise ValueError(
                    f"operand {name} has shape {getattr(x, 'shape', None)}; this plan was made "
                    f"for {shape}: make a plan for the new shape"
                )
        graph = self._captured
        if graph is not None and _float32_cupy(a, b) and _on(graph.stream):
            c = graph(a, b)
            if c is not None:
                return c
        return dispatch.run(a, b, self.route)

    __call__ = execute

    def release(self) -> None:
        """Gives the plan's device memory back (once the GPU has run what it queued); the plan
        executes no more."""
        self.released = True
        if self._captured is not None:
            self._captured.release()
            self._captured = None

    def __enter__(self) -> MatmulPlan:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __repr__(self) -> str:
        (m, k), n = self.shapes[0], self.shapes[1][1]
        how = "one CUDA graph" if self.captured else self.route.backend
        how = "released" if self.released else how
        return f"MatmulPlan({m} x {k} @ {k} x {n}, level {self.level.name}, {how})"


def _float32_cupy(a: Any, b: Any) -> bool:
    return (
        device.is_cupy_array(a)
        and device.is_cupy_array(b)
        and a.dtype == _FLOAT32
        and b.dtype == _FLOAT32
    )


def _on(stream: Any) -> bool:
    """Whether ``stream`` is the current one (a plan replays on the stream it was made on)."""
    return device.cupy_module().cuda.get_current_stream().ptr == stream.ptr
