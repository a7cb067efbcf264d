"""The fused MoE router: scores, optional bias and expert groups, top-k and weights in one call.

    weights, ids = metaltopk.moe_route(logits, k, scoring="softmax", bias=None, n_group=None,
                                       topk_group=None, renormalize=True, scale=1.0,
                                       index_dtype=np.int32, backend=None)

The exact semantics are in lib/core/router_semantics.md. Without a bias or groups the ids are
exactly `metaltopk.topk(logits, k)`'s on every backend.
"""

import operator
from typing import Optional

import numpy as np

from ._core import (_CALL_LAYOUTS, DeviceTensor, _acquire_block, _array_adapters,
                    _as_native_array, _byte_extent, _contiguous_strides, _describe,
                    _DeviceBuffers, _free_blocks, _memcpy, _native_dtype_code, _type_handler,
                    check, context, dtype_name)
from ._ffi import ffi, lib

SCORINGS = {
    "softmax": lib.MTK_SCORING_SOFTMAX,
    "sigmoid": lib.MTK_SCORING_SIGMOID,
    "none": lib.MTK_SCORING_NONE,
}


def _params(k, scoring, bias_tensor, n_group, topk_group, renormalize, scale):
    params = ffi.new("mtk_router_params*")
    params.struct_size = ffi.sizeof("mtk_router_params")
    params.k = k
    params.scoring = SCORINGS[scoring]
    params.bias = bias_tensor if bias_tensor is not None else ffi.NULL
    params.n_group = 0 if n_group is None else operator.index(n_group)
    params.topk_group = 0 if topk_group is None else operator.index(topk_group)
    params.renormalize = 1 if renormalize else 0
    params.scale = float(scale)
    return params


def _as_host_array(x, what):
    array = _as_native_array(x)
    if what == "logits" and array.ndim != 2:
        raise ValueError(f"metaltopk.moe_route: logits.ndim = {array.ndim} must be 2 "
                         "([tokens, experts])")
    return array


def _element_strides(array):
    return tuple(s // array.itemsize for s in array.strides)


def _output_shape(logits_shape, k):
    # A negative k still reaches the library, which names it in its error.
    return (logits_shape[0], max(k, 0))


def _host_pointer(array):
    """The address of array's element 0 as cdata: ffi.from_buffer is several times cheaper than
    .ctypes.data, but takes C-contiguous arrays only."""
    return (ffi.from_buffer(array) if array.flags.c_contiguous
            else ffi.cast("void*", array.ctypes.data))


_FLOAT32 = lib.MTK_FLOAT32


def _route_host(ctx, logits, bias, k, index_dtype, make_params):
    """numpy arrays on the CPU backend, described in place. As in topk's host path, the three
    descriptors are packed in one step into a reused block: building them field by field through
    cffi cost a small call more than the routing itself."""
    shape = _output_shape(logits.shape, k)
    weights = np.empty(shape, dtype=np.float32)
    ids = np.empty(shape, dtype=index_dtype)
    bias_t = None
    if bias is not None:
        bias_t = _describe(_host_pointer(bias), dtype_name(bias.dtype), bias.shape,
                           _element_strides(bias))
    output_dims = shape + _contiguous_strides(shape)
    block = _acquire_block()
    try:
        _CALL_LAYOUTS[2].pack_into(block.memory, 0,
                                   0, _native_dtype_code(logits.dtype), 2, *logits.shape,
                                   *_element_strides(logits),
                                   0, _FLOAT32, 2, *output_dims,
                                   0, _native_dtype_code(ids.dtype), 2, *output_dims)
        block.input.data = _host_pointer(logits)
        block.values.data = ffi.from_buffer(weights)
        block.indices.data = ffi.from_buffer(ids)
        status = lib.mtk_moe_route(ctx.handle, block.input, make_params(bias_t), block.values,
                                   block.indices, ffi.NULL)
    finally:
        _free_blocks.append(block)
    check(status, ctx.backend)
    return weights, ids


def _upload(ctx, buffers, array):
    """Copies array's memory span to the device; returns the descriptor of the device copy,
    strides intact, so the kernels see the caller's layout."""
    low, high = _byte_extent(array)
    device = buffers.allocate(high - low)
    _memcpy(ctx, device, array.ctypes.data + low, high - low, lib.MTK_COPY_HOST_TO_DEVICE)
    return _describe(device - low if array.size else 0, dtype_name(array.dtype), array.shape,
                     _element_strides(array))


def _route_via_device(ctx, logits, bias, k, index_dtype, make_params):
    shape = _output_shape(logits.shape, k)
    weights = np.empty(shape, dtype=np.float32)
    ids = np.empty(shape, dtype=index_dtype)
    with _DeviceBuffers(ctx) as buffers:
        logits_t = _upload(ctx, buffers, logits)
        bias_t = _upload(ctx, buffers, bias) if bias is not None else None
        device_weights = buffers.allocate(weights.nbytes)
        device_ids = buffers.allocate(ids.nbytes)
        weights_t = _describe(device_weights, "float32", shape, _contiguous_strides(shape))
        ids_t = _describe(device_ids, dtype_name(ids.dtype), shape, _contiguous_strides(shape))
        try:
            check(lib.mtk_moe_route(ctx.handle, logits_t, make_params(bias_t), weights_t, ids_t,
                                    ffi.NULL), ctx.backend)
            _memcpy(ctx, weights.ctypes.data, device_weights, weights.nbytes,
                    lib.MTK_COPY_DEVICE_TO_HOST)
            _memcpy(ctx, ids.ctypes.data, device_ids, ids.nbytes, lib.MTK_COPY_DEVICE_TO_HOST)
        finally:
            # Host buffers and device memory must outlive the queued work, even on failure.
            check(lib.mtk_synchronize(ctx.handle, ffi.NULL), ctx.backend)
    return weights, ids


def _device_view(x) -> Optional[DeviceTensor]:
    if isinstance(x, np.ndarray):
        return None
    for adapter in _array_adapters:
        view = adapter(x)
        if view is not None:
            return view
    return None


def bias_not_on_logits_device(device, got=None) -> ValueError:
    """The contract's error for a bias that is no tensor on the logits' device."""
    return ValueError(f"metaltopk.moe_route: bias must be a tensor on the logits' device "
                      f"({device})" + (f", not {got}" if got else ""))


def _route_device_tensors(view, bias, k, index_dtype, make_params, backend,
                          view_of=_device_view):
    """Logits that an array adapter described (and a bias that `view_of` describes); the adapter
    allocates the outputs."""
    if backend not in (None, "default", view.backend):
        raise ValueError(f"metaltopk.moe_route: the logits live on the {view.backend} backend "
                         f"but backend = {backend!r} was asked for")
    if len(view.shape) != 2:
        raise ValueError(f"metaltopk.moe_route: logits.ndim = {len(view.shape)} must be 2 "
                         "([tokens, experts])")
    ctx = context(view.backend, view.device_index)
    bias_t = None
    if bias is not None:
        bias_view = view_of(bias)
        if (bias_view is None or bias_view.backend != view.backend
                or bias_view.device_index != view.device_index):
            raise bias_not_on_logits_device(f"{view.backend}:{view.device_index}")
        bias_t = _describe(bias_view.data, bias_view.dtype, bias_view.shape, bias_view.strides)
    shape = _output_shape(view.shape, k)
    weights = view.new_empty(shape, "float32")
    ids = view.new_empty(shape, dtype_name(index_dtype))
    logits_t = _describe(view.data, view.dtype, view.shape, view.strides)
    weights_t = _describe(weights.data, weights.dtype, weights.shape, weights.strides)
    ids_t = _describe(ids.data, ids.dtype, ids.shape, ids.strides)
    check(lib.mtk_moe_route(ctx.handle, logits_t, make_params(bias_t), weights_t, ids_t,
                            ffi.cast("void*", view.stream)), ctx.backend)
    return weights.owner, ids.owner


def route_params(k, scoring, n_group, topk_group, renormalize, scale):
    """Checks the options and returns bias_tensor -> mtk_router_params*."""
    if scoring not in SCORINGS:
        raise ValueError(f"metaltopk.moe_route: scoring = {scoring!r} is not one of "
                         + ", ".join(repr(s) for s in SCORINGS))

    def make_params(bias_tensor):
        return _params(k, scoring, bias_tensor, n_group, topk_group, renormalize, scale)

    return make_params


def moe_route(logits, k, *, scoring="softmax", bias=None, n_group=None, topk_group=None,
              renormalize=True, scale=1.0, index_dtype=np.int32, backend=None):
    """Routes each token (row) of `logits` [T, E] to its k best experts.

    scoring: "softmax" (over the E experts, in float32), "sigmoid" or "none" (the logits).
    bias: optional [E] float32, added to the scores for selection only (DeepSeek-V3 style).
    n_group, topk_group: when n_group > 1, experts form n_group groups of E / n_group
      consecutive experts and only the topk_group groups with the best sum of their two best
      scores are eligible.
    Returns (weights [T, k] float32, ids [T, k] index_dtype), best expert first, ties to the
    lower expert id. Weights are the selected scores without the bias, divided by their sum when
    `renormalize`, times `scale`. numpy inputs (float32, float16, ml_dtypes.bfloat16, any
    strides) give numpy outputs on every backend; torch tensors (metaltopk.torch) give torch
    tensors on their device, CuPy arrays CuPy arrays, both on their library's current stream.
    """
    handler = _type_handler(logits)
    if handler is not None:
        return handler.moe_route(logits, k, scoring=scoring, bias=bias, n_group=n_group,
                                 topk_group=topk_group, renormalize=renormalize, scale=scale,
                                 index_dtype=index_dtype, backend=backend)
    k = operator.index(k)
    index_dtype = np.dtype(index_dtype)
    make_params = route_params(k, scoring, n_group, topk_group, renormalize, scale)
    view = _device_view(logits)
    if view is not None:
        return _route_device_tensors(view, bias, k, index_dtype, make_params, backend)
    array = _as_host_array(logits, "logits")
    bias_array = None if bias is None else _as_host_array(bias, "bias")
    ctx = context(backend)
    run = _route_host if ctx.on_host else _route_via_device
    return run(ctx, array, bias_array, k, index_dtype, make_params)
