"""torch tensors in the library: described in place, outputs and scratch allocated by torch.

A CPU tensor runs on the CPU backend and a CUDA tensor on the CUDA backend of its device, on
torch's current stream. Outputs, and the scratch a call needs, come from torch's allocator (the
caching allocator on CUDA) through the library's workspace ABI: the library holds no scratch of
its own for torch calls, and a call inside CUDA graph capture allocates from the graph's pool.
Tensors on other devices (MPS, XPU, ...) go through a host copy.

The eager path is host-bound for small inputs (MoE routing), so a call's geometry, context and
scratch size are looked up once per (shape, strides, dtype, device, k, dim, largest, sorted) and a
call then costs two or three allocations, one struct pack and one library call. Where `make` built
the torch fast path (adapters/torch/) against this torch, a plain CPU or CUDA tensor's call runs in
C++ instead (top-k, the router and ragged rows): the allocations and the library call then take
no Python at all.
"""

import atexit
import copy
import importlib.machinery
import importlib.util
import sysconfig
import warnings
from pathlib import Path

import numpy as np
import torch

from .. import _abi, _ragged
from .._arguments import check_backend_matches, check_static_k_and_dim, topk_arguments
from .._ffi import ffi, lib, library_path
from ..router import (SCORINGS, bias_not_on_logits_device, python_names, route_arguments,
                      route_device_tensors, route_params)

# Contract dtype names; torch calls these dtypes the same.
DTYPE_NAMES = {getattr(torch, name): name for name in _abi.DTYPE_CODES}


def unsupported_dtype(dtype, function="topk") -> TypeError:
    return TypeError(f"metaltopk.{function}: dtype {dtype} is not supported (supported: "
                     + ", ".join(_abi.DTYPE_CODES) + ")")


_empty_strided = torch.empty_strided
_empty = torch.empty
_uint8 = torch.uint8
_int64 = torch.int64
_current_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
_with_workspace = lib.mtk_topk_with_workspace
_NULL = ffi.NULL
_stream_handle = _abi.stream_handle
_acquire_block = _abi.acquire_block
_free_blocks = _abi.free_blocks


EXTENSION_NAME = "_metaltopk_torch"


def _load_fast_path(directory=Path(library_path).parent):
    """The compiled fast path (its topk and moe_route), or None where it was not built beside
    the library or was built against another torch (a torch extension runs only with the torch
    it was compiled against)."""
    path = directory / (EXTENSION_NAME + sysconfig.get_config_var("EXT_SUFFIX"))
    stamp = directory / (EXTENSION_NAME + ".torch_version")
    if not (path.is_file() and stamp.is_file()):
        # pip install writes why it could not build the torch parts (python/setup.py).
        skipped = directory / (EXTENSION_NAME + ".skipped")
        if skipped.is_file():
            warnings.warn(f"metaltopk: {skipped.read_text().strip()}; calls on torch tensors take "
                          "the slower cffi path", RuntimeWarning, stacklevel=2)
        return None
    built_for = stamp.read_text().strip()
    if built_for != torch.__version__:
        warnings.warn(f"metaltopk: {path.name} was built for torch {built_for}, not for this "
                      f"torch {torch.__version__}; calls on torch tensors take the slower cffi "
                      "path until it is rebuilt (`make`, or reinstall the package)",
                      RuntimeWarning, stacklevel=2)
        return None
    loader = importlib.machinery.ExtensionFileLoader(EXTENSION_NAME, str(path))
    spec = importlib.util.spec_from_loader(EXTENSION_NAME, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


_fast_path = _load_fast_path()
_fast_topk = _fast_path.topk if _fast_path is not None else None
_fast_moe_route = _fast_path.moe_route if _fast_path is not None else None
# An extension built before ragged rows existed has no topk_ragged: those calls take cffi.
_fast_ragged = getattr(_fast_path, "topk_ragged", None)
_fast_contexts = {}  # device index (-1: CPU) -> (context, its handle's address)


def _fast_call(function, device_index, *args, translate=None):
    """function(*args, context address) on a CPU (-1) or CUDA device: its two tensors, or None
    where the fast path could not make the call (the caller's Python path then makes it and
    raises the contract's exception); a status the library returned is raised here."""
    entry = _fast_contexts.get(device_index)
    if entry is None:
        ctx = _abi.context("cpu" if device_index < 0 else "cuda", max(device_index, 0))
        entry = _fast_contexts[device_index] = (ctx, int(ffi.cast("uintptr_t", ctx.handle)))
    result = function(*args, entry[1])
    if result.__class__ is tuple:
        return result
    if result is not None:
        _abi.check(result, entry[0].backend, translate)
    return None


class _Plan:
    """What a call of one geometry needs beyond its tensors' addresses."""

    __slots__ = ("ctx", "handle", "device", "out_shape", "out_strides", "layout", "input_fields",
                 "values_fields", "indices_fields", "workspace_bytes")


_PLAN_CACHE_SIZE = 1024
_plans = {}
# Both caches hold context handles. Registered after metaltopk._abi's exit handler, so they are
# emptied before it destroys the contexts: a call made later in the interpreter's exit then
# creates a context again instead of using a destroyed one.
atexit.register(_fast_contexts.clear)
atexit.register(_plans.clear)


def _new_plan(key, x) -> _Plan:
    shape, strides, dtype, device_index, k, dim, largest, sorted = key
    name = DTYPE_NAMES.get(dtype)
    if name is None:
        raise unsupported_dtype(dtype)
    backend = "cpu" if device_index < 0 else "cuda"
    ctx = _abi.context(backend, max(device_index, 0))
    geometry = _abi.call_geometry(tuple(shape), tuple(strides), 1, k, dim)
    code = _abi.DTYPE_CODES[name]
    input_fields = (code, geometry.ndim, *geometry.input_dims)
    size = ffi.new("size_t*")
    probe = _abi.describe(x.data_ptr(), name, geometry.input_dims[:geometry.ndim],
                          geometry.input_dims[geometry.ndim:])
    # Validates k and dim (the library's own errors) and sizes the scratch, once per geometry.
    _abi.check(lib.mtk_topk_workspace_size(ctx.handle, probe, k, dim, largest, sorted,
                                           lib.MTK_INT64, size), ctx.backend)
    plan = _Plan()
    plan.ctx, plan.handle = ctx, ctx.handle
    plan.device = x.device
    plan.out_shape, plan.out_strides = geometry.out_shape, geometry.out_strides
    plan.layout = _abi.CALL_LAYOUTS[geometry.ndim]
    plan.input_fields = input_fields
    plan.values_fields = (code, geometry.ndim, *geometry.output_dims)
    plan.indices_fields = (lib.MTK_INT64, geometry.ndim, *geometry.output_dims)
    plan.workspace_bytes = size[0]
    if len(_plans) >= _PLAN_CACHE_SIZE:
        _plans.clear()
    _plans[key] = plan
    return plan


def topk_kernel(x, k, dim=-1, largest=True, sorted=True):
    """The torch op's kernel (below autograd): fresh (values, indices) on x's device."""
    device_index = x.get_device()
    if device_index >= 0 and not x.is_cuda:
        values, indices = topk_kernel(x.cpu(), k, dim, largest, sorted)
        return values.to(x.device), indices.to(x.device)
    if _fast_topk is not None:
        result = _fast_call(_fast_topk, device_index, x, k, dim, largest, sorted)
        if result is not None:
            return result
    key = (x.shape, x.stride(), x.dtype, device_index, k, dim, largest, sorted)
    plan = _plans.get(key)
    if plan is None:
        plan = _new_plan(key, x)
    device = plan.device
    values = _empty_strided(plan.out_shape, plan.out_strides, dtype=x.dtype, device=device)
    indices = _empty_strided(plan.out_shape, plan.out_strides, dtype=_int64, device=device)
    workspace_bytes = plan.workspace_bytes
    if workspace_bytes:
        # Held until the library has enqueued its work, then freed: on CUDA the caching allocator
        # hands a freed block out again only in stream order.
        scratch = _empty((workspace_bytes,), dtype=_uint8, device=device)
        workspace = ffi.cast("void*", scratch.data_ptr())
    else:
        scratch, workspace = None, _NULL
    stream = _NULL if device_index < 0 else _stream_handle(_current_raw_stream(device_index))
    block = _acquire_block()
    try:
        plan.layout.pack_into(block.memory, 0, x.data_ptr(), *plan.input_fields,
                              values.data_ptr(), *plan.values_fields,
                              indices.data_ptr(), *plan.indices_fields)
        status = _with_workspace(plan.handle, block.input, k, dim, largest, sorted, block.values,
                                 block.indices, workspace, workspace_bytes, stream)
    finally:
        _free_blocks.append(block)
    if status:
        _abi.check(status, plan.ctx.backend)
    return values, indices


def tensor_view(tensor, function="moe_route") -> _abi.DeviceTensor:
    """The generic array-adapter view of a CPU or CUDA tensor (the router's path)."""
    name = DTYPE_NAMES.get(tensor.dtype)
    if name is None:
        raise unsupported_dtype(tensor.dtype, function)
    device_index = tensor.get_device()
    on_cuda = tensor.is_cuda
    if device_index >= 0 and not on_cuda:
        raise ValueError(f"metaltopk.{function}: tensors on {tensor.device} are not supported "
                         "(CPU and CUDA are)")
    stream = _current_raw_stream(device_index) if on_cuda else 0
    device = tensor.device

    def new_empty(shape, dtype_name):
        out = _empty(shape, dtype=getattr(torch, dtype_name), device=device)
        return _abi.DeviceTensor(out, out.data_ptr(), dtype_name, tuple(shape), out.stride(),
                                 "cuda" if on_cuda else "cpu", max(device_index, 0), stream,
                                 new_empty)

    return _abi.DeviceTensor(tensor, tensor.data_ptr(), name, tuple(tensor.shape),
                             tensor.stride(), "cuda" if on_cuda else "cpu",
                             max(device_index, 0), stream, new_empty)


INDEX_DTYPES = (torch.int32, torch.int64)
_TORCH_INDEX_DTYPE_OF = {
    np.int32: torch.int32, np.dtype("int32"): torch.int32,
    np.int64: torch.int64, np.dtype("int64"): torch.int64}


def moe_route_kernel(logits, k, scoring="softmax", bias=None, n_group=0, topk_group=0,
                     renormalize=True, scale=1.0, index_dtype=torch.int32):
    """The router op's kernel: (weights float32 [T, k], ids index_dtype [T, k])."""
    if index_dtype not in INDEX_DTYPES:
        raise TypeError(f"metaltopk.moe_route: index_dtype = {index_dtype} must be torch.int32 "
                        "or torch.int64")
    scoring_code = SCORINGS.get(scoring)
    device_index = logits.get_device()
    if _fast_moe_route is not None and scoring_code is not None and (
            device_index < 0 or logits.is_cuda):
        result = _fast_call(_fast_moe_route, device_index, logits, k, scoring_code, bias,
                            n_group, topk_group, renormalize, scale, index_dtype is _int64,
                            translate=python_names)
        if result is not None:
            return result
    make_params = route_params(k, scoring, n_group, topk_group, renormalize, scale)
    return route_device_tensors(tensor_view(logits), bias, k, DTYPE_NAMES[index_dtype],
                                make_params, None, tensor_view)


# ---- ragged rows (docs/CONTRACT.md, "Ragged rows") ------------------------------------------


def check_index_tensor(tensor, name, x, function):
    """An index tensor of a ragged call (lengths, starts, offsets, src_page_table,
    row_to_batch): int32 or int64 on x's device, or the contract's error naming it."""
    if not isinstance(tensor, _Tensor):
        raise TypeError(f"metaltopk.{function}: {name} must be a torch.Tensor, not "
                        f"{type(tensor).__name__}")
    if tensor.dtype not in INDEX_DTYPES:
        raise TypeError(f"metaltopk.{function}: {name}.dtype = {tensor.dtype} must be int32 "
                        "or int64")
    if tensor.device != x.device:
        raise ValueError(f"metaltopk.{function}: {name} is on {tensor.device}, not on the "
                         f"input's device {x.device}")


def index_tensor(value, name, x, function):
    """An index argument given as a tensor, a list or a numpy array, as a tensor on x's device
    (checked as check_index_tensor does)."""
    if not isinstance(value, _Tensor):
        array = np.asarray(value)
        if array.size == 0 and isinstance(value, (list, tuple)):
            array = array.astype(np.int64)  # numpy reads an empty list as float64
        _ragged.check_index_dtype(array.dtype, name, function)
        value = torch.as_tensor(array, device=x.device)
    check_index_tensor(value, name, x, function)
    return value


def run_ragged(x, request):
    """A ragged request on tensors: the index arrays in request.arrays are tensors on x's
    device. Returns (values or None, indices)."""
    for name, tensor in request.arrays.items():
        check_index_tensor(tensor, name, x, request.function)
    if x.get_device() >= 0 and not x.is_cuda:  # another device: through the host
        host_request = copy.copy(request)
        host_request.arrays = {name: t.cpu() for name, t in request.arrays.items()}
        values, indices = run_ragged(x.cpu(), host_request)
        return (None if values is None else values.to(x.device)), indices.to(x.device)
    if _fast_ragged is not None:
        arrays = request.arrays
        result = _fast_call(
            _fast_ragged, x.get_device(), x, request.k, arrays["lengths"], arrays.get("starts"),
            request.dim, request.largest, request.sorted, request.return_values,
            request.transform, arrays.get("offsets"), arrays.get("src_page_table"),
            arrays.get("row_to_batch"), request.page_size, request.index_dtype == "int32",
            translate=request.translate)
        if result is not None:
            return (result[0] if request.return_values else None), result[1]
    views = {name: tensor_view(t, request.function) for name, t in request.arrays.items()}
    out = _ragged.run_device_tensors(tensor_view(x, request.function), request, views)
    return out if request.return_values else (None, out)


def topk_ragged_kernel(x, k, lengths, starts=None, dim=-1, largest=True, sorted=True,
                       return_values=True):
    """metaltopk::mtk_topk_ragged's kernel: (values, indices int64); values are empty ([0])
    when return_values is False."""
    request = _ragged.topk_request(k, dim, largest, sorted, lengths, starts, return_values)
    values, indices = run_ragged(x, request)
    return (x.new_empty((0,)) if values is None else values), indices


def topk_ragged_transform_kernel(scores, offsets, lengths, k):
    """metaltopk::mtk_topk_ragged_transform's kernel: int32 [rows, k]."""
    return run_ragged(scores, _ragged.ragged_transform_request(offsets, lengths, k))[1]


def topk_page_table_transform_kernel(scores, src_page_table, lengths, k, row_to_batch=None,
                                     page_size=1):
    """metaltopk::mtk_topk_page_table_transform's kernel: int32 [rows, k]."""
    request = _ragged.page_table_transform_request(src_page_table, lengths, k, row_to_batch,
                                                   page_size)
    return run_ragged(scores, request)[1]


def _ragged_op_call(x, request):
    """request as a call of its torch op (tracing, gradients): the front door's result."""
    arrays = request.arrays
    if request.transform == _ragged.TRANSFORM_RAGGED:
        return torch.ops.metaltopk.mtk_topk_ragged_transform(x, arrays["offsets"],
                                                            arrays["lengths"], request.k)
    if request.transform == _ragged.TRANSFORM_PAGE_TABLE:
        return torch.ops.metaltopk.mtk_topk_page_table_transform(
            x, arrays["src_page_table"], arrays["lengths"], request.k,
            arrays.get("row_to_batch"), request.page_size)
    values, indices = torch.ops.metaltopk.mtk_topk_ragged(
        x, request.k, arrays["lengths"], arrays.get("starts"), request.dim, request.largest,
        request.sorted, request.return_values)
    return (values, indices) if request.return_values else indices


def _check_backend(x, backend, function):
    if backend is not None:
        check_backend_matches(backend, "cuda" if x.is_cuda else "cpu", str(x.device), function)


def no_gradient_error() -> RuntimeError:
    return RuntimeError(
        "metaltopk.moe_route: logits require grad, but the router has no gradient: the weights "
        "would silently carry none. Call it under torch.no_grad() (inference), or pass "
        "logits.detach() and compute differentiable weights from the ids, e.g. "
        "logits.softmax(-1).gather(-1, ids)")


_is_compiling = torch.compiler.is_compiling
_is_grad_enabled = torch.is_grad_enabled
_Tensor = torch.Tensor
_topk_arguments = topk_arguments


def _topk_op(x, k, dim, largest, sorted):
    return torch.ops.metaltopk.mtk_topk.default(x, k, dim, largest, sorted)


class TorchArrays:
    """metaltopk.topk and moe_route on torch tensors. Plain tensors that need no gradient take
    the kernel directly (a dispatcher round trip and the autograd wrapper cost more host time
    than the call itself at MoE sizes); anything else (gradients, torch.compile, export,
    tensor subclasses such as FakeTensor) goes through the registered op."""

    @staticmethod
    def topk(x, k, dim, largest, sorted, backend):
        if backend is not None:
            _check_backend(x, backend, "topk")
        k, dim, largest, sorted = _topk_arguments(k, dim, largest, sorted)
        if type(x) is _Tensor and not (x.requires_grad and _is_grad_enabled()) \
                and not x.is_meta and not _is_compiling():
            return topk_kernel(x, k, dim, largest, sorted)
        check_static_k_and_dim(x.shape, k, dim)
        return _topk_op(x, k, dim, largest, sorted)

    @staticmethod
    def ragged(x, request, backend):
        """A ragged front door's request (metaltopk._ragged) on a tensor; index arguments that
        are lists or numpy arrays move to x's device."""
        _check_backend(x, backend, request.function)
        request.arrays = {name: index_tensor(value, name, x, request.function)
                          for name, value in request.arrays.items()}
        if type(x) is _Tensor and not (x.requires_grad and _is_grad_enabled()) \
                and not x.is_meta and not _is_compiling():
            return _ragged.result(request, *run_ragged(x, request))
        return _ragged_op_call(x, request)

    @staticmethod
    def moe_route(logits, k, *, scoring, bias, n_group, topk_group, renormalize, scale,
                  index_dtype, backend):
        _check_backend(logits, backend, "moe_route")
        if logits.requires_grad and _is_grad_enabled():
            raise no_gradient_error()
        if bias is not None and not isinstance(bias, _Tensor):
            # The op's schema would reject it with torch's own error, not the contract's.
            raise bias_not_on_logits_device(logits.device, type(bias).__name__)
        if not isinstance(index_dtype, torch.dtype):
            # numpy's int32 / int64 (the default) by a lookup: np.dtype(...).name costs more
            # than the fast path's whole call. Tracing takes the long way: Dynamo (torch 2.11)
            # cannot hash a numpy dtype.
            known = None if _is_compiling() else _TORCH_INDEX_DTYPE_OF.get(index_dtype)
            index_dtype = known or getattr(torch, np.dtype(index_dtype).name)
        k, n_group, topk_group, renormalize, scale = route_arguments(
            k, scoring, n_group, topk_group, renormalize, scale)
        args = (logits, k, scoring, bias, n_group, topk_group, renormalize, scale, index_dtype)
        # As topk: the router has no gradient, so only tracing needs the op.
        if type(logits) is _Tensor and not logits.is_meta and not _is_compiling():
            return moe_route_kernel(*args)
        experts = logits.shape[-1] if logits.dim() == 2 else None
        if experts.__class__ is int and not 1 <= k <= experts:  # as in check_static_k_and_dim
            raise ValueError(f"metaltopk.moe_route: k = {k} is out of range for {experts} "
                             f"experts (expected 1 <= k <= {experts})")
        return torch.ops.metaltopk.mtk_moe_route(*args)
