"""metaltopk: exact, backend-independent top-k (see the contract in the project's docs).

    values, indices = metaltopk.topk(x, k, dim=-1, largest=True, sorted=True, backend=None)
"""

from importlib.util import find_spec as _find_spec

from ._ffi import lib as _lib, library_path
from ._core import (DeviceTensor, backends, cache_stats, default_backend, dtype_name,
                    register_array_adapter, topk)


def _version() -> str:
    runtime = _lib.mtk_version()
    header = (_lib.MTK_VERSION_MAJOR * 10000 + _lib.MTK_VERSION_MINOR * 100
              + _lib.MTK_VERSION_PATCH)
    if runtime != header:
        raise ImportError(f"metaltopk: the library at {library_path} is version {runtime} but "
                          f"the header the bindings were generated from is {header}")
    return f"{runtime // 10000}.{runtime // 100 % 100}.{runtime % 100}"


__version__ = _version()

# Device-array support (torch / CuPy through DLPack) registers itself with
# register_array_adapter when its module is present.
if _find_spec(f"{__name__}._gpu_arrays") is not None:
    from . import _gpu_arrays  # noqa: F401

# The fused MoE router lives in router.py (owned by the router work).
if _find_spec(f"{__name__}.router") is not None:
    from .router import moe_route  # noqa: F401

__all__ = ["topk", "backends", "default_backend", "cache_stats", "register_array_adapter",
           "DeviceTensor", "dtype_name", "library_path", "__version__"]
if "moe_route" in globals():
    __all__.append("moe_route")
