"""Every Python block of the README runs as pasted (in a scratch folder)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)


def test_the_readme_has_python_blocks() -> None:
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_block_runs_as_pasted(index: int, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # blocks may write files (a plan)
    # A module of its own, as a pasted script is: Numba's object mode finds globals by module.
    module = types.ModuleType(f"readme_block_{index + 1}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(BLOCKS[index], f"README.md block {index + 1}", "exec"), module.__dict__)
