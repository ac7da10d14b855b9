"""Per call of a jitted function: the slots where its loop-invariant operands keep their packs.

The function's wrapper opens a ``PackScope`` for each call (``state.activate``); a product of
one of its ops asks ``keep_for`` for slots for the operands the compiler proved loop-invariant
(``OpInfo.invariant``, ``passes.loop_invariance``), and the backend packs such an operand once
and reuses the pack (``runtime.pack_reuse``). The scope, and every pack in it, ends with the
call: nothing is carried from one call to the next.

What the compiler cannot see is checked here, and keeps nothing when it fails:

- only the function's own ops take part: a callee's loops prove invariance for one call of the
  callee, and nothing marks where such a call begins;
- a function that may call itself (directly or through the functions it names) keeps nothing:
  an inner call shares the outer call's scope, and its loops run again;
- a function that defines functions (closures, lambdas) keeps nothing: object mode numbers its
  sites before inlining them, so op indices could name other sites;
- a call whose array arguments may overlap in memory, or that passes containers or objects,
  keeps nothing: the proof treats distinct arguments as distinct storage.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping, Sequence
from types import CodeType
from typing import Any

import numpy as np

from mixpert.runtime import device
from mixpert.runtime.pack_reuse import (
    KEEP_NOTHING,
    NOT_KEPT,
    Keep,
    Kept,
    PackSlot,
    identity_of,
)

Invariance = Mapping[int, tuple[bool, bool]]  # op index -> (A invariant, B invariant)


class PackScope:
    """The kept packs of one call. ``invariant`` is asked once, at the first product (the ops
    are known by then: the function has been compiled)."""

    def __init__(self, invariant: Callable[[], Invariance], args: Sequence[Any]) -> None:
        self._invariant_of = invariant
        self._args = args
        self._invariant: Invariance | None = None
        self._slots: dict[tuple[int, int], PackSlot] = {}

    def keep_for(self, op_index: int, a: Any, b: Any) -> Keep:
        """Slots for the invariant operands of op ``op_index`` (``a``, ``b`` are its operands)."""
        if self._invariant is None:  # (the ops first: most functions have no invariant operand,
            # and the overlap test costs a CuPy call per pair of arguments)
            invariant = self._invariant_of()
            self._invariant = {} if invariant and arguments_overlap(self._args) else invariant
        flags = self._invariant.get(op_index)
        if not flags:
            return KEEP_NOTHING
        a_flag, b_flag = flags
        return self._kept(op_index, 0, a) if a_flag else NOT_KEPT, (
            self._kept(op_index, 1, b) if b_flag else NOT_KEPT
        )

    def _kept(self, op_index: int, side: int, operand: Any) -> Kept:
        return Kept(self._slots.setdefault((op_index, side), PackSlot()), identity_of(operand))


def keeps_packs(py_func: Any) -> bool:
    """Whether calls of ``py_func`` may keep packs: it defines no functions and cannot call
    itself (module docstring)."""
    code = py_func.__code__
    if any(isinstance(const, CodeType) for const in code.co_consts):
        return False
    return not _may_reenter(py_func)


def _may_reenter(py_func: Any) -> bool:
    """Whether ``py_func`` names itself, or a function that (transitively) names it."""
    seen: set[int] = set()
    stack = [py_func]
    while stack:
        f = stack.pop()
        if id(f) in seen or not inspect.isfunction(f):
            continue
        seen.add(id(f))
        for name in f.__code__.co_names:
            target = f.__globals__.get(name)
            inner = getattr(target, "__mixpert_py_func__", getattr(target, "py_func", target))
            if inner is py_func:
                return True
            stack.append(inner)
    return False


def arguments_overlap(args: Sequence[Any]) -> bool:
    """Whether arguments may share storage unseen: two arrays that may overlap in memory
    (bounds only: cheap, and conservative), or any container or object argument."""
    if not all(_plain(x) for x in args):
        return True
    arrays = [x for x in args if isinstance(x, np.ndarray) or device.is_cupy_array(x)]
    for i, x in enumerate(arrays):
        for y in arrays[i + 1 :]:
            if type(x) is not type(y):
                continue
            if isinstance(x, np.ndarray):
                shared = np.may_share_memory(x, y)
            else:
                shared = device.cupy_module().may_share_memory(x, y)  # type: ignore[union-attr]
            if shared:
                return True
    return False


def _plain(x: Any) -> bool:
    """An array, a number, a string or None: nothing that can hold arrays."""
    plain = (np.ndarray, np.generic, np.dtype, int, float, complex, bool, str, bytes, type(None))
    return isinstance(x, plain) or device.is_cupy_array(x)


def reused(keep: Keep, before: tuple[int, int]) -> tuple[bool, bool]:
    """Which of a product's operands reused a kept pack, given their slots' reuse counts
    (``reuse_counts``) before it ran."""
    now = reuse_counts(keep)
    return now[0] > before[0], now[1] > before[1]


def reuse_counts(keep: Keep) -> tuple[int, int]:
    a_slot, b_slot = keep[0].slot, keep[1].slot
    return (a_slot.reuses if a_slot else 0), (b_slot.reuses if b_slot else 0)
