"""Every error and warning the documentation names is one a user can reach as ``mixpert.Name``
(to catch it, or to filter it with ``warnings.filterwarnings(..., category=...)``).

The names are read from README.md and docs/*.md on each run, so a class the docs add later is
checked too; Python's own exceptions and Numba's (``TypingError``) are not mixpert's to export.
"""

from __future__ import annotations

import builtins
import re
from pathlib import Path

import numba.core.errors
import pytest

import mixpert

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NAME = re.compile(r"\b[A-Z][A-Za-z0-9]*(?:Error|Warning)\b")


def documented_names() -> dict[str, str]:
    """Error and warning class names in the docs that are neither Python's nor Numba's, each
    with the first document naming it."""
    found: dict[str, str] = {}
    for doc in DOCS:
        for name in NAME.findall(doc.read_text()):
            if hasattr(builtins, name) or hasattr(numba.core.errors, name):
                continue
            found.setdefault(name, doc.name)
    return found


def test_the_docs_name_mixperts_errors_and_warnings() -> None:
    """The scan finds what it is there for (an empty scan would pass everything below)."""
    names = documented_names()
    for name in ("NativeOnCpuWarning", "PlanFileError", "StalePlanError", "UnseenGemmWarning"):
        assert name in names


@pytest.mark.parametrize("name", sorted(documented_names()))
def test_each_documented_error_and_warning_is_exported(name: str) -> None:
    where = documented_names()[name]
    assert name in mixpert.__all__, f"{where} names {name}, which mixpert.__all__ lacks"
    cls = getattr(mixpert, name)
    base = Warning if name.endswith("Warning") else Exception
    assert isinstance(cls, type) and issubclass(cls, base), f"mixpert.{name} is no {base}"
    assert cls.__module__.startswith("mixpert."), f"mixpert.{name} comes from {cls.__module__}"


def test_every_exported_name_exists() -> None:
    assert sorted(set(mixpert.__all__)) == sorted(mixpert.__all__)
    assert [name for name in mixpert.__all__ if not hasattr(mixpert, name)] == []
