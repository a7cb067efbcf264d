"""metaltopk: exact, backend-independent top-k (the contract is docs/CONTRACT.md).

    values, indices = metaltopk.topk(x, k, dim=-1, largest=True, sorted=True, backend=None)
    weights, ids = metaltopk.moe_route(logits, k, scoring="softmax", ...)
    tokens = metaltopk.sampling.sample(probs, uniforms, top_k=50, top_p=0.9)

numpy arrays, torch tensors (any device; torch ops too, see metaltopk.torch), CuPy arrays and
any DLPack producer go in, and the same kind comes out.
"""

from importlib.util import find_spec as _find_spec

from ._ffi import lib as _lib, library_path
from ._abi import DeviceTensor, backends, cache_stats, default_backend, dtype_name
from ._arguments import register_symbolic_int_type as _register_symbolic_int_type
from ._dispatch import (moe_route, register_array_adapter, register_type_handler, topk,
                        topk_page_table_transform, topk_ragged_transform)
from . import _cupy, sampling


def _version() -> str:
    runtime = _lib.mtk_version()
    header = (_lib.MTK_VERSION_MAJOR * 10000 + _lib.MTK_VERSION_MINOR * 100
              + _lib.MTK_VERSION_PATCH)
    if runtime != header:
        raise ImportError(f"metaltopk: the library at {library_path} is version {runtime} but "
                          f"the header the bindings were generated from is {header}")
    return f"{runtime // 10000}.{runtime // 100 % 100}.{runtime % 100}"


__version__ = _version()

# The adapters, registered in one place (metaltopk._dispatch tries type handlers, then array
# adapters, then DLPack, then numpy). With torch importable, its ops are registered now, so that
# torch.ops.metaltopk.* exist as soon as metaltopk is imported.
register_array_adapter(_cupy.cupy_view)
if _find_spec("torch") is not None:
    from . import torch

    register_type_handler(torch.TENSOR_TYPE, torch.TorchArrays)
    sampling._register_torch_tensor_type(torch.TENSOR_TYPE)
    _register_symbolic_int_type(torch.SYMBOLIC_INT_TYPE)

__all__ = ["topk", "topk_ragged_transform", "topk_page_table_transform", "moe_route",
           "backends", "default_backend", "cache_stats", "register_array_adapter",
           "register_type_handler", "DeviceTensor", "dtype_name", "library_path", "sampling",
           "__version__"]
