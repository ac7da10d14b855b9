"""Output digests of a sample at every level, for ``mixpert demo`` on machines without a GPU.

Runs the sample with every op at each level of the ladder on inputs drawn by NumPy
(``make_inputs(numpy, default_rng(seed), size)``), on the CPU backend and, where a GPU is usable,
on the CUDA backend (the same inputs moved to the GPU), and writes ``mixpert.recorded``'s
``output_digest`` of each. ``benchmarks/recorded_figures.py`` ships the GPU's digests with the
package; the CPU demo recomputes them on the exact backend and shows which levels agree.

    python benchmarks/demo_bits.py [--sample mlp] [--size N] [--seed 1] --out FILE

The defaults are the CPU demo's held-out inputs: the sample's "ci" size, seed 1.
"""

from __future__ import annotations

import argparse
import datetime
import json
from pathlib import Path
from typing import Any

import numpy as np

from mixpert.recorded import output_digest
from mixpert.runtime import LADDER, device
from mixpert.samples import load_sample


def digests(sample: Any, args: tuple[Any, ...]) -> dict[str, str]:
    """Level -> digest of the sample's outputs with every op at that level."""
    return {
        level.name: output_digest(
            sample.func.with_plan(dict.fromkeys(sample.func.ops, level.name))(*args)
        )
        for level in LADDER
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sample", default="mlp")
    parser.add_argument("--size", type=int, default=None, help="default: the sample's ci size")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True)
    options = parser.parse_args(argv)
    sample = load_sample(options.sample)
    size = options.size or sample.sizes["ci"]
    args = sample.make_inputs(np, np.random.default_rng(options.seed), size)
    record: dict[str, Any] = {
        "device": device.device_name(),
        "date": datetime.date.today().isoformat(),
        "sample": sample.name,
        "size": size,
        "seed": options.seed,
        "cpu": digests(sample, args),
    }
    cupy = device.cupy_module() if device.gpu_available() else None
    if cupy is not None:
        record["cuda"] = digests(sample, tuple(cupy.asarray(a) for a in args))
        for level, cpu in record["cpu"].items():
            same = "same bits" if record["cuda"][level] == cpu else "differ"
            print(f"{level:>13}: CPU {cpu}  GPU {record['cuda'][level]}  {same}")
    options.out.write_text(json.dumps(record, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
