"""``gemm_call(op_index, a, b) -> (status, out)``: the call of ``mixpert_gemm`` from compiled code.

An intrinsic rather than Python-level code (``np.empty``, ``a.ctypes.data``, ``a.strides``):
it allocates the float32 (m, n) output and passes the operands' data pointers, shapes and byte
strides straight from the array structs, so no extra NumPy overloads are typed and compiled for
each signature (this keeps mixpert's compile time close to plain Numba's).
"""

from __future__ import annotations

from typing import Any

from llvmlite import ir as llvm
from numba.core import cgutils, types
from numba.extending import intrinsic
from numba.np.arrayobj import _empty_nd_impl, make_array

from mixpert.execution.hook import GEMM_ARGUMENTS, STACK_ARGUMENTS, STACK_SYMBOL, SYMBOL

_OUT = types.Array(types.float32, 2, "C")
_I64 = llvm.IntType(64)


def _operands(context: Any, builder: Any, signature: Any, args: Any) -> tuple[Any, Any, Any]:
    """The op index as int64 and the two operands' array structs."""
    index_value, a_value, b_value = args
    index_value = context.cast(builder, index_value, signature.args[0], types.int64)
    a_arr = make_array(signature.args[1])(context, builder, a_value)
    b_arr = make_array(signature.args[2])(context, builder, b_value)
    return index_value, a_arr, b_arr


@intrinsic
def gemm_call(typingctx: Any, op_index: types.Type, a: types.Type, b: types.Type) -> Any:
    sig = types.Tuple((types.int32, _OUT))(types.int64, a, b)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        index_value, a_arr, b_arr = _operands(context, builder, signature, args)
        a_shape = cgutils.unpack_tuple(builder, a_arr.shape, 2)
        b_shape = cgutils.unpack_tuple(builder, b_arr.shape, 2)
        a_strides = cgutils.unpack_tuple(builder, a_arr.strides, 2)
        b_strides = cgutils.unpack_tuple(builder, b_arr.strides, 2)
        out = _empty_nd_impl(context, builder, _OUT, [a_shape[0], b_shape[1]])
        fnty = llvm.FunctionType(llvm.IntType(32), [_I64] * GEMM_ARGUMENTS)
        fn = cgutils.get_or_insert_function(builder.module, fnty, SYMBOL)
        status = builder.call(
            fn,
            [
                index_value,
                a_shape[0],
                a_shape[1],
                b_shape[0],
                b_shape[1],
                builder.ptrtoint(a_arr.data, _I64),
                a_strides[0],
                a_strides[1],
                builder.ptrtoint(b_arr.data, _I64),
                b_strides[0],
                b_strides[1],
                builder.ptrtoint(out.data, _I64),
            ],
        )
        return context.make_tuple(builder, signature.return_type, [status, out._getvalue()])

    return sig, codegen


_STACK_OUT = types.Array(types.float32, 3, "C")


@intrinsic
def gemm_stack_call(typingctx: Any, op_index: types.Type, a: types.Type, b: types.Type) -> Any:
    """``(status, out)`` of ``mixpert_gemm_stack`` for two C-contiguous float32 stacks of one
    length, (s, m, k) and (s, k, n); ``out`` is (s, m, n)."""
    sig = types.Tuple((types.int32, _STACK_OUT))(types.int64, a, b)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        index_value, a_arr, b_arr = _operands(context, builder, signature, args)
        count, m, k = cgutils.unpack_tuple(builder, a_arr.shape, 3)
        n = cgutils.unpack_tuple(builder, b_arr.shape, 3)[2]
        out = _empty_nd_impl(context, builder, _STACK_OUT, [count, m, n])
        fnty = llvm.FunctionType(llvm.IntType(32), [_I64] * STACK_ARGUMENTS)
        fn = cgutils.get_or_insert_function(builder.module, fnty, STACK_SYMBOL)
        pointers = [builder.ptrtoint(x.data, _I64) for x in (a_arr, b_arr, out)]
        status = builder.call(fn, [index_value, count, m, k, n, *pointers])
        return context.make_tuple(builder, signature.return_type, [status, out._getvalue()])

    return sig, codegen
