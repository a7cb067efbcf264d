#!/usr/bin/env python3
"""Fetches the peers' kernel sources (exact versions, from PyPI with pip) into
bench/peers/third_party/, which git ignores: nothing of the peers' code is committed.

    python3 bench/peers/fetch.py [--keep-downloads DIR]

What is kept (everything else of the packages is dropped):
  flashinfer/   flashinfer-python 0.7.2 wheel: include/flashinfer (topk.cuh and the headers it
                includes; the attention, GEMM, communication and TensorRT-LLM folders are dropped)
                and the DeepSeek-V3 router csrc/fused_moe/noAuxTcKernels.cu (cut before its
                tvm-ffi entry point) with moeTopKFuncs.cuh and trtllm/fused_moe/noAuxTcKernels.h
  cccl/         the CCCL that flashinfer-python 0.7.2 bundles (CUB 3.6.0): include/{cub,cuda,nv,
                thrust}. Its DeviceBatchedTopK has the cluster backend for segments up to 2^21;
                CUB 3.5 of nvidia-cuda-cccl 13.3.5.0.6 has DeviceTopK and DeviceBatchedTopK too,
                but its batched top-k static_asserts on any segment that one block cannot hold
                (so on every sampling shape), which is why the harness uses the bundled one
  vllm/         vllm 0.33.0 sdist: csrc/moe/{topk_softmax,grouped_topk}_kernels.cu cut before
                their torch entry points (the harness calls the launchers below them),
                csrc/sampler.cu cut before its torch entry points (the sparse-attention indexer's
                top_k_per_row_decode/prefill kernels; the harness repeats their launchers),
                csrc/moe/moeTopKFuncs.cuh, csrc/cub_helpers.h, csrc/core/cuda_compat.h
                and, for the sampling family, vllm/v1/sample/ops/topk_topp_sampler.py and
                topk_topp_triton.py (the sampler's PyTorch and Triton top-k/top-p, which
                vllm_sampler.py loads on the device)
  sglang/       sglang 0.5.23 wheel: sglang/kernels/ops/moe/moe_fused_gate.py (a Triton kernel)
  curand/       nvidia-curand 10.4.0.35 wheel (CUDA 13): include/curand*.h, the Philox generator
                FlashInfer's sampling.cuh includes (toolkits without cuRAND lack them)
The vllm sdist cannot be built without torch, so pip is asked to keep the unpacked source
(--no-clean) and stops at the metadata step; the script takes the files from there.
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEST = os.path.join(HERE, "third_party")

FLASHINFER = "flashinfer-python==0.7.2"
VLLM = "vllm==0.33.0"
SGLANG = "sglang==0.5.23"
CURAND = "nvidia-curand==10.4.0.35"


def pip_download(spec, dest, extra=()):
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-d", dest, *extra, spec]
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def one(pattern):
    found = glob.glob(pattern)
    if len(found) != 1:
        sys.exit(f"fetch.py: expected one match for {pattern}, found {found}")
    return found[0]


def extract(wheel, prefix, target, keep=lambda name: True):
    """Extracts the members of `wheel` under `prefix` into `target`, paths relative to prefix."""
    count = 0
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if not name.startswith(prefix) or name.endswith("/"):
                continue
            rel = name[len(prefix):]
            if not keep(rel):
                continue
            out = os.path.join(target, rel)
            os.makedirs(os.path.dirname(out), exist_ok=True)
            with z.open(name) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst)
            count += 1
    if count == 0:
        sys.exit(f"fetch.py: nothing under {prefix} in {wheel}")
    return count


def cut_before(path, marker, out):
    text = open(path).read()
    at = text.find(marker)
    if at < 0:
        sys.exit(f"fetch.py: marker {marker!r} not in {path}: the peer's source changed")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write("// Cut by bench/peers/fetch.py before the torch entry point: "
                + marker.replace("\n", " ") + "\n")
        f.write(text[:at])


def drop_instantiations(path, keep, expected):
    """Drops the INSTANTIATE_NOAUX_TC(...) lines of `path` except `keep`; `expected` dropped."""
    lines = open(path).read().split("\n")
    kept = [l for l in lines if not l.startswith("INSTANTIATE_NOAUX_TC(") or l == keep]
    if len(lines) - len(kept) != expected:
        sys.exit(f"fetch.py: the explicit instantiations of {path} changed")
    open(path, "w").write("\n".join(kept))


def flashinfer_wheel(work):
    """The FlashInfer wheel in `work`, downloaded once: its top-k headers and its CCCL."""
    pattern = os.path.join(work, "flashinfer_python-*.whl")
    if not glob.glob(pattern):
        r = pip_download(FLASHINFER, work)
        if r.returncode:
            sys.exit(r.stdout)
    return one(pattern)


def flashinfer(work):
    wheel = flashinfer_wheel(work)
    dest = os.path.join(DEST, "flashinfer")
    n = extract(wheel, "flashinfer/data/include/flashinfer/", os.path.join(dest, "include/flashinfer"),
                keep=lambda rel: not rel.startswith(("attention/", "gemm/", "comm/", "mamba/",
                                                    "flat/", "cutlass_utils", "trtllm/")))
    # The DeepSeek-V3 router (TensorRT-LLM's noAuxTc, flashinfer.fused_topk_deepseek): the .cu
    # cut before its tvm-ffi entry point, without its explicit instantiations (the harness
    # instantiates the one it calls), and the two headers it includes from FlashInfer.
    csrc = os.path.join(work, "flashinfer-noaux")
    extract(wheel, "flashinfer/data/csrc/fused_moe/", csrc,
            keep=lambda rel: rel in ("noAuxTcKernels.cu", "moeTopKFuncs.cuh"))
    cut_before(os.path.join(csrc, "noAuxTcKernels.cu"),
               "namespace flashinfer::trtllm_dsv3_fused_routing {",
               os.path.join(dest, "csrc", "fused_moe", "noAuxTcKernels.cu"))
    drop_instantiations(os.path.join(dest, "csrc", "fused_moe", "noAuxTcKernels.cu"), None, 9)
    shutil.copy(os.path.join(csrc, "moeTopKFuncs.cuh"),
                os.path.join(dest, "csrc", "fused_moe", "moeTopKFuncs.cuh"))
    n += extract(wheel, "flashinfer/data/include/flashinfer/trtllm/fused_moe/",
                 os.path.join(dest, "include/flashinfer/trtllm/fused_moe"),
                 keep=lambda rel: rel == "noAuxTcKernels.h")
    print(f"flashinfer: {n + 2} files")


def cccl(work):
    wheel = flashinfer_wheel(work)
    dest = os.path.join(DEST, "cccl/include")
    n = extract(wheel, "flashinfer/data/cccl/cub/cub/", os.path.join(dest, "cub"))
    n += extract(wheel, "flashinfer/data/cccl/libcudacxx/include/", dest)
    n += extract(wheel, "flashinfer/data/cccl/thrust/thrust/", os.path.join(dest, "thrust"))
    print(f"cccl: {n} files")


def vllm(work):
    tmp = os.path.join(work, "vllm-tmp")
    os.makedirs(tmp, exist_ok=True)
    env = dict(os.environ, TMPDIR=tmp)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
           "--no-build-isolation", "--no-clean", "-d", os.path.join(work, "vllm-dl"), VLLM]
    print("+", " ".join(cmd), "(its metadata step fails without torch; the source stays)",
          flush=True)
    subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env)
    roots = glob.glob(os.path.join(tmp, "pip-*", "vllm_*")) + \
        glob.glob(os.path.join(tmp, "pip-*", "vllm"))
    roots = [r for r in roots if os.path.isdir(os.path.join(r, "csrc", "moe"))]
    if not roots:
        sys.exit("fetch.py: pip did not leave the vllm source under " + tmp)
    src = os.path.join(roots[0], "csrc")
    dest = os.path.join(DEST, "vllm", "csrc")
    cut_before(os.path.join(src, "moe", "topk_softmax_kernels.cu"),
               "template<typename ComputeType, vllm::moe::ScoringFunc SF>\nvoid dispatch_topk_launch(",
               os.path.join(dest, "moe", "topk_softmax_kernels.cu"))
    cut_before(os.path.join(src, "moe", "grouped_topk_kernels.cu"),
               "std::tuple<torch::stable::Tensor, torch::stable::Tensor> grouped_topk(",
               os.path.join(dest, "moe", "grouped_topk_kernels.cu"))
    # The indexer's kernels (namespace vllm closes before the first torch entry point).
    cut_before(os.path.join(src, "sampler.cu"), "void apply_repetition_penalties_(",
               os.path.join(dest, "sampler.cu"))
    # Its 18 explicit instantiations triple the build time: keep the one the harness calls.
    drop_instantiations(os.path.join(dest, "moe", "grouped_topk_kernels.cu"),
                        "INSTANTIATE_NOAUX_TC(__nv_bfloat16, float, int32_t, SCORING_SIGMOID);", 17)
    for rel in ("moe/moeTopKFuncs.cuh", "cub_helpers.h", "core/cuda_compat.h"):
        os.makedirs(os.path.dirname(os.path.join(dest, rel)), exist_ok=True)
        shutil.copy(os.path.join(src, rel), os.path.join(dest, rel))
    # The sampler's Python (the sampling family): loaded by vllm_sampler.py, not imported.
    for name in ("topk_topp_sampler.py", "topk_topp_triton.py"):
        rel = os.path.join("vllm", "v1", "sample", "ops", name)
        os.makedirs(os.path.join(DEST, "vllm", "python"), exist_ok=True)
        shutil.copy(os.path.join(roots[0], rel), os.path.join(DEST, "vllm", "python", name))
    shutil.copy(os.path.join(roots[0], "LICENSE"), os.path.join(DEST, "vllm", "LICENSE"))
    print("vllm: 8 files")


def sglang(work):
    r = pip_download(SGLANG, work, ("--only-binary", ":all:", "--python-version", "3.12",
                                    "--platform", "manylinux_2_34_x86_64"))
    if r.returncode:
        sys.exit(r.stdout)
    wheel = one(os.path.join(work, "sglang-*.whl"))
    n = extract(wheel, "sglang/kernels/ops/moe/", os.path.join(DEST, "sglang"),
                keep=lambda rel: rel == "moe_fused_gate.py")
    print(f"sglang: {n} file")


def curand(work):
    r = pip_download(CURAND, work, ("--only-binary", ":all:", "--python-version", "3.12",
                                    "--platform", "manylinux_2_27_x86_64"))
    if r.returncode:
        sys.exit(r.stdout)
    wheel = one(os.path.join(work, "nvidia_curand-*.whl"))
    n = extract(wheel, "nvidia/cu13/include/", os.path.join(DEST, "curand", "include"),
                keep=lambda rel: rel.startswith("curand") and rel.endswith(".h"))
    print(f"curand: {n} files")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--keep-downloads", help="download into this folder and keep it")
    parser.add_argument("--only", nargs="*",
                        default=["flashinfer", "cccl", "vllm", "sglang", "curand"])
    args = parser.parse_args()
    work = args.keep_downloads or tempfile.mkdtemp(prefix="peers-fetch-")
    os.makedirs(work, exist_ok=True)
    try:
        for name in args.only:
            shutil.rmtree(os.path.join(DEST, name), ignore_errors=True)
            globals()[name](work)
    finally:
        if not args.keep_downloads:
            shutil.rmtree(work, ignore_errors=True)
    with open(os.path.join(DEST, "VERSIONS"), "w") as f:
        f.write("\n".join([FLASHINFER, VLLM, SGLANG, CURAND]) + "\n")
    total = sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(DEST) for f in fs)
    print(f"third_party: {total / 2**20:.1f} MiB in {DEST}")


if __name__ == "__main__":
    main()
