"""The Python face of the C ABI: dtype codes, errors, contexts, descriptors, device buffers.

Every other module of the package reaches the library through these names; none of them
knows which kind of array (numpy, torch, CuPy, DLPack) it serves: that is metaltopk._dispatch.
"""

import atexit
import struct
import threading
from dataclasses import dataclass
from typing import Callable, Optional, Tuple

import numpy as np

from ._arguments import BACKEND_NAMES, backend_name
from ._ffi import ffi, lib

try:
    from ml_dtypes import bfloat16 as _bfloat16
except ImportError:  # bfloat16 arrays cannot exist without ml_dtypes
    _bfloat16 = None

# ---- dtypes ---------------------------------------------------------------------------------

# Contract dtype name -> mtk_dtype. Names are what numpy (and ml_dtypes) call them.
DTYPE_CODES = {
    "float32": lib.MTK_FLOAT32,
    "float16": lib.MTK_FLOAT16,
    "bfloat16": lib.MTK_BFLOAT16,
    "float64": lib.MTK_FLOAT64,
    "int8": lib.MTK_INT8,
    "uint8": lib.MTK_UINT8,
    "int16": lib.MTK_INT16,
    "int32": lib.MTK_INT32,
    "int64": lib.MTK_INT64,
}

_NUMPY_KIND_NAMES = {("f", 2): "float16", ("f", 4): "float32", ("f", 8): "float64",
                     ("i", 1): "int8", ("i", 2): "int16", ("i", 4): "int32", ("i", 8): "int64",
                     ("u", 1): "uint8"}


def dtype_name(dtype: np.dtype) -> str:
    """The contract name of a numpy dtype, or TypeError for any dtype the contract excludes."""
    dtype = np.dtype(dtype)
    if _bfloat16 is not None and dtype == _bfloat16:
        return "bfloat16"
    name = _NUMPY_KIND_NAMES.get((dtype.kind, dtype.itemsize))
    if name is None or dtype.fields is not None:
        raise TypeError(f"metaltopk.topk: dtype {dtype} is not supported (supported: "
                        + ", ".join(DTYPE_CODES) + ")")
    return name


# Native-byte-order numpy dtype -> mtk_dtype, filled as dtypes are first seen: the per-call
# lookup of topk's hot path (non-native byte orders are distinct dtypes and never land here).
_native_dtype_codes = {}


def native_dtype_code(dtype: np.dtype) -> Optional[int]:
    code = _native_dtype_codes.get(dtype)
    if code is None and dtype.isnative:
        code = DTYPE_CODES[dtype_name(dtype)]  # TypeError for unsupported dtypes
        _native_dtype_codes[dtype] = code
    return code


# ---- errors ---------------------------------------------------------------------------------

EXCEPTIONS = {
    lib.MTK_ERROR_INVALID_ARGUMENT: ValueError,
    lib.MTK_ERROR_INVALID_DIM: IndexError,
    lib.MTK_ERROR_UNSUPPORTED_DTYPE: TypeError,
    lib.MTK_ERROR_OUT_OF_MEMORY: MemoryError,
    lib.MTK_ERROR_BACKEND_UNAVAILABLE: RuntimeError,
    lib.MTK_ERROR_DEVICE: RuntimeError,
    lib.MTK_ERROR_INVALID_CONTEXT: ValueError,
    lib.MTK_ERROR_INTERNAL: RuntimeError,
}


def check(status: int, backend: Optional[str] = None,
          translate: Optional[Callable[[str], str]] = None) -> None:
    """Raises the contract's exception for a failed call, carrying the library's message
    (through `translate`, which renames C fields to Python arguments, where given).
    Must run on the thread that made the call: the message is thread-local."""
    if status == lib.MTK_SUCCESS:
        return
    message = ffi.string(lib.mtk_last_error_message()).decode("utf-8", "replace")
    if not message:
        message = ffi.string(lib.mtk_status_string(status)).decode()
    if backend is not None and backend not in message and status in (
            lib.MTK_ERROR_BACKEND_UNAVAILABLE, lib.MTK_ERROR_DEVICE):
        message = f"{backend} backend: {message}"
    if translate is not None:
        message = translate(message)
    raise EXCEPTIONS.get(status, RuntimeError)(message)


# ---- backends and contexts ------------------------------------------------------------------

BACKEND_CODES = {name: getattr(lib, "MTK_BACKEND_" + name.upper()) for name in BACKEND_NAMES}


def backends() -> dict:
    """{name: {"compiled": bool, "available": bool}} for every concrete backend."""
    result = {}
    for name, code in BACKEND_CODES.items():
        if name == "default":
            continue
        compiled, available = ffi.new("int*"), ffi.new("int*")
        check(lib.mtk_backend_query(code, compiled, available))
        result[name] = {"compiled": bool(compiled[0]), "available": bool(available[0])}
    return result


class Context:
    """One library context; `backend` is the resolved name ("default" resolves at creation)."""

    def __init__(self, requested: str, device_index: int):
        handle = ffi.new("mtk_context*")
        check(lib.mtk_context_create(BACKEND_CODES[requested], device_index, handle), requested)
        self.handle = handle[0]
        resolved = ffi.new("mtk_backend*")
        check(lib.mtk_context_backend(self.handle, resolved))
        self.backend = ffi.string(lib.mtk_backend_name(resolved[0])).decode()
        self.on_host = self.backend == "cpu"

    def destroy(self) -> None:
        if self.handle is not None:
            lib.mtk_context_destroy(self.handle)
            self.handle = None


_contexts = {}
_contexts_lock = threading.Lock()


def context(backend: Optional[str] = None, device_index: int = 0,
            function: str = "topk") -> Context:
    """The process-wide context of a backend and device, created on first use."""
    key = (backend_name(backend, function), device_index)
    ctx = _contexts.get(key)  # a dict read is atomic: only creation needs the lock
    if ctx is not None and ctx.handle is not None:
        return ctx
    with _contexts_lock:
        ctx = _contexts.get(key)
        if ctx is None:
            ctx = _contexts[key] = Context(*key)
        return ctx


@atexit.register
def _destroy_contexts() -> None:
    with _contexts_lock:
        for ctx in _contexts.values():
            ctx.destroy()
        _contexts.clear()


def default_backend() -> str:
    """The backend that backend=None resolves to: CUDA, then Metal, then the CPU."""
    return context(None).backend


def cache_stats(backend: Optional[str] = None) -> dict:
    """Plan/pipeline cache counters and scratch bytes of the backend's context."""
    stats = ffi.new("mtk_cache_stats*")
    check(lib.mtk_context_cache_stats(context(backend).handle, stats))
    return {"hits": stats.hits, "misses": stats.misses, "entries": stats.entries,
            "scratch_bytes": stats.scratch_bytes}


# ---- tensors --------------------------------------------------------------------------------


@dataclass
class DeviceTensor:
    """A tensor in a backend's device memory, as an array adapter (see register_array_adapter)
    describes it. `owner` keeps the memory alive and is what topk returns for outputs."""

    owner: object
    data: int                 # address of element 0 (strides apply from here)
    dtype: str                # a DTYPE_CODES name
    shape: Tuple[int, ...]
    strides: Tuple[int, ...]  # in elements
    backend: str              # "cuda", "metal", ...
    device_index: int
    stream: int               # the backend's queue handle, 0 for the default
    # Allocates a contiguous output on the same device and returns its DeviceTensor.
    new_empty: Callable[[Tuple[int, ...], str], "DeviceTensor"]


def describe(data: int, dtype: str, shape, strides):
    if len(shape) > lib.MTK_MAX_NDIM:
        raise ValueError(f"metaltopk.topk: input.ndim = {len(shape)} exceeds MTK_MAX_NDIM = "
                         f"{lib.MTK_MAX_NDIM}")
    t = ffi.new("mtk_tensor*")
    t.data = ffi.cast("void*", data)
    t.dtype = DTYPE_CODES[dtype]
    t.ndim = len(shape)
    for d, (size, stride) in enumerate(zip(shape, strides)):
        t.sizes[d] = size
        t.strides[d] = stride
    return t


def contiguous_strides(shape):
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def normalized_dim_and_k(shape, k, dim):
    """(dim, k) normalised, or None where the library must report the error."""
    rank = max(len(shape), 1)
    if not -rank <= dim < rank:
        return None
    dim %= rank
    n = shape[dim] if shape else 1
    return (dim, k) if 0 <= k <= n else None


def output_shape(shape, dim, k):
    return tuple(k if d == dim else s for d, s in enumerate(shape))


# ---- the hot path: cached geometry, descriptors packed in one step ---------------------------
#
# A small call's host time went mostly to building three mtk_tensor descriptors field by field
# through cffi and to re-deriving shapes and strides. Now a call's geometry is cached by
# (shape, strides, itemsize, k, dim), and its three descriptors are packed with one
# struct.pack_into into a block of three mtk_tensor, laid out from cffi's own view of the header.

MAX_NDIM = lib.MTK_MAX_NDIM


class Geometry:
    """What a (shape, byte strides, itemsize, k, dim) call needs: the input's sizes and element
    strides (None when a stride is not a whole number of elements), the output shape (None
    when k or dim is out of range: the library reports that), its strides, and both together."""

    __slots__ = ("ndim", "input_dims", "out_shape", "out_strides", "output_dims")

    def __init__(self, shape, byte_strides, itemsize, k, dim):
        if len(shape) > MAX_NDIM:
            raise ValueError(f"metaltopk.topk: input.ndim = {len(shape)} exceeds MTK_MAX_NDIM = "
                             f"{MAX_NDIM}")
        self.ndim = len(shape)
        self.input_dims = None
        if not any(stride % itemsize for stride in byte_strides):
            self.input_dims = shape + tuple(stride // itemsize for stride in byte_strides)
        normalized = normalized_dim_and_k(shape, k, dim)
        self.out_shape = self.out_strides = self.output_dims = None
        if normalized is not None:
            self.out_shape = output_shape(shape, *normalized)
            self.out_strides = contiguous_strides(self.out_shape)
            self.output_dims = self.out_shape + self.out_strides


_GEOMETRY_CACHE_SIZE = 1024
_geometries = {}


def call_geometry(shape, byte_strides, itemsize, k, dim) -> Geometry:
    key = (shape, byte_strides, itemsize, k, dim)
    geometry = _geometries.get(key)
    if geometry is None:
        geometry = Geometry(*key)
        if len(_geometries) >= _GEOMETRY_CACHE_SIZE:
            _geometries.clear()
        _geometries[key] = geometry
    return geometry


def _tensor_format(ndim: int) -> str:
    """struct format of one mtk_tensor with ndim sizes and strides; the entries past ndim are
    skipped (the library ignores them)."""
    fields = (("data", "Q" if ffi.sizeof("void*") == 8 else "I"), ("dtype", "i"),
              ("ndim", "i"), ("sizes", f"{ndim}q"), ("strides", f"{ndim}q"))
    parts, end = [], 0
    for name, code in fields:
        offset = ffi.offsetof("mtk_tensor", name)
        parts.append(f"{offset - end}x{code}")
        end = offset + struct.calcsize("=" + code)
    parts.append(f"{ffi.sizeof('mtk_tensor') - end}x")
    return "".join(parts)


# Per rank: input, values and indices descriptors back to back, each (data, dtype, ndim,
# sizes..., strides...).
CALL_LAYOUTS = [struct.Struct("=" + _tensor_format(ndim) * 3) for ndim in range(MAX_NDIM + 1)]


class DescriptorBlock:
    """Three mtk_tensor (input, values, indices) and a writable view of their bytes."""

    __slots__ = ("tensors", "input", "values", "indices", "memory")

    def __init__(self):
        self.tensors = ffi.new("mtk_tensor[3]")  # owns the memory the pointers below address
        self.input, self.values, self.indices = (self.tensors + i for i in range(3))
        self.memory = ffi.buffer(self.tensors)


# Blocks not in use. list.pop and list.append are atomic, so concurrent calls (the library
# releases the GIL) and re-entrant ones never share a block; the list holds at most one block
# per call that was ever in flight at once.
free_blocks = []

# Stream address -> void*, for the few streams a process uses.
_stream_handles = {0: ffi.NULL}


def stream_handle(stream: int):
    handle = _stream_handles.get(stream)
    if handle is None:
        handle = ffi.cast("void*", stream)
        if len(_stream_handles) < 64:
            _stream_handles[stream] = handle
    return handle


def acquire_block() -> DescriptorBlock:
    try:
        return free_blocks.pop()
    except IndexError:
        return DescriptorBlock()


def as_native_array(x) -> np.ndarray:
    """x as a numpy array of native byte order, aligned, with strides of whole elements."""
    array = np.asarray(x)
    dtype_name(array.dtype)  # TypeError before any copy
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    # The library reads whole, aligned elements: anything else goes through a compact copy.
    if not array.flags.aligned or any(s % array.itemsize for s in array.strides):
        array = np.ascontiguousarray(array)
    return array


class DeviceBuffers:
    """Device allocations of one call, all freed when the call ends, successful or not."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.pointers = []

    def allocate(self, nbytes: int) -> int:
        out = ffi.new("void**")
        check(lib.mtk_malloc(self.ctx.handle, nbytes, out), self.ctx.backend)
        if out[0] != ffi.NULL:
            self.pointers.append(out[0])
        return int(ffi.cast("uintptr_t", out[0]))

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        for pointer in self.pointers:
            lib.mtk_free(self.ctx.handle, pointer)
        self.pointers.clear()


def memcpy(ctx, dst: int, src: int, nbytes: int, kind) -> None:
    if nbytes:
        check(lib.mtk_memcpy(ctx.handle, ffi.cast("void*", dst), ffi.cast("void*", src), nbytes,
                             kind, ffi.NULL), ctx.backend)


def byte_extent(array):
    """(lowest, highest + itemsize) byte offsets, relative to element 0, that array touches."""
    if array.size == 0:
        return 0, 0
    low = high = 0
    for size, stride in zip(array.shape, array.strides):
        reach = (size - 1) * stride
        if reach < 0:
            low += reach
        else:
            high += reach
    return low, high + array.itemsize




def host_pointer(array):
    """The address of array's element 0 as cdata: ffi.from_buffer is several times cheaper than
    .ctypes.data, but takes C-contiguous arrays only."""
    return (ffi.from_buffer(array) if array.flags.c_contiguous
            else ffi.cast("void*", array.ctypes.data))


def element_strides(array):
    return tuple(s // array.itemsize for s in array.strides)
