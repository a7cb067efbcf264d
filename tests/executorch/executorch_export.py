#!/usr/bin/env python3
"""Exports the end-to-end run's models to ExecuTorch programs, and checks the runner's outputs.

    executorch_export.py export OUT [--backend cuda|metal|cpu-stand-in]
    executorch_export.py check OUT RESULTS.json [--timings FILE] [--backend cuda|metal]

`export` writes, for each model and route, OUT/<model>-<route>/ with model.pte, the backend's
.ptd, the input as raw bytes (input-0.bin, as executor_runner's --inputs reads it), the reference
outputs (expected-<i>.bin) and what they come from (reference.json). The models:

- `sampler`: a sampler's vocabulary top-k over [1, 151936] with k = 50.
- `router`: an MoE router over [64, 128] whose scores are computed in float64 and rounded once
  to float32 (softmax -> top-8 -> renormalise). Rounded once, the float math around the top-k
  does not depend on whose kernel computes it: the float32 softmax of AOTInductor's Triton
  kernels (an approximate exp, its own sum order) differs from eager's by an ulp, which would
  hide whether the top-k's own outputs are exact.
- `router_fused` (CUDA only): the float32 router that replace_topk fuses into one
  mtk_moe_route. The fused router ranks by logits and computes its own softmax (see
  metaltopk/torch/_export.py; its weights agree with other backends' to float32 rounding, not
  bit for bit: lib/core/router_semantics.md), so its reference is the replaced program run
  eagerly on the export device; the difference from the float32 model's eager outputs is
  recorded beside it.

Routes: `plain` (torch.topk as written, which lowers to AOTInductor's fallback
aoti_torch_cuda_topk) and `replaced` (after metaltopk.torch.replace_topk, which lowers to
aoti_torch_cuda_mtk_topk or the fused aoti_torch_cuda_mtk_moe_route). The references of `sampler`
and `router` are eager's outputs (the model run on the export device). Lowering goes through
to_edge_transform_and_lower with ExecuTorch's CudaPartitioner after
metaltopk.executorch.enable(); `--backend metal` (macOS, unverified) with ExecuTorch's
MetalPartitioner, where both routes call aoti_torch_mps_topk (the router is not fused there, and
its scores stay float32, as MPS has no float64); `--backend cpu-stand-in` lowers through
StandInCpuBackend instead, which needs no GPU (that program has no runner: it checks the export
side only).

`check` compares each folder's runner outputs (output-<i>.bin, from executor_runner's
--output_file) with the reference, byte for byte, and writes the results as JSON.
"""
import argparse
import json
import sys
from pathlib import Path

import numpy
import torch
from executorch.backends.aoti.aoti_backend import AotiBackend
from executorch.backends.aoti.aoti_partitioner import AotiPartitioner
from executorch.exir import to_edge_transform_and_lower
from executorch.exir.backend.backend_details import BackendDetails

import metaltopk.executorch as mtk_executorch
from metaltopk.torch import replace_topk

VOCABULARY = 151936
SAMPLER_K = 50
ROUTER_TOKENS, ROUTER_EXPERTS, ROUTER_K = 64, 128, 8


class Sampler(torch.nn.Module):
    def forward(self, logits):
        values, indices = torch.topk(logits, SAMPLER_K)
        return values, indices


class Router(torch.nn.Module):
    def __init__(self, score_dtype):
        super().__init__()
        self.score_dtype = score_dtype

    def forward(self, logits):
        scores = torch.softmax(logits.to(self.score_dtype), dim=-1).float()
        weights, ids = torch.topk(scores, ROUTER_K, dim=-1)
        weights = weights.to(self.score_dtype)
        return (weights / weights.sum(dim=-1, keepdim=True)).float(), ids


class FusedRouter(torch.nn.Module):
    """The router as replace_topk fuses it (see metaltopk/torch/_export.py)."""

    def forward(self, logits):
        scores = torch.softmax(logits.float(), dim=-1)
        weights, ids = torch.topk(scores, ROUTER_K, dim=-1)
        return weights / weights.sum(dim=-1, keepdim=True), ids


# name -> (model, example input, routes, reference); the reference is "eager" (the model on the
# export device) or "replaced-eager" (the replaced program run eagerly on the export device,
# where metaltopk's torch ops run its kernels).
def models(backend_name):
    generator = torch.Generator().manual_seed(34)
    logits = torch.randn(1, VOCABULARY, generator=generator) * 4
    router_logits = torch.randn(ROUTER_TOKENS, ROUTER_EXPERTS, generator=generator)
    # MPS has no float64, and Metal has no fused router.
    score_dtype = torch.float32 if backend_name == "metal" else torch.float64
    chosen = {
        "sampler": (Sampler(), logits, ("plain", "replaced"), "eager"),
        "router": (Router(score_dtype), router_logits, ("plain", "replaced"), "eager"),
    }
    if backend_name != "metal":
        chosen["router_fused"] = (FusedRouter(), router_logits, ("replaced",), "replaced-eager")
    return chosen


class StandInCpuBackend(AotiBackend, BackendDetails):
    """An AOTI backend for the CPU, built as ExecuTorch's CudaBackend is (no libtorch linked,
    weights apart from the model, no fallback kernels of its own), for checking lowering where
    there is no GPU."""

    @classmethod
    def get_device_name(cls):
        return "cpu"

    @classmethod
    def get_supported_fallback_kernels(cls):
        return {}

    @classmethod
    def get_decomposition_table(cls):
        return {}

    @classmethod
    def get_custom_passes(cls, compile_specs):
        return []

    @classmethod
    def get_aoti_compile_options(cls, compile_specs):
        return {"aot_inductor.link_libtorch": False, "aot_inductor.package": True,
                "aot_inductor.package_constants_in_so": False,
                "aot_inductor.package_constants_on_disk_format": "binary_blob"}


def partitioner(backend_name):
    if backend_name == "cuda":
        from executorch.backends.cuda.cuda_backend import CudaBackend
        from executorch.backends.cuda.cuda_partitioner import CudaPartitioner

        mtk_executorch.enable("cuda")
        return CudaPartitioner([CudaBackend.generate_method_name_compile_spec("forward")])
    if backend_name == "metal":
        from executorch.backends.apple.metal.metal_backend import MetalBackend
        from executorch.backends.apple.metal.metal_partitioner import MetalPartitioner

        mtk_executorch.enable("metal")
        return MetalPartitioner([MetalBackend.generate_method_name_compile_spec("forward")])
    mtk_executorch.enable(StandInCpuBackend)
    return AotiPartitioner(StandInCpuBackend.__name__,
                           [StandInCpuBackend.generate_method_name_compile_spec("forward")])


def export_device(backend_name: str) -> str:
    if backend_name == "metal":
        return "mps" if torch.backends.mps.is_available() else "cpu"
    return "cuda" if backend_name == "cuda" else "cpu"


def write_outputs(folder: Path, prefix: str, tensors) -> None:
    for i, tensor in enumerate(tensors):
        (folder / f"{prefix}-{i}.bin").write_bytes(tensor.cpu().contiguous().numpy().tobytes())


def replaced_eager(model, example, device):
    """The replaced program run eagerly on `device`. It is exported there: a program exported on
    the CPU keeps CPU devices in its graph (the fused router's call then refuses CUDA tensors)."""
    on_device = example.to(device)
    return replace_topk(torch.export.export(model.to(device), (on_device,))).module()(on_device)


def export(out: Path, backend_name: str) -> None:
    device = export_device(backend_name)
    for model_name, (model, example, routes, reference) in models(backend_name).items():
        for route in routes:
            folder = out / f"{model_name}-{route}"
            folder.mkdir(parents=True, exist_ok=True)
            program = torch.export.export(model, (example,))
            if route == "replaced":  # Metal has no C function for the fused router
                program = replace_topk(program, router=backend_name != "metal")
            with torch.no_grad():
                eager = model.to(device)(example.to(device))
                expected = eager if reference == "eager" else replaced_eager(model, example, device)
            lowered = to_edge_transform_and_lower(program, partitioner=[partitioner(backend_name)])
            executorch_program = lowered.to_executorch()
            (folder / "model.pte").write_bytes(executorch_program.buffer)
            executorch_program.write_tensor_data_to_file(str(folder))
            (folder / "input-0.bin").write_bytes(example.contiguous().numpy().tobytes())
            write_outputs(folder, "expected", expected)
            if reference != "eager":
                write_outputs(folder, "eager", eager)
            (folder / "outputs.json").write_text(json.dumps(
                [str(tensor.dtype).removeprefix("torch.") for tensor in expected]))
            (folder / "reference.json").write_text(json.dumps(reference))
            print(f"exported {folder.name}: {sorted(p.name for p in folder.iterdir())}", flush=True)


def max_abs_difference(a, b) -> float:
    return float(numpy.max(numpy.abs(a.astype(numpy.float64) - b.astype(numpy.float64))))


# Metal's router keeps float32 scores (MPS has no float64), whose softmax the generated Metal
# kernels round differently from eager's; its float outputs pass within this (unverified: no
# Mac has run it). Everything else must be exact.
METAL_FLOAT_TOLERANCE = 1e-6


def compare(folder: Path, i: int, dtype: str, float_tolerance: float = 0.0) -> dict:
    read = lambda name: numpy.frombuffer((folder / name).read_bytes(), dtype=dtype)
    expected = read(f"expected-{i}.bin")
    produced_path = folder / f"output-{i}.bin"
    result = {"output": i, "dtype": dtype, "produced": produced_path.is_file(), "exact": False,
              "passed": False}
    if not produced_path.is_file():
        return result
    produced = read(produced_path.name)
    if produced.shape != expected.shape:
        result["size_mismatch"] = [int(produced.size), int(expected.size)]
        return result
    result["exact"] = produced.tobytes() == expected.tobytes()
    result["passed"] = result["exact"]
    if not result["exact"] and dtype.startswith("float"):
        result["max_abs_difference"] = max_abs_difference(produced, expected)
        result["passed"] = result["max_abs_difference"] <= float_tolerance
    eager_path = folder / f"eager-{i}.bin"
    if eager_path.is_file() and dtype.startswith("float"):
        result["eager_max_abs_difference"] = max_abs_difference(produced, read(eager_path.name))
    return result


# What the results file says of each backend's programs.
REPORTS = {
    "cuda": {
        "what": "ExecuTorch programs lowered with CudaPartitioner, top-k served by metaltopk's "
                "C shim (libmetaltopk_aoti preloaded into executor_runner), against eager",
        "routes": {
            "plain": "torch.topk as written: AOTInductor's fallback aoti_torch_cuda_topk, which "
                     "the shim built without libtorch provides",
            "replaced": "after metaltopk.torch.replace_topk: aoti_torch_cuda_mtk_topk, the "
                        "router fused into aoti_torch_cuda_mtk_moe_route",
        },
        "executorch_own_topk": "none in 1.2.0: without metaltopk.executorch.enable() its CUDA "
                               "backend refuses torch.topk ('missing fallback kernels'); later "
                               "releases replace top-k with a Triton kernel for rows up to 4096 "
                               "only",
    },
    "metal": {
        "what": "ExecuTorch programs lowered with MetalPartitioner, top-k served by metaltopk's "
                "C shim (libmetaltopk_aoti inserted into executor_runner), against eager",
        "routes": {
            "plain": "torch.topk as written: AOTInductor's fallback aoti_torch_mps_topk, which "
                     "the shim provides",
            "replaced": "after metaltopk.torch.replace_topk(router=False): mtk_topk, mapped to "
                        "aoti_torch_mps_topk",
        },
        "executorch_own_topk": "none in 1.2.0 (torch.topk is a missing fallback kernel); "
                               "1.4.1's MetalBackend lists torch.topk among its own fallbacks "
                               "(its runner's aoti_torch_mps_topk; the inserted shim's is "
                               "searched first)",
    },
}


def gpu_name(backend_name: str):
    if backend_name == "metal":
        return "Apple GPU (mps)" if torch.backends.mps.is_available() else None
    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def check(out: Path, results_path: Path, timings: Path, backend_name: str = "cuda") -> bool:
    times = {}
    if timings is not None and timings.is_file():
        for line in timings.read_text().splitlines():
            name, milliseconds, runs = line.split()
            total = float(milliseconds)  # nan where the runner's log had no time
            times[name] = {"ms_per_run": total / int(runs) if total == total else None,
                           "runs": int(runs)}
    results = []
    for folder in sorted(p for p in out.iterdir() if (p / "model.pte").is_file()):
        tolerance = METAL_FLOAT_TOLERANCE if backend_name == "metal" else 0.0
        outputs = [compare(folder, i, dtype, tolerance)
                   for i, dtype in enumerate(json.loads((folder / "outputs.json").read_text()))]
        reference = json.loads((folder / "reference.json").read_text())
        results.append({"program": folder.name, "reference": reference, "outputs": outputs,
                        **times.get(folder.name, {})})
        print(f"{folder.name} against {reference}: " + "; ".join(
            f"output {o['output']} ({o['dtype']}) " + ("exact" if o["exact"] else
            f"max |difference| {o.get('max_abs_difference')}") +
            (f" (eager: {o['eager_max_abs_difference']})" if "eager_max_abs_difference" in o
             else "") for o in outputs), flush=True)
    expected_programs = sum(len(routes) for _, _, routes, _ in models(backend_name).values())
    from importlib import metadata

    described = REPORTS[backend_name]
    report = {
        "what": described["what"],
        "executorch": metadata.version("executorch"),
        "torch": torch.__version__,
        "gpu": gpu_name(backend_name),
        "models": {
            "sampler": f"torch.topk over [1, {VOCABULARY}] float32, k = {SAMPLER_K}",
            "router": f"softmax -> top-{ROUTER_K} -> renormalise over [{ROUTER_TOKENS}, "
                      f"{ROUTER_EXPERTS}], scores in "
                      f"{'float32' if backend_name == 'metal' else 'float64'} rounded once to "
                      "float32",
            **({} if backend_name == "metal" else {
                "router_fused": "the float32 router replace_topk fuses into mtk_moe_route, "
                                "against the replaced program run eagerly"}),
        },
        "references": {
            "eager": "the model run eagerly on the export device",
            "replaced-eager": "the replaced program run eagerly on the export device "
                              "(metaltopk's torch ops); eager_max_abs_difference: from the "
                              "float32 model's eager outputs",
        },
        "routes": described["routes"],
        "ms_per_run": "executor_runner's time for method execute, averaged over its runs: the "
                      "delegate's copies of the input to the GPU and of the outputs back included",
        "executorch_own_topk": described["executorch_own_topk"],
        "programs": results,
        "all_exact": all(o["exact"] for r in results for o in r["outputs"]),
        "passed": len(results) == expected_programs and all(
            o["passed"] for r in results for o in r["outputs"]),
    }
    results_path.parent.mkdir(parents=True, exist_ok=True)
    results_path.write_text(json.dumps(report, indent=1) + "\n")
    return report["passed"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    export_command = commands.add_parser("export")
    export_command.add_argument("out", type=Path)
    export_command.add_argument("--backend", choices=("cuda", "metal", "cpu-stand-in"),
                                default="cuda")
    check_command = commands.add_parser("check")
    check_command.add_argument("out", type=Path)
    check_command.add_argument("results", type=Path)
    check_command.add_argument("--timings", type=Path)
    check_command.add_argument("--backend", choices=("cuda", "metal"), default="cuda")
    args = parser.parse_args()
    if args.command == "export":
        export(args.out, args.backend)
        return 0
    return 0 if check(args.out, args.results, args.timings, args.backend) else 1


if __name__ == "__main__":
    sys.exit(main())
