"""``runtime.cuda.transfers`` without a GPU: its pieces, offsets and layouts, against a stand-in
for CuPy whose "device" memory is host memory and whose copies are ``memmove``. The copy engine's
asynchrony is the GPU's to show (tests/runtime/test_one_trip_gpu.py); what pieces go where, in
any layout and across many staging buffers, is checked here bit for bit."""

from __future__ import annotations

import ctypes
import importlib
import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest


class DeviceArray(np.ndarray):
    """Stand-in device memory: a host array with CuPy's ``.data.ptr``."""

    @property
    def data(self) -> Any:  # type: ignore[override]
        return SimpleNamespace(ptr=self.__array_interface__["data"][0])


class Pinned(bytearray):
    """Stand-in pinned memory: a buffer with CuPy's ``.ptr``."""

    @property
    def ptr(self) -> int:
        return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))


def _fake_cupy(copies: list[tuple[int, int]]) -> ModuleType:
    def memcpy_async(dst: int, src: int, size: int, kind: int, stream: int) -> None:
        copies.append((kind, size))
        ctypes.memmove(dst, src, size)

    runtime = SimpleNamespace(
        memcpyAsync=memcpy_async, memcpyHostToDevice=1, memcpyDeviceToHost=2, getDevice=lambda: 0
    )
    event = SimpleNamespace(record=lambda stream: None, synchronize=lambda: None)
    cuda = SimpleNamespace(
        runtime=runtime,
        alloc_pinned_memory=lambda size: Pinned(size),
        Event=lambda **options: event,
        get_current_stream=lambda: SimpleNamespace(ptr=0),
    )
    cupy = ModuleType("cupy")
    cupy.cuda = cuda  # type: ignore[attr-defined]
    cupy.empty = lambda shape, dtype: np.empty(shape, dtype).view(DeviceArray)  # type: ignore[attr-defined]
    cupy.ascontiguousarray = lambda a: np.ascontiguousarray(a).view(DeviceArray)  # type: ignore[attr-defined]
    return cupy


@pytest.fixture
def transfers(monkeypatch: pytest.MonkeyPatch) -> Any:
    """The module imported afresh over the stand-in; the real one (if any) back after."""
    copies: list[tuple[int, int]] = []
    name = "mixpert.runtime.cuda.transfers"
    package = importlib.import_module("mixpert.runtime.cuda")
    real = sys.modules.get(name), package.__dict__.get("transfers")
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(copies))
    sys.modules.pop(name, None)
    module = importlib.import_module(name)
    monkeypatch.setattr(module, "SLOT_BYTES", 4096)  # many pieces from small arrays
    module.copies = copies
    yield module
    for table, key, value in (
        (sys.modules, name, real[0]),
        (package.__dict__, "transfers", real[1]),
    ):
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value


RNG = np.random.default_rng(5)


def layouts() -> dict[str, np.ndarray]:
    return {
        "C": RNG.standard_normal((37, 29)).astype(np.float32),
        "F": np.asfortranarray(RNG.standard_normal((37, 29)).astype(np.float32)),
        "strided": RNG.standard_normal((40, 60)).astype(np.float32)[::3, 1::2],
        "negative": RNG.standard_normal((20, 30)).astype(np.float32)[::-1, ::-2],
        "0-d": np.array(2.5, np.float32),
        "empty": np.zeros((0, 7), np.float32),
        "1-d strided": RNG.standard_normal(5000).astype(np.float32)[::3],
        "long rows": RNG.standard_normal((3, 3000)).astype(np.float32)[:, ::2],  # rows > a slot
        "int64": RNG.integers(-9, 9, (13, 50)),
        "bool": RNG.random((70, 3)) > 0.5,
        "complex128": RNG.standard_normal((6, 40)) + 1j * RNG.standard_normal((6, 40)),
        "3-d": RNG.standard_normal((4, 50, 6)).astype(np.float32).transpose(1, 0, 2),
    }


def same_bits(x: np.ndarray, y: np.ndarray) -> bool:
    x, y = np.asarray(x), np.asarray(y)
    return (
        x.dtype == y.dtype
        and x.shape == y.shape
        and np.array_equal(
            np.ascontiguousarray(x).reshape(-1).view(np.uint8),
            np.ascontiguousarray(y).reshape(-1).view(np.uint8),
        )
    )


@pytest.mark.parametrize("name", list(layouts()))
def test_pieces_land_where_they_belong_in_any_layout(transfers: Any, name: str) -> None:
    array = layouts()[name]
    copy = transfers.to_device(array)
    assert isinstance(copy, DeviceArray) and same_bits(copy.view(np.ndarray), array)
    if array.flags.c_contiguous or array.flags.f_contiguous:
        assert copy.strides == array.strides  # mirrored byte for byte
    slot = transfers.SLOT_BYTES
    assert all(size <= slot for kind, size in transfers.copies)  # every piece fits a slot
    assert sum(size for _, size in transfers.copies) == array.nbytes
    back = transfers.to_host(copy)
    assert type(back) is np.ndarray and same_bits(back, array)
    if not array.ndim:
        into = np.zeros((), array.dtype)
        assert transfers.to_host(copy, into) is into and same_bits(into, array)
        return
    wide = np.zeros((*array.shape[:-1], 2 * array.shape[-1]), array.dtype)
    into = wide[..., ::2]
    assert transfers.to_host(copy, into) is into and same_bits(into, array)
    assert not wide[..., 1::2].any()  # nothing written beside it
    fortran = np.asfortranarray(np.zeros_like(array))
    assert transfers.to_host(copy, fortran) is fortran and same_bits(fortran, array)


def test_out_of_another_kind_is_refused(transfers: Any) -> None:
    copy = transfers.to_device(np.ones((3, 4), np.float32))
    with pytest.raises(ValueError, match=r"out is float64\[3, 4\], the array float32\[3, 4\]"):
        transfers.to_host(copy, np.zeros((3, 4)))
