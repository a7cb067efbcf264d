#!/usr/bin/env python3
"""Exports the end-to-end run's models to ExecuTorch programs, and checks the runner's outputs.

    executorch_export.py export OUT [--backend cuda|metal|cpu-stand-in]
    executorch_export.py check OUT RESULTS.json [--timings FILE] [--backend cuda|metal]

`export` writes, for each model (a sampler's vocabulary top-k over [1, 151936] with k = 50, and
an MoE router softmax -> top-8 of 128 -> renormalise over [64, 128]) and each route (`plain`:
torch.topk as written, which lowers to AOTInductor's fallback aoti_torch_cuda_topk; `replaced`:
after metaltopk.torch.replace_topk, which lowers to aoti_torch_cuda_mtk_topk or the fused
aoti_torch_cuda_mtk_moe_route), OUT/<model>-<route>/ with model.pte, the backend's .ptd, the
input as raw bytes (input-0.bin, as executor_runner's --inputs reads it) and eager's outputs
(expected-<i>.bin, from the exported program run eagerly on the export device). Lowering goes
through to_edge_transform_and_lower with ExecuTorch's CudaPartitioner after
metaltopk.executorch.enable(); `--backend metal` (macOS, unverified) with ExecuTorch's
MetalPartitioner, where both routes call aoti_torch_mps_topk (the router is not fused there);
`--backend cpu-stand-in` lowers through StandInCpuBackend instead, which needs no GPU (that
program has no runner: it checks the export side only).

`check` compares each folder's runner outputs (output-<i>.bin, from executor_runner's
--output_file) with eager's, byte for byte, and writes the results as JSON.
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
    def forward(self, logits):
        scores = torch.softmax(logits.float(), dim=-1)
        weights, ids = torch.topk(scores, ROUTER_K, dim=-1)
        return weights / weights.sum(dim=-1, keepdim=True), ids


def models():
    generator = torch.Generator().manual_seed(34)
    return {
        "sampler": (Sampler(), torch.randn(1, VOCABULARY, generator=generator) * 4),
        "router": (Router(), torch.randn(ROUTER_TOKENS, ROUTER_EXPERTS, generator=generator)),
    }


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


def export(out: Path, backend_name: str) -> None:
    device = export_device(backend_name)
    for model_name, (model, example) in models().items():
        for route in ("plain", "replaced"):
            folder = out / f"{model_name}-{route}"
            folder.mkdir(parents=True, exist_ok=True)
            program = torch.export.export(model, (example,))
            if route == "replaced":  # Metal has no C function for the fused router
                program = replace_topk(program, router=backend_name != "metal")
            with torch.no_grad():
                expected = model.to(device)(example.to(device))
            lowered = to_edge_transform_and_lower(program, partitioner=[partitioner(backend_name)])
            executorch_program = lowered.to_executorch()
            (folder / "model.pte").write_bytes(executorch_program.buffer)
            executorch_program.write_tensor_data_to_file(str(folder))
            (folder / "input-0.bin").write_bytes(example.contiguous().numpy().tobytes())
            for i, tensor in enumerate(expected):
                (folder / f"expected-{i}.bin").write_bytes(tensor.cpu().contiguous().numpy().tobytes())
            (folder / "outputs.json").write_text(json.dumps(
                [str(tensor.dtype).removeprefix("torch.") for tensor in expected]))
            print(f"exported {folder.name}: {sorted(p.name for p in folder.iterdir())}", flush=True)


# Float outputs computed around the top-k (the router's softmax and renormalisation) are
# AOTInductor's kernels against eager's, which may round differently; what top-k selects (values,
# indices, ids) must match exactly.
FLOAT_TOLERANCE = 1e-6


def compare(folder: Path, i: int, dtype: str) -> dict:
    expected = numpy.frombuffer((folder / f"expected-{i}.bin").read_bytes(), dtype=dtype)
    produced_path = folder / f"output-{i}.bin"
    result = {"output": i, "dtype": dtype, "produced": produced_path.is_file(), "exact": False,
              "passed": False}
    if not produced_path.is_file():
        return result
    produced = numpy.frombuffer(produced_path.read_bytes(), dtype=dtype)
    if produced.shape != expected.shape:
        result["size_mismatch"] = [int(produced.size), int(expected.size)]
        return result
    result["exact"] = produced.tobytes() == expected.tobytes()
    if result["exact"]:
        result["passed"] = True
    elif dtype.startswith("float"):
        difference = float(numpy.max(numpy.abs(produced.astype(numpy.float64) - expected)))
        result["max_abs_difference"] = difference
        result["passed"] = difference <= FLOAT_TOLERANCE
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
    results, passed = [], True
    for folder in sorted(p for p in out.iterdir() if (p / "model.pte").is_file()):
        outputs = []
        for i, dtype in enumerate(json.loads((folder / "outputs.json").read_text())):
            outputs.append(compare(folder, i, dtype))
            passed &= outputs[-1]["passed"]
        results.append({"program": folder.name, "outputs": outputs, **times.get(folder.name, {})})
        print(f"{folder.name}: " + "; ".join(
            f"output {o['output']} ({o['dtype']}) " + ("exact" if o["exact"] else
            f"max |difference| {o.get('max_abs_difference')}") for o in outputs), flush=True)
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
                      f"{ROUTER_EXPERTS}] float32",
        },
        "routes": described["routes"],
        "ms_per_run": "executor_runner's time for method execute, averaged over its runs: the "
                      "delegate's copies of the input to the GPU and of the outputs back included",
        "executorch_own_topk": described["executorch_own_topk"],
        "programs": results,
        "all_exact": all(o["exact"] for r in results for o in r["outputs"]),
        "passed": passed and len(results) == 4,
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
