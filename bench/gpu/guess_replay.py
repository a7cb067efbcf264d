#!/usr/bin/env python3
"""Replays the CUDA top-k filter's sampled guess (lib/cuda/sampling_rows.cuh,
gather_top_candidates) in numpy on the peers benchmark's own logits (bench/gpu/c_abi_bench.hpp's
generator, bench/peers/sampling.cu's seeds and k, every buffer it rotates through), and prints
which rows miss which guess and how many reads of the row the slowest row takes: a batch, split
or not, waits for its slowest row.

    python3 bench/gpu/guess_replay.py ROWS N K [bf16]     e.g. 64 262144 50, 64 262144 per-row bf16

A model of the kernel's rule, not the kernel. It showed why 64x262144 with per-row k up to 1024
was slow (one row in two of the four buffers missed three guesses, then read the row twice more)."""
import math
import sys

import numpy as np

CAPACITY, SAMPLE_KEYS, SAMPLE_RUN, GUESSES = 2048, 8192, 32, 3
LEAST_FIRST_RANK, SURE_GUESS_MOST_K = 16, CAPACITY // 8
L2_BYTES = 50 << 20  # H100's and H200's: inputs that fit rotate over 4 buffers


def splitmix64(x):
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def benchmark_logits(rows, n, buffer):
    seed = np.uint64((rows * 7919 + n) * 16 + 5 + buffer)
    with np.errstate(over="ignore"):
        x = splitmix64(seed * np.uint64(0x100000001B3) + np.arange(rows * n, dtype=np.uint64))
    u1 = ((x >> np.uint64(40)).astype(np.float64) + 1.0) / 16777217.0
    u2 = (x & np.uint64(0xFFFFFF)).astype(np.float64) / 16777216.0
    return (np.sqrt(-2 * np.log(u1)) * np.cos(6.283185307179586 * u2)).astype(np.float32).reshape(rows, n)


def bfloat16_rounded(values):
    """The benchmark's bfloat16 logits: float32 rounded to nearest even, widened back."""
    bits = values.view(np.uint32).astype(np.uint64)
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return bits.astype(np.uint32).view(np.float32)


def benchmark_top_k(rows, k):
    """The benchmark's k of every row: K, or for K = per-row 1 + splitmix64(4r + 1) % 1024."""
    if k != "per-row":
        return [int(k)] * rows
    return [1 + int(splitmix64(np.uint64(4 * r + 1)) % np.uint64(1024)) for r in range(rows)]


def key_prefixes(values):
    bits = values.view(np.uint32).astype(np.int64)
    return np.where(bits & 0x80000000, (~bits) & 0xFFFFFFFF, bits | 0x80000000) >> 16


def replay_row(row, k, n):
    """The guesses that miss on one row, (guess, rank, gathered) each, and the reads of the row
    its gather takes: one a guess; where every guess missed, the histogram's gather and, unless
    the one guess above SURE_GUESS_MOST_K counted it, its count."""
    target = int(math.sqrt(k * CAPACITY))
    prefixes = key_prefixes(row)
    j = np.arange(SAMPLE_KEYS)
    stride = n // (SAMPLE_KEYS // SAMPLE_RUN)
    sample = np.sort(prefixes[(j // SAMPLE_RUN) * stride + j % SAMPLE_RUN])[::-1]
    rank = max((target * SAMPLE_KEYS + n - 1) // n,
               min(LEAST_FIRST_RANK, CAPACITY // 2 * SAMPLE_KEYS // n))
    guesses = GUESSES if k <= SURE_GUESS_MOST_K else 1
    missed = []
    while len(missed) < guesses and rank != 0:
        prefix = sample[rank - 1]
        before, at_or_above = int((sample > prefix).sum()), int((sample >= prefix).sum())
        gathered = int((prefixes >= prefix).sum())
        if k <= gathered <= CAPACITY:
            return missed, len(missed) + 1
        missed.append((len(missed), rank, gathered))
        step = at_or_above + int((target - gathered) * SAMPLE_KEYS / n)
        if gathered > CAPACITY:
            rank = min(max(step, 1), before) if before else 0
        elif at_or_above < SAMPLE_KEYS:
            rank = at_or_above + 1 if step <= at_or_above else min(step, SAMPLE_KEYS)
        else:
            rank = 0
    return missed, len(missed) + (1 if k > SURE_GUESS_MOST_K else 2)


def main():
    rows, n, bf16 = int(sys.argv[1]), int(sys.argv[2]), sys.argv[4:] == ["bf16"]
    top_k = benchmark_top_k(rows, sys.argv[3])
    buffers = 4 if rows * n * (2 if bf16 else 4) <= L2_BYTES else 1
    for buffer in range(buffers):
        misses, slowest = [0] * GUESSES, 0
        logits = benchmark_logits(rows, n, buffer)
        for r, row in enumerate(bfloat16_rounded(logits) if bf16 else logits):
            k = top_k[r]
            missed, reads = replay_row(row, k, n) if k <= CAPACITY // 2 and n >= 2 * SAMPLE_KEYS else ([], 2)
            for guess, rank, gathered in missed:
                misses[guess] += 1
                print(f"buffer {buffer} row {r} (k {k}): guess {guess} at rank {rank} gathered {gathered}")
            slowest = max(slowest, reads)
        print(f"{rows}x{n} {'bf16' if bf16 else 'f32'} k={sys.argv[3]} buffer {buffer} of {buffers}: "
              f"misses by guess {misses}, the slowest row reads the row {slowest} times")


if __name__ == "__main__":
    main()
