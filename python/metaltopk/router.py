"""The fused MoE router's implementations (metaltopk._dispatch.moe_route is its front door):
scores, optional bias and expert groups, top-k and weights in one call.

    weights, ids = metaltopk.moe_route(logits, k, scoring="softmax", bias=None, n_group=None,
                                       topk_group=None, renormalize=True, scale=1.0,
                                       index_dtype=np.int32, backend=None)

The exact semantics are in lib/core/router_semantics.md. Without a bias or groups the ids are
exactly `metaltopk.topk(logits, k)`'s on every backend.
"""

import re
import numpy as np

from ._abi import (CALL_LAYOUTS, DeviceBuffers, acquire_block, as_native_array, byte_extent,
                   check, context, contiguous_strides, describe, dtype_name, element_strides,
                   free_blocks, host_pointer, memcpy, native_dtype_code)
from ._arguments import boolean, check_backend_matches, integer, optional_integer, real
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
    params.n_group = 0 if n_group is None else n_group
    params.topk_group = 0 if topk_group is None else topk_group
    params.renormalize = 1 if renormalize else 0
    params.scale = float(scale)
    return params


def as_host_array(x, what):
    array = as_native_array(x)
    if what == "logits" and array.ndim != 2:
        raise ValueError(f"metaltopk.moe_route: logits.ndim = {array.ndim} must be 2 "
                         "([tokens, experts])")
    return array


def _output_shape(logits_shape, k):
    # A negative k still reaches the library, which names it in its error.
    return (logits_shape[0], max(k, 0))


_FLOAT32 = lib.MTK_FLOAT32


def route_host(ctx, logits, bias, k, index_dtype, make_params):
    """numpy arrays on the CPU backend, described in place. As in topk's host path, the three
    descriptors are packed in one step into a reused block: building them field by field through
    cffi cost a small call more than the routing itself."""
    shape = _output_shape(logits.shape, k)
    weights = np.empty(shape, dtype=np.float32)
    ids = np.empty(shape, dtype=index_dtype)
    bias_t = None
    if bias is not None:
        bias_t = describe(host_pointer(bias), dtype_name(bias.dtype), bias.shape,
                          element_strides(bias))
    output_dims = shape + contiguous_strides(shape)
    block = acquire_block()
    try:
        CALL_LAYOUTS[2].pack_into(block.memory, 0,
                                  0, native_dtype_code(logits.dtype), 2, *logits.shape,
                                  *element_strides(logits),
                                  0, _FLOAT32, 2, *output_dims,
                                  0, native_dtype_code(ids.dtype), 2, *output_dims)
        block.input.data = host_pointer(logits)
        block.values.data = ffi.from_buffer(weights)
        block.indices.data = ffi.from_buffer(ids)
        status = lib.mtk_moe_route(ctx.handle, block.input, make_params(bias_t), block.values,
                                   block.indices, ffi.NULL)
    finally:
        free_blocks.append(block)
    check(status, ctx.backend, python_names)
    return weights, ids


def _upload(ctx, buffers, array):
    """Copies array's memory span to the device; returns the descriptor of the device copy,
    strides intact, so the kernels see the caller's layout."""
    low, high = byte_extent(array)
    device = buffers.allocate(high - low)
    memcpy(ctx, device, array.ctypes.data + low, high - low, lib.MTK_COPY_HOST_TO_DEVICE)
    return describe(device - low if array.size else 0, dtype_name(array.dtype), array.shape,
                    element_strides(array))


def route_via_device(ctx, logits, bias, k, index_dtype, make_params):
    shape = _output_shape(logits.shape, k)
    weights = np.empty(shape, dtype=np.float32)
    ids = np.empty(shape, dtype=index_dtype)
    with DeviceBuffers(ctx) as buffers:
        logits_t = _upload(ctx, buffers, logits)
        bias_t = _upload(ctx, buffers, bias) if bias is not None else None
        device_weights = buffers.allocate(weights.nbytes)
        device_ids = buffers.allocate(ids.nbytes)
        weights_t = describe(device_weights, "float32", shape, contiguous_strides(shape))
        ids_t = describe(device_ids, dtype_name(ids.dtype), shape, contiguous_strides(shape))
        try:
            check(lib.mtk_moe_route(ctx.handle, logits_t, make_params(bias_t), weights_t, ids_t,
                                    ffi.NULL), ctx.backend, python_names)
            memcpy(ctx, weights.ctypes.data, device_weights, weights.nbytes,
                   lib.MTK_COPY_DEVICE_TO_HOST)
            memcpy(ctx, ids.ctypes.data, device_ids, ids.nbytes, lib.MTK_COPY_DEVICE_TO_HOST)
        finally:
            # Host buffers and device memory must outlive the queued work, even on failure.
            check(lib.mtk_synchronize(ctx.handle, ffi.NULL), ctx.backend)
    return weights, ids


def bias_not_on_logits_device(device, got=None) -> ValueError:
    """The contract's error for a bias that is no tensor on the logits' device."""
    return ValueError(f"metaltopk.moe_route: bias must be a tensor on the logits' device "
                      f"({device})" + (f", not {got}" if got else ""))


def route_device_tensors(view, bias, k, index_dtype, make_params, backend, view_of):
    """Logits that an array adapter described (and a bias that `view_of` describes); the adapter
    allocates the outputs."""
    check_backend_matches(backend, view.backend, f"{view.backend}:{view.device_index}",
                          "moe_route")
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
        bias_t = describe(bias_view.data, bias_view.dtype, bias_view.shape, bias_view.strides)
    shape = _output_shape(view.shape, k)
    weights = view.new_empty(shape, "float32")
    ids = view.new_empty(shape, dtype_name(index_dtype))
    logits_t = describe(view.data, view.dtype, view.shape, view.strides)
    weights_t = describe(weights.data, weights.dtype, weights.shape, weights.strides)
    ids_t = describe(ids.data, ids.dtype, ids.shape, ids.strides)
    check(lib.mtk_moe_route(ctx.handle, logits_t, make_params(bias_t), weights_t, ids_t,
                            ffi.cast("void*", view.stream)), ctx.backend, python_names)
    return weights.owner, ids.owner


_C_FIELD = re.compile(r"\bparams\.(\w+)")


def python_names(message: str) -> str:
    """The library's message about mtk_router_params fields in moe_route's argument names."""
    return "metaltopk.moe_route: " + _C_FIELD.sub(r"\1", message)


def route_arguments(k, scoring, n_group, topk_group, renormalize, scale):
    """The options checked: (k, n_group, topk_group, renormalize, scale), with 0 for a group
    count left None; errors name moe_route's arguments."""
    k = integer(k, "k", "moe_route")
    if scoring not in SCORINGS:
        raise ValueError(f"metaltopk.moe_route: scoring = {scoring!r} is not one of "
                         + ", ".join(repr(s) for s in SCORINGS))
    n_group = optional_integer(n_group, "n_group", "moe_route")
    topk_group = optional_integer(topk_group, "topk_group", "moe_route")
    if n_group is not None and n_group > 1 and topk_group is None:
        raise ValueError(f"metaltopk.moe_route: n_group = {n_group} needs topk_group, the number "
                         f"of groups kept (1 <= topk_group <= {n_group})")
    renormalize = boolean(renormalize, "renormalize", "moe_route")
    scale = real(scale, "scale", "moe_route")
    return k, n_group or 0, topk_group or 0, renormalize, scale


def route_params(k, scoring, n_group, topk_group, renormalize, scale):
    """Checks the options and returns bias_tensor -> mtk_router_params*."""
    k, n_group, topk_group, renormalize, scale = route_arguments(
        k, scoring, n_group, topk_group, renormalize, scale)

    def make_params(bias_tensor):
        return _params(k, scoring, bias_tensor, n_group, topk_group, renormalize, scale)

    return make_params
