"""Bad inputs raise errors naming the operand, the value and the rule; other dtypes get
np.matmul's meaning, natively (issue 38; the ported NumPy tests: test_matmul_is_np_matmul.py)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from conftest import normal

import mixpert
from mixpert.runtime import LADDER, device

ALL_LEVELS = [lv.name for lv in LADDER]


@pytest.fixture
def ab() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(11)
    return normal(rng, (3, 4)), normal(rng, (4, 2))


def test_mismatched_shapes_name_both(ab) -> None:
    a, _ = ab
    b = np.ones((5, 2), np.float32)
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5, 2\)") as info:
        mixpert.matmul(a, b)
    assert "a.shape[1] = 4" in str(info.value) and "b.shape[0] = 5" in str(info.value)
    with pytest.raises(ValueError, match=r"a is \(2, 4\), b is \(3, 4\)"):
        mixpert.matmul(np.ones((2, 4), np.float32), a)  # not a @ a


@pytest.mark.parametrize(
    "dtype", [np.int8, np.int32, np.int64, np.uint8, np.complex64, np.complex128, np.bool_]
)
@pytest.mark.parametrize("which", ["a", "b"])
def test_other_dtypes_are_np_matmul(ab, dtype, which: str) -> None:
    a, b = ab
    if which == "a":
        a = (a * 4).astype(dtype)
    else:
        b = (b * 4).astype(dtype)
    want = np.matmul(a, b)
    got = mixpert.matmul(a, b, level="V")
    assert got.dtype == want.dtype
    if want.dtype == np.float32:  # int8, uint8, bool beside float32: NumPy's float32 loop
        bound = 2 * 4 * 2.0**-24 * (np.abs(a).astype(np.float64) @ np.abs(b))
        assert np.all(np.abs(got - want.astype(np.float64)) <= 2 * bound + 1e-30)
    else:
        assert np.array_equal(got, want)


@pytest.mark.parametrize("which", ["a", "b"])
def test_a_0d_operand_is_a_value_error(ab, which: str) -> None:
    a, b = ab
    bad = np.ones((), np.float32)
    args = (bad, b) if which == "a" else (a, bad)
    with pytest.raises(ValueError, match=rf"operand {which} has ndim=0 \(shape \(\)\)"):
        mixpert.matmul(*args)


@pytest.mark.parametrize(
    ("shape_a", "shape_b"),
    [((2, 3, 4), (5, 6)), ((7,), (6, 5)), ((2, 3, 4), (3, 4, 2)), ((2, 5, 4), (3, 4, 2))],
)
def test_mismatched_vectors_and_stacks_name_the_shapes(shape_a, shape_b) -> None:
    a, b = np.ones(shape_a, np.float32), np.ones(shape_b, np.float32)
    with pytest.raises(ValueError, match=re.escape(str(shape_b)[:3])):
        mixpert.matmul(a, b)


@pytest.mark.parametrize(
    ("bad", "error"), [(3.0, ValueError), ("ab", TypeError), (None, ValueError)]
)
def test_what_np_matmul_refuses_is_refused_alike(ab, bad, error) -> None:
    a, b = ab
    for args in ((bad, b), (a, bad)):
        with pytest.raises(error) as numpy_error:
            np.matmul(*args)
        with pytest.raises(error) as ours:
            mixpert.matmul(*args)
        assert type(ours.value) is type(numpy_error.value)


def test_lists_are_converted_as_numpy_converts_them(ab) -> None:
    a, b = ab
    got = mixpert.matmul([[1.0, 2.0, 3.0, 4.0]], b)  # a list of floats is float64
    assert got.dtype == np.float64 and np.array_equal(got, np.matmul([[1.0, 2.0, 3.0, 4.0]], b))
    assert np.array_equal(mixpert.matmul([[1, 2], [3, 4]], ((1,), (1,))), [[3], [7]])


@pytest.mark.parametrize("level", ["VI", "iv6", "", "float32", 4, 1.5])
def test_unknown_level_lists_the_known_ones(ab, level) -> None:
    with pytest.raises(ValueError, match=re.escape(f"level={level!r}")) as info:
        mixpert.matmul(*ab, level=level)
    message = str(info.value)
    assert all(re.search(rf"\b{name}\b", message) for name in [*ALL_LEVELS, "auto"]), message


def test_unknown_level_is_reported_before_operand_errors() -> None:
    with pytest.raises(ValueError, match="known levels"):
        mixpert.matmul(np.ones(3, np.int32), np.ones(3), level="nope")


def test_unknown_backend(ab) -> None:
    with pytest.raises(ValueError, match=r"backend='gpu'.*'auto', 'cpu', 'cuda'"):
        mixpert.matmul(*ab, backend="gpu")


@pytest.mark.skipif(device.gpu_available(), reason="a GPU is usable here")
def test_cuda_backend_without_gpu_says_why(ab) -> None:
    with pytest.raises(RuntimeError, match=re.escape(device.unavailable_reason())):
        mixpert.matmul(*ab, backend="cuda")


@pytest.mark.parametrize("name", ALL_LEVELS)
def test_float64_and_float16_keep_numpys_dtype(name: str) -> None:
    """float64 (also beside float32) runs in float64 and float16 alone in float16, natively,
    as np.matmul does; float16 beside float32 is NumPy's float32 product, emulated."""
    rng = np.random.default_rng(12)
    a64 = rng.standard_normal((9, 13)) * np.exp(rng.standard_normal((9, 13)))
    b64 = rng.standard_normal((13, 6))
    a16, b16 = a64.astype(np.float16), b64.astype(np.float16)
    for x, y in ((a64, b64), (a64.astype(np.float32), b64), (a16, b16), (a16, b64)):
        got, want = mixpert.matmul(x, y, level=name), np.matmul(x, y)
        assert got.dtype == want.dtype and np.array_equal(got, want)
    mixed = mixpert.matmul(a16, b64.astype(np.float32), level=name)
    want = mixpert.matmul(a16.astype(np.float32), b64.astype(np.float32), level=name)
    assert mixed.dtype == np.float32 and np.array_equal(mixed, want)


def test_default_level_is_auto(ab) -> None:
    assert mixpert.DEFAULT_LEVEL == "auto"
    assert np.array_equal(mixpert.matmul(*ab, backend="cpu"), mixpert.matmul(*ab, level="fp32"))


def test_auto_level_is_native_float32_on_the_cpu(ab) -> None:
    got = mixpert.matmul(*ab, level="auto", backend="cpu")
    assert np.array_equal(got, mixpert.matmul(*ab, level="fp32"))


def test_level_objects_are_accepted(ab) -> None:
    level = mixpert.get_level("V")
    assert np.array_equal(mixpert.matmul(*ab, level=level), mixpert.matmul(*ab, level="V"))


def test_inputs_are_not_modified() -> None:
    rng = np.random.default_rng(13)
    a, b = normal(rng, (5, 7)), normal(rng, (7, 3))
    a[1, 2], b[0, 1] = np.nan, np.inf
    a_copy, b_copy = a.copy(), b.copy()
    for name in ALL_LEVELS:
        mixpert.matmul(a, b, level=name)
    assert np.array_equal(a, a_copy, equal_nan=True) and np.array_equal(b, b_copy)


# ---- workspace --------------------------------------------------------------------------------


@pytest.mark.parametrize("level", ["IV", "V"])
@pytest.mark.parametrize("shape", [(384, 384, 384), (128, 1536, 128), (1024, 128, 48)])
def test_cpu_workspace_stays_within_4x_operands_and_output(level, shape) -> None:
    import tracemalloc

    m, k, n = shape
    rng = np.random.default_rng(1)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    tracemalloc.start()
    try:
        mixpert.matmul(a, b, level=level)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak <= 4 * (a.nbytes + b.nbytes + 4 * m * n)


def test_a_product_that_cannot_fit_is_refused_before_allocating(monkeypatch) -> None:
    from mixpert.runtime import workspace

    monkeypatch.setattr(workspace, "available_host_bytes", lambda: 1_000_000)
    a = np.ones((300, 400), np.float32)
    with pytest.raises(MemoryError, match=r"level IV: a \(300 x 400\) @ \(400 x 200\) product"):
        mixpert.matmul(a, np.ones((400, 200), np.float32), level="IV")
