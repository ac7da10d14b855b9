"""Do tuned plans hold on inputs the tuner never saw? Tune once, check 20 fresh inputs.

For each function (subspace iteration, an RBF kernel predictor, attention-free MLP) and each
tuning margin (the greedy walk accepts a plan when its error is within margin x tol on the
tuning input), tune on seed 0 and measure the output error on fresh seeds 1..20: the fraction
within tol, the worst error / tol, and the profiling runs. Writes JSON and Markdown.

    python benchmarks/tuner_holdout.py [--out DIR]     (CPU, about a minute)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

import mixpert
from mixpert.metrics import output_error, reference_outputs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "plans"))
from tuner_functions import (  # noqa: E402
    mlp,
    mlp_inputs,
    rbf_inputs,
    rbf_predict,
    subspace_inputs,
    subspace_iteration,
)

FUNCTIONS = {
    "subspace iteration": (subspace_iteration, subspace_inputs, 1e-4),
    "rbf predictor": (rbf_predict, rbf_inputs, 1e-4),
    "mlp": (mlp, mlp_inputs, 1e-5),
}
MARGINS = (None, 1.0, 0.5, 0.25, 0.1)  # None: the tuner's own rule (docs/tuning.md)
FRESH = 20


def measure() -> list[dict]:
    rows = []
    for name, (func, make, tol) in FUNCTIONS.items():
        jitted = mixpert.jit(func)
        for margin in MARGINS:
            plan = mixpert.tune(
                jitted, make(np.random.default_rng(0)), tol=tol, margin=margin, target="cuda"
            )
            run = jitted.with_plan(plan)
            errors = []
            for seed in range(1, FRESH + 1):
                args = make(np.random.default_rng(seed))
                errors.append(output_error(run(*args), reference_outputs(func, args)))
            errors_tol = np.array(errors) / tol
            rows.append({
                "function": name, "tol": tol, "margin": margin, "share": plan.margin,
                "levels": plan.levels,
                "tuning_error": plan.error, "profiling_runs": plan.profiling_runs,
                "within_tol": float((errors_tol <= 1).mean()),
                "worst_over_tol": float(errors_tol.max()),
            })  # fmt: skip
            print(json.dumps(rows[-1]))
    return rows


def markdown(rows: list[dict]) -> str:
    lines = [
        "# Tuned plans on fresh inputs (CPU oracle)", "",
        f"Tuned on seed 0, checked on seeds 1..{FRESH}.", "",
        "margin: a fixed share of tol, or \"rule\": the tuner's own (the share it reached in",
        "brackets). The GPU's plans (target cuda), errors on the exact CPU backend.", "",
        "| function | tol | margin | levels | runs | fresh within tol | worst / tol |",
        "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for r in rows:
        levels = ", ".join(f"{v}" for _, v in sorted(r["levels"].items()))
        lines.append(
            f"| {r['function']} | {r['tol']:g} | {_margin(r)} | {levels} | "
            f"{r['profiling_runs']} | {r['within_tol']:.0%} | {r['worst_over_tol']:.2f} |"
        )
    return "\n".join(lines) + "\n"


def _margin(row: dict) -> str:
    if row["margin"] is None:
        return f"rule ({row['share']:.2f})"
    return f"{row['margin']:g}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("tuner-holdout"))
    args = parser.parse_args()
    rows = measure()
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "tuner-holdout.json").write_text(json.dumps(rows, indent=1))
    (args.out / "tuner-holdout.md").write_text(markdown(rows))
    print(markdown(rows))


if __name__ == "__main__":
    main()
