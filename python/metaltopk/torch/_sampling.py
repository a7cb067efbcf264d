"""The sampling ops (docs/CONTRACT.md, "Sampling filters") and metaltopk.sampling's front door
for torch tensors:

    metaltopk::mtk_top_k_mask_logits(logits, top_k, top_k_value) -> logits' dtype [rows, n]
    metaltopk::mtk_renorm_probs(probs, <filters>) -> float32 [rows, n]
    metaltopk::mtk_sample(probs, uniforms, <filters>, index_dtype) -> [rows] tokens
    metaltopk::mtk_sample_from_logits(logits, uniforms, <filters>, temperature,
                                      temperature_value, index_dtype) -> [rows] tokens

where <filters> is top_k, top_k_value, top_p, top_p_value, min_p, min_p_value. Each per-row
argument is two, as in mtk_sampling_params: a [rows] tensor on the input's device (or None) and
the scalar that every row takes where the tensor is None. A schema cannot take "a tensor or a
number" in one argument, and this keeps per-row tensors traced as tensors (read on the device,
never synchronised to the host) and scalars as constants. mtk_renorm_probs applies whichever
filters are set, in the contract's order, as the C entry does: top_k_renorm_probs,
top_p_renorm_probs and min_p_renorm_probs are it with one filter.

Each op has one kernel for every device (the compiled fast path for plain CPU and CUDA tensors,
else metaltopk.sampling's Python path; either way the tensors go to the C ABI in place, on
torch's current stream) and a fake kernel making the same argument checks,
so that meta tensors, torch.compile and torch.export report the contract's errors too. The
ops have no gradient.
"""

import functools

import numpy as np
import torch

from .. import sampling as _sampling
from .._arguments import integer, real
from . import _tensors
from ._ops import _library

_FILTERS = ("Tensor? top_k=None, int top_k_value=0, Tensor? top_p=None, float top_p_value=1.0, "
            "Tensor? min_p=None, float min_p_value=0.0")
MASK_LOGITS_SCHEMA = ("mtk_top_k_mask_logits(Tensor logits, Tensor? top_k=None, "
                      "int top_k_value=0) -> Tensor")
RENORM_PROBS_SCHEMA = f"mtk_renorm_probs(Tensor probs, {_FILTERS}) -> Tensor"
SAMPLE_SCHEMA = (f"mtk_sample(Tensor probs, Tensor uniforms, {_FILTERS}, "
                 "ScalarType index_dtype=int) -> Tensor")
SAMPLE_FROM_LOGITS_SCHEMA = (f"mtk_sample_from_logits(Tensor logits, Tensor uniforms, {_FILTERS}, "
                             "Tensor? temperature=None, float temperature_value=1.0, "
                             "ScalarType index_dtype=int) -> Tensor")

_LOGIT_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
_INDEX_DTYPES = (torch.int32, torch.int64)
# The scalar each per-row argument takes where the caller gives none: the C struct's defaults.
_DEFAULTS = {"top_k": 0, "top_p": 1.0, "min_p": 0.0, "temperature": 1.0}
_PER_ROW = tuple(_DEFAULTS)

# The compiled fast path's sampling entry, where make built it against this torch (an older
# build has none: those calls take the Python path).
_fast_sampling = getattr(_tensors._fast_path, "sampling", None)


def _run_kernel(function, op, x, pairs, uniforms=None, index_dtype=torch.int32):
    """One call on torch tensors: `pairs` maps each per-row argument the op takes to (its tensor
    or None, its scalar). Plain CPU and CUDA tensors take the compiled fast path; what it cannot
    describe (another device, an argument that is not a tensor on x's device, a dtype the library
    has no code for) takes metaltopk.sampling's Python path, which raises the contract's error."""
    if uniforms is not None:
        _check_index_dtype(index_dtype, function)
    device_index = x.get_device()
    if _fast_sampling is not None and (device_index < 0 or x.is_cuda):
        flat = []
        for name in _PER_ROW:
            flat += pairs.get(name, (None, _DEFAULTS[name]))
        result = _tensors._fast_call(_fast_sampling, device_index, op, x, *flat, uniforms,
                                     index_dtype == torch.int64,
                                     translate=functools.partial(_sampling.translate, function))
        if result is not None:
            return result[0]
    arguments = {name: tensor if tensor is not None else value
                 for name, (tensor, value) in pairs.items()}
    if uniforms is not None:
        arguments.update(uniforms=uniforms, index_dtype=index_dtype)
    return _sampling.run_torch_kernel(function, op, x, **arguments)


def _filters(top_k, top_k_value, top_p, top_p_value, min_p, min_p_value):
    return {"top_k": (top_k, top_k_value), "top_p": (top_p, top_p_value),
            "min_p": (min_p, min_p_value)}


def _mask_logits_kernel(logits, top_k=None, top_k_value=0):
    return _run_kernel("top_k_mask_logits", _sampling._MASK, logits,
                       {"top_k": (top_k, top_k_value)})


def _renorm_probs_kernel(probs, top_k=None, top_k_value=0, top_p=None, top_p_value=1.0,
                         min_p=None, min_p_value=0.0):
    return _run_kernel("renorm_probs", _sampling._RENORM, probs,
                       _filters(top_k, top_k_value, top_p, top_p_value, min_p, min_p_value))


def _sample_kernel(probs, uniforms, top_k=None, top_k_value=0, top_p=None, top_p_value=1.0,
                   min_p=None, min_p_value=0.0, index_dtype=torch.int32):
    return _run_kernel("sample", _sampling._SAMPLE, probs,
                       _filters(top_k, top_k_value, top_p, top_p_value, min_p, min_p_value),
                       uniforms, index_dtype)


def _sample_from_logits_kernel(logits, uniforms, top_k=None, top_k_value=0, top_p=None,
                               top_p_value=1.0, min_p=None, min_p_value=0.0, temperature=None,
                               temperature_value=1.0, index_dtype=torch.int32):
    pairs = _filters(top_k, top_k_value, top_p, top_p_value, min_p, min_p_value)
    pairs["temperature"] = (temperature, temperature_value)
    return _run_kernel("sample_from_logits", _sampling._SAMPLE_FROM_LOGITS, logits, pairs,
                       uniforms, index_dtype)


for _schema, _kernel in ((MASK_LOGITS_SCHEMA, _mask_logits_kernel),
                         (RENORM_PROBS_SCHEMA, _renorm_probs_kernel),
                         (SAMPLE_SCHEMA, _sample_kernel),
                         (SAMPLE_FROM_LOGITS_SCHEMA, _sample_from_logits_kernel)):
    _library.define(_schema)
    _library.impl(_schema.partition("(")[0], _kernel, "CompositeExplicitAutograd")

mask_logits_op = torch.ops.metaltopk.mtk_top_k_mask_logits.default
renorm_probs_op = torch.ops.metaltopk.mtk_renorm_probs.default
sample_op = torch.ops.metaltopk.mtk_sample.default
sample_from_logits_op = torch.ops.metaltopk.mtk_sample_from_logits.default


# ---- fake kernels: the checks the kernels make, on shapes, dtypes and devices alone ----------


def _check_input(x, name, function):
    if x.dim() != 2:
        raise ValueError(f"metaltopk.{function}: {name}.ndim = {x.dim()} must be 2 ([rows, n])")
    dtype = str(x.dtype).replace("torch.", "")
    if name == "logits" and x.dtype not in _LOGIT_DTYPES:
        raise TypeError(f"metaltopk.{function}: logits.dtype = {dtype} is not float32, float16 "
                        "or bfloat16")
    if name == "probs" and x.dtype != torch.float32:
        raise TypeError(f"metaltopk.{function}: probs.dtype = {dtype} must be float32")


def _check_per_row(tensor, name, x, function):
    if tensor is None:
        return
    if tensor.device != x.device:
        raise ValueError(f"metaltopk.{function}: {name} must be a tensor on the input's device "
                         f"({x.device}), not on {tensor.device}")
    if name == "top_k":
        if tensor.dtype not in _INDEX_DTYPES:
            raise TypeError(f"metaltopk.{function}: top_k.dtype = "
                            f"{str(tensor.dtype).replace('torch.', '')} must be int32 or int64")
    elif tensor.dtype != torch.float32:
        raise TypeError(f"metaltopk.{function}: {name}.dtype = "
                        f"{str(tensor.dtype).replace('torch.', '')} must be float32")
    if tensor.dim() != 1:
        raise ValueError(f"metaltopk.{function}: {name}.ndim = {tensor.dim()} must be 1 ([rows])")
    rows = x.shape[0]
    torch._check_value(tensor.shape[0] == rows, lambda: f"metaltopk.{function}: {name}.sizes[0] "
                       f"= {tensor.shape[0]} does not match the {rows} rows of the input")


def _check_index_dtype(index_dtype, function):
    if index_dtype not in _INDEX_DTYPES:
        raise TypeError(f"metaltopk.{function}: index_dtype = {index_dtype} must be int32 or "
                        "int64")


@torch.library.register_fake("metaltopk::mtk_top_k_mask_logits")
def _mask_logits_fake(logits, top_k=None, top_k_value=0):
    _check_input(logits, "logits", "top_k_mask_logits")
    _check_per_row(top_k, "top_k", logits, "top_k_mask_logits")
    return logits.new_empty(logits.shape)


@torch.library.register_fake("metaltopk::mtk_renorm_probs")
def _renorm_probs_fake(probs, top_k=None, top_k_value=0, top_p=None, top_p_value=1.0,
                       min_p=None, min_p_value=0.0):
    _check_input(probs, "probs", "renorm_probs")
    for name, tensor in (("top_k", top_k), ("top_p", top_p), ("min_p", min_p)):
        _check_per_row(tensor, name, probs, "renorm_probs")
    return probs.new_empty(probs.shape)


def _samples_fake(function, x, input_name, uniforms, per_row, index_dtype):
    _check_input(x, input_name, function)
    for name, tensor in per_row:
        _check_per_row(tensor, name, x, function)
    _check_per_row(uniforms, "uniforms", x, function)
    _check_index_dtype(index_dtype, function)
    return x.new_empty((x.shape[0],), dtype=index_dtype)


@torch.library.register_fake("metaltopk::mtk_sample")
def _sample_fake(probs, uniforms, top_k=None, top_k_value=0, top_p=None, top_p_value=1.0,
                 min_p=None, min_p_value=0.0, index_dtype=torch.int32):
    return _samples_fake("sample", probs, "probs", uniforms,
                         (("top_k", top_k), ("top_p", top_p), ("min_p", min_p)), index_dtype)


@torch.library.register_fake("metaltopk::mtk_sample_from_logits")
def _sample_from_logits_fake(logits, uniforms, top_k=None, top_k_value=0, top_p=None,
                             top_p_value=1.0, min_p=None, min_p_value=0.0, temperature=None,
                             temperature_value=1.0, index_dtype=torch.int32):
    return _samples_fake("sample_from_logits", logits, "logits", uniforms,
                         (("top_k", top_k), ("top_p", top_p), ("min_p", min_p),
                          ("temperature", temperature)), index_dtype)


# ---- metaltopk.sampling's front door for torch tensors ---------------------------------------

# The per-row arguments each operation takes, in its schema's order.
_OP_ARGUMENTS = {
    _sampling._MASK: ("top_k",),
    _sampling._RENORM: ("top_k", "top_p", "min_p"),
    _sampling._SAMPLE: ("top_k", "top_p", "min_p"),
    _sampling._SAMPLE_FROM_LOGITS: ("top_k", "top_p", "min_p", "temperature"),
}
_OPS = {_sampling._MASK: mask_logits_op, _sampling._RENORM: renorm_probs_op,
        _sampling._SAMPLE: sample_op, _sampling._SAMPLE_FROM_LOGITS: sample_from_logits_op}


def _as_tensor(value, name, x, function, dtype):
    """A per-row argument given as a tensor (checked by the kernels) or a list, as a tensor."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (list, tuple)):
        return torch.tensor(value, dtype=dtype, device=x.device)
    kind = "a numpy array" if isinstance(value, np.ndarray) else type(value).__name__
    raise ValueError(f"metaltopk.{function}: {name} must be a tensor on the input's device "
                     f"({x.device}), not {kind}")


def _tensor_and_value(value, name, x, function):
    """A per-row argument as the schema takes it: (a tensor on x's device or None, a scalar)."""
    if value is None:
        return None, _DEFAULTS[name]
    if isinstance(value, (torch.Tensor, list, tuple, np.ndarray)):
        dtype = torch.int64 if name == "top_k" else torch.float32
        return _as_tensor(value, name, x, function, dtype), _DEFAULTS[name]
    if name == "top_k":
        return None, integer(value, name, function)
    return None, real(value, name, function)


def _uniforms(value, x, function):
    """The uniforms as a tensor: a torch.Generator draws them with torch.rand on x's device.
    A tensor is told apart first: the newest torch's Dynamo cannot trace isinstance(tensor,
    torch.Generator) under fullgraph."""
    if not isinstance(value, torch.Tensor) and isinstance(value, torch.Generator):
        _check_input(x, "logits" if function == "sample_from_logits" else "probs", function)
        return torch.rand(x.shape[0], generator=value, dtype=torch.float32, device=x.device)
    return _as_tensor(value, "uniforms", x, function, torch.float32)


def _index_dtype(index_dtype, function):
    if isinstance(index_dtype, torch.dtype):
        _check_index_dtype(index_dtype, function)
        return index_dtype
    return getattr(torch, _sampling._index_dtype_name(index_dtype, function))


_is_compiling = torch.compiler.is_compiling
_Tensor = torch.Tensor


def front_door(function, op, x, backend, *, uniforms=None, index_dtype="int32", **given):
    """metaltopk.sampling's functions on a torch tensor. A plain tensor outside tracing takes
    the kernel directly (the dispatcher would only add host time, and there is no gradient to
    record); anything else (torch.compile, export, meta and fake tensors) calls the op."""
    if not x.is_meta:  # meta tensors run nowhere: only the fake kernels see them
        _sampling.check_torch_device(x, backend, function)
    pairs = {name: _tensor_and_value(given.get(name), name, x, function)
             for name in _OP_ARGUMENTS[op]}
    samples = op in (_sampling._SAMPLE, _sampling._SAMPLE_FROM_LOGITS)
    if samples:
        uniforms = _uniforms(uniforms, x, function)
        index_dtype = _index_dtype(index_dtype, function)
    if type(x) is _Tensor and not x.is_meta and not _is_compiling():
        if samples:
            return _run_kernel(function, op, x, pairs, uniforms, index_dtype)
        return _run_kernel(function, op, x, pairs)
    flat = [item for pair in pairs.values() for item in pair]
    if samples:
        return _OPS[op](x, uniforms, *flat, index_dtype)
    return _OPS[op](x, *flat)
