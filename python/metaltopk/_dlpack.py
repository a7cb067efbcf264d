"""The DLPack adapter: arrays of any producer (JAX, ...) that metaltopk has no integration for.

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
        raise TypeError(f"metaltopk: a {type(x).__name__} on DLPack device type "
                        f"{device_type} needs torch installed to be read")
    return np.from_dlpack


def _exporter(x):
    namespace = getattr(x, "__array_namespace__", None)
    if namespace is not None:
        return namespace().from_dlpack
    module = sys.modules.get(type(x).__module__.partition(".")[0])
    from_dlpack = getattr(module, "from_dlpack", None)
    if from_dlpack is None:
        raise TypeError(f"metaltopk: cannot return a {type(x).__name__}: it has no "
                        "__array_namespace__ and its module no from_dlpack")
    return from_dlpack


def is_foreign(x) -> bool:
    """Whether x is an array of a DLPack producer other than numpy (which is read directly)."""
    return hasattr(x, "__dlpack__") and not isinstance(x, np.ndarray)


def call(operation, x, *args, **options):
    """operation (a metaltopk front door) on x imported without a copy; its outputs exported
    back to x's kind. A `bias` option of the same kind is imported alike."""
    export = _exporter(x)
    importer = _importer(x)
    bias = options.get("bias")
    if bias is not None and is_foreign(bias):
        options["bias"] = importer(bias)
    return tuple(export(out) for out in operation(importer(x), *args, **options))


def call_ragged(run, x, request, backend):
    """run(x, request, backend) (a ragged front door's dispatcher) on x and the request's
    foreign index arrays imported without a copy; its outputs exported back to x's kind."""
    export = _exporter(x)
    importer = _importer(x)
    request.arrays = {name: importer(value) if is_foreign(value) else value
                      for name, value in request.arrays.items()}
    out = run(importer(x), request, backend)
    if isinstance(out, tuple):
        return tuple(export(part) for part in out)
    return export(out)
