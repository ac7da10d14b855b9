"""Golden (FileCheck-style) tests of the transformed IR, and mixpert.inspect / the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

import mixpert
from mixpert.cli import main
from mixpert.execution import op_index

GOLDEN = Path(__file__).parent / "golden"


def chain(a, b, c):
    x = a @ b
    y = np.dot(x, c)
    return y.dot(x)


def _pattern(text: str) -> re.Pattern[str]:
    parts = re.split(r"\{\{(.*?)\}\}", text.strip())
    return re.compile("".join(re.escape(p) if i % 2 == 0 else p for i, p in enumerate(parts)))


def filecheck(output: str, check_file: Path) -> None:
    """A small FileCheck: CHECK (in order), CHECK-NEXT (next line), CHECK-NOT (until next match)."""
    lines = [line.strip() for line in output.splitlines()]
    position, forbidden = 0, []
    for raw in check_file.read_text().splitlines():
        directive, _, text = raw.partition(":")
        if directive not in ("CHECK", "CHECK-NEXT", "CHECK-NOT"):
            continue
        pattern = _pattern(text)
        if directive == "CHECK-NOT":
            forbidden.append(pattern)
            continue
        candidates = [position] if directive == "CHECK-NEXT" else range(position, len(lines))
        hit = next((i for i in candidates if i < len(lines) and pattern.search(lines[i])), None)
        assert hit is not None, f"{check_file.name}: no match for {raw!r} from line {position}"
        for bad in forbidden:
            between = lines[position:hit]
            assert not any(bad.search(line) for line in between), f"{raw!r}: found {bad.pattern}"
        forbidden, position = [], hit + 1
    for bad in forbidden:
        assert not any(bad.search(line) for line in lines[position:]), f"found {bad.pattern}"


A = np.linspace(-1, 1, 36, dtype=np.float32).reshape(6, 6)
jitted = mixpert.jit(chain)
COMPILED = mixpert.inspect(jitted, A, A, A, print_ir_after=["mixpert-rewrite-matmul"])
UNTYPED = mixpert.inspect(chain, print_ir_after="all")


def test_golden_untyped_ir_after_rewrite() -> None:
    filecheck(UNTYPED.ir_after["mixpert-rewrite-matmul"], GOLDEN / "rewrite_chain.check")


def test_golden_ir_is_the_same_in_the_full_pipeline() -> None:
    filecheck(COMPILED.ir_after["mixpert-rewrite-matmul"], GOLDEN / "rewrite_chain.check")


def test_golden_llvm_calls_the_runtime_symbol() -> None:
    filecheck("\n".join(COMPILED.llvm_calls), GOLDEN / "llvm_chain.check")


def test_rewrite_notes_show_each_site_before_and_after() -> None:
    notes = {note.op_id: note for note in UNTYPED.rewrites}
    assert len(notes) == 3
    first = notes["chain:0"]
    assert first.before == "x = a <built-in function matmul> b"
    assert first.after.splitlines() == [
        "$mixpert_stub = global(mixpert_matmul)",
        f"$mixpert_op = const(int, {op_index(first.op_id)})",
        "x = call $mixpert_stub($mixpert_op, a, b)",
    ]


def test_print_ir_after_all_names_numba_and_mixpert_passes() -> None:
    names = list(UNTYPED.ir_after)
    for name in ("reconstruct_ssa", "mixpert-find-matmul-sites", "mixpert-gemm-graph"):
        assert name in names
    assert names.index("reconstruct_ssa") < names.index("mixpert-find-matmul-sites")


def test_inspect_reports_ops_levels_shapes_and_cost() -> None:
    ops = [row.op_id for row in COMPILED.ops]
    planned = mixpert.inspect(jitted.with_plan({ops[0]: "V"}), A, A, A)
    row = planned.op(ops[0])
    assert row.source == "x = a @ b" and row.kind == "matmul" and row.level == "V"
    assert row.shapes == ((6, 6, 6),)
    assert row.predicted_cost == pytest.approx(2 * 6**3 * mixpert.LEVELS["V"].relative_cost)
    assert planned.op(ops[1]).level == "auto" and sorted(planned.graph.edges) == sorted(
        [(ops[0], ops[1]), (ops[0], ops[2]), (ops[1], ops[2])]
    )
    assert planned.unseen_gemm == [] and "float32" in (planned.signature or "")
    assert "digraph gemm" in planned.to_dot() and f'"{ops[0]}" -> "{ops[1]}"' in planned.to_dot()


def test_cli_inspect(tmp_path: Path) -> None:
    source = tmp_path / "user_mlp.py"
    source.write_text(
        "import numpy as np\n\n\ndef mlp(x, w1, w2):\n"
        "    h = np.maximum(x @ w1, np.float32(0))\n    return h @ w2\n"
    )
    dot = tmp_path / "g.dot"
    runner = CliRunner()
    result = runner.invoke(
        main,
        [
            "inspect",
            f"{source}:mlp",
            "--shapes",
            "8x4,4x4,4x2",
            "--dot",
            str(dot),
            "--print-ir-after",
            "mixpert-rewrite-matmul",
        ],
        terminal_width=200,
    )
    assert result.exit_code == 0, result.output
    out = result.output
    assert "mlp:0 -> mlp:1" in out
    assert "8x4x4" in out and "@mixpert_gemm(" in out
    assert "$mixpert_op = const(int" in out and "IR after mixpert-rewrite-matmul" in out
    assert '"mlp:0" -> "mlp:1"' in dot.read_text()


def test_cli_inspect_bad_target() -> None:
    result = CliRunner().invoke(main, ["inspect", "no_such_file.py:f"])
    assert result.exit_code != 0 and "no file" in result.output
