#!/usr/bin/env python3
"""Replays the CUDA top-k filter's sampled guess (lib/cuda/sampling_rows.cuh, gather_top_bins and
its cluster twin) in numpy on the peers benchmark's own float32 logits (bench/gpu/c_abi_bench.hpp's
generator and bench/peers/sampling.cu's seeds), and prints which rows miss which guess.

    python3 bench/gpu/guess_replay.py ROWS N K BLOCKS [bf16]     e.g. 64 262144 50 2, 64 262144 per-row 2 bf16

A model of the kernel's rule, not the kernel: the numbers it gives (row 35 of 64x262144 at k = 50,
about one first guess in eight missing at k = 1024 on 262144 tokens) are why a batch waits."""
import math
import sys

import numpy as np

CAPACITY, SAMPLE_KEYS, SAMPLE_RUN, GUESSES = 2048, 4096, 32, 3
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


def replay_row(row, k, blocks, n):
    """The guesses that miss on one row: (guess, rank, gathered) each."""
    keys = SAMPLE_KEYS // blocks // SAMPLE_RUN * SAMPLE_RUN
    sampled, size = keys * blocks, n // blocks
    j = np.arange(keys)
    target = int(math.sqrt(k * CAPACITY))
    prefixes = key_prefixes(row)
    stride = size // (keys // SAMPLE_RUN)
    sample = np.sort(np.concatenate(
        [prefixes[b * size + (j // SAMPLE_RUN) * stride + j % SAMPLE_RUN] for b in range(blocks)]))[::-1]
    rank = max((target * sampled + n - 1) // n, min(LEAST_FIRST_RANK, CAPACITY // 2 * sampled // n))
    missed = []
    for guess in range(GUESSES if k <= SURE_GUESS_MOST_K else 1):
        prefix = sample[rank - 1]
        before, at_or_above = int((sample > prefix).sum()), int((sample >= prefix).sum())
        gathered = int((prefixes >= prefix).sum())
        if k <= gathered <= CAPACITY:
            break
        missed.append((guess, rank, gathered))
        step = at_or_above + int((target - gathered) * sampled / n)
        if gathered > CAPACITY:
            rank = min(max(step, 1), before) if before else 0
        else:
            rank = (at_or_above + 1 if step <= at_or_above else min(step, sampled)) if at_or_above < sampled else 0
        if rank == 0:
            break
    return missed


def reads_of_row(k, misses, guesses_from_sample):
    """Reads of its slice the row's gather takes: one a guess; where every guess missed, the
    histogram's count (unless the guess's read counted it, k above SURE_GUESS_MOST_K) and gather."""
    if not guesses_from_sample:
        return 2
    guesses = len(misses) + (0 if misses and len(misses) == (GUESSES if k <= SURE_GUESS_MOST_K else 1) else 1)
    if guesses > len(misses):
        return guesses
    return guesses + (1 if k > SURE_GUESS_MOST_K else 2)


def main():
    rows, n, blocks = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[4])
    bf16 = sys.argv[5:] == ["bf16"]
    top_k = benchmark_top_k(rows, sys.argv[3])
    buffers = 4 if rows * n * (2 if bf16 else 4) <= L2_BYTES else 1
    sampled_rows = n // blocks >= 4 * SAMPLE_KEYS
    for buffer in range(buffers):
        misses, slowest = [0] * GUESSES, 0
        logits = benchmark_logits(rows, n, buffer)
        for r, row in enumerate(bfloat16_rounded(logits) if bf16 else logits):
            k = top_k[r]
            guessed = sampled_rows and k <= CAPACITY // 2
            missed = replay_row(row, k, blocks, n) if guessed else []
            for guess, rank, gathered in missed:
                misses[guess] += 1
                print(f"buffer {buffer} row {r} (k {k}): guess {guess} at rank {rank} gathered {gathered}")
            slowest = max(slowest, reads_of_row(k, missed, guessed))
        print(f"{rows}x{n} {'bf16' if bf16 else 'f32'} k={sys.argv[3]} blocks={blocks} buffer {buffer} of "
              f"{buffers}: misses by guess {misses}, the slowest row reads its slice {slowest} times")


if __name__ == "__main__":
    main()
