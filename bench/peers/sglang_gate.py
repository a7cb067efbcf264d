"""SGLang's router (moe_fused_gate, a Triton kernel in sglang 0.5.23) against metaltopk's
mtk_moe_route on the same router shapes and the same tensors, in one process and on one stream.

SGLang's moe_fused_gate is Triton, not CUDA C++, so it runs here under torch + triton; metaltopk
is called through its C ABI with ctypes (no cffi needed), on torch's current stream. The module
is the file from the sglang wheel (bench/peers/third_party/sglang/moe_fused_gate.py, fetched by
fetch.py), loaded with stand-ins for the four SGLang modules it imports (PDL on for sm_90+, as
SGLang's is_arch_support_pdl says; the sm_120 fast path and the radix path, which neither
router shape takes, off).

    python3 bench/peers/sglang_gate.py --json out.json [--library build/libmetaltopk.so]

Rows have the fields of peers_bench's router rows: graph replay (peer_us, metaltopk_us) and
back-to-back loop (peer_loop_us, metaltopk_loop_us; Python-level calls on both sides: SGLang's
wrapper, and one ctypes call for metaltopk), and the check of SGLang's route against metaltopk's
(same expert set per token; weights within 1e-5 relative; near-tie tokens counted).
Exit status: 0 when every shape ran and matched, 1 otherwise, 2 without CUDA, torch or triton.
"""

import argparse
import ctypes
import json
import os
import sys
import types

from cuda_timing import graph_us, loop_us

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
SOURCE = os.path.join(HERE, "third_party", "sglang", "moe_fused_gate.py")

SHAPES = [(False, t, e, 10 if e == 512 else 8) for e in (64, 128, 256, 512)
          for t in (1, 128, 4096, 16384)] + [(True, t, 256, 8) for t in (1, 128, 4096, 16384)]
GROUPS, TOPK_GROUPS = 8, 4


# ---- metaltopk through ctypes -----------------------------------------------------------------

class MtkTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("dtype", ctypes.c_int), ("ndim", ctypes.c_int32),
                ("sizes", ctypes.c_int64 * 8), ("strides", ctypes.c_int64 * 8)]


class MtkRouterParams(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_size_t), ("k", ctypes.c_int64),
                ("scoring", ctypes.c_int),
                ("bias", ctypes.POINTER(MtkTensor)), ("n_group", ctypes.c_int64),
                ("topk_group", ctypes.c_int64), ("renormalize", ctypes.c_int),
                ("scale", ctypes.c_float)]


MTK_FLOAT32, MTK_BFLOAT16, MTK_INT32 = 0, 2, 7
MTK_BACKEND_CUDA, MTK_SCORING_SOFTMAX, MTK_SCORING_SIGMOID = 2, 0, 1


def find_library(given):
    candidates = [given, os.environ.get("METALTOPK_LIBRARY")] + [
        os.path.join(ROOT, b, "libmetaltopk.so") for b in ("build-gpu", "build")]
    for path in candidates:
        if path and os.path.exists(path):
            return path
    sys.exit("sglang_gate.py: no libmetaltopk.so (build the repo, or pass --library)")


class Metaltopk:
    def __init__(self, path):
        lib = ctypes.CDLL(path)
        lib.mtk_context_create.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
        lib.mtk_moe_route.argtypes = [ctypes.c_void_p, ctypes.POINTER(MtkTensor),
                                      ctypes.POINTER(MtkRouterParams), ctypes.POINTER(MtkTensor),
                                      ctypes.POINTER(MtkTensor), ctypes.c_void_p]
        lib.mtk_last_error_message.restype = ctypes.c_char_p
        self.lib = lib
        self.ctx = ctypes.c_void_p()
        self.check(lib.mtk_context_create(MTK_BACKEND_CUDA, 0, ctypes.byref(self.ctx)), "context")

    def check(self, status, what):
        if status != 0:
            raise RuntimeError(f"metaltopk {what}: status {status}: "
                               f"{self.lib.mtk_last_error_message().decode()}")

    @staticmethod
    def describe(t, dtype):
        d = MtkTensor()
        d.data = t.data_ptr()
        d.dtype = dtype
        d.ndim = t.dim()
        for i in range(t.dim()):
            d.sizes[i] = t.size(i)
            d.strides[i] = t.stride(i)
        return d


# ---- SGLang's module with stand-ins for its imports -------------------------------------------

def load_sglang(torch):
    def module(name, **attrs):
        m = types.ModuleType(name)
        m.__dict__.update(attrs)
        m.__path__ = []
        sys.modules[name] = m
        return m

    major, minor = torch.cuda.get_device_capability()
    arch = types.SimpleNamespace(major=major, minor=minor)
    for name in ("sglang", "sglang.kernels", "sglang.kernels.jit", "sglang.kernels.ops",
                 "sglang.srt"):
        module(name)
    module("sglang.kernels.jit.utils", get_jit_cuda_arch=lambda: arch,
           is_arch_support_pdl=lambda: major >= 9)
    module("sglang.kernels.kernel_api_logging", debug_kernel_api=lambda f: f)
    radix = module("sglang.kernels.ops.moe.moe_route_radix", covered=lambda *a: False)
    module("sglang.kernels.ops.moe", moe_route_radix=radix)
    off = types.SimpleNamespace(get=lambda: False)
    module("sglang.srt.environ", envs=types.SimpleNamespace(SGLANG_OPT_SM120_MTP_ROUTER_TOP22=off))
    gate = types.ModuleType("sglang_moe_fused_gate")
    gate.__file__ = SOURCE
    with open(SOURCE) as f:
        exec(compile(f.read(), SOURCE, "exec"), gate.__dict__)
    return gate.moe_fused_gate


# ---- checking ---------------------------------------------------------------------------------

def compare(torch, deepseek, logits, bias, k, w_want, id_want, w_got, id_got, row):
    """Same expert set per token, weights by expert within 1e-5 relative; tokens whose sets
    differ are near ties when the float64 selection scores of the two sets agree rank by rank
    within 1e-5 relative, else mismatches."""
    id_got, id_want = id_got.long(), id_want.long()
    same = (id_got.sort(dim=1).values == id_want.sort(dim=1).values).all(dim=1)
    x = logits.double()
    c = (torch.sigmoid(x) + bias.double()) if deepseek else torch.softmax(x, dim=1)
    ties = mismatches = 0
    first = ""
    for t in torch.nonzero(~same).flatten().tolist():
        a = c[t, id_got[t]].sort(descending=True).values
        b = c[t, id_want[t]].sort(descending=True).values
        if ((a - b).abs() <= 1e-5 * b.abs()).all():
            ties += 1
        else:
            mismatches += 1
            first = first or f"token {t}: expert set differs from metaltopk's"
    # Weights of the tokens whose sets agree, matched by expert id.
    rows = torch.nonzero(same).flatten()
    max_err = 0.0
    if rows.numel():
        order_got = id_got[rows].argsort(dim=1)
        order_want = id_want[rows].argsort(dim=1)
        wg = w_got[rows].double().gather(1, order_got)
        ww = w_want[rows].double().gather(1, order_want)
        err = (wg - ww).abs() / ww.abs().clamp_min(1e-30)
        max_err = float(err.max())
        bad = (err > 1e-5).any(dim=1)
        if bad.any():
            mismatches += int(bad.sum())
            t = int(rows[torch.nonzero(bad).flatten()[0]])
            first = first or f"token {t}: weights differ from metaltopk's by more than 1e-5"
    row.update(rows_checked=int(logits.shape[0]), tie_rows=ties, mismatch_rows=mismatches,
               max_weight_rel_err=max_err)
    row["status"] = "mismatch" if mismatches else (
        "match (near-tie tokens)" if ties else "match")
    if first:
        row["note"] += "; " + first


# ---- one shape --------------------------------------------------------------------------------

def bench(torch, gate, mtk, deepseek, tokens, experts, k, args):
    name = (f"router {'deepseek-v3' if deepseek else 'softmax'} T={tokens} E={experts}")
    print(f"[sglang] {name} k={k}", file=sys.stderr, flush=True)
    gen = torch.Generator(device="cuda").manual_seed(tokens * 31 + experts + k)
    rotation = 4 if tokens * experts * 2 <= 50 * 2 ** 20 else 1
    logits = [torch.randn(tokens, experts, device="cuda", generator=gen).bfloat16()
              for _ in range(rotation)]
    bias = 0.1 * torch.randn(experts, device="cuda", generator=gen)
    big = tokens * experts >= 4096 * 256
    calls, reps = (20, 5) if big else (args.calls, args.reps)
    graph_calls, replays = (10, 5) if big else (args.graph_calls, args.replays)

    # metaltopk: outputs preallocated, descriptors built once (as a runtime would).
    weights = torch.empty(tokens, k, device="cuda", dtype=torch.float32)
    ids = torch.empty(tokens, k, device="cuda", dtype=torch.int32)
    bias_t = Metaltopk.describe(bias, MTK_FLOAT32)
    params = MtkRouterParams(struct_size=ctypes.sizeof(MtkRouterParams), k=k,
                             scoring=MTK_SCORING_SIGMOID if deepseek else MTK_SCORING_SOFTMAX,
                             bias=ctypes.pointer(bias_t) if deepseek else None,
                             n_group=GROUPS if deepseek else 0,
                             topk_group=TOPK_GROUPS if deepseek else 0, renormalize=1, scale=1.0)
    descs = [Metaltopk.describe(x, MTK_BFLOAT16) for x in logits]
    w_desc, i_desc = Metaltopk.describe(weights, MTK_FLOAT32), Metaltopk.describe(ids, MTK_INT32)

    def mtk_call(i):
        mtk.check(mtk.lib.mtk_moe_route(mtk.ctx, ctypes.byref(descs[i % rotation]),
                                        ctypes.byref(params), ctypes.byref(w_desc),
                                        ctypes.byref(i_desc),
                                        ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)),
                  "mtk_moe_route")

    def peer_call(i):
        if deepseek:
            return gate(logits[i % rotation], bias, k, scoring_func="sigmoid",
                        renormalize=True, routed_scaling_factor=1.0,
                        num_expert_group=GROUPS, topk_group=TOPK_GROUPS)
        return gate(logits[i % rotation], None, k, scoring_func="softmax", renormalize=True)

    row = {"shape": name, "family": "router", "k": k, "dtype": "bf16",
           "peer": "sglang_moe_fused_gate", "index_dtype": "int32", "status": "ok",
           "timing": "graph: median over replays of a graph of captured calls, per call; loop: "
                     "median over bursts of back-to-back Python calls, per call",
           "note": "Triton kernel (sglang 0.5.23 moe_fused_gate), run under torch + triton; "
                   "metaltopk through ctypes" +
                   ("; n_group=8 topk_group=4, sigmoid + float32 bias, renormalised, scale 1"
                    if deepseek else "; softmax, renormalised")}
    mtk_call(0)
    w_want, id_want = weights.clone(), ids.clone()
    row["metaltopk_us"] = graph_us(torch, mtk_call, graph_calls, replays)
    row["metaltopk_loop_us"] = loop_us(torch, mtk_call, calls, reps)
    try:
        w_got, id_got = peer_call(0)
        torch.cuda.synchronize()
        compare(torch, deepseek, logits[0], bias, k, w_want, id_want, w_got, id_got, row)
        row["peer_us"] = graph_us(torch, peer_call, graph_calls, replays)
        row["peer_loop_us"] = loop_us(torch, peer_call, calls, reps)
    except Exception as e:  # one shape's failure must not hide the rest
        row["status"] = "failed"
        row["note"] += f"; {type(e).__name__}: {e}"
    row["speedup"] = (row["peer_us"] / row["metaltopk_us"]
                      if row.get("peer_us") and row.get("metaltopk_us") else None)
    return row


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
        import triton  # noqa: F401  (moe_fused_gate is a Triton kernel)
    except ImportError as e:
        print(f"sglang_gate.py: {e}", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("sglang_gate.py: no CUDA device", file=sys.stderr)
        return 2
    if not os.path.exists(SOURCE):
        print(f"sglang_gate.py: {SOURCE} missing: run bench/peers/fetch.py", file=sys.stderr)
        return 1
    gate = load_sglang(torch)
    mtk = Metaltopk(find_library(args.library))
    rows, ok = [], True
    for deepseek, tokens, experts, k in SHAPES:
        name = (f"router {'deepseek-v3' if deepseek else 'softmax'} T={tokens} E={experts}")
        if args.filter not in name:
            continue
        try:
            row = bench(torch, gate, mtk, deepseek, tokens, experts, k, args)
        except Exception as e:
            print(f"{name}: {type(e).__name__}: {e}", file=sys.stderr)
            ok = False
            continue
        ok = ok and row["status"] not in ("failed", "mismatch")
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(rows, f, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
