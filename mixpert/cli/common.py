"""What the CLI commands share: the console, loading the named file and its inputs, user errors,
progress, the plan tables.

Output is written for terminals and pipes alike: when stdout is not a terminal the console is
wide (nothing is cut or wrapped mid-identifier) and progress bars are off.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import math
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import click
import numpy as np
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from ..plans.plan import Plan
from ..runtime.levels import NATIVE_LEVEL, get_level
from ..source_files import load_module

console = Console() if sys.stdout.isatty() else Console(width=240, soft_wrap=True)
CONTEXT = {"help_option_names": ["-h", "--help"]}
TARGET_MODULE_PREFIX = "_mixpert_target_"
SIZE = click.IntRange(min=1)  # problem sizes: 0 and negative sizes are refused while parsing


# --- option checks: click calls them while parsing, before the command prints anything -----------
def positive_tol(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A ``--tol`` option: a positive finite number (or not given)."""
    if value is not None and not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"{value:g}: tol must be a positive finite number")
    return value


def usable_backend(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """A ``--backend`` option: "cuda" only where a GPU is usable."""
    if value == "cuda":
        from ..runtime import device

        if not device.gpu_available():
            raise click.BadParameter(f"cuda needs a usable CUDA GPU: {device.unavailable_reason()}")
    return value


def load_function(target: str) -> Any:
    """The object named by ``path/to/file.py:name``, from exactly that file.

    The file is loaded from its path under a private module name (its top level runs once per
    process), nothing is added to ``sys.path``, and only ``.py`` files are taken.
    """
    path_text, _, name = target.rpartition(":")
    if not path_text or not name.isidentifier():
        raise click.BadParameter(
            f"{target!r} is not of the form path/to/file.py:name", param_hint="TARGET"
        )
    path = Path(path_text)
    if path.suffix != ".py":
        raise click.BadParameter(
            f"{path_text!r} is not a Python file: mixpert loads .py files only",
            param_hint="TARGET",
        )
    if not path.is_file():
        raise click.BadParameter(f"no file {path_text!r}", param_hint="TARGET")
    module = load_file(path.resolve())
    try:
        return getattr(module, name)
    except AttributeError:
        raise click.BadParameter(f"{path_text} has no {name!r}", param_hint="TARGET") from None


def load_file(path: Path) -> Any:
    """The module of file ``path`` under a private name (``source_files``); its errors reported."""
    digest = hashlib.blake2b(str(path).encode(), digest_size=6).hexdigest()
    try:
        return load_module(path, f"{TARGET_MODULE_PREFIX}{path.stem.replace('.', '_')}_{digest}")
    except Exception as error:
        raise click.ClickException(
            f"{path}: running its top level failed: {type(error).__name__}: {error}"
        ) from None


@contextlib.contextmanager
def user_errors(hint: str) -> Iterator[None]:
    """Report what the user's inputs caused (bad values, shapes, plans, no GPU) as one line
    with exit status 2, not a traceback."""
    try:
        yield
    except (ValueError, TypeError, LookupError) as error:
        raise click.UsageError(f"{hint}: {error}") from None
    except (OSError, RuntimeError) as error:
        raise click.UsageError(f"{hint}: {type(error).__name__}: {error}") from None


@contextlib.contextmanager
def plain_warnings() -> Iterator[None]:
    """Python warnings as one line each on stderr, ``warning: Category: message``: no file and
    line (the frame a warning names is click's or the installed package's, not the user's),
    each distinct one once, and in order with the output (stdout flushed before, stderr after)."""
    shown: set[tuple[type[Warning], str]] = set()
    previous = warnings.showwarning

    def show(message: Warning | str, category: type[Warning], *where: Any, **more: Any) -> None:
        text = " ".join(str(message).split()).removeprefix("mixpert: ")
        if (category, text) in shown:
            return
        shown.add((category, text))
        sys.stdout.flush()
        sys.stderr.write(f"warning: {category.__name__}: {text}\n")
        sys.stderr.flush()

    warnings.showwarning = show
    try:
        yield
    finally:
        warnings.showwarning = previous


@contextlib.contextmanager
def progress(
    description: str, total: int | None, enabled: bool = True
) -> Iterator[Callable[[], None]]:
    """A rich progress bar on the console (off when not a terminal); yields its ``advance``."""
    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, disable=not (enabled and console.is_terminal), transient=True,
    )  # fmt: skip
    with bar:
        task = bar.add_task(description, total=total)
        yield lambda: bar.advance(task)


def print_json(data: Any) -> None:
    """``data`` as JSON on stdout, unstyled (for ``--json``)."""
    click.echo(json.dumps(data, indent=2, default=str))


ARGUMENTS_HELP = (
    "arguments to compile and run with, comma separated: SHAPE (64x32: a float32 array, "
    "standard normal), SHAPE:DTYPE (64x32:f64, 10:i64: another dtype; integers 0..9, booleans "
    "random), TYPE:VALUE (f32:1.5, f:0.5, i:3, b:true: a scalar); DTYPE and TYPE one of "
    "f16 f32 f64 i32 i64 b, and f, i for a Python float, int"
)
_DTYPES = {"f16": np.float16, "f32": np.float32, "f64": np.float64, "i32": np.int32,
           "i64": np.int64, "b": np.bool_}  # fmt: skip
_SCALARS: dict[str, Callable[[str], Any]] = {
    **{name: lambda text, t=t: t(text) for name, t in _DTYPES.items() if name != "b"},
    "f": float,
    "i": int,
    "b": lambda text: {"true": True, "false": False, "1": True, "0": False}[text.lower()],
}


def _shape(text: str) -> tuple[int, ...] | None:
    parts = text.split("x")
    if not all(p.isdigit() for p in parts):
        return None
    return tuple(int(p) for p in parts)


def _argument(item: str, rng: np.random.Generator) -> Any:
    left, colon, right = item.partition(":")
    if colon and left in _SCALARS:
        try:
            return _SCALARS[left](right)
        except (ValueError, KeyError, OverflowError):
            raise click.BadParameter(
                f"{item!r}: {right!r} is not a value of type {left}", param_hint="--shapes"
            ) from None
    shape = _shape(left)
    if shape is None or (colon and right not in _DTYPES):
        raise click.BadParameter(
            f"{item!r} is none of SHAPE (64x32), SHAPE:DTYPE (64x32:f64), TYPE:VALUE (i:3); "
            f"types: {', '.join(_SCALARS)}",
            param_hint="--shapes",
        )
    dtype = np.dtype(_DTYPES[right] if colon else np.float32)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    if dtype.kind == "i":
        return rng.integers(0, 10, shape).astype(dtype)
    return rng.standard_normal(shape).astype(dtype)


def parse_shapes(text: str, seed: int) -> tuple[Any, ...]:
    """``--shapes``: '64x32,32x16,f32:0.5,i:3' -> the arguments (``ARGUMENTS_HELP``)."""
    rng = np.random.default_rng(seed)
    return tuple(_argument(item.strip(), rng) for item in text.split(","))


def load_input_sets(paths: Sequence[str], count: int, func: Any) -> list[tuple[Any, ...]]:
    """Argument tuples from several .npz files, or ``count`` from one generator
    (``path/to/file.py:name``, a function yielding argument tuples)."""
    if len(paths) == 1 and ":" in paths[0] and not Path(paths[0]).is_file():
        make = load_function(paths[0])
        sets = [tuple(args) for args, _ in zip(make(), range(count), strict=False)]
        if not sets:
            raise click.BadParameter(f"{paths[0]} yielded no inputs", param_hint="--inputs")
        return sets
    for path in paths:
        if not Path(path).is_file():
            raise click.BadParameter(f"no file {path!r}", param_hint="--inputs")
        _check_npz(path)  # every file before the first is loaded
    return [load_inputs(path, func) for path in paths]


def _check_npz(path: str) -> None:
    """Refuse a file that is not an .npz, saying what to give instead (NumPy's own error for a
    text file is advice about pickles)."""
    with open(path, "rb") as handle:
        head = handle.read(6)
    if head[:2] == b"PK":  # a zip archive: np.savez's format
        return
    if Path(path).suffix == ".py":
        found = f"a Python file; to draw inputs from a generator in it, give {path}:NAME"
    elif head == b"\x93NUMPY":
        found = "an .npy file of one array; save all the arguments with np.savez"
    else:
        found = "not an .npz file"
    raise click.BadParameter(
        f"{path}: {found} (--inputs takes an .npz of the arguments, np.savez(path, a=..., b=...), "
        "or a generator path/to/file.py:NAME yielding argument tuples)",
        param_hint="--inputs",
    )


def load_inputs(path: str, func: Any = None) -> tuple[np.ndarray, ...]:
    """The arguments in an .npz: by parameter name when the file names them (``np.savez(f,
    x=..., w=...)``), else in ``np.savez`` order (arr_0, arr_1, ...)."""
    try:
        data = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise click.BadParameter(f"{path}: not readable ({error})", param_hint="--inputs") from None
    if not isinstance(data, np.lib.npyio.NpzFile):
        raise click.BadParameter(f"{path}: not an .npz file (np.savez)", param_hint="--inputs")
    with data:
        names = list(data.files)
        if all(n.startswith("arr_") and n[4:].isdigit() for n in names):
            return tuple(data[n] for n in sorted(names, key=lambda n: int(n[4:])))
        signature = inspect.signature(getattr(func, "py_func", func)).parameters
        params = list(signature)
        given = [p for p in params if p in names]
        unknown = sorted(set(names) - set(params))
        required = [p for p, spec in signature.items() if spec.default is spec.empty]
        missing = [p for p in required if p not in names]
        if unknown or missing or given != params[: len(given)]:
            raise click.BadParameter(
                f"{path} names {sorted(names)}; the function takes {params}"
                + (f" (unknown: {unknown})" if unknown else "")
                + (f" (missing: {missing})" if missing else "")
                + ("" if unknown or missing else " (only trailing parameters may be left out)"),
                param_hint="--inputs",
            )
        return tuple(data[p] for p in given)  # the rest take their defaults


def failing_op(error: BaseException, func: Any) -> Any:
    """The ``OpInfo`` of ``func``'s product that raised ``error``, or None: the op the runtime
    noted (``execution.hook.OP_NOTE``), else the innermost traceback line that is a product
    (a product run by Python, as in the float64 reference run)."""
    from ..execution.hook import OP_NOTE

    ops = getattr(func, "ops", None)
    if ops is None:  # a plain function: its ops as mixpert.jit finds them
        from ..jit import jit

        try:
            ops = jit(func).ops
        except Exception:  # not a function mixpert can analyse: no product to name
            return None
    for note in getattr(error, "__notes__", ()):
        if note.startswith(OP_NOTE) and note[len(OP_NOTE) :] in ops:
            return ops[note[len(OP_NOTE) :]]
    lines: list[tuple[str, int]] = []
    trace: TracebackType | None = error.__traceback__
    while trace is not None:
        lines.append((trace.tb_frame.f_code.co_filename, trace.tb_lineno))
        trace = trace.tb_next
    at = {(str(Path(op.file).resolve()), op.line): op for op in ops.values()}
    for file, line in reversed(lines):
        op = at.get((str(Path(file).resolve()), line))
        if op is not None:
            return op
    return None


@contextlib.contextmanager
def naming_the_product(func: Any) -> Iterator[None]:
    """A ValueError from one of ``func``'s products (operands whose shapes do not fit) names
    the op, its file:line and its source."""
    try:
        yield
    except ValueError as error:
        op = failing_op(error, func)
        if op is None:
            raise
        from ..tuning.tuned_plan import relative_path

        where = f"{relative_path(op.file)}:{op.line}"
        raise ValueError(f"product {op.op_id} at {where} (`{op.source}`): {error}") from error


def plan_table(plan: Plan, title: str, why: Mapping[str, str] | None = None) -> Table:
    """op, location, level, share of time, contribution to error, op speedup over fp32, and
    ``why`` (op id -> why it got its level) when given."""
    table = Table(title=title, caption=f"tuning error {plan.error:.2e} (tol {plan.tol:g})")
    for name in ("op", "location"):
        table.add_column(name, overflow="fold")  # never cut
    for name in ("level", "share of time", "contribution to error", "op speedup"):
        table.add_column(name)
    if why is not None:
        table.add_column("why this level")
    native = get_level(NATIVE_LEVEL).relative_cost
    for op in plan.ops:
        table.add_row(
            escape(op.op_id),
            escape(op.location),
            escape(f"native: {op.native}") if op.native else op.level,  # never reaches it
            f"{op.share:.1%}",
            f"{op.contribution:+.2e}",
            "1.00x" if op.native else f"{native / get_level(op.level).relative_cost:.2f}x",
            *([escape(why.get(op.op_id, ""))] if why is not None else []),
        )
    return table


def plan_summary(plan: Plan) -> str:
    speed = f"predicted speedup over fp32: {plan.predicted_speedup:.2f}x"
    if plan.measured_speedup is not None:
        speed += f", measured {plan.measured_speedup:.2f}x"
    held_out = (
        f", on held-out inputs {plan.held_out_error:.2e}" if plan.held_out_error is not None else ""
    )
    text = (
        f"{speed}; measured error {plan.error:.2e} (tol {plan.tol:g}, tuned within "
        f"{plan.margin:g} tol){held_out}; {plan.profiling_runs} profiling runs"
    )
    if not plan.met_tol:
        text += "\n[red]tol is tighter than the most accurate level reaches[/red]"
    return text
