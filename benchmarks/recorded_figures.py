"""Write mixpert/recorded_gpu.json: the GPU figures ``mixpert demo`` shows where there is no GPU.

The package does not ship ``benchmarks/``, so the figures the CPU demo quotes travel in this
small file, each with its GPU, date and source file (``mixpert.recorded`` reads it):

- ``speed``: ``benchmarks/results/<gpu>/samples.json`` (``samples_e2e.py``) for each GPU in
  ``SPEED_RESULTS``; a file's date is that of the last commit that changed it;
- ``demo_bits``: every ``benchmarks/results/<gpu>/bits/demo-<sample>.json`` holding a GPU's
  digests (``demo_bits.py`` run on that GPU; its date is the run's).

    python benchmarks/recorded_figures.py           # rewrite the file
    python benchmarks/recorded_figures.py --check   # exit 1 when it differs from the results
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
SHIPPED = ROOT / "mixpert" / "recorded_gpu.json"
SPEED_RESULTS = ("NVIDIA-H200", "NVIDIA-H100-80GB-HBM3")  # the newest run first


def committed_date(path: Path) -> str:
    """The date of the last commit that changed ``path`` (today's while it is uncommitted, or
    where git cannot say)."""
    try:
        done = subprocess.run(
            ["git", "log", "-1", "--format=%cs", "--", str(path.relative_to(ROOT))],
            cwd=ROOT, capture_output=True, text=True, check=True,
        )  # fmt: skip
    except (OSError, subprocess.CalledProcessError):
        return datetime.date.today().isoformat()
    return done.stdout.strip() or datetime.date.today().isoformat()


def speed(folder: str) -> dict[str, Any]:
    path = RESULTS / folder / "samples.json"
    rows = json.loads(path.read_text())["rows"]
    return {
        "gpu": rows[0]["device"],
        "date": committed_date(path),
        "source": path.relative_to(ROOT).as_posix(),
        "samples": {
            row["sample"]: {
                "size": row["size"],
                "tol": row["tol"],
                "levels": sorted(set(row["levels"].values())),
                "native_seconds": row["native_seconds"],
                "mixpert_seconds": row["mixpert_seconds"],
                "error": row["error"],
                "native_error": row["native_error"],
            }
            for row in rows
        },
    }


def demo_bits() -> list[dict[str, Any]]:
    records = []
    for path in sorted(RESULTS.glob("*/bits/demo-*.json")):
        run = json.loads(path.read_text())
        if "cuda" not in run:  # a run without a GPU: nothing to compare with
            continue
        records.append(
            {
                "gpu": run["device"],
                "date": run["date"],
                "source": path.relative_to(ROOT).as_posix(),
                "sample": run["sample"],
                "size": run["size"],
                "seed": run["seed"],
                "digests": run["cuda"],
            }
        )
    return records


def recorded() -> dict[str, Any]:
    return {
        "about": "GPU figures for `mixpert demo` without a GPU; written by "
        "benchmarks/recorded_figures.py from benchmarks/results",
        "speed": [speed(folder) for folder in SPEED_RESULTS],
        "demo_bits": demo_bits(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    options = parser.parse_args(argv)
    text = json.dumps(recorded(), indent=1) + "\n"
    if options.check:
        if SHIPPED.read_text() != text:
            print(f"{SHIPPED} differs from the results files: rerun {__file__}", file=sys.stderr)
            return 1
        return 0
    SHIPPED.write_text(text)
    print(f"wrote {SHIPPED}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
