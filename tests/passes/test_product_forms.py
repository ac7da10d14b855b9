"""Every spelling of a matrix product is found, rewritten and run through the runtime."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import mixpert
from mixpert.passes.native_sites import NotEmulatedWarning

RNG = np.random.default_rng(12)
A = RNG.standard_normal((10, 7)).astype(np.float32)
W = RNG.standard_normal((10, 5)).astype(np.float32)


def method_on_a_transpose(a, w):
    return a.T.dot(w)


def method_on_a_name(a, w):
    t = a.T
    return t.dot(w)


def numpy_matmul(a, w):
    return np.matmul(a.T, w)


def operator_on_a_transpose(a, w):
    return a.T @ w


@pytest.mark.parametrize(
    "func", [method_on_a_transpose, method_on_a_name, numpy_matmul, operator_on_a_transpose]
)
def test_each_spelling_is_one_emulated_op(func) -> None:
    f = mixpert.jit(func)
    assert len(f.ops) == 1
    with mixpert.record() as calls:
        got = f.with_plan(dict.fromkeys(f.ops, "V"))(A, W)
    assert len(calls) == 1 and calls[0].shape == (7, 10, 5) and calls[0].level == "V"
    np.testing.assert_array_equal(got, mixpert.matmul(A.T, W, level="V"))


def test_np_matmul_keeps_numpys_semantics_for_other_dtypes() -> None:
    got = mixpert.jit(numpy_matmul)(A.astype(np.float64), W.astype(np.float64))
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, A.T.astype(np.float64) @ W, rtol=1e-12)


def dot_into(a, w, out):
    np.dot(a.T, w, out)
    return out @ w.T  # reads the product through out: an edge in the graph


def dot_into_keyword(a, w, out):
    np.dot(a.T, w, out=out)
    return out


@pytest.mark.parametrize("func", [dot_into, dot_into_keyword])
def test_np_dot_with_out_writes_the_emulated_product_into_out(func) -> None:
    f = mixpert.jit(func)
    f.plan = dict.fromkeys(f.ops, "V")
    out = np.full((7, 5), np.nan, np.float32)
    with mixpert.record() as calls:
        f(A, W, out)
    np.testing.assert_array_equal(out, mixpert.matmul(A.T, W, level="V"))
    assert calls[0].shape == (7, 10, 5)
    if func is dot_into:
        assert sorted(f.graph.edges) == [("dot_into:0", "dot_into:1")]


B = RNG.standard_normal((7, 5)).astype(np.float32)
C = RNG.standard_normal((5, 7)).astype(np.float32)


def einsum_plain(a, b):
    return np.einsum("ij,jk->ik", a, b)


def einsum_transposed_right(a, c):
    return np.einsum("ik,jk->ij", a, c)


def einsum_output_transposed(a, b):
    return np.einsum("ij,jk->ki", a, b)


@pytest.mark.parametrize(
    ("func", "args", "want"),
    [
        (einsum_plain, (A, B), lambda: mixpert.matmul(A, B, level="V")),
        (einsum_transposed_right, (A, C), lambda: mixpert.matmul(A, C.T, level="V")),
        (einsum_output_transposed, (A, B), lambda: mixpert.matmul(B.T, A.T, level="V")),
    ],
)
def test_two_operand_einsum_products_are_sites(func, args, want) -> None:
    f = mixpert.jit(func)
    assert len(f.ops) == 1
    with mixpert.record() as calls:
        got = f.with_plan(dict.fromkeys(f.ops, "V"))(*args)
    assert len(calls) == 1
    np.testing.assert_array_equal(got, want())


def test_einsum_parser_rejects_what_is_not_one_product() -> None:
    from mixpert.passes.sites import einsum_product

    for text in ("bij,bjk->bik", "ii,ij->ij", "ij,ij->ij", "ij,jk", "ij,jk,kl->il"):
        assert einsum_product(text) is None, text
    assert einsum_product("ji , jk -> ik") == (0, 1, True, False)


def test_native_sites_are_listed_with_their_reason() -> None:
    def mixed(a, b, v):
        return a @ b, a.astype(np.float64) @ b.astype(np.float64), a @ v

    a = np.ones((4, 4), np.float32)
    report = mixpert.inspect(mixpert.jit(mixed), a, a, np.ones(4, np.float32))
    reasons = {row.op_id.rsplit(":", 1)[1]: row.native for row in report.ops}
    assert reasons["0"] == ""
    assert "float64 x float64" in reasons["1"] and "matrix-vector" in reasons["2"]


def test_a_float32_function_whose_products_all_run_natively_warns_naming_them() -> None:

    def matvec(a, v):
        return a @ v

    with pytest.warns(NotEmulatedWarning, match=r"matvec:0: matrix-vector"):
        mixpert.jit(matvec)(np.ones((4, 4), np.float32), np.ones(4, np.float32))


STACK = RNG.standard_normal((4, 5, 6)).astype(np.float32)
WEIGHTS = RNG.standard_normal((6, 3)).astype(np.float32)
STACK_B = RNG.standard_normal((4, 6, 3)).astype(np.float32)
MATRIX = RNG.standard_normal((5, 6)).astype(np.float32)
DEEP = RNG.standard_normal((2, 3, 5, 6)).astype(np.float32)  # (batch, heads, m, k)
DEEP_B = RNG.standard_normal((2, 3, 6, 4)).astype(np.float32)
HEADS_B = RNG.standard_normal((3, 6, 4)).astype(np.float32)  # broadcasts over DEEP's batch
ONE_B = RNG.standard_normal((2, 1, 6, 4)).astype(np.float32)  # broadcasts over the heads


def stacked_operator(a, b):
    return a @ b


def stacked_numpy(a, b):
    return np.matmul(a, b)


# np.matmul: the slow run (the same runtime calls as @; the site itself:
# test_each_spelling_is_one_emulated_op)
@pytest.mark.parametrize(
    "func", [stacked_operator, pytest.param(stacked_numpy, marks=pytest.mark.slow)]
)
@pytest.mark.parametrize(
    ("a", "b", "calls"),
    [
        (STACK, WEIGHTS, 1),
        (STACK, STACK_B, 1),
        (MATRIX, STACK_B, 1),
        (DEEP, WEIGHTS, 1),
        pytest.param(MATRIX, DEEP_B, 1, marks=pytest.mark.slow),  # as MATRIX, STACK_B
        (DEEP, DEEP_B, 1),
        (DEEP, HEADS_B, 1),
        pytest.param(DEEP, ONE_B, 1, marks=pytest.mark.slow),  # broadcast as DEEP, HEADS_B
        (RNG.standard_normal((3, 4, 5)).astype(np.float32), DEEP, 1),  # 3-D @ 4-D
    ],
)
def test_stacks_compile_and_match_mixpert_matmul(func, a, b, calls) -> None:
    """One runtime call per site: a shared matrix folds the stack, two stacks go as one call
    (``mixpert_gemm_stack``); the bits are ``mixpert.matmul``'s."""
    f = mixpert.jit(func)
    f.plan = dict.fromkeys(f.ops, "IV")
    with mixpert.record() as records:
        got = f(a, b)
    assert len(records) == calls and got.shape == np.matmul(a, b).shape
    np.testing.assert_array_equal(got, mixpert.matmul(a, b, level="IV"))


def test_stacks_that_do_not_broadcast_raise_numpys_error() -> None:
    f = mixpert.jit(stacked_operator)
    f.plan = dict.fromkeys(f.ops, "IV")
    with pytest.raises(ValueError):
        f(DEEP, RNG.standard_normal((4, 6, 2)).astype(np.float32))
    with pytest.raises(ValueError):
        f(DEEP, RNG.standard_normal((2, 3, 5, 4)).astype(np.float32))  # inner dimensions


def in_place(a, b):
    a @= b
    return a.sum()


def test_in_place_matmul_writes_the_emulated_product_into_a() -> None:
    f = mixpert.jit(in_place)
    f.plan = dict.fromkeys(f.ops, "V")
    b = RNG.standard_normal((6, 6)).astype(np.float32)
    a = MATRIX.copy()
    f(a, b)
    np.testing.assert_array_equal(a, mixpert.matmul(MATRIX, b, level="V"))
    a64 = MATRIX.astype(np.float64)
    mixpert.jit(in_place)(a64, b.astype(np.float64))  # NumPy's meaning for other dtypes too
    np.testing.assert_allclose(a64, MATRIX.astype(np.float64) @ b, rtol=1e-12)


@pytest.mark.filterwarnings("ignore::mixpert.NotEmulatedWarning")
@pytest.mark.parametrize(
    ("a", "b"),
    [
        (DEEP, RNG.standard_normal((3, 6, 6)).astype(np.float32)),  # stacks, broadcast
        (STACK, RNG.standard_normal((6, 6)).astype(np.float32)),  # a stack times a matrix
        (MATRIX.astype(np.float64), RNG.standard_normal((6, 6)).astype(np.float32)),  # promoted
        (np.arange(12, dtype=np.int64).reshape(2, 6), np.arange(36, dtype=np.int64).reshape(6, 6)),
        pytest.param(  # float64 stacks (as test_float64_stacks_run_natively_with_numpys_result)
            DEEP.astype(np.float64), RNG.standard_normal((2, 3, 6, 6)), marks=pytest.mark.slow
        ),
    ],
)
def test_in_place_matmul_of_stacks_and_other_dtypes(a, b) -> None:
    """a @= b means NumPy's a = a @ b written into a, for every operand form @ takes."""
    want = a.copy()
    want @= b
    f = mixpert.jit(in_place)
    f.plan = dict.fromkeys(f.ops, "IV")
    got = a.copy()
    f(got, b)
    if a.dtype == np.float32:
        np.testing.assert_array_equal(got, mixpert.matmul(a, b, level="IV"))
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=2e-5)


def three_spellings(a, b):
    return a @ b, np.dot(a, b), a.dot(b)


@pytest.mark.filterwarnings("ignore::mixpert.passes.native_sites.NotEmulatedWarning")
@pytest.mark.parametrize("dtype_a", [np.float64, np.int64])
def test_mixed_dtypes_promote_as_numpy_does(dtype_a) -> None:
    a = (RNG.standard_normal((3, 4)) * 4).astype(dtype_a)
    b = RNG.standard_normal((4, 2)).astype(np.float32)
    for got in mixpert.jit(three_spellings)(a, b):
        want = np.matmul(a, b)
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-12)


def matmul_of(a, b):
    return a @ b


def dot_of(a, b):
    return np.dot(a, b)


# np.dot: the slow run (integers beside float32: test_mixed_dtypes_promote_as_numpy_does)
@pytest.mark.parametrize("func", [matmul_of, pytest.param(dot_of, marks=pytest.mark.slow)])
@pytest.mark.parametrize(
    ("a", "b"),
    [
        (np.arange(12, dtype=np.int64).reshape(3, 4), np.arange(8, dtype=np.int32).reshape(4, 2)),
        (np.arange(12, dtype=np.int16).reshape(3, 4), np.arange(4, dtype=np.int16)),
        (np.arange(4, dtype=np.int64), np.arange(8, dtype=np.int64).reshape(4, 2)),
        (np.arange(4, dtype=np.int32), np.arange(4, dtype=np.int32)),
        (np.full((2, 3), 2**62, dtype=np.int64), np.full((3, 2), 2, dtype=np.int64)),  # wraps
        (np.ones((3, 3), np.complex64), RNG.standard_normal((3, 2)).astype(np.float32)),
        (RNG.random((4, 3)) > 0.5, RNG.random((3, 5)) > 0.5),  # booleans: OR of ANDs
        (RNG.random((4, 3)) > 0.5, np.arange(15, dtype=np.int8).reshape(3, 5)),
    ],
)
def test_integer_and_complex_products_follow_numpy(func, a, b) -> None:
    """Numba's products take floats of one dtype only; NumPy multiplies integers (wrapping on
    overflow) and promotes mixed dtypes."""
    want = func(a, b)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NotEmulatedWarning)
        got = mixpert.jit(func)(a, b)
    assert np.shape(got) == want.shape
    if want.ndim:  # a scalar result comes back as a Python number (Numba's boxing)
        assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def scaled_by_product(a, b):
    h = a @ b
    return h @ 2.0


def test_a_product_site_that_cannot_compile_says_which_and_why() -> None:
    f = mixpert.jit(scaled_by_product)
    with pytest.raises(TypeError) as caught:
        f(MATRIX, RNG.standard_normal((6, 6)).astype(np.float32))
    message = str(caught.value)
    assert "scaled_by_product:1" in message and "float64" in message and "use *" in message
    assert "mixpert_matmul" not in message and "line" in message


def test_np_dot_of_stacks_has_numpys_meaning() -> None:
    """np.dot of N-D arrays sums a's last axis against b's second-to-last (not np.matmul's
    pairs); Numba has no such product, mixpert computes NumPy's."""
    a, b = DEEP.astype(np.float64), DEEP_B.astype(np.float64)
    got = mixpert.jit(dot_of)(a, b)
    assert got.shape == (2, 3, 5, 2, 3, 4)
    np.testing.assert_allclose(got, np.dot(a, b), rtol=1e-12, atol=1e-12)


def test_float64_stacks_run_natively_with_numpys_result() -> None:
    got = mixpert.jit(matmul_of)(DEEP.astype(np.float64), HEADS_B.astype(np.float64))
    np.testing.assert_allclose(got, DEEP.astype(np.float64) @ HEADS_B, rtol=1e-12)


def relu_mlp(x, w1, w2):
    h = np.maximum(x @ w1, 0.0)
    return h @ w2


def chain(x, w, v):
    return (x @ w) @ v


def test_a_float64_site_names_what_made_its_operand_float64() -> None:
    x = RNG.standard_normal((6, 6)).astype(np.float32)
    f = mixpert.jit(relu_mlp, scalar_rules="numba")  # Numba's rules: the 0.0 makes h float64
    reasons = {row.op_id: row.native for row in mixpert.inspect(f, x, x, x).ops}
    assert reasons["relu_mlp:0"] == ""
    why = reasons["relu_mlp:1"]
    assert "the Python float 0.0 at line" in why and "`h` float64" in why
    g = mixpert.jit(chain)
    reasons = {row.op_id: row.native for row in mixpert.inspect(g, x, x, x.astype(np.float64)).ops}
    assert "argument `v`" in reasons["chain:1"]


def test_stack_pairs_at_native_float32_run_numbas_own_products() -> None:
    f = mixpert.jit(stacked_operator)
    f.plan = dict.fromkeys(f.ops, "fp32")
    np.testing.assert_allclose(f(DEEP, DEEP_B), np.matmul(DEEP, DEEP_B), rtol=1e-6, atol=1e-6)
    f.plan = dict.fromkeys(f.ops, "V")
    np.testing.assert_array_equal(f(DEEP, DEEP_B), mixpert.matmul(DEEP, DEEP_B, level="V"))
