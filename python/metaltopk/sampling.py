"""metaltopk.sampling: the filters and the sampler of an LLM decoder, exact and batch-invariant
(docs/CONTRACT.md, "Sampling filters"), with FlashInfer's argument order.

    masked = top_k_mask_logits(logits, top_k)
    probs = top_k_renorm_probs(probs, top_k)      # top_p_renorm_probs, min_p_renorm_probs
    tokens = sample(probs, uniforms, top_k=50, top_p=0.9)
    tokens = sample_from_logits(logits, generator, temperature=0.7, top_p=0.9)

`logits` and `probs` are [rows, n]: numpy arrays (float32; logits also float16 and
ml_dtypes.bfloat16) or torch tensors, and the result is of the same kind. top_k, top_p, min_p and
temperature are each a Python number for every row or a [rows] array (int32/int64 for top_k,
float32 otherwise) of the input's kind, on its device. A filter left None, or set to a value
that disables it (top_k <= 0 or >= n, top_p >= 1, min_p <= 0: vLLM's conventions), keeps the row.
`uniforms` is a float32 [rows] array, one uniform in [0, 1) per row, or a torch.Generator or
numpy.random.Generator that draws them.

The CPU backend runs these today; the GPU backends raise RuntimeError naming themselves until
their kernels exist. numpy inputs run on the CPU backend. Torch tensors go through the torch ops
(metaltopk.torch, "sampling"), so torch.compile and torch.export see them; a torch.Generator
draws the uniforms with torch.rand on the input's device.
"""

import re

import numpy as np

from ._abi import DTYPE_CODES, as_native_array, check, context, describe, element_strides
from ._arguments import backend_name, integer, real
from ._dispatch import type_handler
from ._ffi import ffi, lib

__all__ = ["top_k_mask_logits", "top_k_renorm_probs", "top_p_renorm_probs",
           "min_p_renorm_probs", "sample", "sample_from_logits"]

_MASK = lib.MTK_SAMPLING_TOP_K_MASK_LOGITS
_RENORM = lib.MTK_SAMPLING_RENORM_PROBS
_SAMPLE = lib.MTK_SAMPLING_SAMPLE
_SAMPLE_FROM_LOGITS = lib.MTK_SAMPLING_SAMPLE_FROM_LOGITS
_INDEX_DTYPES = ("int32", "int64")


def top_k_mask_logits(logits, top_k, *, backend=None):
    """logits with all but each row's top_k set to -inf: the kept logits are bit-exact copies,
    chosen by the top-k contract (NaN above +inf, ties to the lower index, exactly top_k)."""
    return _run("top_k_mask_logits", _MASK, logits, backend, top_k=top_k)


def top_k_renorm_probs(probs, top_k, *, backend=None):
    """float32 probs keeping each row's top_k largest (ties to the lower index), divided by
    their sum; 0 elsewhere."""
    return _run("top_k_renorm_probs", _RENORM, probs, backend, top_k=top_k)


def top_p_renorm_probs(probs, top_p, *, backend=None):
    """float32 probs keeping the shortest prefix, in descending order (ties to the lower index),
    whose exact sum reaches top_p times the row's sum (at least one token), divided by their
    sum; 0 elsewhere."""
    return _run("top_p_renorm_probs", _RENORM, probs, backend, top_p=top_p)


def min_p_renorm_probs(probs, min_p, *, backend=None):
    """float32 probs keeping p >= min_p * max(p), divided by their sum; 0 elsewhere."""
    return _run("min_p_renorm_probs", _RENORM, probs, backend, min_p=min_p)


def sample(probs, uniforms=None, *, top_k=None, top_p=None, min_p=None, generator=None,
           index_dtype="int32", backend=None):
    """One token per row of probs after the filters (top-k, then top-p on what it kept, then
    min-p): the first index whose cumulative filtered mass exceeds uniforms[r] times the row's
    filtered total. `uniforms` (or `generator`) as in the module's documentation. Returns
    [rows] int32 (or index_dtype) tokens."""
    return _run("sample", _SAMPLE, probs, backend, top_k=top_k, top_p=top_p, min_p=min_p,
                uniforms=_uniforms_argument(uniforms, generator, "sample"),
                index_dtype=index_dtype)


def sample_from_logits(logits, uniforms=None, *, temperature=None, top_k=None, top_p=None,
                       min_p=None, generator=None, index_dtype="int32", backend=None):
    """sample() on softmax(logits * (1 / temperature)); top_k keeps top_k_mask_logits's tokens.
    A temperature <= 0 picks each row's top logit (greedy)."""
    return _run("sample_from_logits", _SAMPLE_FROM_LOGITS, logits, backend, top_k=top_k,
                top_p=top_p, min_p=min_p, temperature=temperature,
                uniforms=_uniforms_argument(uniforms, generator, "sample_from_logits"),
                index_dtype=index_dtype)


def _uniforms_argument(uniforms, generator, function):
    if generator is not None:
        if uniforms is not None:
            raise ValueError(f"metaltopk.{function}: pass uniforms or generator, not both")
        return generator
    if uniforms is None:
        raise ValueError(f"metaltopk.{function}: uniforms is required (a float32 array of one "
                         "uniform in [0, 1) per row, or a generator that draws them)")
    return uniforms


def _run(function, op, x, backend, **arguments):
    handler = type_handler(x) if _is_torch(x) else None
    if handler is not None:
        # metaltopk.torch's: through the torch ops, so that torch.compile and torch.export see
        # them.
        return handler.sampling(function, op, x, backend, **arguments)
    return _Call(function, op, x, backend, **arguments).run()


def run_torch_kernel(function, op, x, **arguments):
    """The torch ops' kernel: one call on torch tensors (x and the per-row tensors on one CPU,
    CUDA or MPS device, which the checks below confirm), its output a new torch tensor there."""
    return _Call(function, op, x, None, **arguments).run()


_C_NAMES = re.compile(r"\bparams\.(\w+)")


def translate(function, message):
    """The library's message in this API's names: the function's, and the arguments' (the C
    names params.top_k and so on are the arguments top_k and so on)."""
    return f"metaltopk.{function}: " + _C_NAMES.sub(r"\1", message)


class _Call:
    """One call: the input and every per-row argument of the input's kind, described for the
    library; the output allocated in the input's kind."""

    def __init__(self, function, op, x, backend, *, top_k=None, top_p=None, min_p=None,
                 temperature=None, uniforms=None, index_dtype="int32"):
        self.function, self.op = function, op
        self.kind = _TorchKind(x, function, backend) if _is_torch(x) else _NumpyKind(
            x, function, backend)
        self.input = self.kind.input
        if len(self.input.shape) != 2:
            input_name = "logits" if op in (_MASK, _SAMPLE_FROM_LOGITS) else "probs"
            raise ValueError(f"metaltopk.{function}: {input_name}.ndim = "
                             f"{len(self.input.shape)} must be 2 ([rows, n])")
        self.rows = self.input.shape[0]
        self.keep = [self.input]
        self.params = ffi.new("mtk_sampling_params*")
        self.params.struct_size = ffi.sizeof("mtk_sampling_params")
        self.params.top_p_value = 1.0
        self.params.temperature_value = 1.0
        if top_k is not None:
            self._integer_member("top_k", top_k)
        for name, value in (("top_p", top_p), ("min_p", min_p), ("temperature", temperature)):
            if value is not None:
                self._float_member(name, value)
        self.uniforms = None
        if uniforms is not None:
            array = self.kind.uniforms(uniforms, self.rows)
            self.uniforms = self._describe(array, "uniforms", ("float32",))
        self.index_dtype = _index_dtype_name(index_dtype, function)

    def _describe(self, array, name, dtypes):
        dtype = self.kind.dtype_name(array, name)
        if dtype not in dtypes:
            raise TypeError(f"metaltopk.{self.function}: {name}.dtype = {dtype} must be "
                            + " or ".join(dtypes))
        descriptor = describe(*self.kind.layout(array))
        # cffi does not keep what a struct member points to alive: the call does.
        self.keep += [array, descriptor]
        return descriptor

    def _integer_member(self, name, value):
        if self.kind.is_array(value) or isinstance(value, (list, tuple)):
            array = self.kind.per_row(value, name)
            setattr(self.params, name, self._describe(array, name, _INDEX_DTYPES))
        else:
            setattr(self.params, name + "_value", integer(value, name, self.function))

    def _float_member(self, name, value):
        if self.kind.is_array(value) or isinstance(value, (list, tuple)):
            array = self.kind.per_row(value, name, np.float32)
            setattr(self.params, name, self._describe(array, name, ("float32",)))
        else:
            setattr(self.params, name + "_value", real(value, name, self.function))

    def translate(self, message):
        return translate(self.function, message)

    def run(self):
        ctx = self.kind.context
        samples = self.op in (_SAMPLE, _SAMPLE_FROM_LOGITS)
        shape = (self.rows,) if samples else tuple(self.input.shape)
        if samples:
            out_dtype = self.index_dtype
        elif self.op == _MASK:
            out_dtype = self.kind.dtype_name(self.input, "logits")
        else:
            out_dtype = "float32"
        input_dtype = self.kind.dtype_name(self.input, "input")
        if input_dtype not in DTYPE_CODES:
            raise TypeError(f"metaltopk.{self.function}: dtype {input_dtype} is not supported "
                            "(float32; logits also float16 and bfloat16)")
        input_t = describe(*self.kind.layout(self.input))
        size = ffi.new("size_t*")
        # Validates the input, the params and the output dtype before anything is allocated.
        check(lib.mtk_sampling_workspace_size(ctx.handle, self.op, input_t, self.params,
                                              DTYPE_CODES[out_dtype], size),
              ctx.backend, self.translate)
        output = self.kind.empty(shape, out_dtype)
        output_t = describe(*self.kind.layout(output))
        # Scratch of the input's kind (torch's allocator for tensors, the graph's pool inside
        # CUDA graph capture), held until the call has been enqueued.
        scratch = self.kind.empty((size[0],), "uint8") if size[0] else None
        workspace = ffi.NULL if scratch is None else ffi.cast("void*",
                                                              self.kind.layout(scratch)[0])
        status = lib.mtk_sampling_with_workspace(
            ctx.handle, self.op, input_t, self.params,
            ffi.NULL if self.uniforms is None else self.uniforms, output_t, workspace, size[0],
            self.kind.stream)
        check(status, ctx.backend, self.translate)
        return output


def _index_dtype_name(index_dtype, function):
    name = str(index_dtype).replace("torch.", "")
    if name not in _INDEX_DTYPES:
        try:
            name = np.dtype(index_dtype).name
        except TypeError:
            pass
    if name not in _INDEX_DTYPES:
        raise TypeError(f"metaltopk.{function}: index_dtype = {index_dtype} must be int32 or "
                        "int64")
    return name


# The torch tensor type, registered by metaltopk (__init__.py) where torch is importable. A
# registry rather than a look-up of torch in sys.modules, which Dynamo cannot trace: it iterates
# that dict while imports change it (torch 2.11's torch.compile(fullgraph=True) of a sampler
# failed there with "dictionary changed size during iteration").
_torch_tensor_types = ()


def _register_torch_tensor_type(tensor_type: type) -> None:
    global _torch_tensor_types
    _torch_tensor_types += (tensor_type,)


def _is_torch(x):
    """A torch tensor, subclasses included (tracing's FakeTensor among them)."""
    return isinstance(x, _torch_tensor_types)


class _NumpyKind:
    """numpy arrays (and anything numpy reads), described in place on the CPU backend."""

    stream = ffi.NULL

    def __init__(self, x, function, backend):
        self.function = function
        name = backend_name(backend, function)
        if name not in ("default", "cpu"):
            raise RuntimeError(f"metaltopk.{function}: numpy inputs run on the cpu backend for "
                               f"now, not on backend = {backend!r}")
        self.context = context("cpu", function=function)
        try:
            self.input = as_native_array(x)
        except TypeError:
            raise TypeError(f"metaltopk.{function}: dtype {np.asarray(x).dtype} is not "
                            "supported (float32; logits also float16 and bfloat16)") from None

    @staticmethod
    def is_array(value):
        return isinstance(value, np.ndarray) or _is_torch(value)

    def per_row(self, value, name, list_dtype=np.int64):
        if _is_torch(value):
            raise TypeError(f"metaltopk.{self.function}: {name} is a torch tensor but the input "
                            "is a numpy array")
        array = np.asarray(value, dtype=list_dtype) if isinstance(value, (list, tuple)) else value
        return array

    def uniforms(self, value, rows):
        if isinstance(value, np.random.Generator):
            return value.random(rows, dtype=np.float32)
        if type(value).__module__.startswith("torch"):
            import torch

            if isinstance(value, torch.Generator):  # its draws, as numpy
                return torch.rand(rows, generator=value, dtype=torch.float32).numpy()
            raise TypeError(f"metaltopk.{self.function}: uniforms is a torch tensor but the "
                            "input is a numpy array")
        return np.asarray(value, dtype=np.float32) if isinstance(value, (list, tuple)) else value

    def dtype_name(self, array, name):
        array = np.asarray(array)
        for candidate in DTYPE_CODES:
            if candidate == "bfloat16":
                if array.dtype.name == "bfloat16":
                    return candidate
            elif array.dtype == np.dtype(candidate):
                return candidate
        return str(array.dtype)

    def layout(self, array):
        if not array.dtype.isnative or any(s % array.itemsize for s in array.strides):
            raise TypeError(f"metaltopk.{self.function}: arrays must be native-endian with "
                            "strides of whole elements")
        return (array.ctypes.data, self.dtype_name(array, ""), array.shape,
                element_strides(array))

    @staticmethod
    def empty(shape, dtype):
        if dtype == "bfloat16":
            from ml_dtypes import bfloat16
            return np.empty(shape, bfloat16)
        return np.empty(shape, dtype)


TORCH_DEVICE_BACKENDS = {"cpu": "cpu", "cuda": "cuda", "mps": "metal"}


def check_torch_device(x, backend, function):
    """x's device has a backend, and `backend`, where given, is that one."""
    device_backend = TORCH_DEVICE_BACKENDS.get(x.device.type)
    if device_backend is None:
        raise RuntimeError(f"metaltopk.{function}: tensors on {x.device} are not supported")
    if backend is not None and backend_name(backend, function) not in ("default",
                                                                       device_backend):
        raise ValueError(f"metaltopk.{function}: the input lives on {x.device} but backend "
                         f"= {backend!r} was asked for")
    return device_backend


class _TorchKind:
    """torch tensors on their own device's backend, on torch's current stream there."""

    def __init__(self, x, function, backend):
        import torch

        self.torch, self.function = torch, function
        self.input, self.device = x, x.device
        device_backend = check_torch_device(x, backend, function)
        index = x.device.index or 0
        self.context = context(device_backend, index, function=function)
        self.stream = ffi.NULL
        if x.device.type == "cuda":
            self.stream = ffi.cast("void*", torch.cuda.current_stream(x.device).cuda_stream)

    def is_array(self, value):
        return isinstance(value, self.torch.Tensor)

    def per_row(self, value, name, list_dtype=None):
        """A per-row tensor; the front door (metaltopk.torch._sampling) has turned lists into
        tensors and refused numpy arrays."""
        if value.device != self.device:
            raise ValueError(f"metaltopk.{self.function}: {name} must be a tensor on the "
                             f"input's device ({self.device}), not on {value.device}")
        return value

    def uniforms(self, value, rows):
        return self.per_row(value, "uniforms")

    def dtype_name(self, tensor, name):
        return str(tensor.dtype).replace("torch.", "")

    def layout(self, tensor):
        return (tensor.data_ptr(), self.dtype_name(tensor, ""), tuple(tensor.shape),
                tuple(tensor.stride()))

    def empty(self, shape, dtype):
        return self.torch.empty(shape, dtype=getattr(self.torch, dtype), device=self.device)
