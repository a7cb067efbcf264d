"""AOTInductor: the C shim library and the inductor configuration that calls it.

With `aoti_config()` among its inductor configs, `torch._inductor.aoti_compile_and_package`
compiles each metaltopk op into a direct call of the shim library's C function
(`aoti_torch_<device>_mtk_topk`, `aoti_torch_<device>_mtk_moe_route`, and for the ragged ops
`aoti_torch_<device>_mtk_topk_ragged`, `_mtk_topk_ragged_transform`,
`_mtk_topk_page_table_transform`, and for the sampling ops `_mtk_top_k_mask_logits`,
`_mtk_renorm_probs`, `_mtk_sample`, `_mtk_sample_from_logits`) and links the model
against the library. A process that loads the package must have the library loaded:
`load_aoti_library()` does that for Python's `aoti_load_package` (aoti_config calls it); a C++
program links the library (tests/aoti/aoti_runner.cpp does). A run path baked into the model
instead crashed torch 2.11's package loader on the H200 machine, inside the model's own
constructor; with the library loaded first, the same package loads and runs.
"""

import ctypes
import shlex
import sys
from pathlib import Path

import torch

from .._ffi import library_path

AOTI_LIBRARY_NAME = "metaltopk_aoti"
_SUFFIX = ".dylib" if sys.platform == "darwin" else ".so"

# The sampling ops' filters, as each of their shims takes them.
_FILTERS = ("AtenTensorHandle* top_k, int64_t top_k_value, AtenTensorHandle* top_p, "
            "double top_p_value, AtenTensorHandle* min_p, double min_p_value")

# The C shim declarations AOTInductor's generated code calls, per op. Argument order and types
# follow the ops' schemas (adapters/aoti/metaltopk_aoti.h declares the same functions).
_SHIMS = {
    "mtk_topk": ("AOTITorchError aoti_torch_{device}_mtk_topk(AtenTensorHandle self, int64_t k, "
                 "int64_t dim, int32_t largest, int32_t sorted, AtenTensorHandle* ret0, "
                 "AtenTensorHandle* ret1)"),
    "mtk_moe_route": ("AOTITorchError aoti_torch_{device}_mtk_moe_route(AtenTensorHandle logits, "
                      "int64_t k, const char* scoring, AtenTensorHandle* bias, int64_t n_group, "
                      "int64_t topk_group, int32_t renormalize, double scale, "
                      "int32_t index_dtype, AtenTensorHandle* ret0, AtenTensorHandle* ret1)"),
    "mtk_topk_ragged": (
        "AOTITorchError aoti_torch_{device}_mtk_topk_ragged(AtenTensorHandle self, int64_t k, "
        "AtenTensorHandle lengths, AtenTensorHandle* starts, int64_t dim, int32_t largest, "
        "int32_t sorted, int32_t return_values, AtenTensorHandle* ret0, AtenTensorHandle* ret1)"),
    "mtk_topk_ragged_transform": (
        "AOTITorchError aoti_torch_{device}_mtk_topk_ragged_transform(AtenTensorHandle scores, "
        "AtenTensorHandle offsets, AtenTensorHandle lengths, int64_t k, AtenTensorHandle* ret0)"),
    "mtk_topk_page_table_transform": (
        "AOTITorchError aoti_torch_{device}_mtk_topk_page_table_transform("
        "AtenTensorHandle scores, AtenTensorHandle src_page_table, AtenTensorHandle lengths, "
        "int64_t k, AtenTensorHandle* row_to_batch, int64_t page_size, AtenTensorHandle* ret0)"),
    "mtk_top_k_mask_logits": (
        "AOTITorchError aoti_torch_{device}_mtk_top_k_mask_logits(AtenTensorHandle logits, "
        "AtenTensorHandle* top_k, int64_t top_k_value, AtenTensorHandle* ret0)"),
    "mtk_renorm_probs": (
        "AOTITorchError aoti_torch_{device}_mtk_renorm_probs(AtenTensorHandle probs, "
        f"{_FILTERS}, AtenTensorHandle* ret0)"),
    "mtk_sample": (
        "AOTITorchError aoti_torch_{device}_mtk_sample(AtenTensorHandle probs, "
        f"AtenTensorHandle uniforms, {_FILTERS}, int32_t index_dtype, AtenTensorHandle* ret0)"),
    "mtk_sample_from_logits": (
        "AOTITorchError aoti_torch_{device}_mtk_sample_from_logits(AtenTensorHandle logits, "
        f"AtenTensorHandle uniforms, {_FILTERS}, AtenTensorHandle* temperature, "
        "double temperature_value, int32_t index_dtype, AtenTensorHandle* ret0)"),
}
DEVICES = ("cpu", "cuda")


def aoti_library_path() -> Path:
    """The shim library, built beside libmetaltopk (`make` builds it where torch's headers are
    found)."""
    return Path(library_path).with_name(f"lib{AOTI_LIBRARY_NAME}{_SUFFIX}")


_loaded = None


def load_aoti_library() -> ctypes.CDLL:
    """Loads the shim library with its symbols global, so that AOTInductor packages compiled
    with aoti_config() resolve their calls in this process."""
    global _loaded
    if _loaded is None:
        path = aoti_library_path()
        if not path.is_file():
            raise RuntimeError(f"metaltopk: the AOTInductor shim library {path} was not built "
                               "(run `make` where torch's headers are found)")
        _loaded = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)
    return _loaded


def aoti_config(devices=DEVICES) -> dict:
    """Inductor configs that compile metaltopk's ops into calls of the shim library, for
    torch._inductor.aoti_compile_and_package(..., inductor_configs=aoti_config()). Loads the
    library into this process (load_aoti_library), so packages compiled here load here too."""
    load_aoti_library()
    return {
        "aot_inductor.custom_ops_to_c_shims": {
            getattr(torch.ops.metaltopk, op).default: [template.format(device=device)
                                                       for device in devices]
            for op, template in _SHIMS.items()},
        # Inductor links each entry as -l<entry> on a command line it splits with shlex, so the
        # entry can carry the folder the linker finds the library in.
        "aot_inductor.custom_op_libs": [
            f"{AOTI_LIBRARY_NAME} -L{shlex.quote(str(aoti_library_path().parent))}"],
    }
