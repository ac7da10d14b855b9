"""Pack once what does not change: an INT8 product's packed operand, kept for the next product.

The compiler proves some operands loop-invariant (``passes.loop_invariance``); for one call of
the jitted function, each such operand of an op gets a ``PackSlot``, and its products hand the
backend a ``Kept`` (the slot plus the operand's identity). The backend then reuses, instead of
computing again:

- the operand's *tops*, its half of ``equilibrate.k_exponents`` (the largest finite |entry|
  along each k-index; on the GPU, from the same read, its lines' too:
  ``cuda.packs.OperandTops``), whenever the operand is the same memory;
- its *pack* (scales, flags and digits), when moreover the k-exponents are the ones it was
  packed with: the other operand can move a k-index into or out of the imbalance band, and then
  the operand is packed again.

A pack is a deterministic function of (operand, k-exponents, level), so reuse never changes a
bit. Comparing the exponents brings one flag to the host on the GPU.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")
Identity = tuple[Any, ...]


def identity_of(x: Any) -> Identity:
    """What tells operands apart while the compiler's proof holds: array type, address, shape,
    strides and dtype (a NumPy or CuPy array)."""
    interface = getattr(x, "__array_interface__", None)
    address = interface["data"][0] if interface is not None else x.data.ptr
    return type(x).__module__, address, x.shape, x.strides, x.dtype.str


class PackSlot:
    """Where one loop-invariant operand of one op keeps its tops and pack during one call.

    Each entry is replaced as a whole (one attribute store), so products running in parallel
    threads see an old entry or a new one, never a mix."""

    def __init__(self) -> None:
        self._tops: tuple[Identity, Any] | None = None
        self._pack: tuple[Identity, Any, Any] | None = None
        self._copy: tuple[Identity, Any] | None = None  # the operand on another device
        self.packs = 0
        self.reuses = 0


@dataclass(frozen=True)
class Kept:
    """One operand of one product: its slot (None: nothing kept) and its identity."""

    slot: PackSlot | None = None
    identity: Identity = ()

    def on(self, backend: str) -> Kept:
        """This operand as ``backend`` packs it: a NumPy operand may run on the CPU in one
        product and be copied to the GPU in another, and the two packs differ."""
        return Kept(self.slot, (*self.identity, backend))

    def tops(self, compute: Callable[[], T]) -> T:
        """The operand's tops: the slot's when it holds this operand's, else ``compute()``."""
        slot = self.slot
        if slot is None:
            return compute()
        kept = slot._tops
        if kept is not None and kept[0] == self.identity:
            return kept[1]
        tops = compute()
        slot._tops = (self.identity, tops)
        return tops

    def copy(self, where: str, compute: Callable[[], T]) -> T:
        """The operand copied to device ``where``: the slot's copy when it was made from this
        operand, else ``compute()`` (kept for the next product). A host operand that stays
        the same while a loop runs goes over once per call, as its pack is made once."""
        slot = self.slot
        if slot is None:
            return compute()
        key = (*self.identity, where)
        kept = slot._copy
        if kept is not None and kept[0] == key:
            return kept[1]
        copied = compute()
        slot._copy = (key, copied)
        return copied

    def pack(self, level: str, exponents: Any, compute: Callable[[], T]) -> T:
        """The operand packed at ``level`` with ``exponents``: the slot's pack when it was made
        from this operand with equal exponents, else ``compute()`` (kept for the next one)."""
        slot = self.slot
        if slot is None:
            return compute()
        key = (*self.identity, level)
        kept = slot._pack
        if kept is not None and kept[0] == key and _equal(kept[1], exponents):
            slot.reuses += 1
            return kept[2]
        packed = compute()
        slot._pack = (key, exponents.copy(), packed)
        slot.packs += 1
        return packed


NOT_KEPT = Kept()
Keep = tuple[Kept, Kept]  # (A, B)
KEEP_NOTHING: Keep = (NOT_KEPT, NOT_KEPT)


def _equal(x: Any, y: Any) -> bool:
    """Equal exponent arrays (NumPy or CuPy; on the GPU one flag comes to the host)."""
    return x.shape == y.shape and bool((x == y).all())
