"""Pass ``check-llvm-gemm``: BLAS GEMM calls in the final LLVM IR that the rewrite did not see.

Numba's own overloads (``np.cov``, ``np.linalg.*``, ``np.dot`` with ``out=``) call BLAS through
helper symbols such as ``numba_xxgemm``. After lowering, the pass walks the call graph of the
finished module from the compiled function, not entering mixpert's stubs (their BLAS call is the
native fallback of a site the pass did see), and warns about every BLAS function still reachable.
"""

from __future__ import annotations

import re
import warnings
from collections import defaultdict
from dataclasses import dataclass

from numba.core.compiler import StateDict

from .record import record_of

BLAS_SYMBOLS = ("numba_xxgemm", "numba_xxgemv")
_DEFINE = re.compile(r'^define [^@]*@"?([^"(]+)"?\(', re.M)
_CALLEE = re.compile(r'@"?([\w.$]+)"?\(')


class UnseenGemmWarning(UserWarning):
    """A BLAS matrix product the mixpert pass could not rewrite (it runs in native float32)."""


def _functions(llvm_ir: str) -> dict[str, str]:
    """Defined function name -> its body text."""
    starts = [(m.start(), m.group(1)) for m in _DEFINE.finditer(llvm_ir)]
    bodies = {}
    for (start, name), (end, _) in zip(starts, [*starts[1:], (len(llvm_ir), "")], strict=True):
        bodies[name] = llvm_ir[start:end]
    return bodies


_STUB_MODULE = "7mixpert6passes5stubs"  # mangled prefix of every function in ``stubs``


def _is_stub(name: str) -> bool:
    return _STUB_MODULE in name


def demangle(name: str) -> str:
    """A readable dotted name from Numba's Itanium-style mangling (``_ZN<len><part>...E``)."""
    if not name.startswith("_ZN"):
        return name
    parts, i = [], 3
    while i < len(name) and name[i].isdigit():
        j = i
        while name[j].isdigit():
            j += 1
        size = int(name[i:j])
        parts.append(name[j : j + size])
        i = j + size
    text = ".".join(p for p in parts if not re.fullmatch(r"B\d+v\d+|B\d+c8t.*", p))
    return re.sub(r"_([0-9a-f]{2})", lambda m: chr(int(m.group(1), 16)), text)


def unseen_blas_calls(llvm_ir: str, entry: str) -> list[str]:
    """Functions reachable from ``entry`` (not through a mixpert stub) that call BLAS directly."""
    bodies = _functions(llvm_ir)
    calls: dict[str, set[str]] = defaultdict(set)
    for name, body in bodies.items():
        calls[name] = {callee for callee in _CALLEE.findall(body) if callee != name}
    seen, stack, found = {entry}, [entry], []
    while stack:
        name = stack.pop()
        for callee in sorted(calls.get(name, ())):
            if callee in BLAS_SYMBOLS:
                found.append(name)
            elif callee in bodies and callee not in seen and not _is_stub(callee):
                seen.add(callee)
                stack.append(callee)
    return sorted({demangle(name) for name in found})


@dataclass(frozen=True)
class CheckLLVMGemm:
    name: str = "check-llvm-gemm"

    def apply(self, state: StateDict) -> bool:
        record = record_of(state)
        cres = state.get("cr")
        if cres is None or cres.library is None:
            return False
        entry = cres.fndesc.mangled_name
        record.unseen_gemm = unseen_blas_calls(cres.library.get_llvm_str(), entry)
        if record.unseen_gemm:
            fid = state.func_id
            warnings.warn_explicit(
                f"mixpert: {fid.func_qualname} calls BLAS GEMM/GEMV outside any matmul site the "
                f"pass could rewrite (in {', '.join(record.unseen_gemm)}); those products run "
                "in native float32",
                UnseenGemmWarning,
                fid.filename,
                fid.firstlineno,
            )
        return False
