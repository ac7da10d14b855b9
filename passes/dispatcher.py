"""Numba dispatchers that compile with the mixpert pipelines, with a cache of their own.

Cache entries go to files named ``mixpert-<module>.<qualname>-<line>...`` and their index keys
carry ``CACHE_VERSION``, so plain ``numba.njit(cache=True)`` of the same function never loads
mixpert's code, nor mixpert plain Numba's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from numba.core import errors
from numba.core.caching import CompileResultCacheImpl, FunctionCache
from numba.core.compiler import Flags
from numba.core.compiler_lock import global_compiler_lock
from numba.core.cpu import CPUTargetOptions
from numba.core.registry import CPUDispatcher

from .callees import Mode, install, python_function
from .numpy_products import product_typing_error
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

    def compile(self, sig: Any) -> Any:
        # A product site refused while typing (numpy_products.refuse) surfaces here, whoever
        # compiles: a call, a jitted caller, inspection. One ProductTypingError naming the
        # site instead of Numba's trace through the internal stub.
        try:
            return super().compile(sig)
        except errors.TypingError as error:
            concise = product_typing_error(error)
            if concise is None or concise is error:
                raise
            raise concise from None


class MixpertObjectDispatcher(MixpertDispatcher):
    mixpert_mode: Mode = "object"


ScalarRules = Literal["numpy", "numba"]

# Numba options mixpert cannot honour: the one value each may have, and why. Any other value
# is refused by name when the function is decorated.
REFUSED_OPTIONS: dict[str, tuple[Any, str]] = {
    "pipeline_class": (
        None,
        "mixpert compiles with its own pipelines (the passes that find and rewrite the products)",
    ),
    "_nrt": (True, "the products allocate their results, which needs Numba's runtime"),
    "no_cpython_wrapper": (
        False,
        "a mixpert.jit function is called from Python, through the wrapper this leaves out",
    ),
    "_target": ("cpu", "mixpert.jit compiles for the CPU (CuPy operands run in object mode)"),
}
# Options that are not Numba target options: mixpert's own, or given to the dispatcher.
_NOT_TARGET_OPTIONS = ("cache", "forceobj", "locals", "pipeline_class", "_target")


def numba_options(options: Mapping[str, Any]) -> dict[str, Any]:
    """The Numba options of a mixpert.jit function, checked when it is decorated: values
    mixpert cannot honour raise ValueError naming the option (``REFUSED_OPTIONS``;
    ``nopython=False`` too: mixpert compiles nopython code as numba.njit does, and
    ``forceobj=True`` asks for object mode), and names Numba does not know raise Numba's own
    KeyError now rather than at the first call."""
    options = dict(options)
    for name, (accepted, why) in REFUSED_OPTIONS.items():
        if name in options and options[name] != accepted:
            raise ValueError(f"mixpert.jit: {name}={options[name]!r} is not supported: {why}")
    nopython, forceobj = options.get("nopython"), options.get("forceobj", False)
    if nopython is False and not forceobj:
        raise ValueError(
            "mixpert.jit: nopython=False is not supported: mixpert.jit compiles nopython code, "
            "as numba.njit does; pass forceobj=True for object mode"
        )
    if nopython and forceobj:
        raise ValueError("mixpert.jit: only one of 'nopython' or 'forceobj' can be True")
    target = {k: v for k, v in options.items() if k not in _NOT_TARGET_OPTIONS}
    CPUTargetOptions.parse_as_flags(Flags(), target)  # KeyError naming unknown options
    return options


def make_dispatcher(
    py_func: Any,
    mode: Mode,
    options: Mapping[str, Any] | None = None,
    cache: bool = False,
    scalar_rules: ScalarRules = "numpy",
    local_types: Mapping[str, Any] | None = None,
) -> MixpertDispatcher:
    """A dispatcher of ``mode`` for ``py_func`` with its Numba ``options`` (``locals`` among
    them, or ``local_types``: types of local variables, as numba.jit's ``locals``)."""
    options = dict(options or {})
    local_types = dict(options.pop("locals", None) or local_types or {})
    options = {k: v for k, v in options.items() if k not in _NOT_TARGET_OPTIONS}
    if mode == "object":
        options = {"forceobj": True, "looplift": False}
        disp: MixpertDispatcher = MixpertObjectDispatcher(
            py_func,
            locals=local_types,
            targetoptions=options,
            pipeline_class=MixpertObjectCompiler,
        )
    else:
        options["nopython"] = True
        compiler = MixpertCompiler if scalar_rules == "numpy" else NumbaRulesCompiler
        disp = MixpertDispatcher(
            py_func, locals=local_types, targetoptions=options, pipeline_class=compiler
        )
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
            local_types = getattr(callee, "locals", None)
            _VARIANTS[key] = make_dispatcher(py_func, mode, options, local_types=local_types)
        return _VARIANTS[key]


# retarget-callees, a pass of the pipelines above, makes its callees' variants here
install(variant_for=variant_for)
