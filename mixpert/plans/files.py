"""Plan files: the format, its field rules, and the one reader and writer.

A plan file is JSON: ``{"format": "mixpert-plans/2", "plans": [plan, ...]}``, plans for several
kinds of input side by side (files of mixpert 0.1, one plan with ``"format": "mixpert-plan/1"``,
are read too). Reading accepts regular files only (a FIFO would hang, ``/dev/zero`` never ends)
of at most ``MAX_BYTES``, parses strict JSON (no duplicate keys, no NaN, no integer beyond
int64, nesting at most ``MAX_DEPTH`` deep) and checks every field against ``PLAN_FIELDS``; any
problem raises a ``PlanFileError`` naming the file, the field and the rule. Writing goes to a
temporary file in the same folder (with the permissions the umask gives any new file) and
replaces the old one atomically. A plan is data: nothing in it is executed.

This module deals in checked JSON objects, not ``Plan`` objects: ``plans.plan`` builds plans from
them (``read_plans``, ``Plan.load``, ``Plan.save``), so the data imports the files and never the
other way round.
"""

from __future__ import annotations

import json
import math
import os
import secrets
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from ..runtime.levels import get_level

FORMAT = "mixpert-plans/2"
SINGLE_PLAN_FORMAT = "mixpert-plan/1"  # mixpert 0.1: the file is one plan
MAX_BYTES = 8 * 2**20


class PlanFileError(ValueError):
    """A plan file that cannot be used; the message names the file, the field and the rule."""


# --- field rules -------------------------------------------------------------------------------
MAX_INT = 2**63  # larger integers are no plan's figure (and overflow a float)


def _number(value: Any) -> bool:
    """An int or float a plan can hold: not NaN (the reader refuses the literal), +-inf
    allowed (an overflowing function's error), no integer beyond ``MAX_INT``."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return abs(value) < MAX_INT
    return isinstance(value, float) and not math.isnan(value)


def _rule(check: Callable[[Any], bool], text: str) -> tuple[Callable[[Any], bool], str]:
    return check, text


def _level_name(value: Any) -> bool:
    try:
        get_level(value)
    except (TypeError, ValueError):
        return False
    return True


_STR = _rule(lambda v: isinstance(v, str), "a string")
_NUMBER = _rule(_number, "a number")
_COUNT = _rule(lambda v: isinstance(v, int) and _number(v) and v >= 0, "an integer >= 0")
_POSITIVE = _rule(lambda v: _number(v) and math.isfinite(v) and v > 0, "a positive finite number")
_SECONDS = _rule(
    lambda v: v is None or (_number(v) and math.isfinite(v) and v >= 0), "seconds >= 0 or null"
)
_LEVELS = _rule(
    lambda v: (
        isinstance(v, dict)
        and all(isinstance(k, str) and isinstance(x, str) and _level_name(x) for k, x in v.items())
    ),
    "an object op id -> known level name",
)
_SOURCES = _rule(
    lambda v: isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
    "an object op id -> source hash",
)
PLAN_FIELDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "levels": _LEVELS,
    "function": _STR,
    "op_hash": _STR,
    "signature": _rule(
        lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings"
    ),
    "device": _STR,
    "tol": _POSITIVE,
    "error": _NUMBER,
    "predicted_speedup": _NUMBER,
    "measured_speedup": _rule(lambda v: v is None or _number(v), "a number or null"),
    "met_tol": _rule(lambda v: isinstance(v, bool), "true or false"),
    "profiling_runs": _COUNT,
    "ops": _rule(lambda v: isinstance(v, list), "a list of objects"),
    "op_sources": _SOURCES,
    "margin": _rule(lambda v: _number(v) and 0 < v <= 1, "a number in (0, 1]"),
    "held_out_error": _rule(lambda v: v is None or _number(v), "a number or null"),
    "tuned_on": _STR,
    "provisional": _STR,
    "target": _rule(lambda v: v in ("", "cpu", "cuda"), "'cpu', 'cuda' or ''"),
    # one trip (issue 47): fields files written before it lack, read as absent
    "trip_bytes": _rule(lambda v: v is None or _COUNT[0](v), "an integer >= 0 or null"),
    "trip_seconds": _SECONDS,
    "gpu_seconds": _SECONDS,
    "host_seconds": _SECONDS,
    "on_host": _STR,
}
REQUIRED = ("levels", "function", "op_hash", "signature", "device", "tol", "error",
            "predicted_speedup")  # fmt: skip
OP_FIELDS = {"op_id": _STR, "location": _STR, "level": _rule(_level_name, "a known level name"),
             "share": _NUMBER, "contribution": _NUMBER, "native": _STR,
             "forced_by": _STR}  # fmt: skip
# "native" and "forced_by" came later: files without them are read as before
OP_REQUIRED = ("op_id", "location", "level", "share", "contribution")


def _checked(data: Any, rules: Mapping[str, tuple[Callable[[Any], bool], str]],
             required: tuple[str, ...], where: str) -> dict[str, Any]:  # fmt: skip
    if not isinstance(data, dict):
        raise PlanFileError(f"{where}: must be a JSON object, found {type(data).__name__}")
    for name in required:
        if name not in data:
            raise PlanFileError(f"{where}: field {name!r} is missing")
    values = {}
    for name, value in data.items():
        if name == "format":
            continue
        if name not in rules:
            raise PlanFileError(f"{where}: unknown field {name!r} (known: {', '.join(rules)})")
        check, text = rules[name]
        if not check(value):
            raise PlanFileError(f"{where}: field {name!r} must be {text}, found {value!r:.80}")
        values[name] = value
    return values


def checked_plan_fields(data: Any, where: str = "plan") -> dict[str, Any]:
    """The fields of one plan's JSON object, every one checked (``ops`` rows too)."""
    values = _checked(data, PLAN_FIELDS, REQUIRED, where)
    values["ops"] = [
        _checked(row, OP_FIELDS, OP_REQUIRED, f"{where}, ops[{i}]")
        for i, row in enumerate(values.get("ops", []))
    ]
    return values


# --- reading -----------------------------------------------------------------------------------
def _read_text(path: Path) -> str:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise PlanFileError(f"plan file {path}: does not exist") from None
    except OSError as error:
        raise PlanFileError(f"plan file {path}: cannot be read ({error.strerror})") from None
    if not stat.S_ISREG(info.st_mode):
        raise PlanFileError(f"plan file {path}: must be a regular file (a FIFO, device or "
                            "folder is never read)")  # fmt: skip
    if info.st_size > MAX_BYTES:
        raise PlanFileError(
            f"plan file {path}: {info.st_size} bytes, more than the {MAX_BYTES} "
            "a plan file may have"
        )
    with open(path, "rb") as handle:
        raw = handle.read(MAX_BYTES + 1)
    if len(raw) > MAX_BYTES:
        raise PlanFileError(f"plan file {path}: grew beyond {MAX_BYTES} bytes while read")
    try:
        return raw.decode("utf-8-sig")  # a byte order mark (some editors write one) is skipped
    except UnicodeDecodeError as error:
        raise PlanFileError(f"plan file {path}: not UTF-8 text ({error.reason})") from None


class _Refused(ValueError):
    """What the JSON hooks below raise; ``parse_json`` turns it into a ``PlanFileError``."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    data: dict[str, Any] = {}
    for key, value in pairs:
        if key in data:  # json would keep the last silently: which one did the user mean?
            raise _Refused(f"key {key!r} appears twice in one object")
        data[key] = value
    return data


def _no_nan(literal: str) -> float:
    if literal == "NaN":
        raise _Refused("NaN is not a value a plan file may hold")
    return float(literal)  # Infinity, -Infinity: an overflowing function's error


def _integer(digits: str) -> int:
    if len(digits.lstrip("-")) > 19:  # beyond int64: no plan's figure, and slow to convert
        raise _Refused(f"an integer of {len(digits.lstrip('-'))} digits")
    return int(digits)


def parse_json(text: str, where: str) -> Any:
    """``text`` parsed as JSON; anything else (syntax, nesting too deep for the parser, integers
    too long to convert, duplicate keys, NaN) raises ``PlanFileError`` naming ``where``."""
    try:
        return json.loads(
            text, object_pairs_hook=_no_duplicates, parse_constant=_no_nan, parse_int=_integer
        )
    except json.JSONDecodeError as error:
        raise PlanFileError(
            f"{where}: not JSON ({error.msg} at line {error.lineno}, column {error.colno})"
        ) from None
    except RecursionError:
        raise PlanFileError(f"{where}: not a plan file (JSON nested too deeply)") from None
    except ValueError as error:  # _Refused
        raise PlanFileError(f"{where}: not a plan file ({error})") from None


MAX_DEPTH = 8  # {"plans": [{"ops": [{...}]}]} is 4 deep


def _depth(data: Any) -> int:
    """How deep lists and objects nest in ``data`` (iteratively: no recursion limit)."""
    deepest, todo = 0, [(data, 1)]
    while todo:
        value, depth = todo.pop()
        if isinstance(value, dict | list):
            deepest = max(deepest, depth)
            if depth <= MAX_DEPTH:  # deeper is refused anyway: stop walking
                items = value.values() if isinstance(value, dict) else value
                todo.extend((item, depth + 1) for item in items)
    return deepest


def read_plan_file(path: str | Path) -> list[dict[str, Any]]:
    """The checked fields of every plan in the file (PlanFileError for anything that is not a
    valid plan file)."""
    path = Path(path)
    data = parse_json(_read_text(path), f"plan file {path}")
    if _depth(data) > MAX_DEPTH:  # checked without recursion: later reprs of the values recurse
        raise PlanFileError(
            f"plan file {path}: not a plan file (JSON nested more than {MAX_DEPTH} deep)"
        )
    if not isinstance(data, dict):
        raise PlanFileError(f"plan file {path}: must hold a JSON object, found "
                            f"{type(data).__name__}")  # fmt: skip
    kind = data.get("format")
    if kind == SINGLE_PLAN_FORMAT:
        return [checked_plan_fields(data, f"plan file {path}")]
    if kind != FORMAT:
        raise PlanFileError(
            f"plan file {path}: field 'format' is {kind!r}; a mixpert plan file has {FORMAT!r}"
        )
    _checked(data, {"plans": _rule(lambda v: isinstance(v, list), "a list of plans")},
             ("plans",), f"plan file {path}")  # fmt: skip
    return [
        checked_plan_fields(item, f"plan file {path}, plans[{i}]")
        for i, item in enumerate(data["plans"])
    ]


# --- writing -----------------------------------------------------------------------------------
def check_folder(path: str | Path) -> Path:
    """``path`` itself, after checking that its folder exists (before any tuning starts)."""
    path = Path(path)
    folder = path.parent
    if not folder.is_dir():
        raise PlanFileError(f"plan file {path}: its folder {folder} does not exist")
    if path.exists() and not path.is_file():
        raise PlanFileError(f"plan file {path}: exists and is not a regular file")
    return path


def _new_temporary(path: Path) -> tuple[int, Path]:
    """A new file beside ``path``, open for writing, 0666 less the umask as any new file
    (``tempfile.mkstemp`` makes 0600 files: a plan tuned offline could not be shared)."""
    while True:
        temporary = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        try:
            return os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), temporary
        except FileExistsError:
            continue


def write_plan_file(path: str | Path, plans: list[dict[str, Any]]) -> Path:
    """Write the plans' JSON objects to ``path`` atomically (a temporary file, then a rename),
    readable as the umask allows (``_new_temporary``)."""
    path = check_folder(path)
    text = json.dumps({"format": FORMAT, "plans": plans}, indent=2) + "\n"
    handle, temporary = _new_temporary(path)
    try:
        with os.fdopen(handle, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path
