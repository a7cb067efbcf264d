"""CPU benchmark of the fused MoE router: metaltopk.moe_route (CPU backend) against the torch
composites it replaces, in one process and one run.

Routers timed, on bf16 logits (as models run them):
- softmax: torch `softmax(x.float()) -> topk -> w / w.sum() -> ids.int()`;
- DeepSeek-V3: sigmoid scores, a selection bias, 8 groups of which 4 are kept by the sum of
  their top-2, weights renormalised and scaled (tests/router/torch_routers.py).
Before timing a shape the two results are compared, so a wrong answer is never timed. Times are
medians of interleaved rounds (so machine load hits both alike); ratio = torch / metaltopk.

The results also go to a JSON file (default bench/results/router_cpu.json) with the run's date,
host and library versions.

Usage: python3 bench/bench_router.py [--seconds S] [--threads T] [--json PATH]
"""

import argparse
import math
import os
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import torch

import metaltopk
from bench_cpu import RESULTS_DIR, interleaved_medians, run_meta, write_json

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "router"))
from torch_routers import torch_deepseek_v3, torch_softmax_composite  # noqa: E402

TOKENS = [1, 128, 4096, 16384]
EXPERTS_K = [(64, 8), (128, 8), (256, 8), (512, 10)]
DEEPSEEK = {"n_group": 8, "topk_group": 4, "scale": 2.5}


def check_same(weights, ids, expected_w, expected_ids, ranked_by, label):
    """Weights as torch's, and the chosen experts' ranking scores as those torch chose: ids may
    differ among tied scores (bf16 logits tie often; torch's tie order is its own). Rounding
    (torch's sigmoid against ours) may flip a near-tie, so a few tokens in 10^4 may differ."""
    same_w = np.isclose(weights, expected_w.numpy(), rtol=1e-5, atol=1e-7).all(axis=1)
    ours = np.take_along_axis(ranked_by, ids.astype(np.int64), axis=1)
    theirs = np.take_along_axis(ranked_by, expected_ids.numpy().astype(np.int64), axis=1)
    same_scores = np.isclose(ours, theirs, rtol=1e-6, atol=0).all(axis=1)
    agree = (same_w & same_scores).mean()
    if agree < 0.999:
        raise SystemExit(f"{label}: only {agree:.2%} of tokens agree with torch")


def bench_case(label, tokens, experts, k, deepseek, seconds, rng):
    logits = torch.from_numpy(rng.standard_normal((tokens, experts)).astype(np.float32))
    logits = logits.to(torch.bfloat16)
    array = logits.float().numpy().astype(ml_dtypes.bfloat16)
    if deepseek:
        bias = torch.from_numpy((rng.standard_normal(experts) * 0.1).astype(np.float32))
        bias_array = bias.numpy()
        kwargs = {"scoring": "sigmoid", "bias": bias_array, **DEEPSEEK}
        ranked_by = (torch.sigmoid(logits.float()) + bias).numpy()

        def run_torch():
            return torch_deepseek_v3(logits, k, bias, DEEPSEEK["n_group"],
                                     DEEPSEEK["topk_group"], DEEPSEEK["scale"])
    else:
        kwargs = {}
        ranked_by = torch.softmax(logits.float(), dim=-1).numpy()

        def run_torch():
            return torch_softmax_composite(logits, k)

    def run_metaltopk():
        return metaltopk.moe_route(array, k, backend="cpu", **kwargs)

    check_same(*run_metaltopk(), *run_torch(), ranked_by, f"{label} T={tokens} E={experts} k={k}")
    ours, theirs = interleaved_medians([run_metaltopk, run_torch], seconds)
    return {"router": label, "tokens": tokens, "experts": experts, "k": k,
            "metaltopk_us": ours * 1e6, "torch_us": theirs * 1e6, "ratio": theirs / ours}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5, help="time budget per case")
    parser.add_argument("--threads", type=int, default=2,
                        help="torch threads (metaltopk's CPU context uses every hardware thread)")
    parser.add_argument("--json", type=Path, default=RESULTS_DIR / "router_cpu.json",
                        help="where the results go (default: %(default)s)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    meta = run_meta(torch.get_num_threads())  # the date and load average of the run's start
    rng = np.random.default_rng(0)
    cases = [("softmax", t, e, k, False) for e, k in EXPERTS_K for t in TOKENS]
    cases += [("deepseek-v3", t, 256, 8, True) for t in TOKENS]
    rows = []
    print(f"metaltopk {metaltopk.__version__} CPU router vs torch {torch.__version__} "
          f"({args.threads} threads), bf16 logits; median µs")
    print(f"{'router':<12} {'T':>6} {'E':>4} {'k':>3} {'metaltopk':>10} {'torch':>10} {'ratio':>7}")
    for label, tokens, experts, k, deepseek in cases:
        row = bench_case(label, tokens, experts, k, deepseek, args.seconds, rng)
        rows.append(row)
        print(f"{label:<12} {tokens:>6} {experts:>4} {k:>3} {row['metaltopk_us']:>10.1f} "
              f"{row['torch_us']:>10.1f} {row['ratio']:>6.2f}x", flush=True)
    geomean = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
    print(f"geometric-mean speedup over torch: {geomean:.2f}x")
    meta["host"]["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    write_json(args.json, {"meta": meta, "rows": rows,
                           "geomean_speedup": geomean})


if __name__ == "__main__":
    main()
