"""metaltopk.executorch on CPU: lowering through ExecuTorch's AOTI backend reaches metaltopk's C
shim. ExecuTorch's CUDA backend needs a GPU from its first step (it moves the program to the
device), so the code generation is checked with a stand-in AOTI backend for the CPU, built the
way ExecuTorch's own are; the CUDA backend is checked for what enable() gives it and for getting
as far as the GPU. Skipped where executorch is not installed (tests/executorch/run_e2e.sh runs
the whole flow on a GPU)."""

import pytest

pytest.importorskip("executorch.exir")
torch = pytest.importorskip("torch")

import metaltopk.executorch as mtk_executorch  # noqa: E402
from metaltopk.torch import replace_topk  # noqa: E402

if mtk_executorch.executorch_version() not in mtk_executorch.KNOWN_VERSIONS:
    pytest.skip(f"executorch {mtk_executorch.executorch_version()} is not a release "
                "metaltopk.executorch knows", allow_module_level=True)

from executorch.backends.aoti.aoti_partitioner import AotiPartitioner  # noqa: E402
from executorch.exir import to_edge_transform_and_lower  # noqa: E402

# The end-to-end run's exporter (this folder), its models and its stand-in backend.
from executorch_export import Sampler, StandInCpuBackend  # noqa: E402


def sampler_program():
    return torch.export.export(Sampler(), (torch.randn(1, 151936),))


def lower_and_read_wrapper(program, monkeypatch):
    """Lowers through the stand-in backend; returns the C++ that AOTInductor generated."""
    compiled = []
    aot_compile = torch._inductor.aot_compile

    def recording_aot_compile(*args, **kwargs):
        paths = aot_compile(*args, **kwargs)
        compiled.extend(paths)
        return paths

    monkeypatch.setattr(torch._inductor, "aot_compile", recording_aot_compile)
    lowered = to_edge_transform_and_lower(program, partitioner=[AotiPartitioner(
        StandInCpuBackend.__name__,
        [StandInCpuBackend.generate_method_name_compile_spec("forward")])])
    assert len(lowered.to_executorch().buffer) > 0
    wrappers = [p for p in compiled if p.endswith(".wrapper.cpp")]
    assert len(wrappers) == 1, compiled
    with open(wrappers[0]) as source:
        return source.read()


def test_without_enable_topk_is_a_missing_fallback_kernel(monkeypatch):
    monkeypatch.setattr(StandInCpuBackend, "get_supported_fallback_kernels",
                        classmethod(lambda cls: {}))
    with pytest.raises(RuntimeError, match="missing fallback kernels"):
        lower_and_read_wrapper(sampler_program(), monkeypatch)


def cuda_backend():
    """ExecuTorch's CUDA backend and partitioner (they import triton, which a CPU torch lacks)."""
    pytest.importorskip("triton")
    from executorch.backends.cuda.cuda_backend import CudaBackend
    from executorch.backends.cuda.cuda_partitioner import CudaPartitioner

    return CudaBackend, CudaPartitioner


def test_enable_registers_fallbacks_and_c_shims():
    CudaBackend, _ = cuda_backend()
    mtk_executorch.enable("cuda")
    mtk_executorch.enable("cuda")  # idempotent
    kernels = CudaBackend.get_supported_fallback_kernels()
    for name in ("at::_ops::topk::call", "metaltopk::mtk_topk", "metaltopk::mtk_moe_route",
                 "at::_ops::_weight_int4pack_mm::call"):  # the backend's own one stays
        assert name in kernels
    shims = CudaBackend.get_aoti_compile_options([])["aot_inductor.custom_ops_to_c_shims"]
    assert any("aoti_torch_cuda_mtk_topk(" in declaration
               for declaration in shims[torch.ops.metaltopk.mtk_topk.default])
    assert any("aoti_torch_cuda_mtk_moe_route(" in declaration
               for declaration in shims[torch.ops.metaltopk.mtk_moe_route.default])


def test_enable_metal_maps_mtk_topk_to_the_origins_shim():
    from executorch.backends.apple.metal.metal_backend import MetalBackend

    mtk_executorch.enable("metal")
    kernels = MetalBackend.get_supported_fallback_kernels()
    for name in ("at::_ops::topk::call", "metaltopk::mtk_topk",
                 "aoti_torch_mps_mm_out"):  # the backend's own one stays
        assert name in kernels
    # The compile options themselves import torchao (1.2.0); what enable() adds to them:
    shims = mtk_executorch.c_shims("metal")
    (declaration,) = shims[torch.ops.metaltopk.mtk_topk.default]
    assert "aoti_torch_mps_topk(" in declaration
    assert torch.ops.metaltopk.mtk_moe_route.default not in shims  # export with router=False


def test_replaced_topk_calls_the_shim(monkeypatch):
    mtk_executorch.enable(StandInCpuBackend)
    wrapper = lower_and_read_wrapper(replace_topk(sampler_program()), monkeypatch)
    assert "aoti_torch_cpu_mtk_topk(" in wrapper
    assert "aoti_torch_cpu_topk(" not in wrapper


def test_plain_topk_calls_torchs_c_function(monkeypatch):
    mtk_executorch.enable(StandInCpuBackend)
    wrapper = lower_and_read_wrapper(sampler_program(), monkeypatch)
    # On CUDA that is aoti_torch_cuda_topk, which the shim built for ExecuTorch provides.
    assert "aoti_torch_cpu_topk(" in wrapper


@pytest.mark.skipif(torch.cuda.is_available(), reason="tests/executorch/run_e2e.sh lowers on GPUs")
def test_cuda_partitioner_gets_as_far_as_the_gpu():
    CudaBackend, CudaPartitioner = cuda_backend()
    mtk_executorch.enable("cuda")
    program = replace_topk(sampler_program())
    # A CUDA build of torch without a driver raises RuntimeError, a CPU build AssertionError.
    with pytest.raises((RuntimeError, AssertionError)) as failure:
        to_edge_transform_and_lower(program, partitioner=[CudaPartitioner(
            [CudaBackend.generate_method_name_compile_spec("forward")])])
    # Partitioned and handed to CudaBackend.preprocess, which stops where it first needs CUDA.
    assert "missing fallback kernels" not in str(failure.value)
    frames = failure.traceback
    assert any(frame.name == "preprocess" for frame in frames)
    assert str(frames[-1].path).replace("\\", "/").endswith("torch/cuda/__init__.py")


def test_unknown_version_is_refused(monkeypatch):
    monkeypatch.setattr(mtk_executorch, "executorch_version", lambda: "0.9.0")
    with pytest.raises(mtk_executorch.UnknownExecuTorchVersion, match="0.9.0"):
        mtk_executorch.enable(StandInCpuBackend)


def test_runtime_libraries_and_preload(monkeypatch):
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv("DYLD_INSERT_LIBRARIES", raising=False)
    libraries = mtk_executorch.runtime_libraries()
    assert [p.name.split(".")[0] for p in libraries] == ["libmetaltopk", "libmetaltopk_aoti"]
    (variable, value), = mtk_executorch.preload_environment().items()
    assert variable in ("LD_PRELOAD", "DYLD_INSERT_LIBRARIES")
    assert value == str(libraries[1])
