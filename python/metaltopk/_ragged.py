"""Ragged top-k (docs/CONTRACT.md, "Ragged rows"): metaltopk.topk with lengths and starts, and
the two index-transform functions.

A call's scalar arguments travel as one RaggedRequest, its arrays by the names the Python API
gives them; metaltopk._dispatch hands the request to one implementation per kind of input:
- numpy arrays (RaggedCall): described in place on the CPU backend; on a GPU backend every
  array is copied there and the outputs back;
- device tensors that an array adapter described (torch, CuPy: run_device_tensors): read in
  place on their device, outputs and scratch allocated by the adapter there, the call enqueued on
  the input's stream.

Every check the library makes is left to it (its message, with the C field names turned into
this API's argument names, becomes the exception), except the dtypes of the index arrays: a
dtype the library has no code for (bool, uint64, ...) must still name its argument.
"""

import numpy as np

from ._abi import (DTYPE_CODES, DeviceBuffers, as_native_array, byte_extent, check, context,
                   contiguous_strides, describe, dtype_name, element_strides, memcpy,
                   stream_handle)
from ._arguments import check_backend_matches, integer
from ._ffi import ffi, lib

_INDEX_DTYPES = (np.dtype(np.int32), np.dtype(np.int64))
INDEX_DTYPE_NAMES = ("int32", "int64")
TRANSFORM_NONE = lib.MTK_INDEX_TRANSFORM_NONE
TRANSFORM_RAGGED = lib.MTK_INDEX_TRANSFORM_RAGGED
TRANSFORM_PAGE_TABLE = lib.MTK_INDEX_TRANSFORM_PAGE_TABLE
# The Python argument of each tensor of mtk_ragged_params, in the order the C fields come.
PARAM_ARGUMENTS = (("lengths", "lengths"), ("starts", "starts"), ("offsets", "offsets"),
                   ("page_table", "src_page_table"), ("row_to_batch", "row_to_batch"))


class RaggedRequest:
    """One ragged call's checked scalar arguments and its index arrays by argument name (those
    given: lengths always; starts, offsets, src_page_table, row_to_batch as the call has them).
    dim is -1 or 1 (rows along the last dim) or -2 or 0 (the transposed input's rows)."""

    def __init__(self, function, k, arrays, dim=-1, largest=True, sorted=True,
                 transform=TRANSFORM_NONE, page_size=1, index_dtype="int64",
                 return_values=True):
        if not -2 <= dim <= 1:
            raise IndexError(f"metaltopk.{function}: dim = {dim} is out of range for a 2-d "
                             "input (expected -2 <= dim <= 1)")
        self.function = function
        self.k, self.dim, self.largest, self.sorted = k, dim, largest, sorted
        self.transform, self.page_size = transform, page_size
        self.index_dtype = index_dtype
        self.return_values = return_values
        self.arrays = {name: value for name, value in arrays.items() if value is not None}

    @property
    def along_rows(self):
        return self.dim % 2 == 1

    def translate(self, message):
        """The library's message with the C names of params' fields as this API's arguments."""
        message = (message.replace("params.page_table", "src_page_table")
                   .replace("params.", "")
                   .replace("mtk_topk_ragged", f"metaltopk.{self.function}"))
        return f"metaltopk.{self.function}: {message}"

    def params(self, tensors):
        """mtk_ragged_params over tensors (argument name -> mtk_tensor*)."""
        params = ffi.new("mtk_ragged_params*")
        params.struct_size = ffi.sizeof("mtk_ragged_params")
        params.transform = self.transform
        params.page_size = self.page_size
        for field, name in PARAM_ARGUMENTS:
            if name in tensors:
                setattr(params, field, tensors[name])
        return params


def topk_request(k, dim, largest, sorted, lengths, starts, return_values):
    """metaltopk.topk's request (its arguments checked by the caller)."""
    return RaggedRequest("topk", k, {"lengths": lengths, "starts": starts}, dim, largest,
                         sorted, return_values=return_values)


def ragged_transform_request(offsets, lengths, k):
    function = "topk_ragged_transform"
    return RaggedRequest(function, integer(k, "k", function),
                         {"offsets": offsets, "lengths": lengths}, transform=TRANSFORM_RAGGED,
                         index_dtype="int32", return_values=False)


def page_table_transform_request(src_page_table, lengths, k, row_to_batch, page_size):
    function = "topk_page_table_transform"
    return RaggedRequest(function, integer(k, "k", function),
                         {"src_page_table": src_page_table, "lengths": lengths,
                          "row_to_batch": row_to_batch},
                         transform=TRANSFORM_PAGE_TABLE,
                         page_size=integer(page_size, "page_size", function),
                         index_dtype="int32", return_values=False)


def result(request, values, indices):
    """What the front door returns: (values, indices) for topk, else the indices alone."""
    return (values, indices) if request.return_values else indices


def rows_of(x, function):
    """x as a native 2-D numpy array, or ValueError naming the input."""
    array = as_native_array(x)
    if array.ndim != 2:
        raise ValueError(f"metaltopk.{function}: input.ndim = {array.ndim} must be 2 "
                         "([rows, n]) for ragged rows")
    return array


def run_host_arrays(x, request, backend):
    """Inputs numpy reads: numpy outputs, on any backend."""
    array = rows_of(x, request.function)
    call = RaggedCall(request, array if request.along_rows else array.T)
    values, indices = call.run(context(backend, function=request.function))
    if not request.along_rows:
        values = None if values is None else np.ascontiguousarray(values.T)
        indices = np.ascontiguousarray(indices.T)
    return result(request, values, indices)


def check_index_dtype(dtype, name, function):
    """TypeError naming the argument unless dtype (numpy's, torch's, CuPy's) is int32 or
    int64."""
    if str(dtype).rpartition(".")[2] not in INDEX_DTYPE_NAMES:
        raise TypeError(f"metaltopk.{function}: {name}.dtype = {dtype} must be int32 or int64")


def run_device_tensors(view, request, index_views, backend=None):
    """An input and index arrays that an array adapter described (index_views: argument name ->
    DeviceTensor or None where the adapter does not know the array), all on one device. Outputs
    and scratch come from the adapter on that device; the call runs on the input's stream.
    Returns what the front door returns, as the adapter's arrays."""
    function = request.function
    device = f"{view.backend}:{view.device_index}"
    check_backend_matches(backend, view.backend, device, function)
    if len(view.shape) != 2:
        raise ValueError(f"metaltopk.{function}: input.ndim = {len(view.shape)} must be 2 "
                         "([rows, n]) for ragged rows")
    tensors = {}
    for name, index_view in index_views.items():
        if index_view is None or (index_view.backend, index_view.device_index) != (
                view.backend, view.device_index):
            raise ValueError(f"metaltopk.{function}: {name} must be an array on the input's "
                             f"device ({device})")
        check_index_dtype(index_view.dtype, name, function)
        tensors[name] = describe(index_view.data, index_view.dtype, index_view.shape,
                                 index_view.strides)
    shape, strides = view.shape, view.strides
    if not request.along_rows:  # the transposed view: dim 0's columns are the rows
        shape, strides = shape[::-1], strides[::-1]
    input_t = describe(view.data, view.dtype, shape, strides)
    params = request.params(tensors)
    ctx = context(view.backend, view.device_index)
    k = request.k
    size = ffi.new("size_t*")
    # Checks every argument before anything is allocated.
    check(lib.mtk_topk_ragged_workspace_size(ctx.handle, input_t, k, request.largest,
                                             request.sorted, params,
                                             DTYPE_CODES[request.index_dtype], size),
          ctx.backend, request.translate)
    rows = shape[0]
    out_shape = (rows, k) if request.along_rows else (k, rows)
    # Outputs are contiguous in the caller's layout; dim 0's are described transposed.
    out_strides = (k, 1) if request.along_rows else (1, rows)
    indices = view.new_empty(out_shape, request.index_dtype)
    indices_t = describe(indices.data, indices.dtype, (rows, k), out_strides)
    values = values_t = None
    if request.return_values:
        values = view.new_empty(out_shape, view.dtype)
        values_t = describe(values.data, values.dtype, (rows, k), out_strides)
    # Held until the library has enqueued its work: a device allocator hands freed memory out
    # again only in stream order.
    scratch = view.new_empty((size[0],), "uint8") if size[0] else None
    status = lib.mtk_topk_ragged_with_workspace(
        ctx.handle, input_t, k, request.largest, request.sorted, params,
        values_t if values_t is not None else ffi.NULL, indices_t,
        ffi.cast("void*", scratch.data) if scratch is not None else ffi.NULL, size[0],
        stream_handle(view.stream))
    check(status, ctx.backend, request.translate)
    return result(request, values.owner if values is not None else None, indices.owner)


class RaggedCall:
    """One request's arrays as native numpy arrays: the input [rows, n] and the index arrays of
    mtk_ragged_params, by argument name."""

    def __init__(self, request, array):
        if request.k < 0:  # before the outputs [rows, k] are allocated; the library's message
            raise ValueError(f"metaltopk.{request.function}: k = {request.k} is negative "
                             "(expected k >= 0)")
        self.request = request
        self.function = request.function
        self.input = array
        self.k, self.largest, self.sorted = request.k, request.largest, request.sorted
        self.index_dtype = np.dtype(request.index_dtype)
        self.return_values = request.return_values
        self.arrays = {name: self.index_array(value, name)
                       for name, value in request.arrays.items()}

    def index_array(self, value, name):
        array = np.asarray(value)
        if array.dtype not in _INDEX_DTYPES:
            if array.size == 0 and isinstance(value, (list, tuple)):
                array = array.astype(np.int64)  # numpy reads an empty list as float64
            else:
                check_index_dtype(array.dtype, name, self.function)
        return as_native_array(array)

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
    request = call.request
    status = lib.mtk_topk_ragged(ctx.handle, tensors["input"], call.k, call.largest,
                                 call.sorted, request.params(tensors),
                                 values if values is not None else ffi.NULL, indices, ffi.NULL)
    check(status, ctx.backend, request.translate)


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
