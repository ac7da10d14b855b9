"""The knn sample: its neighbours are a brute-force float64 search's, distances come sorted,
blocks change nothing, and its checks can fail."""

from __future__ import annotations

import numpy as np

from mixpert.metrics import reference_outputs

N = 512  # the ci size: 512 queries and references in 32 dimensions
SIZE, SEED = N, 11  # args (conftest.py)


def brute_force(queries: np.ndarray, refs: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Every difference squared and summed in float64, then a full sort: (distances, indices)."""
    diff = queries.astype(np.float64)[:, None, :] - refs.astype(np.float64)[None, :, :]
    d = (diff * diff).sum(axis=2)
    order = np.argsort(d, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(d, order, axis=1), order


def test_one_op_the_distance_gemm(sample) -> None:
    (op,) = sample.func.ops.values()
    assert "q @ refs.T" in op.source


def test_inputs_have_the_documented_shapes(args) -> None:
    queries, refs, ids, k, block = args
    assert queries.shape == refs.shape == (N, N // 16)
    assert queries.dtype == refs.dtype == np.float32
    assert k == 8 and block == N // 4


def test_float64_run_is_a_brute_force_search(sample, args) -> None:
    """The float64 run finds the very neighbours of a brute-force float64 search."""
    queries, refs, ids, k, _ = args
    want_d, want_i = brute_force(queries, refs, k)
    dist, idx = reference_outputs(sample.func.py_func, args)
    np.testing.assert_array_equal(idx, want_i)
    np.testing.assert_allclose(dist, want_d, rtol=1e-10, atol=1e-10 * want_d.max())


def test_emulated_neighbours_are_as_near_as_the_true_ones(sample, args, at_level) -> None:
    """At level I (the tuner's pick at this size) the neighbours are a brute-force search's but
    for swaps of near-tied ones: the exact distances of the ones found are the k smallest, up to
    the GEMM's error, and so are the distances reported."""
    queries, refs, ids, k, _ = args
    want_d, want_i = brute_force(queries, refs, k)
    dist, idx = at_level("I")(*args)
    assert idx.dtype.kind == "i" and dist.dtype == np.float32
    hits = (idx[:, :, None] == want_i[:, None, :]).any(axis=2)
    assert hits.mean() >= 0.99
    diff = queries.astype(np.float64)[:, None, :] - refs.astype(np.float64)[idx]
    exact = np.sort((diff * diff).sum(axis=2), axis=1)
    bound = 10 * sample.tol * want_d[:, -1:]
    assert (np.abs(exact - want_d) <= bound).all()
    assert (np.abs(dist - want_d) <= bound).all()


def test_distances_sorted_ascending(args, at_level) -> None:
    dist, _ = at_level("I")(*args)
    assert dist.dtype == np.float32
    assert (np.diff(dist, axis=1) > 0).all()


def test_blocks_change_nothing(sample, args) -> None:
    """One block, the sample's four, or uneven blocks of 100 (the last one short): same result."""
    queries, refs, ids, k, _ = args
    runs = [
        reference_outputs(sample.func.py_func, (queries, refs, ids, k, b)) for b in (N, N // 4, 100)
    ]
    for dist, idx in runs[1:]:
        np.testing.assert_array_equal(idx, runs[0][1])
        np.testing.assert_allclose(dist, runs[0][0], rtol=1e-12)


def test_a_reference_finds_itself_first(args, at_level) -> None:
    """Queries that are references: each one's nearest neighbour is itself, at distance ~0
    (the expansion ||q||^2 - 2 q.r + ||r||^2 cancels to the GEMM's error, not to exactly 0)."""
    _, refs, ids, k, block = args
    dist, idx = at_level("I")(refs[:64].copy(), refs, ids, k, block)
    np.testing.assert_array_equal(idx[:, 0], np.arange(64))
    scale = (refs[:64].astype(np.float64) ** 2).sum(axis=1)
    assert (np.abs(dist[:, 0]) <= 1e-3 * scale).all()
    assert (dist[:, 1] > 0.1 * scale).all()  # the next one is a genuinely other point


def test_checks_pass_on_the_reference_and_fail_on_wrong_results(sample, args) -> None:
    dist64, idx64 = ref = reference_outputs(sample.func.py_func, args)
    dist = dist64.astype(np.float32)
    assert all(ch.ok for ch in sample.checks(args, (dist, idx64), ref))

    def failed(outputs) -> set[str]:
        return {ch.name.split()[0] for ch in sample.checks(args, outputs, ref) if not ch.ok}

    assert failed((dist, np.roll(idx64, 1, axis=0))) == {"1"}  # other queries' neighbours
    assert "descending" in failed((dist[:, ::-1].copy(), idx64[:, ::-1].copy()))
    assert "worst" in failed((dist * np.float32(1.01), idx64))


def test_tied_distances_are_both_found(args, at_level) -> None:
    """Two identical references tie exactly: masking by index finds both, one after the other."""
    queries, refs, ids, k, block = args
    refs = refs.copy()
    refs[7] = refs[3]
    dist, idx = at_level("fp32")(refs[3:4].copy(), refs, ids, k, block)
    assert sorted(idx[0, :2]) == [3, 7] and dist[0, 0] == dist[0, 1]
