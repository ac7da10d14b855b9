"""Environment switches read on a product's hot path (``$MIXPERT_PLAN_CACHE``,
``$MIXPERT_FUSED``): read at each call, so that a switch set mid-run takes effect, and cheaply.
``os.environ.get`` of an unset variable raises and catches a KeyError inside, microseconds on a
busy host, where os.environ's own mapping of encoded names (POSIX), kept in step with every
change made through ``os.environ``, answers in tens of nanoseconds."""

from __future__ import annotations

import functools
import os

_POSIX = os.name == "posix"
_encoded = functools.cache(os.fsencode)  # names as os.environ's own mapping keys them


def read(name: str, default: str) -> str:
    """``os.environ.get(name, default)``."""
    data = getattr(os.environ, "_data", None) if _POSIX else None
    if type(data) is not dict:
        return os.environ.get(name, default)
    value = data.get(_encoded(name))
    return default if value is None else os.fsdecode(value)
