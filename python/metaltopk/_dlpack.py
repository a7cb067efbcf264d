"""Arrays of any DLPack producer (JAX, ...) that metaltopk has no integration for.

The input is imported without a copy (through torch where torch is importable: it reads every
dtype and device DLPack carries, bfloat16 included; else through numpy, CPU only), the call runs
there, and the outputs are exported back to the producer's kind: through its array-API namespace
(`x.__array_namespace__().from_dlpack`) or its top-level module's `from_dlpack`.
"""

import sys

import numpy as np

_CPU = 1  # DLDeviceType kDLCPU


def _importer(x):
    try:
        import torch
    except ImportError:
        torch = None
    if torch is not None:
        return torch.from_dlpack
    device_type, _ = x.__dlpack_device__()
    if device_type != _CPU:
        raise TypeError(f"metaltopk.topk: a {type(x).__name__} on DLPack device type "
                        f"{device_type} needs torch installed to be read")
    return np.from_dlpack


def _exporter(x):
    namespace = getattr(x, "__array_namespace__", None)
    if namespace is not None:
        return namespace().from_dlpack
    module = sys.modules.get(type(x).__module__.partition(".")[0])
    from_dlpack = getattr(module, "from_dlpack", None)
    if from_dlpack is None:
        raise TypeError(f"metaltopk.topk: cannot return a {type(x).__name__}: it has no "
                        "__array_namespace__ and its module no from_dlpack")
    return from_dlpack


def topk_dlpack(x, k, dim, largest, sorted, backend):
    from ._core import topk

    export = _exporter(x)
    values, indices = topk(_importer(x)(x), k, dim, largest, sorted, backend=backend)
    return export(values), export(indices)
