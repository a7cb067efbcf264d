"""torch CUDA tensors and CuPy arrays as topk inputs, without copies.

Registers an array adapter with metaltopk._core: a torch.Tensor on a CUDA device, or a
cupy.ndarray, is described in place (its data pointer, shape and element strides, so views of any
strides work), the call is enqueued on the producer's *current* stream
(torch.cuda.current_stream(device) / cupy.cuda.get_current_stream()), and the outputs are
allocated by the producer itself (torch.empty_strided / cupy.empty on the input's device) and
returned as that library's arrays. Nothing is synchronised: the results are ready in stream
order, as a torch or CuPy op's would be.

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


# Filled by _torch_setup on first use (torch is never imported here): torch.dtype -> contract
# name, the reverse, and torch's current-stream accessor. Per device index, filled as devices
# are first seen: the torch.device and topk's output allocator.
_torch_names = {}
_torch_dtypes = {}
_torch_current_stream = None
_torch_devices = {}


def _torch_setup(torch) -> None:
    """Looks up once what every call needs. The stream accessor is the cheap private one when
    this torch has it, else the public one."""
    global _torch_current_stream
    _torch_dtypes.update({name: getattr(torch, name) for name in _SUPPORTED})
    _torch_names.update({dtype: name for name, dtype in _torch_dtypes.items()})
    _torch_current_stream = (getattr(torch._C, "_cuda_getCurrentRawStream", None)
                             or (lambda index: torch.cuda.current_stream(index).cuda_stream))


def _torch_device(torch, index):
    """(torch.device, allocator) of a device index. The allocator is DeviceTensor.allocate: it
    calls torch.empty_strided, whose argument parsing is cheaper than torch.empty's."""
    entry = _torch_devices.get(index)
    if entry is None:
        device, empty_strided = torch.device("cuda", index), torch.empty_strided

        def allocate(shape, strides, dtype_name):
            out = empty_strided(shape, strides, dtype=_torch_dtypes[dtype_name], device=device)
            return out, out.data_ptr()

        entry = _torch_devices[index] = (device, allocate)
    return entry


def _torch_view(tensor, torch) -> DeviceTensor:
    """The input's view, for torch's current stream on the tensor's device. This runs on every
    call, so it reads each tensor attribute once and builds nothing it does not return."""
    if _torch_current_stream is None:
        _torch_setup(torch)
    name = _torch_names.get(tensor.dtype)
    if name is None:
        raise _unsupported(tensor.dtype)
    index = tensor.get_device()  # an int; tensor.device would build a torch.device
    stream = _torch_current_stream(index)
    device, allocate = _torch_device(torch, index)

    def new_empty(shape, dtype_name):
        out = torch.empty(shape, dtype=_torch_dtypes[dtype_name], device=device)
        return DeviceTensor(out, out.data_ptr(), dtype_name, tuple(shape), out.stride(), "cuda",
                            index, stream, new_empty, allocate)

    # data_ptr() is element 0, storage offset included.
    return DeviceTensor(tensor, tensor.data_ptr(), name, tuple(tensor.shape), tensor.stride(),
                        "cuda", index, stream, new_empty, allocate)


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
