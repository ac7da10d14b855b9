"""The CUDA C of the kernel modules, as NVRTC gets it: a root file of kernels/ (``pack.cu``,
``combine.cu``) with every ``#include "..."`` of kernels/ inlined, each header once, behind a
prelude of ``#define``s: the contract's constants (``packer``, ``fp16split``, ``combine``,
``equilibrate``, ``bypass``, ``ordered``, ``blocks``) and the kernels' launch geometry
(``geometry``), each defined once, in Python. ``#line`` directives name the real files and lines
(compile errors, ncu). The whole text is the source CuPy compiles and keys its cache on, so
editing any file of kernels/ builds afresh. No CuPy here."""

from __future__ import annotations

import re
from pathlib import Path

from .. import blocks, bypass, combine, equilibrate, fp16split, ordered, packer
from ..levels import LEVELS
from . import geometry

KERNELS = Path(__file__).resolve().parent / "kernels"
_INCLUDE = re.compile(r'[ \t]*#[ \t]*include[ \t]+"([^"]+)"[ \t]*')


def _x_list(shapes: dict[int, tuple[int, int]]) -> str:
    """A table of shapes as an X-macro's list: ``X(key, first, second) ...``."""
    return " ".join(f"X({key}, {first}, {second})" for key, (first, second) in shapes.items())


def defines() -> dict[str, str]:
    """The prelude's macros, name (with its parameters, if any) -> replacement text."""
    level = LEVELS[blocks.LEVEL]
    numbers = {
        "FIRST_SLICE_BITS": packer.FIRST_SLICE_BITS,
        "LATER_SLICE_BITS": packer.LATER_SLICE_BITS,
        "HEADROOM_NUM": packer.HEADROOM_NUMERATOR,
        "HEADROOM_DEN": packer.HEADROOM_DENOMINATOR,
        "ROW_TOP_EXPONENT": fp16split.ROW_TOP_EXPONENT,
        "LO_SHIFT": fp16split.LO_SHIFT,
        "OVERFLOW_THRESHOLD": combine.OVERFLOW_THRESHOLD.hex(),  # a C99 hex literal: exact
        "DEAD": int(equilibrate.DEAD),
        "IMBALANCE": equilibrate.IMBALANCE_BINADES,
        "DEEP_FRACTION": bypass.DEEP_FRACTION,
        "NO_BYPASS": bypass.NO_BYPASS,
        "ORDERED_CHUNK": ordered.CHUNK,
        "ORDERED_SEGMENT": ordered.SEGMENT,
        "ROWS_THREADS": geometry.ROWS_THREADS,
        "THIN_THREADS": geometry.THIN_THREADS,
        "THIN_STAGES": geometry.THIN_STAGES,
        "TOTALS_WIDTH": geometry.TOTALS_WIDTH,
        "TOTALS_THREADS": geometry.TOTALS_THREADS,
        "PAIRS_STAGES": geometry.PAIRS_STAGES,
        "COLUMN_TILE_K": geometry.COLUMN_TILE_K,
        "STRIP_LANE_COLUMNS": geometry.STRIP_LANE_COLUMNS,
        "BLOCKS_K": blocks.BLOCK_K,
        "BLOCKS_SLICES": level.a_slices,
        "BLOCKS_MAX_SUM": max(level.groups),
        "BLOCKS_ROW_PAD": geometry.BLOCKS_ROW_PAD,
        "BLOCKS_TILE_ROWS": geometry.BLOCKS_TILE_ROWS,
        "BLOCKS_THREADS": geometry.BLOCKS_THREADS,
        "BLOCKS_BYPASS_THREADS": geometry.BLOCKS_BYPASS_THREADS,
    }
    tables = {  # the kernels' variants: X(key, ...) for each shape
        "CHUNKS_SHAPES(X)": _x_list(geometry.CHUNKS_SHAPES),
        "PAIRS_SHAPES(X)": _x_list(geometry.PAIRS_SHAPES),
        "BLOCKS_SHAPES(X)": _x_list(geometry.BLOCKS_SHAPES),
        "BLOCKS_BUSY_SHAPES(X)": _x_list(geometry.BLOCKS_BUSY_SHAPES),
    }
    return {name: str(value) for name, value in numbers.items()} | tables


def prelude(body: str) -> str:
    """The ``#define``s of the macros ``body`` names (no others: they stay out of the headers and
    the generated code that follow), with a ``#line`` naming where they come from."""
    named = set(re.findall(r"\b[A-Z_][A-Z0-9_]*\b", body))
    lines = [f"#define {name} {text}" for name, text in defines().items() if _bare(name) in named]
    return _line(1, Path(__file__).resolve(), "defines()") + "".join(f"{x}\n" for x in lines)


def _bare(name: str) -> str:
    return name.partition("(")[0]


def _line(number: int, path: Path, note: str = "") -> str:
    return f'#line {number} "{path.as_posix()}{": " + note if note else ""}"\n'


def _inlined(path: Path, included: set[Path]) -> str:
    """The text of ``path`` with its includes of kernels/ inlined (each file once: ``included``
    holds those already in), ``#line`` directives before each and after."""
    included.add(path)
    out = [_line(1, path)]
    text = path.read_text()
    for number, line in enumerate((text if text.endswith("\n") else text + "\n").splitlines(True)):
        match = _INCLUDE.fullmatch(line.rstrip("\n"))
        if match is None:
            out.append(line)
        elif (header := KERNELS / match.group(1)) in included:
            out.append("\n")  # (in already: the lines keep their numbers)
        else:
            out += [_inlined(header, included), _line(number + 2, path)]
    return "".join(out)


def module(root: str) -> str:
    """The source of the kernel module whose root file is kernels/``root``, as NVRTC gets it."""
    body = _inlined(KERNELS / root, set())
    return prelude(body) + body


def helpers() -> str:
    """The device helpers alone: the elementwise conversions' preamble."""
    return module("device.cuh")
