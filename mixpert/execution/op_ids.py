"""Op ids and op indices: the one mapping the compiler and the run-time hook share.

An op id is a readable string naming one matmul site (``passes.sites`` builds it). Compiled code
carries its *op index* instead, a deterministic 63-bit hash baked in as a constant; the run time
maps an index back to its id to name call records and errors. ``op_index`` remembers every id it
has hashed: any index of code compiled in this process has a name (code loaded from Numba's
disk cache does too once the function's ``ops`` have been read, which hashes them again).
"""

from __future__ import annotations

import hashlib

_IDS: dict[int, str] = {}  # op index -> op id, for every id hashed in this process


def op_index(op_id: str) -> int:
    """The id's deterministic 63-bit hash (Python's ``hash`` is salted per process)."""
    digest = hashlib.blake2b(op_id.encode(), digest_size=8).digest()
    index = int.from_bytes(digest, "little") & ((1 << 63) - 1)
    _IDS[index] = op_id
    return index


def op_id_of(index: int) -> str:
    """The op id behind ``index`` ("" for an index no op id was hashed to)."""
    return _IDS.get(index, "")
