"""ExecuTorch: metaltopk as the top-k fallback of ExecuTorch's AOTInductor backends.

ExecuTorch's CUDA backend (and its Metal backend on macOS) compiles a program with AOTInductor;
an op it cannot lower must be a "supported fallback kernel" of the backend, or lowering fails
with "missing fallback kernels", and the compiled model then calls that op's C shim function
from the runtime's process. ExecuTorch's runtime has no top-k of its own there:
libmetaltopk_aoti provides it:

    import metaltopk.executorch
    metaltopk.executorch.enable()                      # once, before lowering
    ep = metaltopk.torch.replace_topk(torch.export.export(model, inputs))   # optional
    program = to_edge_transform_and_lower(ep, partitioner=[CudaPartitioner(specs)])

and run the .pte/.ptd in a runner that has the shim library loaded: link it, or preload it
(`preload_environment()`, e.g. LD_PRELOAD for ExecuTorch's executor_runner).

`enable()` makes the backend accept `torch.topk` (aten.topk, whose C function the shim provides:
aoti_torch_cuda_topk when built for a runtime other than libtorch, aoti_torch_mps_topk on macOS)
and metaltopk's ops, and maps metaltopk's ops to their C functions. ExecuTorch has no
hook for either, so this module replaces two classmethods of the backend class
(get_supported_fallback_kernels and get_aoti_compile_options), wrapping the originals. That is
checked against the ExecuTorch releases whose sources were read (KNOWN_VERSIONS); on any other,
enable() raises rather than patch a class whose shape it does not know (pass
`allow_unknown_version=True` to try anyway).
"""

import os
import sys
from importlib import metadata
from pathlib import Path

import torch

from .._ffi import library_path
from ._aoti import _SHIMS, aoti_library_path

# Releases whose AotiBackend, CudaBackend and MetalBackend were read: the two classmethods exist
# with these signatures, preprocess() reads them on every lowering, and a backend's own
# custom_ops_to_c_shims (1.3 on) is kept beside metaltopk's. Lowering was run with 1.2.0 (torch
# 2.11) and 1.4.1 (torch 2.13).
KNOWN_VERSIONS = ("1.2.0", "1.3.1", "1.4.1")

# The names AotiBackend.collect_unsupported_fallback_kernels sees (torch 2.11's and 2.13's C++
# wrapper): aten.topk as its ATen operator, a custom op as namespace::name whether or not it has
# a C shim.
ATEN_TOPK_KERNEL = "at::_ops::topk::call"
METALTOPK_KERNELS = tuple(f"metaltopk::{op}" for op in _SHIMS)

# The backend's device, as AOTInductor names it in C function names.
_SHIM_DEVICES = {"cpu": "cpu", "cuda": "cuda", "metal": "mps"}
_PATCHED = "_metaltopk_fallback_enabled"


class UnknownExecuTorchVersion(RuntimeError):
    pass


def executorch_version() -> str:
    return metadata.version("executorch")


def _backends(backends):
    found = []
    for backend in backends:
        if backend == "cuda":
            from executorch.backends.cuda.cuda_backend import CudaBackend
            found.append(CudaBackend)
        elif backend == "metal":
            from executorch.backends.apple.metal.metal_backend import MetalBackend
            found.append(MetalBackend)
        elif isinstance(backend, type) and hasattr(backend, "get_supported_fallback_kernels"):
            found.append(backend)
        else:
            raise ValueError(f"backend = {backend!r} is neither 'cuda', 'metal' nor an AOTI "
                             "backend class")
    return found


def c_shims(device: str) -> dict:
    """AOTInductor's custom_ops_to_c_shims entries for metaltopk's ops on an ExecuTorch backend's
    device ('cuda', 'metal' or 'cpu'). On Metal, mtk_topk calls the origin's aoti_torch_mps_topk,
    which has its signature; the other ops have no Metal entry (export with
    replace_topk(router=False))."""
    if device == "metal":
        return {torch.ops.metaltopk.mtk_topk.default:
                [_SHIMS["mtk_topk"].replace("{device}_mtk_topk", "mps_topk")]}
    shim_device = _SHIM_DEVICES[device]
    return {getattr(torch.ops.metaltopk, op).default: [template.format(device=shim_device)]
            for op, template in _SHIMS.items()}


def fallback_kernels() -> tuple:
    """The kernel names enable() adds to a backend's supported fallback kernels."""
    return (ATEN_TOPK_KERNEL,) + METALTOPK_KERNELS


def _patch(backend) -> None:
    if backend.__dict__.get(_PATCHED):
        return
    device = backend.get_device_name()
    original_fallbacks = backend.get_supported_fallback_kernels.__func__
    original_options = backend.get_aoti_compile_options.__func__
    names = fallback_kernels()
    shims = c_shims(device)

    def get_supported_fallback_kernels(cls):
        kernels = dict(original_fallbacks(cls))
        kernels.update(dict.fromkeys(names))
        return kernels

    def get_aoti_compile_options(cls, compile_specs):
        options = dict(original_options(cls, compile_specs))
        merged = dict(options.get("aot_inductor.custom_ops_to_c_shims") or {})
        merged.update(shims)
        options["aot_inductor.custom_ops_to_c_shims"] = merged
        return options

    backend.get_supported_fallback_kernels = classmethod(get_supported_fallback_kernels)
    backend.get_aoti_compile_options = classmethod(get_aoti_compile_options)
    setattr(backend, _PATCHED, True)


def enable(backends=None, *, allow_unknown_version: bool = False) -> None:
    """Makes ExecuTorch's AOTI backends ('cuda', and 'metal' on macOS; default: the one this
    platform has; or AotiBackend subclasses of one's own) lower torch.topk and metaltopk's ops
    as calls of metaltopk's C shim.
    Idempotent. Raises UnknownExecuTorchVersion on an ExecuTorch release this module was not
    checked against."""
    version = executorch_version()
    if version not in KNOWN_VERSIONS and not allow_unknown_version:
        raise UnknownExecuTorchVersion(
            f"metaltopk.executorch: ExecuTorch {version} is not one of the releases this module "
            f"knows ({', '.join(KNOWN_VERSIONS)}): it replaces two classmethods of the backend "
            "(get_supported_fallback_kernels, get_aoti_compile_options) and has not been "
            "checked against this release's; pass allow_unknown_version=True to try anyway")
    if backends is None:
        backends = ("metal",) if sys.platform == "darwin" else ("cuda",)
    elif isinstance(backends, (str, type)):
        backends = (backends,)
    for backend in _backends(backends):
        _patch(backend)


def runtime_libraries() -> list:
    """The libraries a runner must have loaded for programs lowered after enable(): the shim
    (libmetaltopk_aoti, built for the runner's runtime: `make aoti AOTI_RUNTIME_LIBS=`) and the
    library it links (libmetaltopk), in load order."""
    return [Path(library_path), aoti_library_path()]


def preload_environment(shim: Path = None) -> dict:
    """Environment variables that load the shim into a runner that does not link it
    (LD_PRELOAD, or DYLD_INSERT_LIBRARIES on macOS), added to what the variable holds now.
    `shim`: a shim library other than this package's (one built without libtorch for
    ExecuTorch); libmetaltopk is found through its run path."""
    variable = "DYLD_INSERT_LIBRARIES" if sys.platform == "darwin" else "LD_PRELOAD"
    shim = Path(shim) if shim is not None else aoti_library_path()
    current = os.environ.get(variable, "")
    return {variable: f"{shim}:{current}" if current else str(shim)}
