#!/usr/bin/env python3
"""How many candidates min_p_rows_kernel's first read gathers on the peers benchmark's rows
(softmax of standard normals), against what min-p keeps and the slots a warp has, and how many
of a warp's batches hold any (what a vote skipping a batch's appends could save; the kernel has
no such vote).

Replays gather_min_p_candidates (lib/cuda/sampling_rows.cuh) in numpy: 16 warp ranges, batches
of 512 tokens a warp, the bound min_p times the largest mass read so far, shared by the block
(as the kernel does) or each warp's own. Warps are taken as running in step.
  python3 bench/gpu/min_p_candidates.py [n] [min_p ...]
"""
import sys

import numpy as np

WARPS, BATCH = 16, 512


def gather(p, min_p, shared):
    n = len(p)
    per = ((n + WARPS - 1) // WARPS + 3) // 4 * 4
    ranges = [p[w * per:min((w + 1) * per, n)] for w in range(WARPS)]
    seen = np.zeros(WARPS)
    count = np.zeros(WARPS, dtype=np.int64)
    batches = holding = 0
    block = 0.0
    for b in range(max((len(r) + BATCH - 1) // BATCH for r in ranges)):
        chunks = [r[b * BATCH:(b + 1) * BATCH] for r in ranges]
        block = max([block] + [c.max() for c in chunks if len(c)])
        for w, c in enumerate(chunks):
            if len(c) == 0:
                continue
            seen[w] = max(seen[w], c.max())
            taken = int(np.sum(c >= min_p * (block if shared else seen[w])))
            count[w] += taken
            batches += 1
            holding += taken > 0
    return count, holding, batches


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 151936
    bounds = [float(v) for v in sys.argv[2:]] or [0.05, 0.1, 0.2]
    rng = np.random.default_rng(1)
    slots = (n + 1) // 2 // 2 // WARPS  # sampling.cu: half a row of floats, two words a slot
    for min_p in bounds:
        x = rng.standard_normal(n).astype(np.float32)
        p = np.exp(x - x.max())
        p = (p / p.sum()).astype(np.float32)
        kept = int(np.sum(p >= min_p * p.max()))
        for shared in (True, False):
            c, holding, batches = gather(p, min_p, shared)
            print(f"n {n} min_p {min_p}: keeps {kept}, gathers {int(c.sum())} "
                  f"({'block' if shared else 'warp'}'s largest), most in a warp {int(c.max())} "
                  f"of {slots} slots; {holding} of {batches} warp batches hold one")


if __name__ == "__main__":
    main()
