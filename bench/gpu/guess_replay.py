#!/usr/bin/env python3
"""Replays the CUDA top-k filter's sampled guess (lib/cuda/sampling_rows.cuh, gather_top_bins and
its cluster twin) in numpy on the peers benchmark's own float32 logits (bench/gpu/c_abi_bench.hpp's
generator and bench/peers/sampling.cu's seeds), and prints which rows miss which guess.

    python3 bench/gpu/guess_replay.py ROWS N K BLOCKS     e.g. 64 262144 50 2

A model of the kernel's rule, not the kernel: the numbers it gives (row 35 of 64x262144 at k = 50,
about one first guess in eight missing at k = 1024 on 262144 tokens) are why a batch waits."""
import math
import sys

import numpy as np

CAPACITY, SAMPLE_KEYS, SAMPLE_RUN, GUESSES = 2048, 4096, 32, 3


def benchmark_logits(rows, n):
    seed = np.uint64((rows * 7919 + n) * 16 + 5)
    with np.errstate(over="ignore"):
        x = seed * np.uint64(0x100000001B3) + np.arange(rows * n, dtype=np.uint64)
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        x = x ^ (x >> np.uint64(31))
    u1 = ((x >> np.uint64(40)).astype(np.float64) + 1.0) / 16777217.0
    u2 = (x & np.uint64(0xFFFFFF)).astype(np.float64) / 16777216.0
    return (np.sqrt(-2 * np.log(u1)) * np.cos(6.283185307179586 * u2)).astype(np.float32).reshape(rows, n)


def key_prefixes(values):
    bits = values.view(np.uint32).astype(np.int64)
    return np.where(bits & 0x80000000, (~bits) & 0xFFFFFFFF, bits | 0x80000000) >> 16


def main():
    rows, n, k, blocks = map(int, sys.argv[1:5])
    target = int(math.sqrt(k * CAPACITY))
    keys = SAMPLE_KEYS // blocks // SAMPLE_RUN * SAMPLE_RUN
    sampled, size = keys * blocks, n // blocks
    j = np.arange(keys)
    misses = [0] * GUESSES
    for r, row in enumerate(benchmark_logits(rows, n)):
        prefixes = key_prefixes(row)
        stride = size // (keys // SAMPLE_RUN)
        sample = np.sort(np.concatenate(
            [prefixes[b * size + (j // SAMPLE_RUN) * stride + j % SAMPLE_RUN] for b in range(blocks)]))[::-1]
        rank = (target * sampled + n - 1) // n
        for guess in range(GUESSES):
            prefix = sample[rank - 1]
            before, at_or_above = int((sample > prefix).sum()), int((sample >= prefix).sum())
            gathered = int((prefixes >= prefix).sum())
            if k <= gathered <= CAPACITY:
                break
            misses[guess] += 1
            print(f"row {r}: guess {guess} at rank {rank} gathered {gathered}")
            step = at_or_above + int((target - gathered) * sampled / n)
            if gathered > CAPACITY:
                rank = min(max(step, 1), before) if before else 0
            else:
                rank = (at_or_above + 1 if step <= at_or_above else min(step, sampled)) if at_or_above < sampled else 0
            if rank == 0:
                break
    print(f"{rows}x{n} k={k} blocks={blocks}: misses by guess {misses}")


if __name__ == "__main__":
    main()
