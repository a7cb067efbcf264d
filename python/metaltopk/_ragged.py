"""Ragged top-k (docs/CONTRACT.md, "Ragged rows"): metaltopk.topk with lengths and starts, and
the two index-transform functions, for inputs numpy can read. On the CPU backend the arrays are
described in place; on a GPU backend every array is copied there and the outputs back.

Every check the library makes is left to it (its message, with the C field names turned into
this API's argument names, becomes the exception), except the dtypes of the index arrays: a
numpy dtype the library has no code for (bool, uint64, ...) must still name its argument.
"""

import numpy as np

from ._abi import (DeviceBuffers, as_native_array, byte_extent, check, context,
                   contiguous_strides, describe, dtype_name, element_strides, memcpy)
from ._arguments import integer
from ._ffi import ffi, lib

_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
TRANSFORM_NONE = lib.MTK_INDEX_TRANSFORM_NONE
TRANSFORM_RAGGED = lib.MTK_INDEX_TRANSFORM_RAGGED
TRANSFORM_PAGE_TABLE = lib.MTK_INDEX_TRANSFORM_PAGE_TABLE


def rows_of(x, function):
    """x as a native 2-D numpy array, or ValueError naming the input."""
    array = as_native_array(x)
    if array.ndim != 2:
        raise ValueError(f"metaltopk.{function}: input.ndim = {array.ndim} must be 2 "
                         "([rows, n]) for ragged rows")
    return array


def topk_ragged(x, k, dim, largest, sorted, lengths, starts, return_values, backend):
    """metaltopk.topk with lengths (arguments checked): (values, indices), or indices alone."""
    array = rows_of(x, "topk")
    if not -2 <= dim <= 1:
        raise IndexError(f"metaltopk.topk: dim = {dim} is out of range for a 2-d input "
                         "(expected -2 <= dim <= 1)")
    along_rows = dim % 2 == 1  # dim 0 runs on the transposed view: columns are the rows
    call = RaggedCall("topk", array if along_rows else array.T, k, largest, sorted, lengths,
                      starts, return_values=return_values)
    values, indices = call.run(context(backend))
    if not along_rows:
        values = None if values is None else np.ascontiguousarray(values.T)
        indices = np.ascontiguousarray(indices.T)
    return (values, indices) if return_values else indices


def topk_ragged_transform(scores, offsets, lengths, k, backend):
    """FlashInfer's top_k_ragged_transform: int32 [rows, k], offsets[r] + index, -1 padded."""
    k = integer(k, "k", "topk_ragged_transform")
    call = RaggedCall("topk_ragged_transform", rows_of(scores, "topk_ragged_transform"), k,
                      True, True, lengths, transform=TRANSFORM_RAGGED, offsets=offsets,
                      index_dtype=np.int32, return_values=False)
    return call.run(context(backend, function="topk_ragged_transform"))[1]


def topk_page_table_transform(scores, src_page_table, lengths, k, row_to_batch, page_size,
                              backend):
    """FlashInfer's top_k_page_table_transform: int32 [rows, k], each winner's index mapped
    through its row's page table, -1 padded."""
    function = "topk_page_table_transform"
    k = integer(k, "k", function)
    page_size = integer(page_size, "page_size", function)
    call = RaggedCall(function, rows_of(scores, function), k, True, True, lengths,
                      transform=TRANSFORM_PAGE_TABLE, page_table=src_page_table,
                      page_size=page_size, row_to_batch=row_to_batch, index_dtype=np.int32,
                      return_values=False)
    return call.run(context(backend, function=function))[1]


class RaggedCall:
    """One ragged call's arguments as native numpy arrays: input [rows, n] and the index arrays
    of mtk_ragged_params, named as the Python API names them."""

    def __init__(self, function, array, k, largest, sorted, lengths, starts=None,
                 transform=TRANSFORM_NONE, offsets=None, page_table=None, page_size=1,
                 row_to_batch=None, index_dtype=np.int64, return_values=True):
        if k < 0:  # before the outputs [rows, k] are allocated; the library's message
            raise ValueError(f"metaltopk.{function}: k = {k} is negative (expected k >= 0)")
        self.function = function
        self.input = array
        self.k, self.largest, self.sorted = k, largest, sorted
        self.transform, self.page_size = transform, page_size
        self.index_dtype = np.dtype(index_dtype)
        self.return_values = return_values
        self.arrays = {name: self.index_array(value, name) for name, value in (
            ("lengths", lengths), ("starts", starts), ("offsets", offsets),
            ("src_page_table", page_table), ("row_to_batch", row_to_batch))
            if value is not None}

    def index_array(self, value, name):
        array = np.asarray(value)
        if array.dtype not in _INDEX_DTYPES:
            if array.size == 0 and isinstance(value, (list, tuple)):
                array = array.astype(np.int64)  # numpy reads an empty list as float64
            else:
                raise TypeError(f"metaltopk.{self.function}: {name}.dtype = {array.dtype} must "
                                "be int32 or int64")
        return as_native_array(array)

    def translate(self, message):
        """The library's message with the C names of params' fields as this API's arguments."""
        return (message.replace("params.page_table", "src_page_table")
                .replace("params.", "").replace("mtk_topk_ragged", f"metaltopk.{self.function}"))

    def run(self, ctx):
        """(values or None, indices) as numpy arrays."""
        return (run_on_host if ctx.on_host else run_via_device)(ctx, self)


def _descriptor(pointer, array):
    return describe(pointer, dtype_name(array.dtype), array.shape, element_strides(array))


def _outputs(call):
    rows = call.input.shape[0]
    values = np.empty((rows, call.k), call.input.dtype) if call.return_values else None
    return values, np.empty((rows, call.k), call.index_dtype)


def _call_library(ctx, call, tensors, values, indices):
    """tensors: name -> mtk_tensor* of the input and the index arrays."""
    params = ffi.new("mtk_ragged_params*")
    params.struct_size = ffi.sizeof("mtk_ragged_params")
    params.transform = call.transform
    params.page_size = call.page_size
    params.lengths = tensors["lengths"]
    for field, name in (("starts", "starts"), ("offsets", "offsets"),
                        ("page_table", "src_page_table"), ("row_to_batch", "row_to_batch")):
        if name in tensors:
            setattr(params, field, tensors[name])
    status = lib.mtk_topk_ragged(ctx.handle, tensors["input"], call.k, call.largest,
                                 call.sorted, params, values if values is not None else ffi.NULL,
                                 indices, ffi.NULL)
    check(status, ctx.backend, call.translate)


def run_on_host(ctx, call):
    values, indices = _outputs(call)
    sources = {"input": call.input, **call.arrays}
    tensors = {name: _descriptor(array.ctypes.data, array) for name, array in sources.items()}
    _call_library(ctx, call, tensors,
                  None if values is None else _descriptor(values.ctypes.data, values),
                  _descriptor(indices.ctypes.data, indices))
    return values, indices


def run_via_device(ctx, call):
    """Each array's memory span goes up with its strides intact; outputs come back whole."""
    values, indices = _outputs(call)
    sources = {"input": call.input, **call.arrays}
    with DeviceBuffers(ctx) as buffers:
        tensors = {}
        for name, array in sources.items():
            low, high = byte_extent(array)
            device = buffers.allocate(high - low)
            memcpy(ctx, device, array.ctypes.data + low, high - low, lib.MTK_COPY_HOST_TO_DEVICE)
            tensors[name] = _descriptor(device - low if array.size else 0, array)
        outputs = [(host, buffers.allocate(host.nbytes)) for host in (values, indices)
                   if host is not None]
        described = [describe(device, dtype_name(host.dtype), host.shape,
                              contiguous_strides(host.shape)) for host, device in outputs]
        try:
            _call_library(ctx, call, tensors, described[0] if values is not None else None,
                          described[-1])
            for host, device in outputs:
                memcpy(ctx, host.ctypes.data, device, host.nbytes, lib.MTK_COPY_DEVICE_TO_HOST)
        finally:
            # Host buffers and device memory must outlive the queued work, even on failure.
            check(lib.mtk_synchronize(ctx.handle, ffi.NULL), ctx.backend)
    return values, indices
