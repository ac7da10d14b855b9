"""mixpert passes and their Numba adaptors.

A mixpert pass is a small frozen dataclass with a ``name`` and one method, ``apply(state) -> bool``
(True when it changed the IR), in the manner of xDSL. ``numba_pass`` turns one into a registered
Numba ``CompilerPass`` class, so pipelines place it with ``PassManager.add_pass_after`` as in
Numba's own custom-pipeline example; the Numba pass name is ``mixpert-<name>``.
"""

from __future__ import annotations

from typing import Protocol

from numba.core.compiler import StateDict
from numba.core.compiler_machinery import (
    AnalysisPass,
    CompilerPass,
    FunctionPass,
    LoweringPass,
    register_pass,
)


class MixpertPass(Protocol):
    name: str

    def apply(self, state: StateDict) -> bool: ...


# Numba registers pass classes, once each; keep one class per pass value.
_CLASSES: dict[MixpertPass, type[CompilerPass]] = {}
_BASES = {"function": FunctionPass, "analysis": AnalysisPass, "lowering": LoweringPass}


def numba_pass(
    mixpert_pass: MixpertPass, stage: str = "function", mutates_cfg: bool = False
) -> type[CompilerPass]:
    """The registered Numba pass class running ``mixpert_pass``."""
    cls = _CLASSES.get(mixpert_pass)
    if cls is not None:
        return cls
    base = _BASES[stage]

    def __init__(self: CompilerPass) -> None:
        base.__init__(self)

    def run_pass(self: CompilerPass, state: StateDict) -> bool:
        return bool(mixpert_pass.apply(state))

    cls = type(
        f"Mixpert_{mixpert_pass.name.replace('-', '_')}",
        (base,),
        {"_name": f"mixpert-{mixpert_pass.name}", "__init__": __init__, "run_pass": run_pass},
    )
    register_pass(mutates_CFG=mutates_cfg, analysis_only=stage == "analysis")(cls)
    _CLASSES[mixpert_pass] = cls
    return cls
