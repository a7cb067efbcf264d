"""metaltopk.topk's implementations, one per kind of input that metaltopk._dispatch hands over:
a numpy array on the CPU backend (described in place), a numpy array on a GPU backend (copied
there and back), and a device tensor that an array adapter described (torch, CuPy)."""

import numpy as np

from ._abi import (CALL_LAYOUTS, DTYPE_CODES, DeviceBuffers, DeviceTensor, acquire_block,
                   byte_extent, call_geometry, check, context, contiguous_strides, describe,
                   dtype_name, free_blocks, memcpy, normalized_dim_and_k, output_shape,
                   stream_handle)
from ._arguments import check_backend_matches
from ._ffi import ffi, lib

_INT64 = lib.MTK_INT64
_mtk_topk = lib.mtk_topk


def raise_argument_error(ctx, tensor, k, dim, largest, sorted):
    """Lets the library itself reject k or dim so the exception carries its message."""
    size = ffi.new("size_t*")
    check(lib.mtk_topk_workspace_size(ctx.handle, tensor, k, dim, largest, sorted,
                                      lib.MTK_INT64, size), ctx.backend)
    raise RuntimeError(f"metaltopk: internal error: the library accepted k = {k}, dim = {dim} "
                       "that the bindings found out of range")


def topk_host(ctx, array, code, k, dim, largest, sorted):
    """A numpy array on the CPU backend: described in place, outputs allocated here."""
    geometry = call_geometry(array.shape, array.strides, array.itemsize, k, dim)
    if geometry.input_dims is None:  # misaligned strides: the library reads whole elements
        array = np.ascontiguousarray(array)
        geometry = call_geometry(array.shape, array.strides, array.itemsize, k, dim)
    if geometry.out_shape is None:
        tensor = describe(array.ctypes.data, dtype_name(array.dtype), array.shape,
                          geometry.input_dims[geometry.ndim:])
        raise_argument_error(ctx, tensor, k, dim, largest, sorted)
    values = np.empty(geometry.out_shape, dtype=array.dtype)
    indices = np.empty(geometry.out_shape, dtype=np.int64)
    ndim = geometry.ndim
    block = acquire_block()
    try:
        CALL_LAYOUTS[ndim].pack_into(block.memory, 0, 0, code, ndim, *geometry.input_dims,
                                     0, code, ndim, *geometry.output_dims,
                                     0, _INT64, ndim, *geometry.output_dims)
        # Data pointers as cdata: ffi.from_buffer is several times cheaper than .ctypes.data.
        # It needs a C-contiguous buffer, which the outputs always are.
        block.input.data = (ffi.from_buffer(array) if array.flags.c_contiguous
                            else ffi.cast("void*", array.ctypes.data))
        block.values.data = ffi.from_buffer(values)
        block.indices.data = ffi.from_buffer(indices)
        status = _mtk_topk(ctx.handle, block.input, k, dim, largest, sorted, block.values,
                           block.indices, ffi.NULL)
    finally:
        free_blocks.append(block)
    check(status, ctx.backend)
    return values, indices


def topk_via_device(ctx, array, name, k, dim, largest, sorted):
    """A numpy array on a GPU backend: the input's memory span goes up with its strides intact
    (so device kernels see the same layout), outputs come back contiguous."""
    strides = tuple(s // array.itemsize for s in array.strides)
    normalized = normalized_dim_and_k(array.shape, k, dim)
    if normalized is None:
        probe = describe(array.ctypes.data, name, array.shape, strides)
        raise_argument_error(ctx, probe, k, dim, largest, sorted)
    out_shape = output_shape(array.shape, *normalized)
    values = np.empty(out_shape, dtype=array.dtype)
    indices = np.empty(out_shape, dtype=np.int64)
    out_strides = contiguous_strides(out_shape)
    low, high = byte_extent(array)
    host = array.ctypes.data
    with DeviceBuffers(ctx) as buffers:
        device_in = buffers.allocate(high - low)
        device_values = buffers.allocate(values.nbytes)
        device_indices = buffers.allocate(indices.nbytes)
        memcpy(ctx, device_in, host + low, high - low, lib.MTK_COPY_HOST_TO_DEVICE)
        tensor = describe(device_in - low if array.size else 0, name, array.shape, strides)
        values_t = describe(device_values, name, out_shape, out_strides)
        indices_t = describe(device_indices, "int64", out_shape, out_strides)
        try:
            check(lib.mtk_topk(ctx.handle, tensor, k, dim, largest, sorted, values_t, indices_t,
                               ffi.NULL), ctx.backend)
            memcpy(ctx, values.ctypes.data, device_values, values.nbytes,
                   lib.MTK_COPY_DEVICE_TO_HOST)
            memcpy(ctx, indices.ctypes.data, device_indices, indices.nbytes,
                   lib.MTK_COPY_DEVICE_TO_HOST)
        finally:
            # Host buffers and device memory must outlive the queued work, even on failure.
            check(lib.mtk_synchronize(ctx.handle, ffi.NULL), ctx.backend)
    return values, indices


def topk_device_tensor(view: DeviceTensor, k, dim, largest, sorted, backend):
    """An input that an array adapter described; the adapter allocates the outputs. Small calls
    (MoE routing) spend most of their host time in this Python, so nothing is looked up twice."""
    check_backend_matches(backend, view.backend, f"{view.backend}:{view.device_index}", "topk")
    ctx = context(view.backend, view.device_index)
    # The adapter's strides are in elements already.
    geometry = call_geometry(view.shape, view.strides, 1, k, dim)
    if geometry.out_shape is None:
        tensor = describe(view.data, view.dtype, view.shape, view.strides)
        raise_argument_error(ctx, tensor, k, dim, largest, sorted)
    code = DTYPE_CODES[view.dtype]
    values_view = view.new_empty(geometry.out_shape, view.dtype)
    indices_view = view.new_empty(geometry.out_shape, "int64")
    values, values_data = values_view.owner, values_view.data
    indices, indices_data = indices_view.owner, indices_view.data
    values_code = DTYPE_CODES[values_view.dtype]
    indices_code = DTYPE_CODES[indices_view.dtype]
    values_dims = (*values_view.shape, *values_view.strides)
    indices_dims = (*indices_view.shape, *indices_view.strides)
    ndim = geometry.ndim
    block = acquire_block()
    try:
        CALL_LAYOUTS[ndim].pack_into(block.memory, 0,
                                     view.data, code, ndim, *geometry.input_dims,
                                     values_data, values_code, ndim, *values_dims,
                                     indices_data, indices_code, ndim, *indices_dims)
        status = _mtk_topk(ctx.handle, block.input, k, dim, largest, sorted, block.values,
                           block.indices, stream_handle(view.stream))
    finally:
        free_blocks.append(block)
    check(status, ctx.backend)
    return values, indices
