"""Running exactly one named Python file: under a module name of our choosing, never through
``sys.path`` (so a ``cupy.py`` or ``json.py`` beside it is never imported in its place)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_module(path: Path, name: str) -> ModuleType:
    """The module of file ``path`` registered as ``name``: loaded once per process (its top
    level runs once); a failed load leaves nothing behind and raises the file's own error."""
    loaded = sys.modules.get(name)
    if loaded is not None and Path(loaded.__file__ or "").resolve() == path.resolve():
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and Numba look modules up by name
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
