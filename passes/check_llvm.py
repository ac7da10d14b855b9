"""Pass ``check-llvm-gemm``: BLAS GEMM calls in the final LLVM IR that the rewrite did not see.

Numba's own overloads (``np.cov``, ``np.linalg.*``) call BLAS through helper symbols such as
``numba_xxgemm``. After lowering, the pass walks the call graph of the finished module from the
compiled function, not entering mixpert's stubs (their BLAS call is the native fallback of a site
the pass did see), and warns once about BLAS calls reached through other library code, naming
the NumPy calls of the function that lead there (``np.cov (line 3)``).
"""

from __future__ import annotations

import re
import warnings
from collections import defaultdict
from dataclasses import dataclass

from numba.core import ir
from numba.core.compiler import StateDict

from . import stubs
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


def _is_stub(name: str) -> bool:
    """A function of ``stubs`` (the rewritten sites' own code), by its demangled module."""
    return demangle(name).startswith(stubs.__name__ + ".")


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


# Numba's implementations of ``a @ b``, ``np.dot`` and ``a.dot`` (a stub's native fallback).
DOT_FAMILY = ("numba.np.linalg.dot", "numba.np.arrayobj.array_dot", "numba.np.linalg.matmul")


def _is_dot_family(name: str) -> bool:
    return demangle(name).startswith(DOT_FAMILY)


def _is_library(name: str) -> bool:
    return demangle(name).startswith("numba.")


def unseen_blas_calls(llvm_ir: str, entry: str) -> list[str]:
    """Functions reachable from ``entry`` that call BLAS on behalf of code the pass did not see.

    LLVM may inline a stub into its caller, leaving the caller calling Numba's ``np.dot``
    implementation directly; so a BLAS call reached from user code through ``np.dot``'s own
    functions only (``DOT_FAMILY``) counts as a site's native path, while one reached
    through any other library function (``np.cov``, ``np.linalg.*``) is reported.
    """
    bodies = _functions(llvm_ir)
    calls: dict[str, set[str]] = defaultdict(set)
    for name, body in bodies.items():
        calls[name] = {callee for callee in _CALLEE.findall(body) if callee != name}
    seen = {(entry, True)}
    stack, found = [(entry, True)], []
    while stack:
        name, clean = stack.pop()
        for callee in sorted(calls.get(name, ())):
            if callee in BLAS_SYMBOLS:
                if not clean:
                    found.append(name)
                continue
            if callee not in bodies or _is_stub(callee):
                continue
            if not _is_library(callee):
                state = (callee, True)  # user code
            else:
                state = (callee, clean and _is_dot_family(callee))
            if state not in seen:
                seen.add(state)
                stack.append(state)
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
            calls = numpy_calls(state.func_ir, state.typemap)
            where = (
                ", ".join(f"{name} (line {line})" for name, line in calls)
                if calls
                else f"through {', '.join(record.unseen_gemm)}"
            )
            warnings.warn_explicit(
                f"mixpert: {fid.func_qualname}: {where} multiplies matrices inside NumPy's "
                "implementation, through BLAS, not at a product site mixpert rewrites; that "
                "product runs in native float32",
                UnseenGemmWarning,
                fid.filename,
                fid.firstlineno,
            )
        return False


# NumPy functions whose Numba implementations multiply matrices through BLAS (every np.linalg
# function is also taken): what the warning names instead of Numba's internal helpers.
BLAS_BACKED = {"cov", "corrcoef", "inner", "vdot"}


def numpy_calls(func_ir: ir.FunctionIR, typemap: dict) -> list[tuple[str, int]]:
    """(``np.cov``, line) for each call in the function of a NumPy function that may multiply
    matrices through BLAS inside Numba's implementation, in source order."""
    found = []
    for block in func_ir.blocks.values():
        for stmt in block.find_exprs(op="call"):
            key = getattr(typemap.get(stmt.func.name), "typing_key", None)
            module = getattr(key, "__module__", None) or ""
            name = getattr(key, "__name__", "")
            if module.startswith("numpy.linalg"):
                found.append((f"np.linalg.{name}", stmt.loc.line))
            elif module.startswith("numpy") and name in BLAS_BACKED:
                found.append((f"np.{name}", stmt.loc.line))
    return sorted(set(found), key=lambda call: (call[1], call[0]))
