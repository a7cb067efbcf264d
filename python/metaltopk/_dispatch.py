"""The one dispatcher: every operation's front door turns its input, whatever kind it is, into
the call of one implementation, and the result back into the caller's kind.

Kinds, tried in this order:
1. a registered type handler (metaltopk.torch registers torch.Tensor): it takes the whole call,
   so torch ops, autograd and torch.compile see it;
2. a registered array adapter (CuPy): it describes the input as a DeviceTensor on its device
   and allocates the outputs there;
3. any other DLPack producer (JAX, ...): imported without a copy, run as 1 or 2, exported back
   (metaltopk._dlpack);
4. anything numpy can read: described in place on the CPU backend, or copied to a GPU backend.

The adapters are registered in one place, metaltopk/__init__.py. An operation added to the ABI
gets a front door here and implementations of the same four cases (see topk and moe_route).
"""

from typing import Callable, Optional

import numpy as np

from . import _dlpack
from ._abi import DeviceTensor, as_native_array, context, dtype_name, native_dtype_code
from ._arguments import boolean, integer, topk_arguments
from . import _ragged
from ._topk import topk_device_tensor, topk_host, topk_via_device
from .router import (as_host_array, route_device_tensors, route_host, route_params,
                     route_via_device)

# Callables obj -> DeviceTensor | None, tried in order for inputs that are not numpy arrays.
_array_adapters = []


def register_array_adapter(adapter: Callable[[object], Optional[DeviceTensor]]) -> None:
    """Lets another module (e.g. CuPy support) hand device tensors to topk and moe_route."""
    _array_adapters.append(adapter)


# A library's array type -> its integration: an object with topk(x, k, dim, largest, sorted,
# backend) and moe_route(logits, k, **options) that take every call on arrays of that type and
# return arrays of that type. Looked up by the input's exact type first (the hot path), then
# along its type's MRO, so subclasses (torch.nn.Parameter, say) find their base's entry.
_type_handlers = {}


def register_type_handler(array_type: type, handler) -> None:
    """Lets a library's integration (metaltopk.torch) take every call on its arrays."""
    _type_handlers[array_type] = handler


def type_handler(x) -> Optional[Callable]:
    for base in type(x).__mro__:
        handler = _type_handlers.get(base)
        if handler is not None:
            return handler
    return None



def device_view(x) -> Optional[DeviceTensor]:
    """The DeviceTensor the first adapter that knows x makes of it, else None."""
    if isinstance(x, np.ndarray):
        return None
    for adapter in _array_adapters:
        view = adapter(x)
        if view is not None:
            return view
    return None


def topk(x, k, dim=-1, largest=True, sorted=True, *, lengths=None, starts=None,
         return_values=True, backend=None):
    """The k largest (or smallest) entries of x along dim, as (values, indices).

    Follows the metaltopk contract exactly (docs/CONTRACT.md): NaN ranks above +inf,
    -0.0 == +0.0, ties go to the lower index, values are bit-exact copies; indices are int64.
    numpy arrays (any strides, 0-d, empty, ml_dtypes.bfloat16) go in and come out as numpy
    arrays on every backend; torch tensors as torch tensors on their own device
    (metaltopk.torch); CuPy arrays as CuPy arrays; any other DLPack producer (JAX, ...) as
    arrays of the producer's kind.

    k, dim: integers (Python or numpy ints; not bools or floats). largest, sorted: bools.
    backend: None (the default: CUDA, then Metal, then the CPU for numpy inputs; the tensor's
      own device for torch and CuPy inputs), "default", "cpu", "cuda", "metal" or "mpsgraph".
      A numpy input on a GPU backend is copied there and back.

    Raises:
      TypeError: k or dim is not an integer, largest or sorted not a bool, or the dtype is not
        one of float32, float16, bfloat16, float64, int8, uint8, int16, int32, int64.
      ValueError: k < 0 or k > the size along dim; backend is not a backend name, or is not
        the device a torch or CuPy input lives on.
      IndexError: dim is outside [-ndim, ndim - 1].
      RuntimeError: the backend is not compiled in or has no driver or device (the message
        says which), or the device failed.
      MemoryError: an allocation failed.

    Ragged rows (docs/CONTRACT.md, "Ragged rows"): with `lengths` (int32 or int64, one per
    row of a 2-D x), row r selects among its positions [starts[r], starts[r] + lengths[r])
    (`starts` defaults to 0), clipped to the row; any k >= 0; indices count from the window
    start, and a row with fewer than k candidates ends with index -1 and zero values. Every
    kind of input above; the index arrays live where x does (for torch inputs also lists and
    numpy arrays, moved to x's device); a backend without ragged kernels refuses with
    RuntimeError naming it. return_values=False returns the indices alone, ragged or not.
    """
    if lengths is not None or starts is not None or return_values is not True:
        return _topk_with_options(x, k, dim, largest, sorted, lengths, starts, return_values,
                                  backend)
    handler = _type_handlers.get(type(x))
    if handler is not None:
        return handler.topk(x, k, dim, largest, sorted, backend)
    k, dim, largest, sorted = topk_arguments(k, dim, largest, sorted)
    if not isinstance(x, np.ndarray):
        handler = type_handler(x)
        if handler is not None:
            return handler.topk(x, k, dim, largest, sorted, backend)
        view = device_view(x)
        if view is not None:
            return topk_device_tensor(view, k, dim, largest, sorted, backend)
        if _dlpack.is_foreign(x):
            return _dlpack.call(topk, x, k, dim, largest, sorted, backend=backend)
    array = np.asarray(x)
    code = native_dtype_code(array.dtype)
    if code is None or not array.flags.aligned:
        array = as_native_array(array)
        code = native_dtype_code(array.dtype)
    ctx = context(backend)
    if ctx.on_host:
        return topk_host(ctx, array, code, k, dim, largest, sorted)
    return topk_via_device(ctx, array, dtype_name(array.dtype), k, dim, largest, sorted)


def _topk_with_options(x, k, dim, largest, sorted, lengths, starts, return_values, backend):
    return_values = boolean(return_values, "return_values", "topk")
    if lengths is None:
        if starts is not None:
            raise ValueError("metaltopk.topk: starts needs lengths (row r's window is "
                             "[starts[r], starts[r] + lengths[r]))")
        # Indices only: the values are computed and dropped (the C ABI can skip them, on the
        # CPU backend only for now; this path serves every kind of input).
        result = topk(x, k, dim, largest, sorted, backend=backend)
        return result if return_values else result[1]
    k, dim, largest, sorted = topk_arguments(k, dim, largest, sorted)
    request = _ragged.topk_request(k, dim, largest, sorted, lengths, starts, return_values)
    return _ragged_call(x, request, backend)


def _ragged_call(x, request, backend):
    """A ragged request on x, whatever kind x is (the four kinds of the module docstring)."""
    if not isinstance(x, np.ndarray):
        handler = type_handler(x)
        if handler is not None:
            return handler.ragged(x, request, backend)
        view = device_view(x)
        if view is not None:
            index_views = {name: device_view(value) for name, value in request.arrays.items()}
            return _ragged.run_device_tensors(view, request, index_views, backend)
        if _dlpack.is_foreign(x):
            return _dlpack.call_ragged(_ragged_call, x, request, backend)
    return _ragged.run_host_arrays(x, request, backend)


def topk_ragged_transform(scores, offsets, lengths, k, *, backend=None):
    """The top k of each row's first lengths[r] scores, as offsets[r] + their index: int32
    [rows, k], best first (ties to the lower index), -1 where a row has fewer than k. The
    arguments of FlashInfer's top_k_ragged_transform. Inputs and output of any kind topk takes
    (numpy, torch on its device, CuPy, DLPack; the index arrays on the scores' device); backend
    as for topk."""
    return _ragged_call(scores, _ragged.ragged_transform_request(offsets, lengths, k), backend)


def topk_page_table_transform(scores, src_page_table, lengths, k, *, row_to_batch=None,
                              page_size=1, backend=None):
    """The top k of each row's first lengths[r] scores, each index i mapped through the page
    table to src_page_table[b, i // page_size] * page_size + i % page_size, b = row_to_batch[r]
    (or r): int32 [rows, k], best first, -1 where a row has fewer than k (and on rows whose
    row_to_batch is outside the table). The arguments of FlashInfer's
    top_k_page_table_transform. Inputs and output as for topk_ragged_transform."""
    request = _ragged.page_table_transform_request(src_page_table, lengths, k, row_to_batch,
                                                   page_size)
    return _ragged_call(scores, request, backend)


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
    k, n_group, topk_group: integers; renormalize: a bool; scale: a real number. backend: as
    for metaltopk.topk.

    Raises TypeError (an argument of the wrong type, an unsupported dtype), ValueError (k,
    n_group, topk_group, bias shape or scoring out of range, each named as here; a backend that
    is no backend name), RuntimeError (a backend unavailable or failing; torch logits that
    require grad while grad mode is on: the router has no gradient), MemoryError.
    """
    handler = type_handler(logits)
    if handler is not None:
        return handler.moe_route(logits, k, scoring=scoring, bias=bias, n_group=n_group,
                                 topk_group=topk_group, renormalize=renormalize, scale=scale,
                                 index_dtype=index_dtype, backend=backend)
    make_params = route_params(k, scoring, n_group, topk_group, renormalize, scale)
    k = integer(k, "k", "moe_route")
    index_dtype = np.dtype(index_dtype)
    view = device_view(logits)
    if view is not None:
        return route_device_tensors(view, bias, k, index_dtype, make_params, backend,
                                    device_view)
    if _dlpack.is_foreign(logits):
        return _dlpack.call(moe_route, logits, k, scoring=scoring, bias=bias, n_group=n_group,
                            topk_group=topk_group, renormalize=renormalize, scale=scale,
                            index_dtype=index_dtype, backend=backend)
    array = as_host_array(logits, "logits")
    bias_array = None if bias is None else as_host_array(bias, "bias")
    ctx = context(backend, function="moe_route")
    run = route_host if ctx.on_host else route_via_device
    return run(ctx, array, bias_array, k, index_dtype, make_params)
