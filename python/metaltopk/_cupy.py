"""CuPy arrays as topk and moe_route inputs, without copies.

The array adapter that metaltopk/__init__.py registers with metaltopk._dispatch: a
cupy.ndarray is described in place (its data pointer, shape and element strides, so views of
any strides work), the call is enqueued on CuPy's current stream of the array's device, and the
outputs are allocated by CuPy on that device and returned as CuPy arrays. Nothing is synchronised: results are ready in stream order.

CuPy is never imported here: an object can only be a CuPy array if CuPy is already loaded, so
the adapter looks it up in sys.modules.
"""

import sys

from ._abi import DTYPE_CODES, DeviceTensor


def _cupy_view(array, cupy) -> DeviceTensor:
    name = array.dtype.name
    if name not in DTYPE_CODES:
        raise TypeError(f"metaltopk.topk: dtype {array.dtype} is not supported (supported: "
                        + ", ".join(DTYPE_CODES) + ")")
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


def cupy_view(obj):
    """The adapter: a DeviceTensor for a cupy.ndarray, None for anything else."""
    cupy = sys.modules.get("cupy")
    if cupy is not None and isinstance(obj, cupy.ndarray):
        return _cupy_view(obj, cupy)
    return None
