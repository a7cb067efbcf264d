"""vLLM's own sampler path (vllm 0.33.0, vllm/v1/sample/ops/) on the sampling shapes of
peers_bench's `sampling` family (issue #33): rows in its JSON schema, which run.sh joins with
peers_bench's metaltopk times of the same (shape, op, dtype, params).

vLLM cannot be imported without its compiled extension and its dependencies, so nothing of vLLM
is imported: the functions are taken from the fetched sources at run time
(bench/peers/third_party/vllm/python/, fetch.py). From topk_topp_sampler.py, the functions
TopKTopPSampler.forward_native calls (apply_top_k_top_p_pytorch, random_sample and its two
helpers) are compiled alone from the file's syntax tree. topk_topp_triton.py (the Triton
apply_top_k_top_p, what vLLM runs where Triton exists) runs whole, with stand-ins for its vLLM
imports: the platform (CUDA), num_compute_units (the SM count), next_power_of_2,
gpu_sync_allowed (a no-op), and triton_kernel_dispatcher_with_warmup, which here launches as
vLLM's does (dispatch arguments bound to kernel parameters by name, NAME_STRIDE_d from the
tensors) without its ahead-of-time warm-up.

    python3 bench/peers/vllm_sampler.py --json out.json [--library build/libmetaltopk.so]

Peers, each on float32 logits (bfloat16 rows include the `.float()` vLLM's Sampler applies):
  vllm_sampler_triton / vllm_sampler_pytorch, op top_k_top_p_sampling_from_logits:
      apply_top_k_top_p (Triton, or the PyTorch sort path with allow_cpu_sync=False as on CUDA),
      softmax in float32, random_sample (exponential noise, argmax): forward_native's sampling.
  vllm_apply_top_k_triton / vllm_apply_top_k_pytorch, op top_k_mask_logits:
      apply_top_k_top_p with p = None.
vLLM masks its logits in place, so each timed call first restores them from the input; for
float32 that copy is timed alone and subtracted (`copy_us` in the row), for bfloat16 it is the
widening vLLM's Sampler does and stays in the time. k and p are per-row tensors, as vLLM
always passes them; the scalar rows fill them with one value.
Checks: a mask against metaltopk's (its CPU backend through ctypes on the host copy): identical,
or differing only at copies of the k-th value; a token inside its row's top-k (not comparable
otherwise: vLLM draws its own randoms).
Exit status: 0 when every row ran and matched, 1 otherwise, 2 without CUDA, torch or triton.
"""

import argparse
import ast
import contextlib
import ctypes
import json
import os
import sys
import types

from cuda_timing import graph_us, loop_us

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SOURCES = os.path.join(HERE, "third_party", "vllm", "python")

# peers_bench's sampling family (sampling.cu): the same shapes, values and `params` strings.
ROWS, COLUMNS = (1, 64, 256), (151936, 262144)
TOP_K, TOP_K_MAX, TOP_P = 50, 1024, 0.9


def splitmix64(x):
    m = (1 << 64) - 1
    x = (x + 0x9E3779B97F4A7C15) & m
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & m
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & m
    return x ^ (x >> 31)


def filters(rows, per_row):
    """sampling.cu's Filters: per-row top_k in [1, 1024] and top_p in [0.5, 1], or scalars."""
    if not per_row:
        return [TOP_K] * rows, [TOP_P] * rows
    unit = [float(splitmix64(r * 4 + 1 + 977) >> 40) * 2.0**-24 for r in range(rows)]
    return ([1 + splitmix64(r * 4 + 1) % TOP_K_MAX for r in range(rows)],
            [0.5 + 0.5 * u for u in unit])


def params(op, per_row):
    k = "top_k per-row 1..1024" if per_row else f"top_k {TOP_K}"
    p = "top_p per-row 0.5..1" if per_row else "top_p 0.9"
    return k if op == "top_k_mask_logits" else f"{k}, {p}"


# ---- metaltopk's CPU backend (the mask reference) through ctypes ------------------------------

class MtkTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int32),
                ("sizes", ctypes.c_int64 * 8), ("strides", ctypes.c_int64 * 8)]


class MtkSamplingParams(ctypes.Structure):
    P = ctypes.POINTER(MtkTensor)
    _fields_ = [("struct_size", ctypes.c_size_t), ("top_k", P), ("top_k_value", ctypes.c_int64),
                ("top_p", P), ("top_p_value", ctypes.c_float), ("min_p", P),
                ("min_p_value", ctypes.c_float), ("temperature", P),
                ("temperature_value", ctypes.c_float)]


MTK_FLOAT32, MTK_BFLOAT16, MTK_INT32 = 0, 2, 7
MTK_BACKEND_CPU, MTK_SAMPLING_TOP_K_MASK_LOGITS = 1, 0


def find_library(given):
    for path in [given, os.environ.get("METALTOPK_LIBRARY")] + [
            os.path.join(ROOT, b, "libmetaltopk.so") for b in ("build-gpu", "build")]:
        if path and os.path.exists(path):
            return path
    sys.exit("vllm_sampler.py: no libmetaltopk.so (build the repo, or pass --library)")


class CpuMask:
    def __init__(self, path):
        lib = ctypes.CDLL(path)
        lib.mtk_context_create.argtypes = [ctypes.c_int, ctypes.c_int,
                                           ctypes.POINTER(ctypes.c_void_p)]
        lib.mtk_top_k_mask_logits.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(MtkTensor), ctypes.POINTER(MtkSamplingParams),
            ctypes.POINTER(MtkTensor), ctypes.c_void_p]
        lib.mtk_last_error_message.restype = ctypes.c_char_p
        self.lib, self.ctx = lib, ctypes.c_void_p()
        self.check(lib.mtk_context_create(MTK_BACKEND_CPU, 0, ctypes.byref(self.ctx)))

    def check(self, status):
        if status != 0:
            raise RuntimeError(f"metaltopk (CPU): status {status}: "
                               f"{self.lib.mtk_last_error_message().decode()}")

    @staticmethod
    def describe(t, dtype):
        d = MtkTensor(data=t.data_ptr(), dtype=dtype, ndim=t.dim())
        for i in range(t.dim()):
            d.sizes[i], d.strides[i] = t.size(i), t.stride(i)
        return d

    def __call__(self, torch, logits_cpu, top_k_cpu):
        """metaltopk's mask of host logits (float32 or bfloat16) with per-row int32 top_k."""
        dtype = MTK_BFLOAT16 if logits_cpu.dtype == torch.bfloat16 else MTK_FLOAT32
        out = torch.empty_like(logits_cpu)
        k = self.describe(top_k_cpu, MTK_INT32)
        p = MtkSamplingParams(struct_size=ctypes.sizeof(MtkSamplingParams),
                              top_k=ctypes.pointer(k), top_p_value=1.0, temperature_value=1.0)
        self.check(self.lib.mtk_top_k_mask_logits(
            self.ctx, ctypes.byref(self.describe(logits_cpu, dtype)), ctypes.byref(p),
            ctypes.byref(self.describe(out, dtype)), None))
        return out


# ---- vLLM's functions from the fetched sources ------------------------------------------------

def load_pytorch_sampler(torch):
    """forward_native's functions from topk_topp_sampler.py, compiled alone (the module's vLLM
    imports are never executed)."""
    path = os.path.join(SOURCES, "topk_topp_sampler.py")
    tree = ast.parse(open(path).read(), path)
    wanted = {"apply_top_k_top_p_pytorch", "apply_top_k_only", "empty_exponential_noise_like",
              "sample_with_exponential_noise", "random_sample"}
    body = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name in wanted]
    missing = wanted - {n.name for n in body}
    if missing:
        sys.exit(f"vllm_sampler.py: {sorted(missing)} not in {path}: vLLM's source changed")
    namespace = {"torch": torch}
    exec(compile(ast.Module(body=body, type_ignores=[]), path, "exec"), namespace)
    return namespace


def dispatcher_with_warmup(*, warmup_inputs, kernel=None):
    """vLLM's triton_kernel_dispatcher_with_warmup without the warm-up: binds the dispatch
    function's arguments to the kernel's parameters by name (x, x_ptr, X, X_PTR), fills
    NAME_STRIDE_d from the bound tensors, and launches kernel[grid](**kwargs)."""
    import inspect

    def decorate(dispatch):
        signature = inspect.signature(dispatch)
        arg_names = tuple(kernel.arg_names)

        def launch(*args, **kwargs):
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            spec = dispatch(*args, **kwargs)
            grid, launch_kwargs = spec[0], dict(spec[1])
            for name, value in bound.arguments.items():
                for target in (name, f"{name}_ptr", name.upper(), f"{name}_ptr".upper()):
                    if target in arg_names:
                        launch_kwargs.setdefault(target, value)
                        break
            for target in arg_names:
                if target in launch_kwargs:
                    continue
                for sep, suffix in (("_stride", "_ptr"), ("_STRIDE", "_PTR")):
                    name, found, dim = target.rpartition(sep)
                    dim = dim.removeprefix("_")
                    if found and (not dim or dim.isdigit()):
                        source = name if name in launch_kwargs else name + suffix
                        if source in launch_kwargs:
                            launch_kwargs[target] = launch_kwargs[source].stride(int(dim or 0))
                        break
            launch_kwargs.pop("_runtime_launcher", None)
            launch_kwargs.pop("_runtime_launcher_arg_count", None)
            (launch_kwargs.pop("kernel", None) or kernel)[grid](**launch_kwargs)
            return spec[2] if len(spec) == 3 else None

        return launch

    return decorate


def load_triton_sampler(torch):
    import triton
    import triton.language as tl

    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    stand_ins = {
        "vllm.model_executor.warmup.jit_warmup": dict(
            WarmupChoices=lambda *a: None, WarmupIntRange=lambda *a: None, _when=lambda c: None),
        "vllm.model_executor.warmup.jit_warmup_triton_helper": dict(
            DispatchSpec=tuple, TritonWarmupTensor=lambda *a, **k: None,
            triton_kernel_dispatcher_with_warmup=dispatcher_with_warmup),
        "vllm.platforms": dict(current_platform=types.SimpleNamespace(
            is_cuda_alike=lambda: True, is_cuda=lambda: True)),
        "vllm.triton_utils": dict(tl=tl, triton=triton, HAS_TRITON=True),
        "vllm.utils.gpu_sync_debug": dict(gpu_sync_allowed=contextlib.nullcontext),
        "vllm.utils.math_utils": dict(
            next_power_of_2=lambda n: 1 << (max(int(n), 1) - 1).bit_length()),
        "vllm.utils.platform_utils": dict(num_compute_units=lambda device_index=None: sms),
    }
    saved = {name: sys.modules.get(name) for name in stand_ins}
    path = os.path.join(SOURCES, "topk_topp_triton.py")
    module = types.ModuleType("vllm_topk_topp_triton")
    module.__file__ = path
    try:
        for name, attrs in stand_ins.items():
            stand_in = types.ModuleType(name)
            stand_in.__dict__.update(attrs)
            sys.modules[name] = stand_in
        exec(compile(open(path).read(), path, "exec"), module.__dict__)
    finally:  # the stand-ins serve the module's imports only
        for name, previous in saved.items():
            if previous is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = previous
    return module.apply_top_k_top_p_triton


# ---- checks -----------------------------------------------------------------------------------

def compare_mask(torch, x, want, got, row):
    """Identical masks, or differing only where x is the row's k-th value (metaltopk's smallest
    kept logit)."""
    inf = float("-inf")
    x, want, got = x.float(), want.float(), got.float()
    differ = want != got
    kth = torch.where(want != inf, x, torch.full_like(x, float("inf"))).amin(dim=1, keepdim=True)
    tie_only = (~differ | ((x == kth) & ((got == inf) | (got == kth)))).all(dim=1)
    rows_differ = differ.any(dim=1)
    row["tie_rows"] = int((rows_differ & tie_only).sum())
    row["mismatch_rows"] = int((rows_differ & ~tie_only).sum())
    row["rows_checked"] = x.size(0)
    if row["mismatch_rows"]:
        row["status"] = "mismatch"
        first = int((rows_differ & ~tie_only).nonzero()[0, 0])
        row["note"] += f"; first mismatching row {first}"
    else:
        row["status"] = "match (ties at the k-th value)" if row["tie_rows"] else "match"


def check_tokens(torch, x, top_k, tokens, row):
    x = x.float()
    v = x.gather(1, tokens.view(-1, 1).long().clamp(0, x.size(1) - 1))
    above = (x > v).sum(dim=1)
    bad = (tokens < 0) | (tokens >= x.size(1)) | (above >= top_k)
    row["rows_checked"] = x.size(0)
    row["mismatch_rows"] = int(bad.sum())
    row["status"] = ("mismatch" if row["mismatch_rows"] else
                     "not comparable (the peer draws its own randoms); its tokens are inside "
                     "the filter")


# ---- one shape --------------------------------------------------------------------------------

def bench(torch, fns, mask_reference, rows, n, dtype, per_row, args):
    big = rows * n * 4 >= 256 << 20
    graph_calls, replays = (3, 3) if big else (args.graph_calls, args.replays)
    calls, reps = (5, 3) if big else (args.calls, args.reps)
    gen = torch.Generator(device="cpu").manual_seed(rows * 7919 + n)
    x_cpu = torch.randn(rows, n, generator=gen)
    if dtype == "bf16":
        x_cpu = x_cpu.bfloat16()
    x = x_cpu.cuda()
    k_list, p_list = filters(rows, per_row)
    k = torch.tensor(k_list, dtype=torch.int32, device="cuda")
    p = torch.tensor(p_list, dtype=torch.float32, device="cuda")
    work = torch.empty(rows, n, dtype=torch.float32, device="cuda")

    def restore():  # vLLM masks in place; bfloat16 logits are widened as its Sampler does
        work.copy_(x)
        return work

    copy_graph = copy_loop = 0.0
    if dtype == "f32":
        copy_graph = graph_us(torch, lambda i: restore(), graph_calls, replays)
        copy_loop = loop_us(torch, lambda i: restore(), calls, reps)
    want_mask = None
    out = []
    for op, peer, note, fn in fns(restore, k, p):
        row = {"shape": f"{rows}x{n}", "family": "sampling", "k": -1 if per_row else TOP_K,
               "dtype": dtype, "peer": peer, "op": op, "params": params(op, per_row),
               "peer_us": None, "metaltopk_us": None, "peer_loop_us": None,
               "metaltopk_loop_us": None, "speedup": None, "metaltopk_status": "",
               "max_prob_rel_err": None, "index_dtype": "int64", "status": "ok",
               "rows_checked": 0, "tie_rows": 0, "mismatch_rows": 0,
               "copy_us": copy_graph,
               "timing": "graph: median over replays of a graph of captured calls, per call, "
                         "less the restoring float32 copy timed alone (copy_us); loop: the same "
                         "over bursts of back-to-back Python calls",
               "note": note}
        print(f"[vllm] {rows}x{n} {dtype} {'per-row' if per_row else 'scalar'} {peer}",
              file=sys.stderr, flush=True)
        try:
            result = fn(0)
            torch.cuda.synchronize()
            if op == "top_k_mask_logits":
                if want_mask is None:
                    want_mask = mask_reference(torch, x_cpu, k.cpu()).cuda()
                compare_mask(torch, x, want_mask, result, row)
            else:
                check_tokens(torch, x, k, result, row)
            row["peer_us"] = max(graph_us(torch, fn, graph_calls, replays) - copy_graph, 0.0)
            row["peer_loop_us"] = max(loop_us(torch, fn, calls, reps) - copy_loop, 0.0)
        except Exception as e:
            row["status"] = "failed"
            row["note"] += f"; {type(e).__name__}: {e}"
        out.append(row)
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", help="write the rows here (rewritten after every shape)")
    parser.add_argument("--library", help="libmetaltopk.so (default: $METALTOPK_LIBRARY, "
                        "build-gpu/, build/)")
    parser.add_argument("--filter", default="", help="only shapes whose name contains this")
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--graph-calls", type=int, default=20)
    parser.add_argument("--replays", type=int, default=10)
    args = parser.parse_args()
    try:
        import torch
        import triton  # noqa: F401
    except ImportError as e:
        print(f"vllm_sampler.py: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("vllm_sampler.py: no CUDA device", file=sys.stderr)
        return 2
    if not os.path.isdir(SOURCES):
        print(f"vllm_sampler.py: {SOURCES} missing: run bench/peers/fetch.py --only vllm",
              file=sys.stderr)
        return 1
    native = load_pytorch_sampler(torch)
    triton_apply = load_triton_sampler(torch)
    mask_reference = CpuMask(find_library(args.library))

    def fns(restore, k, p):
        def sampler(apply):
            def call(i):
                logits = apply(restore(), k, p)
                probs = logits.softmax(dim=-1, dtype=torch.float32)
                return native["random_sample"](probs, {})
            return call

        def mask(apply):
            return lambda i: apply(restore(), k, None)

        pytorch = lambda logits, k, p: native["apply_top_k_top_p_pytorch"](
            logits, k, p, allow_cpu_sync=False)
        return [
            ("top_k_top_p_sampling_from_logits", "vllm_sampler_triton",
             "apply_top_k_top_p_triton, softmax, random_sample (forward_native with Triton)",
             sampler(triton_apply)),
            ("top_k_top_p_sampling_from_logits", "vllm_sampler_pytorch",
             "apply_top_k_top_p_pytorch (sort), softmax, random_sample", sampler(pytorch)),
            ("top_k_mask_logits", "vllm_apply_top_k_triton", "apply_top_k_top_p_triton, p None",
             mask(triton_apply)),
            ("top_k_mask_logits", "vllm_apply_top_k_pytorch",
             "apply_top_k_top_p_pytorch, p None (sort)", mask(pytorch)),
        ]

    rows_out, ok = [], True
    for rows in ROWS:
        for n in COLUMNS:
            for per_row in (False, True):
                for dtype in ("f32", "bf16"):
                    name = (f"sampling {rows}x{n} {dtype} "
                            f"{'per-row' if per_row else 'scalar'}")
                    if args.filter not in name:
                        continue
                    try:
                        got = bench(torch, fns, mask_reference, rows, n, dtype, per_row, args)
                    except Exception as e:
                        print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr)
                        ok = False
                        continue
                    for row in got:
                        ok = ok and row["status"] not in ("failed", "mismatch")
                        print(json.dumps(row), flush=True)
                    rows_out += got
                    if args.json:
                        with open(args.json, "w") as f:
                            json.dump(rows_out, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
