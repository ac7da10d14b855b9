"""NumPy's own matmul tests with ``np.matmul`` swapped for ``mixpert.matmul`` (issue 38, part 1).

Ported from numpy/_core/tests/test_multiarray.py (``MatmulCommon``, ``TestMatmul``,
``TestMatmulOperator``, ``TestMatmulInplace``, ``test_matmul_axes``, the matmul-shaped parts of
``TestDot``) and numpy/linalg/tests/test_linalg.py (``TestMatrixPower``, ``test_matmul``). The
common tests run at several levels. Listed exceptions (mixpert.matmul's docstring): float32
products are emulated, so float32 results are compared within the level's bound where the data
are not small integers (which every level multiplies exactly); ``a @= b`` is an operator of
ndarray, ported as ``out=a``; ``TestMatmulOperator``'s ``__matmul__`` overrides belong to the
``@`` operator, so mixpert.matmul is held to what ``np.matmul`` does with them.
"""

from __future__ import annotations

import fractions
import functools
import itertools
import warnings

import numpy as np
import pytest
from numpy.exceptions import ComplexWarning
from numpy.testing import (
    assert_,
    assert_allclose,
    assert_almost_equal,
    assert_array_equal,
    assert_equal,
    assert_raises,
    assert_raises_regex,
)

import mixpert

U = 2.0**-24  # float32's unit roundoff


def within_sgemm_bound(got: np.ndarray, a: np.ndarray, b: np.ndarray, factor: float = 1) -> None:
    """``got`` (float32) within factor * 2 k u |A||B| of the float64 product of the float32
    operands: SGEMM's componentwise bound, which IV, V and fp64 keep."""
    a64, b64 = (np.asarray(x, np.float64) for x in (a, b))
    k = a64.shape[-1]
    bound = factor * 2 * k * U * np.matmul(np.abs(a64), np.abs(b64))
    error = np.abs(np.asarray(got, np.float64) - np.matmul(a64, b64))
    assert np.all(error <= bound), float(np.max(error - bound))


class MatmulCommon:
    """Common tests for mixpert.matmul (NumPy's for '@' and numpy.matmul)."""

    level: str | None = None
    types = "?bhilqBHILQefdgFDGO"

    def matmul(self, *args, **kwargs):
        return mixpert.matmul(*args, level=self.level, **kwargs)

    def test_exceptions(self):
        dims = [
            ((1,), (2,)),  # mismatched vector vector
            ((2, 1), (2,)),  # mismatched matrix vector
            ((2,), (1, 2)),  # mismatched vector matrix
            ((1, 2), (3, 1)),  # mismatched matrix matrix
            ((1,), ()),  # vector scalar
            ((), (1)),  # scalar vector
            ((1, 1), ()),  # matrix scalar
            ((), (1, 1)),  # scalar matrix
            ((2, 2, 1), (3, 1, 2)),  # cannot broadcast
        ]
        for dt, (dm1, dm2) in itertools.product(self.types, dims):
            a = np.ones(dm1, dtype=dt)
            b = np.ones(dm2, dtype=dt)
            assert_raises(ValueError, self.matmul, a, b)

    def test_shapes(self):
        dims = [
            ((1, 1), (2, 1, 1)),  # broadcast first argument
            ((2, 1, 1), (1, 1)),  # broadcast second argument
            ((2, 1, 1), (2, 1, 1)),  # matrix stack sizes match
        ]
        for dt, (dm1, dm2) in itertools.product(self.types, dims):
            a = np.ones(dm1, dtype=dt)
            b = np.ones(dm2, dtype=dt)
            res = self.matmul(a, b)
            assert_(res.shape == (2, 1, 1))
        # vector vector returns scalars.
        for dt in self.types:
            a = np.ones((2,), dtype=dt)
            b = np.ones((2,), dtype=dt)
            c = self.matmul(a, b)
            assert_(np.array(c).shape == ())

    def test_result_types(self):
        mat = np.ones((1, 1))
        vec = np.ones((1,))
        for dt in self.types:
            m = mat.astype(dt)
            v = vec.astype(dt)
            for arg in [(m, v), (v, m), (m, m)]:
                res = self.matmul(*arg)
                assert_(res.dtype == dt)
            # vector vector returns scalars
            if dt != "O":
                res = self.matmul(v, v)
                assert_(type(res) is np.dtype(dt).type)

    def test_scalar_output(self):
        vec1 = np.array([2])
        vec2 = np.array([3, 4]).reshape(1, -1)
        tgt = np.array([6, 8])
        for dt in self.types[1:]:
            v1 = vec1.astype(dt)
            v2 = vec2.astype(dt)
            res = self.matmul(v1, v2)
            assert_equal(res, tgt)
            res = self.matmul(v2.T, v1)
            assert_equal(res, tgt)
        # boolean type
        vec = np.array([True, True], dtype="?").reshape(1, -1)
        res = self.matmul(vec[:, 0], vec)
        assert_equal(res, True)

    def test_vector_vector_values(self):
        vec1 = np.array([1, 2])
        vec2 = np.array([3, 4]).reshape(-1, 1)
        tgt1 = np.array([11])
        tgt2 = np.array([[3, 6], [4, 8]])
        for dt in self.types[1:]:
            v1 = vec1.astype(dt)
            v2 = vec2.astype(dt)
            res = self.matmul(v1, v2)
            assert_equal(res, tgt1)
            # no broadcast, we must make v1 into a 2d ndarray
            res = self.matmul(v2, v1.reshape(1, -1))
            assert_equal(res, tgt2)
        # boolean type
        vec = np.array([True, True], dtype="?")
        res = self.matmul(vec, vec)
        assert_equal(res, True)

    def test_vector_matrix_values(self):
        vec = np.array([1, 2])
        mat1 = np.array([[1, 2], [3, 4]])
        mat2 = np.stack([mat1] * 2, axis=0)
        tgt1 = np.array([7, 10])
        tgt2 = np.stack([tgt1] * 2, axis=0)
        for dt in self.types[1:]:
            v = vec.astype(dt)
            m1 = mat1.astype(dt)
            m2 = mat2.astype(dt)
            res = self.matmul(v, m1)
            assert_equal(res, tgt1)
            res = self.matmul(v, m2)
            assert_equal(res, tgt2)
        # boolean type
        vec = np.array([True, False])
        mat1 = np.array([[True, False], [False, True]])
        mat2 = np.stack([mat1] * 2, axis=0)
        tgt1 = np.array([True, False])
        tgt2 = np.stack([tgt1] * 2, axis=0)
        res = self.matmul(vec, mat1)
        assert_equal(res, tgt1)
        res = self.matmul(vec, mat2)
        assert_equal(res, tgt2)

    def test_matrix_vector_values(self):
        vec = np.array([1, 2])
        mat1 = np.array([[1, 2], [3, 4]])
        mat2 = np.stack([mat1] * 2, axis=0)
        tgt1 = np.array([5, 11])
        tgt2 = np.stack([tgt1] * 2, axis=0)
        for dt in self.types[1:]:
            v = vec.astype(dt)
            m1 = mat1.astype(dt)
            m2 = mat2.astype(dt)
            res = self.matmul(m1, v)
            assert_equal(res, tgt1)
            res = self.matmul(m2, v)
            assert_equal(res, tgt2)
        # boolean type
        vec = np.array([True, False])
        mat1 = np.array([[True, False], [False, True]])
        mat2 = np.stack([mat1] * 2, axis=0)
        tgt1 = np.array([True, False])
        tgt2 = np.stack([tgt1] * 2, axis=0)
        res = self.matmul(vec, mat1)
        assert_equal(res, tgt1)
        res = self.matmul(vec, mat2)
        assert_equal(res, tgt2)

    def test_matrix_matrix_values(self):
        mat1 = np.array([[1, 2], [3, 4]])
        mat2 = np.array([[1, 0], [1, 1]])
        mat12 = np.stack([mat1, mat2], axis=0)
        mat21 = np.stack([mat2, mat1], axis=0)
        tgt11 = np.array([[7, 10], [15, 22]])
        tgt12 = np.array([[3, 2], [7, 4]])
        tgt21 = np.array([[1, 2], [4, 6]])
        tgt12_21 = np.stack([tgt12, tgt21], axis=0)
        tgt11_12 = np.stack((tgt11, tgt12), axis=0)
        tgt11_21 = np.stack((tgt11, tgt21), axis=0)
        for dt in self.types[1:]:
            m1 = mat1.astype(dt)
            m2 = mat2.astype(dt)
            m12 = mat12.astype(dt)
            m21 = mat21.astype(dt)
            # matrix @ matrix
            res = self.matmul(m1, m2)
            assert_equal(res, tgt12)
            res = self.matmul(m2, m1)
            assert_equal(res, tgt21)
            # stacked @ matrix
            res = self.matmul(m12, m1)
            assert_equal(res, tgt11_21)
            # matrix @ stacked
            res = self.matmul(m1, m12)
            assert_equal(res, tgt11_12)
            # stacked @ stacked
            res = self.matmul(m12, m21)
            assert_equal(res, tgt12_21)
        # boolean type
        m1 = np.array([[1, 1], [0, 0]], dtype=np.bool)
        m2 = np.array([[1, 0], [1, 1]], dtype=np.bool)
        m12 = np.stack([m1, m2], axis=0)
        m21 = np.stack([m2, m1], axis=0)
        tgt11 = m1
        tgt12 = m1
        tgt21 = np.array([[1, 1], [1, 1]], dtype=np.bool)
        tgt12_21 = np.stack([tgt12, tgt21], axis=0)
        tgt11_12 = np.stack((tgt11, tgt12), axis=0)
        tgt11_21 = np.stack((tgt11, tgt21), axis=0)
        res = self.matmul(m1, m2)
        assert_equal(res, tgt12)
        res = self.matmul(m2, m1)
        assert_equal(res, tgt21)
        res = self.matmul(m12, m1)
        assert_equal(res, tgt11_21)
        res = self.matmul(m1, m12)
        assert_equal(res, tgt11_12)
        res = self.matmul(m12, m21)
        assert_equal(res, tgt12_21)


class TestMatmul(MatmulCommon):
    """NumPy's ``TestMatmul`` at the default level ("auto")."""

    def test_out_arg(self):
        a = np.ones((5, 2), dtype=float)
        b = np.array([[1, 3], [5, 7]], dtype=float)
        tgt = np.dot(a, b)
        # test as positional argument
        msg = "out positional argument"
        out = np.zeros((5, 2), dtype=float)
        self.matmul(a, b, out)
        assert_array_equal(out, tgt, err_msg=msg)
        # test as keyword argument
        msg = "out keyword argument"
        out = np.zeros((5, 2), dtype=float)
        self.matmul(a, b, out=out)
        assert_array_equal(out, tgt, err_msg=msg)
        # test out with not allowed type cast (safe casting)
        msg = "Cannot cast ufunc .* output"
        out = np.zeros((5, 2), dtype=np.int32)
        assert_raises_regex(TypeError, msg, self.matmul, a, b, out=out)
        # test out with type upcast to complex
        out = np.zeros((5, 2), dtype=np.complex128)
        c = self.matmul(a, b, out=out)
        assert_(c is out)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ComplexWarning)
            c = c.astype(tgt.dtype)
        assert_array_equal(c, tgt)

    @pytest.mark.parametrize("level", ["auto", "V", "I"])
    def test_out_arg_float32(self, level):
        """test_out_arg on an emulated (float32) product: the same rules for ``out``."""
        a = np.ones((5, 2), dtype=np.float32)
        b = np.array([[1, 3], [5, 7]], dtype=np.float32)
        tgt = np.dot(a, b)
        out = np.zeros((5, 2), dtype=np.float32)
        assert mixpert.matmul(a, b, out, level=level) is out
        assert_array_equal(out, tgt)
        out = np.zeros((5, 2), dtype=np.float64)  # same_kind: float32 -> float64
        assert mixpert.matmul(a, b, out=out, level=level) is out
        assert_array_equal(out, tgt)
        out = np.zeros((5, 2), dtype=np.float16)  # same_kind allows a narrowing float
        assert_array_equal(mixpert.matmul(a, b, out=out, level=level), tgt.astype(np.float16))
        out = np.zeros((5, 2), dtype=np.int32)
        with pytest.raises(TypeError, match="Cannot cast ufunc .* output") as ours:
            mixpert.matmul(a, b, out=out, level=level)
        with pytest.raises(TypeError) as numpy_error:
            np.matmul(a, b, out=out)
        assert type(ours.value) is type(numpy_error.value)
        out = np.zeros((5, 2), dtype=np.complex128)
        assert mixpert.matmul(a, b, out=(out,), level=level) is out
        assert_array_equal(out.real, tgt)
        with pytest.raises(TypeError, match="return arrays must be of ArrayType"):
            mixpert.matmul(a, b, out=[[0.0] * 2] * 5, level=level)

    @pytest.mark.parametrize("dtype", [np.float64, np.float32])
    def test_empty_out(self, dtype):
        # Check that the output cannot be broadcast, so that it cannot be
        # size zero when the outer dimensions (iterator size) has size zero.
        arr = np.ones((0, 1, 1), dtype)
        out = np.ones((1, 1, 1), dtype)
        assert self.matmul(arr, arr).shape == (0, 1, 1)
        with pytest.raises(ValueError, match=r"non-broadcastable"):
            self.matmul(arr, arr, out=out)

    @pytest.mark.parametrize("dtype", [float, np.float32])
    @pytest.mark.parametrize("level", ["auto", "V"])
    def test_out_contiguous(self, dtype, level):
        a = np.ones((5, 2), dtype=dtype)
        b = np.array([[1, 3], [5, 7]], dtype=dtype)
        v = np.array([1, 3], dtype=dtype)
        tgt = np.dot(a, b)
        tgt_mv = np.dot(a, v)
        matmul = functools.partial(mixpert.matmul, level=level)
        # test out non-contiguous
        out = np.ones((5, 2, 2), dtype=dtype)
        c = matmul(a, b, out=out[..., 0])
        assert c.base is out
        assert_array_equal(c, tgt)
        c = matmul(a, v, out=out[:, 0, 0])
        assert_array_equal(c, tgt_mv)
        c = matmul(v, a.T, out=out[:, 0, 0])
        assert_array_equal(c, tgt_mv)
        # test out contiguous in only last dim
        out = np.ones((10, 2), dtype=dtype)
        c = matmul(a, b, out=out[::2, :])
        assert_array_equal(c, tgt)
        # test transposes of out, args
        out = np.ones((5, 2), dtype=dtype)
        c = matmul(b.T, a.T, out=out.T)
        assert_array_equal(out, tgt)

    m1 = np.arange(15.0).reshape(5, 3)
    m2 = np.arange(21.0).reshape(3, 7)
    m3 = np.arange(30.0).reshape(5, 6)[:, ::2]  # non-contiguous
    vc = np.arange(10.0)
    vr = np.arange(6.0)
    m0 = np.zeros((3, 0))

    @pytest.mark.parametrize("dtype", [np.float64, np.float32])
    @pytest.mark.parametrize(
        "args",
        (
            # matrix-matrix
            (m1, m2), (m2.T, m1.T), (m2.T.copy(), m1.T), (m2.T, m1.T.copy()),
            # matrix-matrix-transpose, contiguous and non
            (m1, m1.T), (m1.T, m1), (m1, m3.T), (m3, m1.T),
            (m3, m3.T), (m3.T, m3),
            # matrix-matrix non-contiguous
            (m3, m2), (m2.T, m3.T), (m2.T.copy(), m3.T),
            # vector-matrix, matrix-vector, contiguous
            (m1, vr[:3]), (vc[:5], m1), (m1.T, vc[:5]), (vr[:3], m1.T),
            # vector-matrix, matrix-vector, vector non-contiguous
            (m1, vr[::2]), (vc[::2], m1), (m1.T, vc[::2]), (vr[::2], m1.T),
            # vector-matrix, matrix-vector, matrix non-contiguous
            (m3, vr[:3]), (vc[:5], m3), (m3.T, vc[:5]), (vr[:3], m3.T),
            # vector-matrix, matrix-vector, both non-contiguous
            (m3, vr[::2]), (vc[::2], m3), (m3.T, vc[::2]), (vr[::2], m3.T),
            # size == 0
            (m0, m0.T), (m0.T, m0), (m1, m0), (m0.T, m1.T),
        ),
    )  # fmt: skip
    @pytest.mark.parametrize("level", ["auto", "V", "IV", "I"])
    def test_dot_equivalent(self, args, dtype, level):
        args = tuple(x.astype(dtype) for x in args)  # (float32: small integers, exact)
        r1 = mixpert.matmul(*args, level=level)
        r2 = np.dot(*args)
        assert_equal(r1, r2)
        r3 = mixpert.matmul(args[0].copy(), args[1].copy(), level=level)
        assert_equal(r1, r3)

    # issue 29164 with extra checks
    @pytest.mark.parametrize("dtype", (np.float32, np.float64, np.complex64, np.complex128))
    @pytest.mark.parametrize("level", ["auto", "V"])
    def test_dot_equivalent_matrix_matrix_blastypes(self, dtype, level):
        modes = list(itertools.product(["C", "F"], [True, False]))

        def apply_mode(m, mode):
            order, is_contiguous = mode
            if is_contiguous:
                return m.copy() if order == "C" else m.T.copy().T
            retval = np.zeros((m.shape[0] * 2, m.shape[1] * 2), dtype=m.dtype, order=order)[
                ::2, ::2
            ]
            retval[...] = m
            return retval

        is_complex = np.issubdtype(dtype, np.complexfloating)
        m1 = self.m1.astype(dtype) + (1j if is_complex else 0)
        m2 = self.m2.astype(dtype) + (1j if is_complex else 0)
        dot_res = np.dot(m1, m2)
        mo = np.zeros_like(dot_res)
        for mode in itertools.product(*[modes] * 3):
            m1_, m2_, mo_ = (apply_mode(*x) for x in zip([m1, m2, mo], mode, strict=True))
            assert_equal(mixpert.matmul(m1_, m2_, out=mo_, level=level), dot_res)

    def test_matmul_object(self):
        f = np.vectorize(fractions.Fraction)

        def random_ints():
            return np.random.randint(1, 1000, size=(10, 3, 3))

        M1 = f(random_ints(), random_ints())
        M2 = f(random_ints(), random_ints())
        M3 = self.matmul(M1, M2)
        [N1, N2, N3] = [a.astype(float) for a in [M1, M2, M3]]
        assert_allclose(N3, self.matmul(N1, N2))

    def test_matmul_object_type_scalar(self):
        F = fractions.Fraction
        v = np.array([F(2, 3), F(5, 7)])
        res = self.matmul(v, v)
        assert_(type(res) is F)

    def test_matmul_empty(self):
        a = np.empty((3, 0), dtype=object)
        b = np.empty((0, 3), dtype=object)
        c = np.zeros((3, 3))
        assert_array_equal(self.matmul(a, b), c)

    def test_matmul_exception_multiply(self):
        # test that matmul fails if `__mul__` is missing
        class add_not_multiply:
            def __add__(self, other):
                return self

        a = np.full((3, 3), add_not_multiply())
        with assert_raises(TypeError):
            self.matmul(a, a)

    def test_matmul_exception_add(self):
        # test that matmul fails if `__add__` is missing
        class multiply_not_add:
            def __mul__(self, other):
                return self

        a = np.full((3, 3), multiply_not_add())
        with assert_raises(TypeError):
            self.matmul(a, a)

    def test_matmul_bool(self):
        # gh-14439
        a = np.array([[1, 0], [1, 1]], dtype=bool)
        assert np.max(a.view(np.uint8)) == 1
        b = self.matmul(a, a)
        # matmul with boolean output should always be 0, 1
        assert np.max(b.view(np.uint8)) == 1
        rg = np.random.default_rng(np.random.PCG64(43))
        d = rg.integers(2, size=4 * 5, dtype=np.int8)
        d = d.reshape(4, 5) > 0
        out1 = self.matmul(d, d.reshape(5, 4))
        out2 = np.dot(d, d.reshape(5, 4))
        assert_equal(out1, out2)
        c = self.matmul(np.zeros((2, 0), dtype=bool), np.zeros(0, dtype=bool))
        assert not np.any(c)


class TestMatmulLevelV(MatmulCommon):
    level = "V"


class TestMatmulLevelIV(MatmulCommon):
    level = "IV"


class TestMatmulLevelI(MatmulCommon):
    level = "I"


class TestMatmulFp16(MatmulCommon):
    level = "fp16"


class TestMatmulOperatorOverrides:
    """``TestMatmulOperator``'s own tests: the overrides belong to ``@``; mixpert.matmul does
    what ``np.matmul`` does with the same operands (result or error type)."""

    def test_array_priority_override(self):
        class A:
            __array_priority__ = 1000

            def __matmul__(self, other):
                return "A"

            def __rmatmul__(self, other):
                return "A"

        for args in ((A(), np.ones(2)), (np.ones(2), A())):
            with pytest.raises(ValueError) as numpy_error:
                np.matmul(*args)
            with pytest.raises(type(numpy_error.value)):
                mixpert.matmul(*args)

    @pytest.mark.parametrize(
        "args",
        [
            (np.int8(5), np.int8(5)),
            (np.void(b"abc"), np.void(b"abc")),
            (np.arange(10), np.void(b"abc")),
            (np.float32(5), np.ones(2, np.float32)),
        ],
    )
    def test_matmul_raises(self, args):
        with pytest.raises((TypeError, ValueError)) as numpy_error:
            np.matmul(*args)
        with pytest.raises(type(numpy_error.value)):
            mixpert.matmul(*args)

    def test_array_ufunc_overrides_are_honoured(self):
        class Overrides:
            def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
                return ufunc.__name__

        assert mixpert.matmul(Overrides(), np.ones(2, np.float32)) == "matmul"


class TestMatmulInplace:
    """``a @= b`` (NumPy: ``np.matmul(a, b, out=a)``) as ``mixpert.matmul(a, b, out=a)``."""

    DTYPES = {}
    for i in MatmulCommon.types:
        for j in MatmulCommon.types:
            if np.can_cast(j, i):
                DTYPES[f"{i}-{j}"] = (np.dtype(i), np.dtype(j))

    @pytest.mark.parametrize(("dtype1", "dtype2"), DTYPES.values(), ids=DTYPES)
    def test_basic(self, dtype1: np.dtype, dtype2: np.dtype) -> None:
        a = np.arange(10).reshape(5, 2).astype(dtype1)
        a_id = id(a)
        b = np.ones((2, 2), dtype=dtype2)
        ref = a @ b
        a = mixpert.matmul(a, b, out=a)
        assert id(a) == a_id
        assert a.dtype == dtype1
        assert a.shape == (5, 2)
        if dtype1.kind in "fc":
            np.testing.assert_allclose(a, ref)
        else:
            np.testing.assert_array_equal(a, ref)

    SHAPES = {
        "2d_large": ((10**5, 10), (10, 10)),
        "3d_large": ((10**4, 10, 10), (1, 10, 10)),
        "1d": ((3,), (3,)),
        "2d_1d": ((3, 3), (3,)),
        "1d_2d": ((3,), (3, 3)),
        "2d_broadcast": ((3, 3), (3, 1)),
        "2d_broadcast_reverse": ((1, 3), (3, 3)),
        "3d_broadcast1": ((3, 3, 3), (1, 3, 1)),
        "3d_broadcast2": ((3, 3, 3), (1, 3, 3)),
        "3d_broadcast3": ((3, 3, 3), (3, 3, 1)),
        "3d_broadcast_reverse1": ((1, 3, 3), (3, 3, 3)),
        "3d_broadcast_reverse2": ((3, 1, 3), (3, 3, 3)),
        "3d_broadcast_reverse3": ((1, 1, 3), (3, 3, 3)),
    }

    @pytest.mark.parametrize("dtype", [np.float64, np.float32])
    @pytest.mark.parametrize(("a_shape", "b_shape"), SHAPES.values(), ids=SHAPES)
    def test_shapes(self, a_shape: tuple[int, ...], b_shape: tuple[int, ...], dtype) -> None:
        a_size = np.prod(a_shape)
        a = np.arange(a_size).reshape(a_shape).astype(dtype)
        a_id = id(a)
        b_size = np.prod(b_shape)
        b = np.arange(b_size).reshape(b_shape).astype(dtype)
        ref = a @ b
        if ref.shape != a_shape:  # NumPy's `a @= b` refuses; np.matmul(a, b, out=a) may not
            theirs = a.copy()
            try:
                np.matmul(theirs, b, out=theirs)
            except ValueError:
                with pytest.raises(ValueError):
                    mixpert.matmul(a, b, out=a, level="V")
                return
            assert mixpert.matmul(a, b, out=a, level="V") is a  # broadcast over out's loop
            np.testing.assert_allclose(a, theirs, rtol=1e-6)
            return
        before = a.copy()
        a = mixpert.matmul(a, b, out=a, level="V")
        assert id(a) == a_id
        assert a.dtype.type == dtype
        assert a.shape == a_shape
        if dtype == np.float32:  # emulated: within SGEMM's bound, not NumPy's bits
            within_sgemm_bound(a, before, b)
        else:
            np.testing.assert_allclose(a, ref)


def test_matmul_axes():
    """ufunc keywords go to np.matmul (a listed exception: natively)."""
    a = np.arange(3 * 4 * 5).reshape(3, 4, 5)
    c = mixpert.matmul(a, a, axes=[(-2, -1), (-1, -2), (1, 2)])
    assert c.shape == (3, 4, 4)
    d = mixpert.matmul(a, a, axes=[(-2, -1), (-1, -2), (0, 1)])
    assert d.shape == (4, 4, 3)
    e = np.swapaxes(d, 0, 2)
    assert_array_equal(e, c)
    f = mixpert.matmul(a, np.arange(3), axes=[(1, 0), (0), (0)])
    assert f.shape == (4, 5)
    with pytest.raises(TypeError):
        mixpert.matmul(a, a, nonsense=1)


class TestDot:
    """The matmul-shaped parts of NumPy's ``TestDot`` (np.dot's operands, which np.matmul takes
    alike), float64 as NumPy wrote them and float32 within the level's bound."""

    N = 7

    def _create_data(self):
        rng = np.random.RandomState(128)
        A = rng.random((4, 2))
        b1 = rng.random((2, 1))
        b2 = rng.random(2)
        b3 = rng.random((1, 2))
        b4 = rng.random(4)
        return A, b1, b2, b3, b4

    CASES = {
        "matmat": (lambda A, b1, b2, b3, b4: (A.T, A), [[1.45046013, 0.86323640],
                                                       [0.86323640, 0.84934569]]),
        "matvec": (lambda A, b1, b2, b3, b4: (A, b1), [[0.32114320], [0.04889721],
                                                      [0.15696029], [0.33612621]]),
        "matvec2": (lambda A, b1, b2, b3, b4: (A, b2),
                    [0.29677940, 0.04518649, 0.14468333, 0.31039293]),
        "vecmat": (lambda A, b1, b2, b3, b4: (b4, A), [1.23495091, 1.12222648]),
        "vecmat2": (lambda A, b1, b2, b3, b4: (b3, A.T),
                    [[0.58793804, 0.08957460, 0.30605758, 0.62716383]]),
        "vecmat3": (lambda A, b1, b2, b3, b4: (A.T, b4), [1.23495091, 1.12222648]),
        "vecvecouter": (lambda A, b1, b2, b3, b4: (b1, b3), [[0.20128610, 0.08400440],
                                                            [0.07190947, 0.03001058]]),
        "vecvecinner": (lambda A, b1, b2, b3, b4: (b3, b1), [[0.23129668]]),
    }  # fmt: skip

    @pytest.mark.parametrize("case", CASES)
    @pytest.mark.parametrize("level", ["auto", "V", "IV", "I", "fp64"])
    def test_values(self, case, level):
        make, tgt = self.CASES[case]
        x, y = make(*self._create_data())
        res = mixpert.matmul(x, y, level=level)
        assert res.dtype == np.float64
        assert_almost_equal(res, tgt, decimal=self.N)
        x32, y32 = x.astype(np.float32), y.astype(np.float32)
        res32 = mixpert.matmul(x32, y32, level=level)
        assert res32.dtype == np.float32
        if level != "I":  # (I keeps a bound scaled by the lines' largest entries)
            factor = 4 if level == "IV" else 1  # IV at k <= 4: 2.4x the bound (issue 38, part 3)
            within_sgemm_bound(res32, x32, y32, factor)
        assert_almost_equal(res32, tgt, decimal=5 if level != "I" else 3)

    def test_dotcolumnvect(self):
        b1 = np.ones((3, 1))
        assert_almost_equal(mixpert.matmul(b1, [5.3]), [5.3] * 3, decimal=self.N)
        assert_almost_equal(mixpert.matmul([6.2], b1.T), [6.2] * 3, decimal=self.N)

    def test_dotvecscalar(self):
        rng = np.random.RandomState(100)
        b1 = rng.random((1, 1))
        b2 = rng.random((1, 4))
        res = mixpert.matmul(b1, b2)
        tgt = np.array([[0.15126730, 0.23068496, 0.45905553, 0.00256425]])
        assert_almost_equal(res, tgt, decimal=self.N)

    def test_all(self):
        dims = [(1,), (1, 1)]  # (np.dot's 0-d operands: np.matmul refuses them)
        for dim1, dim2 in itertools.product(dims, dims):
            for dtype in (np.float64, np.float32):
                b1, b2 = np.zeros(dim1, dtype), np.zeros(dim2, dtype)
                res, tgt = mixpert.matmul(b1, b2), np.matmul(b1, b2)
                assert np.shape(res) == np.shape(tgt) and type(res) is type(tgt)
                assert_almost_equal(res, tgt, decimal=self.N)

    def test_vecobject(self):
        class Vec:
            def __init__(self, sequence=None):
                self.array = np.array([] if sequence is None else sequence)

            def __add__(self, other):
                out = Vec()
                out.array = self.array + other.array
                return out

            def __sub__(self, other):
                out = Vec()
                out.array = self.array - other.array
                return out

            def __mul__(self, other):  # with scalar
                out = Vec(self.array.copy())
                out.array *= other
                return out

            def __rmul__(self, other):
                return self * other

        U_non_cont = np.transpose([[1.0, 1.0], [1.0, 2.0]])
        U_cont = np.ascontiguousarray(U_non_cont)
        x = np.array([Vec([1.0, 0.0]), Vec([0.0, 1.0])])
        zeros = np.array([Vec([0.0, 0.0]), Vec([0.0, 0.0])])
        zeros_test = mixpert.matmul(U_cont, x) - mixpert.matmul(U_non_cont, x)
        assert_equal(zeros[0].array, zeros_test[0].array)
        assert_equal(zeros[1].array, zeros_test[1].array)

    @pytest.mark.parametrize("dtype", [np.float64, np.float32])
    def test_dot_3args(self, dtype):
        rng = np.random.RandomState(22)
        f = rng.random_sample((1024, 16)).astype(dtype)
        v = rng.random_sample((16, 32)).astype(dtype)
        r = np.empty((1024, 32), dtype)
        for _ in range(12):
            mixpert.matmul(f, v, r, level="V")
        r2 = mixpert.matmul(f, v, out=None, level="V")
        assert_array_equal(r2, r)
        assert_(r is mixpert.matmul(f, v, out=r, level="V"))
        v = v[:, 0].copy()  # v.shape == (16,)
        r = r[:, 0].copy()  # r.shape == (1024,)
        r2 = mixpert.matmul(f, v, level="V")
        assert_(r is mixpert.matmul(f, v, r, level="V"))
        assert_array_equal(r2, r)

    @pytest.mark.parametrize("dtype", [np.float64, np.float32])
    def test_dot_3args_errors(self, dtype):
        rng = np.random.RandomState(22)
        f = rng.random_sample((1024, 16)).astype(dtype)
        v = rng.random_sample((16, 32)).astype(dtype)
        r = np.empty((1024, 64))
        outs = [
            np.empty((1024, 31)), np.empty((1024,)), np.empty((32,)), np.empty((32, 1024)),
            np.empty((32, 1024)).T, r[:, ::2], r[:, :32], np.empty((1024, 32), dtype=int),
            np.empty((2, 1024, 33)),
        ]  # fmt: skip
        for out in outs:  # (np.dot refuses float32 for float64 and strided outs: matmul not)
            try:
                want = np.matmul(f, v, out.copy())
            except (ValueError, TypeError) as numpy_error:
                with pytest.raises(type(numpy_error)):
                    mixpert.matmul(f, v, out, level="V")
                continue
            assert mixpert.matmul(f, v, out, level="V") is out
            assert_allclose(out, want, rtol=1e-6)
        # out's loop dimensions: the operands broadcast to them, as in np.matmul
        out = np.empty((3, 1024, 32), dtype)
        assert mixpert.matmul(f, v, out, level="V") is out
        assert_array_equal(out[2], mixpert.matmul(f, v, level="V"))

    @pytest.mark.parametrize("dtype", [np.float16, np.float32])
    def test_dot_out_result(self, dtype):
        x = np.ones((1,), dtype=dtype)
        y = np.ones((1, 5), dtype=dtype)
        z = np.zeros((5,), dtype=dtype)
        res = mixpert.matmul(x, y, out=z)
        assert np.array_equal(res, y[0])
        assert np.array_equal(z, y[0])
        z[0] = 2
        assert np.array_equal(res, z)  # out is returned, not a copy

    def test_dot_array_order(self):
        a = np.array([[1, 2], [3, 4]], order="C")
        b = np.array([[1, 2], [3, 4]], order="F")
        res = np.matmul(a, a)
        for x, y in ((a, b), (b, a), (b, b)):  # integer arrays are exact
            assert_equal(mixpert.matmul(x, y), res)
            assert_equal(mixpert.matmul(x.astype(np.float32), y.astype(np.float32)), res)

    def test_dtype_discovery_fails(self):
        # See gh-14247, error checking was missing for failed dtype discovery
        class BadObject:
            def __array__(self, dtype=None, copy=None):
                raise TypeError("just this tiny mint leaf")

        with pytest.raises(TypeError):
            mixpert.matmul(BadObject(), BadObject())
        with pytest.raises(TypeError):
            mixpert.matmul(np.ones(2, np.float32), BadObject())


# ---- numpy.linalg's matmul checks -------------------------------------------------------------


class TestMatrixPower:
    """numpy.linalg's ``TestMatrixPower`` where it multiplies: matrix_power against matmul."""

    rshft_0 = np.eye(4)
    rshft_1 = rshft_0[[3, 0, 1, 2]]
    rshft_2 = rshft_0[[2, 3, 0, 1]]
    rshft_3 = rshft_0[[1, 2, 3, 0]]
    rshft_all = [rshft_0, rshft_1, rshft_2, rshft_3]
    stacked = np.block([[[rshft_0]]] * 2)
    dtnoinv = [object, np.dtype("e"), np.dtype("g"), np.dtype("G")]

    @pytest.mark.parametrize("dt", [np.dtype(c) for c in "?bBhHiIlLqQefdgFDG"] + [object])
    @pytest.mark.parametrize("level", ["auto", "V", "I"])
    def test_power_is_two(self, dt, level):
        def tz(mat):
            mz = np.linalg.matrix_power(mat, 2)
            mmul = functools.partial(mixpert.matmul, level=level)
            if mat.dtype == object:
                mmul = np.dot
            assert_equal(mz, mmul(mat, mat))
            assert_equal(mz.dtype, mat.dtype)

        for mat in self.rshft_all:
            tz(mat.astype(dt))
            if dt is not object:
                tz(self.stacked.astype(dt))

    @pytest.mark.parametrize("dt", [np.dtype(c) for c in "fdFD"])
    def test_power_is_minus_one(self, dt):
        for mat in self.rshft_all:
            mat = mat.astype(dt)
            invmat = np.linalg.matrix_power(mat, -1)
            assert_almost_equal(mixpert.matmul(invmat, mat, level="V"), np.eye(4))


def test_linalg_matmul():
    # np.linalg.matmul and np.matmul only differs in the number of arguments in the signature
    x = np.arange(6).reshape((2, 3))
    assert_equal(mixpert.matmul(x, x.T), np.array([[5, 14], [14, 50]]))
    assert_equal(np.linalg.matmul(x, x.T), mixpert.matmul(x, x.T))


@pytest.mark.parametrize("level", ["V", "IV", "fp64"])
def test_linalg_solve_residual(level):
    """test_linalg's ``matmul(a, x)`` check of solve: float64 natively, float32 within the
    bound of the float32 product."""
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 6, 6))
    b = rng.standard_normal((3, 6))
    x = np.linalg.solve(a, b[..., None])[..., 0]
    assert_almost_equal(mixpert.matmul(a, x[..., None], level=level)[..., 0], b)
    a32, x32 = a.astype(np.float32), x.astype(np.float32)
    within_sgemm_bound(mixpert.matmul(a32, x32[..., None], level=level), a32, x32[..., None])


# ---- the contract beyond NumPy's own tests -----------------------------------------------------

TYPES = "?bhilqBHILQefdFDO"


@pytest.mark.parametrize(("ta", "tb"), itertools.product(TYPES, TYPES))
def test_every_dtype_pair_has_np_matmuls_dtype_and_values(ta, tb):
    a = np.arange(6).reshape(2, 3).astype(ta)
    b = (np.arange(6).reshape(3, 2) % 3).astype(tb)
    want = np.matmul(a, b)
    got = mixpert.matmul(a, b, level="I")
    assert got.dtype == want.dtype and type(got) is type(want)
    assert_array_equal(got, want)  # small integers: exact at every level


def test_integer_products_wrap_around_as_numpys():
    a = np.full((2, 3), 100, np.int8)
    got = mixpert.matmul(a, a.T)
    assert got.dtype == np.int8 and np.array_equal(got, np.matmul(a, a.T))
    big = np.full((2, 2), 2**62, np.int64)
    assert np.array_equal(mixpert.matmul(big, big), np.matmul(big, big))


@pytest.mark.parametrize("level", ["V", "IV", "fp64"])
def test_float32_products_keep_sgemms_bound_and_float64_is_float64(level):
    rng = np.random.default_rng(3)
    a = rng.standard_normal((4, 7, 33)) * np.exp(2 * rng.standard_normal((4, 7, 33)))
    b = rng.standard_normal((33, 5))
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    got = mixpert.matmul(a32, b32, level=level)
    assert got.dtype == np.float32
    within_sgemm_bound(got, a32, b32)
    for x, y in ((a, b), (a32, b), (a, b32)):  # float64 anywhere: NumPy's float64 product
        got64 = mixpert.matmul(x, y, level=level)
        assert got64.dtype == np.float64 and np.array_equal(got64, np.matmul(x, y))


def test_float16_alone_is_numpys_float16_product():
    a = np.linspace(-2, 2, 12, dtype=np.float16).reshape(3, 4)
    got = mixpert.matmul(a, a.T, level="V")
    assert got.dtype == np.float16 and np.array_equal(got, np.matmul(a, a.T))


@pytest.mark.parametrize("level", ["auto", "V"])
def test_out_overlapping_the_operands_is_numpys(level):
    rng = np.random.default_rng(4)
    for dtype in (np.float32, np.float64, np.int64):
        a = (rng.standard_normal((6, 6)) * 4).astype(dtype)
        want = np.matmul(a, a)
        x = a.copy()
        assert mixpert.matmul(x, x, out=x, level=level) is x
        assert_allclose(x, want, rtol=1e-6)
        y = a.copy()
        mixpert.matmul(y[3:, :], y[:, 3:], out=y[3:, 3:], level=level)  # partial overlap
        z = a.copy()
        np.matmul(z[3:, :], z[:, 3:], out=z[3:, 3:])
        assert_allclose(y, z, rtol=1e-6)
        t = a.copy()
        mixpert.matmul(t, t.T, out=t.T, level=level)  # out is a transposed view of both
        u = a.copy()
        np.matmul(u, u.T, out=u.T)
        assert_allclose(t, u, rtol=1e-6)


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_subclasses_and_array_likes_come_back_as_numpy_gives_them():
    m = np.matrix([[1.0, 2.0], [3.0, 4.0]], dtype=np.float32)
    v = np.ones(2, np.float32)
    for x, y in ((m, m), (m, v), (v, m)):
        got, want = mixpert.matmul(x, y, level="V"), np.matmul(x, y)
        assert type(got) is type(want) and got.shape == want.shape
        assert_array_equal(got, want)
    assert_array_equal(mixpert.matmul(((1, 2), (3, 4)), [5, 6]), [17, 39])
    got = mixpert.matmul(np.ones(3, np.float32), np.ones(3, np.float32), level="V")
    assert type(got) is np.float32 and got == 3  # vector @ vector: a NumPy scalar


def test_positional_out_is_out_not_level():
    a = np.ones((2, 3), np.float32)
    out = np.empty((2, 2), np.float32)
    assert mixpert.matmul(a, a.T, out, level="V") is out and np.all(out == 3)
    with pytest.raises(TypeError, match=r"third positional argument is out.*level='V'"):
        mixpert.matmul(a, a.T, "V")  # level is keyword-only: a clear error


def test_direct_calls_are_recorded_with_out():
    a = np.ones((2, 3), np.float32)
    out = np.empty((2, 2))
    with mixpert.record() as calls:
        mixpert.matmul(a, a.T, out=out, level="V")
        mixpert.matmul(a.astype(np.float64), a.T)
    assert [c.level for c in calls] == ["V", "native float64"]
    assert np.all(out == 3)


# ---- DLPack arrays (PyTorch on the CPU; skipped where torch is not installed) -----------------


@pytest.mark.parametrize("dtype_name", ["float32", "float64", "int64"])
def test_torch_tensors_come_back_as_torch_tensors_without_a_copy(dtype_name):
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, dtype_name)
    a = torch.arange(12, dtype=dtype).reshape(3, 4)
    b = torch.ones((4, 2), dtype=dtype)
    got = mixpert.matmul(a, b, level="V")
    assert isinstance(got, torch.Tensor) and got.dtype == dtype and got.device == a.device
    assert torch.equal(got, a @ b)
    out = torch.zeros((3, 2), dtype=dtype)
    assert mixpert.matmul(a, b, out, level="V") is out and torch.equal(out, a @ b)
    vv = mixpert.matmul(a[0], a[0], level="V")
    assert isinstance(vv, torch.Tensor) and vv.shape == () and vv.item() == 14
    view = np.from_dlpack(a)  # the operand is read in place: no host copy
    assert view.__array_interface__["data"][0] == a.data_ptr()


class _DLPackTensor:
    """A tensor of another library (this test's): it speaks DLPack only, no NumPy protocols."""

    __module__ = "fake_dlpack_lib"

    def __init__(self, array: np.ndarray) -> None:
        self._array = array

    def __dlpack__(self, **kwargs):
        return self._array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_dlpack_arrays_come_back_in_their_kind(monkeypatch):
    """The path torch and JAX take, without them: DLPack views in, ``from_dlpack`` out."""
    import sys
    import types

    lib = types.ModuleType("fake_dlpack_lib")
    lib.from_dlpack = lambda x: _DLPackTensor(np.from_dlpack(x))
    monkeypatch.setitem(sys.modules, "fake_dlpack_lib", lib)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.ones((4, 2), np.float32)
    for x, y in ((a, b), (a.astype(np.int64), b.astype(np.int64)), (a.astype(np.float64), b)):
        got = mixpert.matmul(_DLPackTensor(x), _DLPackTensor(y), level="V")
        assert isinstance(got, _DLPackTensor)
        assert got._array.dtype == np.matmul(x, y).dtype
        assert_array_equal(got._array, np.matmul(x, y))
    mixed = mixpert.matmul(a, _DLPackTensor(b), level="V")  # the foreign operand's kind
    assert isinstance(mixed, _DLPackTensor)
    out = np.zeros((3, 2), np.float32)
    wrapped_out = _DLPackTensor(out)
    assert mixpert.matmul(_DLPackTensor(a), b, wrapped_out, level="V") is wrapped_out
    assert_array_equal(out, a @ b)  # written in place, through the view
    vv = mixpert.matmul(_DLPackTensor(a[0]), _DLPackTensor(a[0]), level="V")
    assert isinstance(vv, _DLPackTensor) and vv._array.shape == () and vv._array == 14
