"""mlp: inference of a 3-layer perceptron, y = relu(relu(x W1 + b1) W2 + b2) W3 + b3.

A batch of feature rows goes through three dense layers of the same width (He-initialised
weights, N(0, 2 / fan_in), so activations keep their scale layer after layer); three ops, one per
layer, and the tuner may give each its own level.

tol = 1e-4: the outputs are logits, read as scores and top-1 labels. Inference in bf16/tf32
(errors of 1e-3 to 1e-2) is routine, so float32-grade accuracy is not needed; 1e-4 keeps scores
to about four digits and top-1 labels identical to float64 on all but near-tied rows (checked).

size = width w: x is (4 w) x w, every W is w x w, every b has w entries. At the gpu size
(w = 8192) the three GEMMs are 32768 x 8192 x 8192 each.
"""

from __future__ import annotations

import numpy as np

import mixpert
from mixpert.samples import Check, Sample, row_relative_errors, to_host

BATCH_PER_WIDTH = 4  # batch rows = 4 x width


@mixpert.jit(tol=1e-4)
def mlp(x, w1, b1, w2, b2, w3, b3):
    zero = x.dtype.type(0)  # a typed zero: a Python 0.0 would make Numba compute in float64
    h = np.maximum(x @ w1 + b1, zero)
    h = np.maximum(h @ w2 + b2, zero)
    return h @ w3 + b3


def make_inputs(xp, rng, width):
    """Standard-normal features; He-initialised weights; small biases."""
    x = rng.standard_normal((BATCH_PER_WIDTH * width, width), dtype=xp.float32)
    layers = []
    for _ in range(3):
        w = rng.standard_normal((width, width), dtype=xp.float32)
        w *= xp.float32(np.sqrt(2.0 / width))
        b = xp.float32(0.1) * rng.standard_normal((width,), dtype=xp.float32)
        layers += [w, b]
    return (x, *layers)


def checks(args, outputs, reference):
    """Finite outputs, top-1 labels as float64's, no row far worse than the average."""
    y, ref = to_host(outputs), to_host(reference)
    tol = mlp.tol
    flipped = float((y.argmax(axis=1) != ref.argmax(axis=1)).mean())
    return [
        Check("non-finite outputs (fraction)", float((~np.isfinite(y)).mean()), 0.0),
        Check("rows whose top-1 label differs from float64 (fraction)", flipped, 0.01),
        Check(
            "worst row's relative error / tol", float(row_relative_errors(y, ref).max()) / tol, 10.0
        ),
    ]


SAMPLE = Sample(
    func=mlp,
    make_inputs=make_inputs,
    sizes={"ci": 48, "demo": 640, "gpu": 8192},
    size_doc="width w: x is 4w x w float32, three w x w layers (gpu: 32768 x 8192, 1 GiB)",
    checks=checks,
)
