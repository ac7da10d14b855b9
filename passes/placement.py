"""``Placement``: where a function's body runs when a plan for a GPU meets NumPy arguments.

The ``placement`` pass (``movability``) judges it from the IR and keeps it in the function's
summary; ``mixpert.one_trip`` adds what only a call shows (the arguments) and acts on it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Placement:
    """On the GPU in one trip (``movable``: the arguments go over once, the body runs on CuPy
    copies, the results come back once), or on the host for ``reason``, found at ``line``
    (None: no line, e.g. an argument's kind)."""

    reason: str = ""
    line: int | None = None

    @property
    def movable(self) -> bool:
        return not self.reason

    def __str__(self) -> str:
        if self.movable:
            return "runs on the GPU in one trip"
        where = "" if self.line is None else f" at line {self.line}"
        return f"stays on the host: {self.reason}{where}"


MOVABLE = Placement()
