"""torch CUDA tensors and CuPy arrays as topk inputs, without copies.

Registers an array adapter with metaltopk._core: a torch.Tensor on a CUDA device, or a
cupy.ndarray, is described in place (its data pointer, shape and element strides, so views of any
strides work), the call is enqueued on the producer's *current* stream
(torch.cuda.current_stream(device) / cupy.cuda.get_current_stream()), and the outputs are
allocated by the producer itself (torch.empty / cupy.empty on the input's device) and returned
as that library's arrays. Nothing is synchronised: the results are ready in stream order, as a
torch or CuPy op's would be.

Neither library is imported here: an object can only be a torch tensor or a CuPy array if its
library is already loaded, so the adapter looks them up in sys.modules.
"""

import sys

from ._core import DeviceTensor, register_array_adapter

# Contract dtype names; torch and CuPy call these dtypes the same.
_SUPPORTED = ("float32", "float16", "bfloat16", "float64", "int8", "uint8", "int16", "int32",
              "int64")


def _unsupported(dtype) -> TypeError:
    return TypeError(f"metaltopk.topk: dtype {dtype} is not supported (supported: "
                     + ", ".join(_SUPPORTED) + ")")


_torch_names = {}  # torch.dtype -> contract name, filled on first use


def _torch_stream(torch, device_index):
    """The raw handle of torch's current stream on the device (the cheap private accessor when
    this torch has it; the public one otherwise)."""
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(device_index)
    return torch.cuda.current_stream(device_index).cuda_stream


def _torch_view(tensor, torch, stream=None) -> DeviceTensor:
    if not _torch_names:
        _torch_names.update({getattr(torch, name): name for name in _SUPPORTED})
    name = _torch_names.get(tensor.dtype)
    if name is None:
        raise _unsupported(tensor.dtype)
    device = tensor.device
    index = device.index if device.index is not None else torch.cuda.current_device()
    if stream is None:
        stream = _torch_stream(torch, index)

    def new_empty(shape, dtype_name):
        out = torch.empty(shape, dtype=getattr(torch, dtype_name), device=device)
        return _torch_view(out, torch, stream)

    return DeviceTensor(
        owner=tensor,
        data=tensor.data_ptr(),  # element 0, storage offset included
        dtype=name,
        shape=tuple(tensor.shape),
        strides=tensor.stride(),
        backend="cuda",
        device_index=index,
        stream=stream,
        new_empty=new_empty,
    )


def _cupy_view(array, cupy) -> DeviceTensor:
    name = array.dtype.name
    if name not in _SUPPORTED:
        raise _unsupported(array.dtype)
    itemsize = array.dtype.itemsize
    if any(stride % itemsize for stride in array.strides):
        raise ValueError("metaltopk.topk: CuPy array strides must be whole elements, got "
                         f"{array.strides} bytes for itemsize {itemsize}")
    device = array.device
    with device:  # CuPy's current stream is per device
        stream = cupy.cuda.get_current_stream().ptr

    def new_empty(shape, dtype_name):
        with device:
            out = cupy.empty(shape, dtype=dtype_name)
        return _cupy_view(out, cupy)

    return DeviceTensor(
        owner=array,
        data=array.data.ptr,  # element 0 of the view
        dtype=name,
        shape=tuple(array.shape),
        strides=tuple(stride // itemsize for stride in array.strides),
        backend="cuda",
        device_index=device.id,
        stream=stream,
        new_empty=new_empty,
    )


def _adapter(obj):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(obj, torch.Tensor):
        return _torch_view(obj, torch) if obj.is_cuda else None
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(obj, cupy.ndarray):
        return _cupy_view(obj, cupy)
    return None


register_array_adapter(_adapter)
