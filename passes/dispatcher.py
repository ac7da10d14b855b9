"""Numba dispatchers that compile with the mixpert pipelines, with a cache of their own.

Cache entries go to files named ``mixpert-<module>.<qualname>-<line>...`` and their index keys
carry ``CACHE_VERSION``, so plain ``numba.njit(cache=True)`` of the same function never loads
mixpert's code, nor mixpert plain Numba's.
"""

from __future__ import annotations

from typing import Any, Literal

from numba.core.caching import CompileResultCacheImpl, FunctionCache
from numba.core.compiler_lock import global_compiler_lock
from numba.core.registry import CPUDispatcher

from .callees import Mode, install, python_function
from .pipeline import MixpertCompiler, MixpertObjectCompiler, NumbaRulesCompiler

CACHE_VERSION = "mixpert-passes-1"


class _MixpertCacheImpl(CompileResultCacheImpl):
    def get_filename_base(self, fullname: str, abiflags: str) -> str:
        return "mixpert-" + super().get_filename_base(fullname, abiflags)


class MixpertFunctionCache(FunctionCache):
    _impl_class = _MixpertCacheImpl

    def _index_key(self, sig: Any, codegen: Any) -> tuple:
        return (*super()._index_key(sig, codegen), CACHE_VERSION)


class MixpertDispatcher(CPUDispatcher):
    """A CPU dispatcher whose compiles run the mixpert pipeline of ``mixpert_mode``."""

    mixpert_mode: Mode = "nopython"

    def enable_caching(self) -> None:
        self._cache = MixpertFunctionCache(self.py_func)


class MixpertObjectDispatcher(MixpertDispatcher):
    mixpert_mode: Mode = "object"


ScalarRules = Literal["numpy", "numba"]


def make_dispatcher(
    py_func: Any,
    mode: Mode,
    options: dict[str, Any] | None = None,
    cache: bool = False,
    scalar_rules: ScalarRules = "numpy",
) -> MixpertDispatcher:
    options = {k: v for k, v in (options or {}).items() if k not in ("cache", "forceobj")}
    if mode == "object":
        options = {"forceobj": True, "looplift": False}
        disp: MixpertDispatcher = MixpertObjectDispatcher(
            py_func, targetoptions=options, pipeline_class=MixpertObjectCompiler
        )
    else:
        options["nopython"] = True
        compiler = MixpertCompiler if scalar_rules == "numpy" else NumbaRulesCompiler
        disp = MixpertDispatcher(py_func, targetoptions=options, pipeline_class=compiler)
    if cache:
        disp.enable_caching()
    return disp


_VARIANTS: dict[tuple[Any, Mode], MixpertDispatcher] = {}


def variant_for(callee: Any, mode: Mode) -> MixpertDispatcher:
    """The mixpert dispatcher of ``mode`` for a jitted callee (one per function and mode)."""
    own = getattr(callee, "dispatcher_for", None)
    if own is not None:  # a mixpert.jit function: use its own dispatchers
        return own(mode)
    py_func = python_function(callee)
    key = (py_func, mode)
    with global_compiler_lock:  # one variant per key, whichever threads ask
        if key not in _VARIANTS:
            options = dict(getattr(callee, "targetoptions", {}))
            _VARIANTS[key] = make_dispatcher(py_func, mode, options)
        return _VARIANTS[key]


# retarget-callees, a pass of the pipelines above, makes its callees' variants here
install(variant_for=variant_for)
