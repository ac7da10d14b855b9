"""The kmeans sample: Lloyd's iterations recover blobs, never raise the inertia, keep empty
clusters, and its checks can fail."""

from __future__ import annotations

import numpy as np

from mixpert.metrics import reference_outputs

CHEAPEST = "tf32"  # the cheapest level, for both GEMMs


def blob_means(x: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
    """The mean of every blob, in float64, one blob at a time."""
    x = x.astype(np.float64)
    return np.stack([x[labels == j].mean(axis=0) for j in range(k)])


def test_two_ops_distance_and_update(sample) -> None:
    sources = sorted(op.source for op in sample.func.ops.values())
    assert len(sources) == 2
    assert any("x @ c.T" in s for s in sources) and any("onehot.T @ x" in s for s in sources)


def test_inputs_have_the_documented_shapes(sample) -> None:
    x, c0, iterations = sample.make_inputs(np, np.random.default_rng(0), 16)
    assert x.shape == (128 * 16, 16) and c0.shape == (16, 16) and iterations == 10
    assert x.dtype == c0.dtype == np.float32


def test_well_separated_blobs_are_recovered_exactly(sample, module, at_level) -> None:
    """Tight blobs started from one point each: every point lands in its own blob, at the
    cheapest levels too, and the centroids are the blob means."""
    k = 12
    x, truth, _ = module.blobs(np, np.random.default_rng(1), k, 24, 64, 0.1)
    c0 = x[:k].copy()
    c64, labels64 = reference_outputs(sample.func.py_func, (x, c0, 5))
    c, labels = at_level(CHEAPEST)(x, c0, 5)
    np.testing.assert_array_equal(labels64, truth)
    np.testing.assert_array_equal(labels, truth)
    means = blob_means(x, truth, k)
    np.testing.assert_allclose(c64, means, rtol=1e-12, atol=1e-12)
    assert np.linalg.norm(c - means) / np.linalg.norm(means) < 1e-4
    assert c.dtype == np.float32 and labels.dtype.kind == "i"


def test_sample_inputs_match_float64_labels_at_the_cheapest_levels(sample, at_level) -> None:
    """The distance GEMM at tf32 (error ~3e-4) leaves every label as float64's: the gap between
    the nearest and the next centroid is far wider than the GEMM's error."""
    args = sample.make_inputs(np, np.random.default_rng(2), 24)
    _, labels64 = reference_outputs(sample.func.py_func, args)
    _, labels = at_level(CHEAPEST)(*args)
    np.testing.assert_array_equal(labels, labels64)


def test_lloyd_never_raises_the_inertia(sample, module, at_level) -> None:
    """Overlapping blobs from random starting points: the inertia falls iteration by iteration
    (float64 and the emulated float32 run alike)."""
    rng = np.random.default_rng(5)
    k = 10
    x, _, _ = module.blobs(np, rng, k, 8, 40, 1.0)
    c0 = x[rng.choice(x.shape[0], k, replace=False)].copy()
    for func in (sample.func.py_func, at_level(CHEAPEST)):
        data = (
            (x.astype(np.float64), c0.astype(np.float64))
            if func is sample.func.py_func
            else (x, c0)
        )
        inertias = [module.inertia(x, *func(*data, t)) for t in range(1, 8)]
        steps = np.diff(inertias) / inertias[0]
        assert (steps <= 1e-6).all(), inertias
        assert inertias[-1] < 0.99 * inertias[0], inertias  # it did move


def test_empty_cluster_keeps_its_centroid(module, at_level) -> None:
    k = 6
    x, truth, _ = module.blobs(np, np.random.default_rng(6), k, 8, 32, 0.2)
    far = np.full((1, 8), 50.0, dtype=np.float32)  # no point is near it
    c0 = np.concatenate([x[:k], far])
    c, labels = at_level(CHEAPEST)(x, c0, 3)
    np.testing.assert_array_equal(c[k], far[0])
    np.testing.assert_array_equal(labels, truth)
    assert np.isfinite(c).all()


def test_checks_pass_on_the_reference_and_fail_on_wrong_results(sample, module) -> None:
    args = sample.make_inputs(np, np.random.default_rng(7), 16)
    c64, labels64 = ref = reference_outputs(sample.func.py_func, args)
    c32 = c64.astype(np.float32)
    assert all(ch.ok for ch in sample.checks(args, (c32, labels64), ref))

    def failed(outputs) -> set[str]:
        return {ch.name.split()[0] for ch in sample.checks(args, outputs, ref) if not ch.ok}

    assert "labels" in failed((c32, np.roll(labels64, 1)))  # labels shuffled
    assert "inertia" in failed((c32 + np.float32(0.05), labels64))  # centroids moved
    broken = c32.copy()
    broken[0, 0] = np.nan
    assert "non-finite" in failed((broken, labels64))
