"""The default level, set as the ecosystem sets matmul precision
(``torch.set_float32_matmul_precision``, ``jax.default_matmul_precision``): the level of
``mixpert.matmul`` calls that name none and of ops a plan leaves out.

Three ways to set it, most local first: ``with mixpert.default_level("V"):`` (this thread or
task), ``mixpert.set_default_level("IV")`` (the process), the ``MIXPERT_DEFAULT_LEVEL``
environment variable (read at import). Unset, it is ``levels.DEFAULT_LEVEL`` ("auto").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from .levels import DEFAULT_LEVEL, Level, get_level

ENV = "MIXPERT_DEFAULT_LEVEL"


def _from_environment() -> Level:
    value = os.environ.get(ENV, DEFAULT_LEVEL)
    try:
        return get_level(value)
    except ValueError as error:
        raise ValueError(f"${ENV}: {error}") from None


_process_default: Level = _from_environment()
_local_default: ContextVar[Level | None] = ContextVar("mixpert_default_level", default=None)


def get_default_level() -> Level:
    """The level in force here: the innermost ``default_level`` block, else the process's."""
    return _local_default.get() or _process_default


def set_default_level(level: str | Level) -> None:
    """Set the process-wide default level (names are checked; case does not matter)."""
    global _process_default
    _process_default = get_level(level)


@contextmanager
def default_level(level: str | Level) -> Iterator[Level]:
    """Run the body (in this thread or task) with ``level`` as the default level."""
    token = _local_default.set(get_level(level))
    try:
        yield get_level(level)
    finally:
        _local_default.reset(token)
