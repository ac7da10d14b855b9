"""The run time of a rewritten matmul site, between compiled code and the emulation runtime.

- ``op_ids``: op id <-> op index (the constant compiled code carries);
- ``state``: per thread, the active plan, the call's kept packs and the call records (profiling);
- ``kept_packs``: per call, the packs of operands the compiler proved loop-invariant;
- ``hook``: the ``mixpert_gemm`` C callback, its ``Status``, ``route_to_run`` (native here or the
  runtime, for nopython and object mode alike) and the error relay.

``passes`` (compile time) generates calls into this layer; the user layer activates plans and
reads records through it; it calls ``mixpert.runtime`` for the products.
"""

from .hook import MixpertRuntimeError, Status, reraise_pending, route_to_run, take_pending_error
from .kept_packs import PackScope
from .op_ids import op_id_of, op_index
from .state import (
    EMPTY_PLAN,
    ActivePlan,
    CallRecord,
    activate,
    level_for,
    record_calls,
)

__all__ = [
    "EMPTY_PLAN",
    "ActivePlan",
    "CallRecord",
    "MixpertRuntimeError",
    "PackScope",
    "Status",
    "activate",
    "level_for",
    "op_id_of",
    "op_index",
    "record_calls",
    "reraise_pending",
    "route_to_run",
    "take_pending_error",
]
