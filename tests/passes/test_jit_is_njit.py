"""``@mixpert.jit`` behaves as ``numba.njit`` on every product form (issue 38, part 2).

Every spelling of a product (``a @ b``, ``np.matmul``, ``np.dot``, ``a.dot(b)``, ``a @= b``,
``np.dot(a, b, out)``) over vectors, matrices and stacks, every dtype family and C, F and
strided layouts runs under ``numba.njit`` and under ``@mixpert.jit`` (no tol, default level).
Where Numba computes the product, mixpert gives its result (float32 within the emulation's
bound, every other dtype bit for bit), dtype and shape, and Numba's warnings; where Numba has no
product (stacks beside vectors, integers, ``@=``, ...) mixpert gives NumPy's, and where NumPy
refuses too, an error of the type Numba or NumPy raises: ``ProductTypingError`` (a Numba
``TypingError``) naming the site at compile time, NumPy's ValueError at run time. No message
names an internal stub.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np
import pytest
from numba.core.errors import NumbaPerformanceWarning, NumbaWarning, TypingError

import mixpert
from mixpert import ProductTypingError

# --- the product forms ------------------------------------------------------------------------


def matmul(a, b):
    return a @ b


def np_matmul(a, b):
    return np.matmul(a, b)


def dot(a, b):
    return np.dot(a, b)


def method_dot(a, b):
    return a.dot(b)


def in_place(a, b):
    a @= b
    return a


def dot_out(a, b, out):
    return np.dot(a, b, out)


def dot_out_keyword(a, b, out):
    np.dot(a, b, out=out)
    return out


def vdot(a, b):  # not product sites: Numba's own, untouched
    return np.vdot(a, b)


def outer(a, b):
    return np.outer(a, b)


FORMS: dict[str, Callable[..., Any]] = {
    f.__name__: f
    for f in (matmul, np_matmul, dot, method_dot, in_place, dot_out, dot_out_keyword, vdot, outer)
}
WRITES = {"in_place": 0, "dot_out": 2, "dot_out_keyword": 2}  # the argument a form writes into
# How Numba's contiguity warning names each form (its np.dot(a, b, out) says "np.vdot()")
NUMBA_NAME = {"matmul": "'@'", "dot": "np.dot()", "method_dot": "np.dot()"}
NUMBA_NAME |= {"dot_out": "np.vdot()", "dot_out_keyword": "np.vdot()"}


# --- operands ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Operand:
    shape: tuple[int, ...]
    dtype: str
    layout: str = "C"  # "C", "F", or "A": a strided view Numba types with layout 'A'

    def make(self, seed: int) -> np.ndarray:
        """The operand, the same values on every call with ``seed`` (a fresh array each time:
        some forms write into their arguments)."""
        rng = np.random.default_rng(seed)
        full = (*self.shape[:-1], 2 * self.shape[-1]) if self.layout == "A" else self.shape
        dtype = np.dtype(self.dtype)
        if dtype.kind == "b":
            x = rng.random(full) > 0.5
        elif dtype.kind in "iu":
            x = rng.integers(0 if dtype.kind == "u" else -3, 4, full)
        elif dtype.kind == "c":
            x = rng.standard_normal(full) + 1j * rng.standard_normal(full)
        else:
            x = rng.standard_normal(full)
        x = np.asarray(x).astype(dtype)
        if self.layout == "A":
            return x[..., ::2]
        return np.asfortranarray(x) if self.layout == "F" else np.ascontiguousarray(x)

    def __str__(self) -> str:
        return f"{self.dtype}{list(self.shape)}{self.layout if self.layout != 'C' else ''}"


@dataclass(frozen=True)
class Case:
    form: str
    operands: tuple[Operand, ...]

    def args(self) -> list[np.ndarray]:
        return [x.make(seed) for seed, x in enumerate(self.operands)]

    def __str__(self) -> str:
        return f"{self.form}({', '.join(map(str, self.operands))})"


@dataclass
class Outcome:
    """What one compiled form did: its result and the array it wrote into, or its error, and
    the warnings it gave."""

    value: Any = None
    written: Any = None
    error: BaseException | None = None
    caught: list[warnings.WarningMessage] | None = None

    def warned(self, category: type[Warning]) -> list[str]:
        plain = [_ANSI.sub("", str(w.message)) for w in self.caught or []]
        return [
            m
            for m, w in zip(plain, self.caught or [], strict=True)
            if issubclass(w.category, category)
        ]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run(func: Callable[..., Any], case: Case) -> Outcome:
    args = case.args()
    outcome = Outcome()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            outcome.value = func(*args)
        except Exception as error:  # noqa: BLE001 - compared with what numba.njit raises
            outcome.error = error
    outcome.caught = caught
    if case.form in WRITES and outcome.error is None:
        outcome.written = args[WRITES[case.form]]
    return outcome


def _dot_result(a: Operand, b: Operand) -> tuple[tuple[int, ...], str]:
    product = np.dot(np.zeros(a.shape, a.dtype), np.zeros(b.shape, b.dtype))
    return np.shape(product), np.result_type(a.dtype, b.dtype).name


# --- the cases --------------------------------------------------------------------------------

K = 3
LEFT = {1: (K,), 2: (2, K), 3: (2, 2, K)}
RIGHT = {1: (K,), 2: (K, 4), 3: (2, K, 4)}
SQUARE = {1: (K,), 2: (K, K), 3: (2, K, K)}
NDIMS = [(1, 1), (1, 2), (2, 1), (2, 2), (1, 3), (3, 1), (2, 3), (3, 2), (3, 3)]


def case(form: str, a: Operand, b: Operand, out: Operand | None = None) -> Case:
    if form.startswith("dot_out") and out is None:
        shape, dtype = _dot_result(a, b)
        out = Operand(shape, dtype)
    return Case(form, (a, b) if out is None else (a, b, out))


def by_ndim(form: str, dtype: str) -> list[Case]:
    shapes = (SQUARE, SQUARE) if form == "in_place" else (LEFT, RIGHT)
    return [
        case(form, Operand(shapes[0][p], dtype), Operand(shapes[1][q], dtype)) for p, q in NDIMS
    ]


MIXED = [
    ("complex64", "complex64"),
    ("complex128", "complex128"),
    ("int64", "int64"),
    ("int32", "int32"),
    ("uint8", "uint8"),
    ("bool", "bool"),
    ("float32", "float64"),
    ("int64", "float32"),
    ("complex64", "float64"),
    ("bool", "int8"),
]


def by_dtype(form: str) -> list[Case]:
    found = []
    for left, right in MIXED:
        for p, q in [(2, 2), (1, 2)]:
            shapes = (SQUARE, SQUARE) if form == "in_place" else (LEFT, RIGHT)
            found.append(case(form, Operand(shapes[0][p], left), Operand(shapes[1][q], right)))
    return found


LAYOUTS = [
    ("float32", "F", "C"),
    ("float32", "C", "A"),
    ("float64", "A", "F"),
    ("float64", "F", "F"),
]


def by_layout(form: str) -> list[Case]:
    left, right = ((K, K), (K, K)) if form == "in_place" else ((2, K), (K, 4))
    found = [case(form, Operand(left, d, la), Operand(right, d, lb)) for d, la, lb in LAYOUTS]
    found.append(case(form, Operand((K,), "float64", "A"), Operand((K, K), "float64", "A")))
    return found


SHAPE_ERRORS = [
    case("matmul", Operand((2, 3), "float64"), Operand((4, 2), "float64")),
    case("matmul", Operand((2, 3), "float32"), Operand((4, 2), "float32")),
    case("matmul", Operand((2, 2, 3), "float64"), Operand((3, 3, 2), "float64")),  # stacks
    case("dot", Operand((3,), "float64"), Operand((4,), "float64")),
    case(
        "dot_out",
        Operand((2, 3), "float64"),
        Operand((3, 4), "float64"),
        Operand((2, 5), "float64"),
    ),
    case(
        "dot_out",
        Operand((2, 3), "float32"),
        Operand((3, 4), "float32"),
        Operand((4, 2), "float32"),
    ),
    case("in_place", Operand((2, 3), "float64"), Operand((3, 2), "float64")),  # a's shape changes
    case(
        "dot_out",
        Operand((2, 3), "float32"),
        Operand((3, 4), "float32"),
        Operand((2, 4), "float64"),
    ),
    case(
        "dot_out",
        Operand((2, 3), "float64"),
        Operand((3, 4), "float64"),
        Operand((2, 4), "float64", "F"),
    ),
    case(
        "dot_out", Operand((3,), "float64"), Operand((3, 4), "float64"), Operand((4, 1), "float64")
    ),
    case("in_place", Operand((3, 3), "int64"), Operand((3, 3), "float64")),  # no same_kind cast
]

EMPTY = [  # sizes of zero: NumPy's empty or zero results
    case("matmul", Operand((2, 2, 0), "float32"), Operand((2, 0, 4), "float32")),
    case("matmul", Operand((2, 2, 0), "float64"), Operand((0, 4), "float64")),
    case("matmul", Operand((K,), "float64"), Operand((0, K, 4), "float64")),
    case("dot", Operand((2, 0, K), "float32"), Operand((2, K, 4), "float32")),
    case("matmul", Operand((2, 0), "float32"), Operand((0, 4), "float32")),
]

UNTOUCHED = [
    case("vdot", Operand((K,), "complex128"), Operand((K,), "complex128")),
    case("vdot", Operand((K,), "float32"), Operand((K,), "float32")),
    case("outer", Operand((K,), "float64"), Operand((4,), "float64")),
    case("outer", Operand((2, K), "int64"), Operand((K,), "int64")),
]

GRID = [
    *(c for form in ("matmul", "dot", "in_place", "dot_out") for c in by_ndim(form, "float64")),
    *(
        c
        for form in ("np_matmul", "method_dot", "dot_out_keyword")
        for c in by_ndim(form, "float64")[1::3]
    ),
    *by_ndim("matmul", "float32"),
    *by_ndim("dot_out", "float32"),
    *by_ndim("in_place", "float32")[2::3],
    *by_dtype("matmul"),
    *by_dtype("dot_out")[::2],
    *by_dtype("in_place")[::3],
    *(
        c
        for form in ("matmul", "dot", "method_dot", "dot_out", "in_place")
        for c in by_layout(form)
    ),
    *SHAPE_ERRORS,
    *EMPTY,
    *UNTOUCHED,
]

# The default run's cases: one or two of each kind of outcome (an emulated product, Numba's own,
# NumPy's meaning, each form, mixed dtypes, a layout Numba warns about), every refusal and some
# empty products. The rest of the grid, exhaustive over ndims, dtypes and layouts, is marked
# slow (``python -m pytest -m slow``): each case compiles both ways, about a second.
DEFAULT = {
    "matmul(float32[2, 3], float32[3, 4])",
    "matmul(float32[3], float32[3])",
    "matmul(float32[3], float32[3, 4])",
    "matmul(float32[2, 3], float32[3])",
    "matmul(float32[2, 2, 3], float32[2, 3, 4])",
    "dot_out(float32[2, 3], float32[3, 4], float32[2, 4])",
    "in_place(float32[3, 3], float32[3])",
    "in_place(float64[3, 3], float64[3, 3])",
    "dot_out(float64[2, 2, 3], float64[3, 4], float64[2, 2, 4])",
    "np_matmul(float64[3], float64[3, 4])",
    "method_dot(float64[3], float64[3, 4])",
    "dot_out_keyword(float64[3], float64[3, 4], float64[4])",
    "matmul(int64[2, 3], int64[3, 4])",
    "matmul(complex128[2, 3], complex128[3, 4])",
    "matmul(float32[2, 3], float64[3, 4])",
    "matmul(float32[2, 3], float32[3, 4]A)",
    "matmul(float64[2, 3]A, float64[3, 4]F)",
    "dot(float32[2, 3], float32[3, 4]A)",
    *map(str, SHAPE_ERRORS),
    "matmul(float32[2, 2, 0], float32[2, 0, 4])",
    "matmul(float32[2, 0], float32[0, 4])",
    "matmul(float64[2, 2, 0], float64[0, 4])",
    *(str(c) for c in UNTOUCHED if c.form == "vdot"),
}
assert not DEFAULT - set(map(str, GRID)), DEFAULT - set(map(str, GRID))  # no typo
CASES = [
    c if str(c) in DEFAULT else pytest.param(c, marks=pytest.mark.slow, id=str(c)) for c in GRID
]


# --- the comparison ---------------------------------------------------------------------------


def _float32_grade(case: Case) -> bool:
    return any(np.dtype(x.dtype) == np.float32 for x in case.operands[:2])


def _same_values(got: Any, want: Any, *, rtol: float, what: str) -> None:
    if isinstance(want, np.ndarray):
        assert isinstance(got, np.ndarray), f"{what}: {type(got)} instead of an array"
        assert got.dtype == want.dtype and got.shape == want.shape, (
            f"{what}: {got.dtype}{got.shape} instead of {want.dtype}{want.shape}"
        )
    else:  # a scalar: Numba boxes it as a Python number
        assert np.ndim(got) == 0 and np.asarray(got).dtype.kind == np.asarray(want).dtype.kind
    if rtol == 0 or np.asarray(want).dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=what)
    else:
        scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * scale, err_msg=what)


def _same(got: Outcome, want: Outcome, *, rtol: float) -> None:
    _same_values(got.value, want.value, rtol=rtol, what="result")
    if want.written is not None:
        _same_values(got.written, want.written, rtol=rtol, what="the array written into")


def _no_stub_named(outcome: Outcome) -> None:
    texts = [str(outcome.error or "")] + [str(w.message) for w in outcome.caught or []]
    assert not any("mixpert_" in t for t in texts), texts


@pytest.mark.filterwarnings("ignore::mixpert.NotEmulatedWarning")
@pytest.mark.parametrize("case", CASES, ids=str)
def test_mixpert_jit_is_numba_njit_or_numpy(case: Case) -> None:
    form = FORMS[case.form]
    by_numba = run(numba.njit(form), case)
    by_mixpert = run(mixpert.jit(form), case)
    by_numpy = run(form, case)
    _no_stub_named(by_mixpert)
    if by_mixpert.error is not None and not isinstance(by_mixpert.error, ValueError):
        assert isinstance(by_mixpert.error, (ProductTypingError, TypingError))
    float32 = _float32_grade(case)
    if by_numba.error is None:  # Numba's product: its result, within float32's bound
        assert by_mixpert.error is None, f"numba.njit computes it; mixpert: {by_mixpert.error!r}"
        _same(by_mixpert, by_numba, rtol=1e-5 if float32 else 0.0)
    elif isinstance(by_numba.error, (TypingError, AssertionError)):  # Numba has none: NumPy's
        if by_numpy.error is None:
            assert by_mixpert.error is None, f"NumPy computes it; mixpert: {by_mixpert.error!r}"
            _same(by_mixpert, by_numpy, rtol=1e-5 if float32 else 1e-12)
        else:  # NumPy refuses too: at compile time as Numba does, or at run time as NumPy
            assert by_mixpert.error is not None, "NumPy and Numba refuse it; mixpert computed"
            if not isinstance(by_mixpert.error, ProductTypingError):
                assert type(by_mixpert.error) is type(by_numpy.error), by_mixpert.error
    else:  # Numba's run-time error (shapes)
        assert type(by_mixpert.error) is type(by_numba.error), by_mixpert.error
    if isinstance(by_mixpert.error, ProductTypingError):
        message = str(by_mixpert.error)
        assert f"{case.form}:0" in message and "line" in message and "array(" in message
    _same_warnings(case, by_mixpert, by_numba)


def _same_warnings(case: Case, by_mixpert: Outcome, by_numba: Outcome) -> None:
    """Numba's warnings, each once. Numba gives its contiguity warning only the first time the
    process types those operands; mixpert gives it on every compile where Numba would."""
    mine = by_mixpert.warned(NumbaWarning)
    if by_numba.error is None:  # (Numba may warn before it refuses: no product, no warning)
        theirs = by_numba.warned(NumbaWarning)
        assert set(theirs) <= set(mine), (theirs, mine)
    contiguity = [m for m in mine if "faster on contiguous arrays" in m]
    a, b = case.operands[:2]
    expected = by_numba.error is None and case.form in NUMBA_NAME and "A" in (a.layout, b.layout)
    assert len(contiguity) == (1 if expected else 0), mine
    if expected:
        assert contiguity[0].startswith(NUMBA_NAME[case.form] + " is faster on contiguous")
    assert len(by_mixpert.warned(NumbaPerformanceWarning)) == len(contiguity), mine


# --- the gaps issue 38 names, one by one --------------------------------------------------------

RNG = np.random.default_rng(38)


@pytest.mark.filterwarnings("ignore::mixpert.NotEmulatedWarning")
@pytest.mark.parametrize(
    "dtype",
    [
        "float32",
        *(pytest.param(d, marks=pytest.mark.slow) for d in ("float64", "int64", "complex128")),
    ],
)
@pytest.mark.parametrize(("a_shape", "b_shape"), [((2,), (3, 2, 2)), ((3, 2, 2), (2,))])
def test_a_vector_beside_a_stack_has_numpys_meaning(dtype, a_shape, b_shape) -> None:
    """Numba has no vector @ stack; NumPy's np.matmul broadcasts the vector over the stack."""
    a, b = Operand(a_shape, dtype).make(1), Operand(b_shape, dtype).make(2)
    with pytest.raises(TypingError):
        numba.njit(matmul)(a, b)
    want = np.matmul(a, b)
    for form in (matmul, np_matmul):
        got = mixpert.jit(form)(a, b)
        assert got.shape == want.shape == (3, 2) and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, rtol=1e-6)


def into_a_vector(a, b):
    a @= b
    return a


def into_out(a, b, out):
    np.dot(a, b, out=out)
    return out


def test_refusals_are_product_typing_errors_naming_the_site() -> None:
    """What NumPy refuses raises ProductTypingError (a Numba TypingError, as numba.njit raises,
    and a TypeError) naming the site's op id, file, line and operand types, never a stub."""
    x32, m32 = np.ones(3, np.float32), np.ones((3, 3), np.float32)
    refused = [
        (into_a_vector, (x32, x32), "into_a_vector:0", "b of at least 2 dimensions"),
        (into_a_vector, (np.ones((3, 3), np.int64), m32), "into_a_vector:0", "same_kind"),
        (into_out, (m32, m32, np.ones((3, 3))), "into_out:0", "out is float64"),
        (into_out, (m32, m32, np.ones((3, 3), np.float32, order="F")), "into_out:0", "C-contig"),
    ]
    for func, args, op_id, why in refused:
        with pytest.raises(ProductTypingError) as caught:
            mixpert.jit(func)(*args)
        error = caught.value
        assert isinstance(error, TypingError) and isinstance(error, TypeError)
        message = str(error)
        assert op_id in message and why in message and "test_jit_is_njit.py" in message
        assert "line" in message and "array(float32" in message and "mixpert_" not in message
        with pytest.raises((TypingError, AssertionError)):  # numba.njit refuses each too
            numba.njit(func)(*args)  # (its np.dot trips an assertion on an F-ordered out)


def test_a_refusal_under_a_numba_caller_names_the_site_too() -> None:
    inner = mixpert.jit(into_a_vector)

    @numba.njit
    def caller(a, b):
        return inner(a, b)

    with pytest.raises(TypingError) as caught:
        caller(np.ones(3), np.ones(3))
    assert "into_a_vector:0" in str(caught.value) and "mixpert_" not in str(caught.value)


@pytest.mark.filterwarnings("ignore::mixpert.NotEmulatedWarning")
def test_in_place_matmul_with_a_vector_and_dot_into_other_dtypes_follow_numpy() -> None:
    """NumPy computes these, Numba has no meaning for them: mixpert gives NumPy's."""
    a, b = RNG.standard_normal(3), RNG.standard_normal((3, 3))
    want = a.copy()
    want @= b
    got = a.copy()
    np.testing.assert_allclose(mixpert.jit(into_a_vector)(got, b), want, rtol=1e-12)
    np.testing.assert_allclose(got, want, rtol=1e-12)
    a32 = a.astype(np.float32)
    for x, y in [(a32, b), (np.arange(3), np.arange(9).reshape(3, 3)), (a, a)]:
        want = np.zeros(np.shape(np.dot(x, y)), np.result_type(x, y))
        np.dot(x, y, out=want)
        out = np.zeros_like(want)
        assert mixpert.jit(into_out)(x, y, out) is not None
        np.testing.assert_allclose(out, want, rtol=1e-12)


class Weights:  # a Python object: only object mode takes it
    def __init__(self, w: np.ndarray) -> None:
        self.w = w


def apply_weights(weights, x):
    return x @ weights.w


def test_forceobj_is_honoured_with_the_products_on_the_runtime() -> None:
    w = RNG.standard_normal((6, 5)).astype(np.float32)
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    f = mixpert.jit(apply_weights, forceobj=True)
    with mixpert.record() as calls:
        got = f(Weights(w), x)
    assert len(calls) == 1 and calls[0].shape == (4, 6, 5)
    np.testing.assert_allclose(got, x.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)
    assert f.native_reasons([Weights(w), x]) == {}
    with pytest.raises(TypingError):  # without it, nopython mode as numba.njit
        mixpert.jit(apply_weights)(Weights(w), x)


@pytest.mark.parametrize(
    ("options", "name"),
    [
        ({"pipeline_class": object}, "pipeline_class"),
        ({"_nrt": False}, "_nrt"),
        ({"nopython": False}, "nopython"),
        ({"no_cpython_wrapper": True}, "no_cpython_wrapper"),
        ({"nopython": True, "forceobj": True}, "forceobj"),
    ],
)
def test_options_mixpert_cannot_honour_are_refused_by_name(options, name) -> None:
    with pytest.raises(ValueError, match=name):
        mixpert.jit(matmul, **options)


def test_an_unknown_option_raises_numbas_key_error_when_decorated() -> None:
    with pytest.raises(KeyError, match="bogus"):
        mixpert.jit(matmul, bogus=True)


def first_element(a, b):
    c = (a @ b)[0, 0]
    return c


@pytest.mark.parametrize(
    "options",
    [
        {"parallel": True},
        {"fastmath": True},
        {"boundscheck": True},
        {"error_model": "numpy"},
        {"nogil": True},
        {"locals": {"c": numba.float32}},
    ],
    ids=str,
)
def test_numba_options_mixpert_honours(options) -> None:
    a, b = RNG.standard_normal((3, 3)), RNG.standard_normal((3, 3))
    assert mixpert.jit(first_element, **options)(a, b) == numba.njit(first_element, **options)(a, b)


def strided_product(a, b):
    return a @ b


def test_numbas_contiguity_warning_comes_with_and_without_tol() -> None:
    """numba.njit warns once when it compiles a product of non-contiguous operands; so does
    every mixpert variant, tuned or not, whatever compiled those types before."""
    a = RNG.standard_normal((16, 32)).astype(np.float32)[:, ::2]
    b = RNG.standard_normal((16, 16)).astype(np.float32)
    expected = "'@' is faster on contiguous arrays, called on (Array(float32, 2, 'A'"
    for options in ({}, {"tol": 1e-3}, {}):
        f = mixpert.jit(strided_product, **options)
        for call in range(2):
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                f(a, b)
            said = [
                _ANSI.sub("", str(w.message))
                for w in caught
                if issubclass(w.category, NumbaPerformanceWarning)
            ]
            assert len(said) == (1 - call) and all(s.startswith(expected) for s in said), said


def test_signatures_compile_now_as_numba_njit_does() -> None:
    sig = "float64[:, :](float64[:, :], float64[:, :])"
    f = mixpert.jit(sig)(matmul)
    assert len(f.dispatcher.signatures) == 1
    a = RNG.standard_normal((3, 3))
    np.testing.assert_array_equal(f(a, a), numba.njit(sig)(matmul)(a, a))
    with pytest.raises(TypeError, match="No matching definition"):
        f(a.astype(np.float32), a.astype(np.float32))
    g = mixpert.jit([sig, "float32[:, :](float32[:, :], float32[:, :])"], fastmath=True)(matmul)
    assert len(g.dispatcher.signatures) == 2


def test_np_dot_of_float32_stacks_is_one_emulated_product_with_numpys_axes() -> None:
    a = RNG.standard_normal((2, 3, 8)).astype(np.float32)
    b = RNG.standard_normal((4, 8, 5)).astype(np.float32)
    f = mixpert.jit(dot)
    f.plan = dict.fromkeys(f.ops, "V")
    with mixpert.record() as calls:
        got = f(a, b)
    assert got.shape == (2, 3, 4, 5) and len(calls) == 1 and calls[0].shape == (6, 8, 20)
    np.testing.assert_allclose(got, np.dot(a.astype(np.float64), b), rtol=1e-5, atol=1e-5)


@pytest.mark.filterwarnings("ignore::mixpert.NotEmulatedWarning")
@pytest.mark.parametrize("form", [dot, pytest.param(method_dot, marks=pytest.mark.slow)])
def test_np_dot_with_a_number_multiplies_as_numpy_does(form) -> None:
    """Numba's np.dot takes no number; NumPy's multiplies, in both operands' dtype as arrays."""
    a = RNG.standard_normal((2, 3)).astype(np.float32)
    for x, y in [(a, np.float64(2.5)), (a, np.array(-1.5)), (np.arange(3), np.float64(0.5))]:
        want = form(x, y)
        got = mixpert.jit(form)(x, y)
        assert got.dtype == want.dtype == np.float64 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    with pytest.raises(TypingError):
        numba.njit(form)(a, np.float64(2.5))


def writes_in_place(a, b, out):
    np.dot(a, b, out)
    a @= b
    return a


def test_forceobj_keeps_numpys_rules_for_in_place_and_out() -> None:
    a, b = RNG.standard_normal((3, 3)).astype(np.float32), RNG.standard_normal((3, 3))
    out = np.zeros((3, 3))
    want_a, want_out = a.copy(), out.copy()
    writes_in_place(want_a, b, want_out)
    got_a = a.copy()
    mixpert.jit(writes_in_place, forceobj=True)(got_a, b, out)
    np.testing.assert_array_equal(got_a, want_a)
    np.testing.assert_array_equal(out, want_out)
    with pytest.raises(ValueError):  # NumPy's rule for an out of another dtype, object mode too
        mixpert.jit(writes_in_place, forceobj=True)(a, a, np.zeros((3, 3)))
