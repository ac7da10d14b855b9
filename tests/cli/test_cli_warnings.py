"""The CLI shows each Python warning as one line, ``warning: Category: message`` on stderr, with
no file:line of click's frames or the installed package, once, and in order with the output:
before what follows it, never after the error a command ends with."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

from click.testing import CliRunner

from mixpert.cli import main

WARNING_FILE = """\
import warnings

import numpy as np

print("loading the weights")  # output before the warnings: they must not overtake it
warnings.warn("the weights are\\n    stale", UserWarning)
warnings.warn("the weights are stale", UserWarning)  # the same again: shown once
warnings.warn("mixpert: old data", DeprecationWarning)


def mlp(x, w):
    return x @ w
"""


def warned_file(tmp_path: Path) -> Path:
    source = tmp_path / "warned.py"
    source.write_text(WARNING_FILE)
    return source


def test_each_warning_is_one_clean_line_before_the_output(tmp_path: Path) -> None:
    source = warned_file(tmp_path)
    before = warnings.showwarning
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        result = CliRunner().invoke(main, ["inspect", f"{source}:mlp"])
    assert result.exit_code == 0, result.output
    assert result.stderr.splitlines() == [
        "warning: UserWarning: the weights are stale",
        "warning: DeprecationWarning: old data",
    ]
    lines = result.output.splitlines()
    assert lines[0] == "loading the weights" and lines[1:3] == result.stderr.splitlines()
    assert lines[3].startswith("mlp")
    assert "core.py" not in result.output and "warned.py:" not in result.output
    assert warnings.showwarning is before  # the CLI's display ends with the command


def test_warnings_come_before_an_error_and_the_error_ends_the_output(tmp_path: Path) -> None:
    source = warned_file(tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        result = CliRunner().invoke(main, ["inspect", f"{source}:no_such_function"])
    assert result.exit_code == 2
    lines = result.output.splitlines()
    assert lines[1] == "warning: UserWarning: the weights are stale"
    assert lines[-1].startswith("Error: ") and "no_such_function" in lines[-1]
    assert not any(line.startswith("warning:") for line in lines[3:])


def test_through_pipes_the_warning_keeps_its_place(tmp_path: Path) -> None:
    """A real process whose stdout is a block-buffered pipe and whose stderr is the same pipe:
    the warnings come after the line printed before them and before the report, not wherever
    the buffers happen to flush."""
    source = warned_file(tmp_path)
    env = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    run = subprocess.run(
        [sys.executable, "-W", "always", "-m", "mixpert.cli", "inspect", f"{source}:mlp"],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
        check=False,
        env=env,
    )
    assert run.returncode == 0, run.stdout
    lines = run.stdout.splitlines()
    assert lines[:3] == [
        "loading the weights",
        "warning: UserWarning: the weights are stale",
        "warning: DeprecationWarning: old data",
    ]
    assert lines[3].startswith("mlp") and not any("Warning" in line for line in lines[3:])
