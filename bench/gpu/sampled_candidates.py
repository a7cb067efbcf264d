"""What the sampled threshold leaves on bench_c_abi's input of a one-row select, computed on the
host: the sampled threshold, the candidates at or above it, and the k-th key's bin among
them. The CUDA notes read the finish kernel's timings against these counts (its one block reads
every candidate when the row goes to it directly).

The input is bench_c_abi's (c_abi_bench.hpp: standard_normal, bf16 rounded to nearest even);
the sample is multi_sample_kernel's (runs of 32 adjacent elements centred in equal strata); the
rank and whether the wide sample is split over blocks are topk_plan.cpp's. Bins are whole keys, as when the threshold pass's key shift is 0; the
script says when it would not be.

Usage: sampled_candidates.py N K {bfloat16,float32} [SAMPLES]   (SAMPLES: 16384, the wide sample)
"""
import math
import sys

import numpy as np


def splitmix64(x):
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def harness_input(n, k, rows=1, buffer=0):
    """bench_c_abi's random_input for shape (rows, n, k), its first input buffer."""
    seed = np.uint64((rows * 31 + n + k) * 8 + buffer)
    with np.errstate(over="ignore"):
        r = splitmix64(seed * np.uint64(0x100000001B3) + np.arange(n, dtype=np.uint64))
    u1 = ((r >> np.uint64(40)).astype(np.float64) + 1.0) / 16777217.0
    u2 = (r & np.uint64(0xFFFFFF)).astype(np.float64) / 16777216.0
    return (np.sqrt(-2.0 * np.log(u1)) * np.cos(6.283185307179586 * u2)).astype(np.float32)


def largest_keys(values, dtype):
    """selection_key for largest=True of NaN-free data (+-0 aside, which do not reach the top)."""
    bits = values.view(np.uint32).astype(np.uint64)
    if dtype == "bfloat16":
        bits = (bits + 0x7FFF + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)
        sign, mask = 0x8000, 0xFFFF
    else:
        sign, mask = 0x80000000, 0xFFFFFFFF
    return np.where(bits & np.uint64(sign), ~bits & np.uint64(mask), bits | np.uint64(sign))


def sample_threshold(sample, rank, key_bits, digit_bits=8):
    """multi_sample_kernel's radix rounds: the lower edge of the narrowest bucket holding the
    rank-th largest sample key (rounds stop once the whole bucket ranks within `rank`)."""
    prefix, resolved, needed = 0, 0, rank
    while resolved < key_bits:
        shift = key_bits - resolved - digit_bits
        in_play = sample if resolved == 0 else sample[(sample >> np.uint64(shift + digit_bits)) == prefix]
        counts = np.bincount(((in_play >> np.uint64(shift)) & np.uint64(0xFF)).astype(np.int64),
                             minlength=256)
        above = 0
        for digit in range(255, -1, -1):
            if above + counts[digit] >= needed:
                break
            above += counts[digit]
        prefix = (prefix << digit_bits) | digit
        resolved += digit_bits
        needed -= above
        if counts[digit] == needed:
            break
    return np.uint64(prefix << (key_bits - resolved))


def main():
    n, k, dtype = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    samples = int(sys.argv[4]) if len(sys.argv) > 4 else 16384
    keys = largest_keys(harness_input(n, k), dtype)
    runs = samples // 32
    centres = (2 * np.arange(runs, dtype=np.int64) + 1) * n // (2 * runs)
    starts = np.clip(centres - 16, 0, n - 32)
    sample = np.sort(keys[(starts[:, None] + np.arange(32)).ravel()])[::-1]
    m = k * samples / n
    rank = math.ceil(m + 4 * math.sqrt(m) + 8)
    # One row's wide sample of rank <= 16 is split over blocks, whose merge gives the rank-th
    # sample key itself; one block gives the lower edge of its bucket.
    split = samples == 16384 and rank <= 16
    threshold = sample[rank - 1] if split else sample_threshold(
        sample, rank, 16 if dtype == "bfloat16" else 32)
    span = int(sample[0]) - int(threshold)
    shift = max(0, span.bit_length() - 9)
    candidates = keys[keys >= threshold]
    kth = np.sort(candidates)[::-1][k - 1]
    above = candidates[candidates > kth]
    _, sizes = np.unique(above, return_counts=True)
    print(f"rank {rank} of {samples} samples{' (split)' if split else ''}; threshold key {int(threshold):#x}, "
          f"key shift {shift}{'' if shift == 0 else ' (bins are not whole keys: counts below are per key)'}")
    print(f"candidates {candidates.size} ({candidates.size * 8} bytes of 64-bit composites)")
    print(f"k-th key {int(kth):#x}: {int((candidates == kth).sum())} elements, {above.size} above it "
          f"in {sizes.size} keys (largest {sizes.max()}, sum of squared sizes {int((sizes ** 2).sum())})")


if __name__ == "__main__":
    main()
