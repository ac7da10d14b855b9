"""``print(mixpert.inspect(...))`` shows the report ``mixpert inspect`` prints (one renderer for
both), not the dataclass's field dump."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

import mixpert
from mixpert.cli import main
from mixpert.cli.common import load_function, parse_shapes

SOURCE = (
    "import numpy as np\n\n\ndef mlp(x, w1, w2):\n"
    "    h = np.maximum(x @ w1, np.float32(0))\n    return h @ w2\n"
)
SHAPES = "8x4,4x4,4x2"


def test_str_of_a_report_is_the_cli_text(tmp_path: Path) -> None:
    source = tmp_path / "user_mlp.py"
    source.write_text(SOURCE)
    result = CliRunner().invoke(main, ["inspect", f"{source}:mlp", "--shapes", SHAPES])
    assert result.exit_code == 0, result.output
    report = mixpert.inspect(load_function(f"{source}:mlp"), *parse_shapes(SHAPES, 0))
    text = str(report)
    assert text == result.output
    lines = text.splitlines()
    assert lines[0].startswith("mlp  (Array(float32, 2, 'C', False, aligned=True)")
    header = next(line for line in lines if "op id" in line)
    for column in ("line", "source", "plan level", "ran at", "shapes (m,k,n)", "pred. cost"):
        assert column in header
    rows = [line for line in lines if line.startswith(("│ mlp:0 ", "│ mlp:1 "))]
    assert len(rows) == 2 and "8x4x4" in rows[0] and "8x4x2" in rows[1]
    assert "  mlp:0 -> mlp:1" in lines and "@mixpert_gemm(" in text
    assert "OpRow(" not in text and "\x1b[" not in text  # no field dump, no colour codes


def chain(a, b):
    return (a @ b) @ b


def test_str_without_arguments_has_no_llvm_section() -> None:
    text = str(mixpert.inspect(chain))
    assert text.startswith("chain  \n") and "  chain:0 -> chain:1" in text.splitlines()
    assert "Numba IR at each site" in text and "LLVM call sites" not in text
