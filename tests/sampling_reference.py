"""An independent model of docs/CONTRACT.md's "Sampling filters", for tests/test_sampling.py.

Row by row in Python: masses as exact integers (a float32 times 2^149 is one) and Fractions for
top_p, min_p and the uniforms, so every sum and comparison is exact; the orders by sorting tuples;
float32 results by numpy's own (IEEE) float32 arithmetic or by rounding a Fraction to the nearest
float32. The softmax's exp is float64's, rounded to float32: the library's integer exp is meant
to equal it (tests/sampling/test_sampling_math.cpp measures how close it is).
"""

import math
from fractions import Fraction

import numpy as np

MAX_MASS = 2.0 ** 64
LARGEST_BELOW_ONE = float(np.nextafter(np.float32(1), np.float32(0)))


def f32(x):
    return np.float32(x)


def is_subnormal_or_zero(x):
    return x == 0 or abs(float(x)) < 2.0 ** -126


def flush(x):
    """Subnormal float32 as a zero of its sign."""
    x = f32(x)
    if not math.isnan(x) and abs(float(x)) < 2.0 ** -126:
        return f32(math.copysign(0.0, float(x)))
    return x


def units(mass):
    """A float32 mass as an exact integer count of 2^-149."""
    return int(math.ldexp(float(mass), 149))


def round_to_f32(value: Fraction):
    """The float32 nearest to a non-negative Fraction, ties to even."""
    if value == 0:
        return f32(0)
    guess = f32(float(value))  # within one float32 step of the answer
    candidates = [np.nextafter(guess, f32(0)), guess, np.nextafter(guess, f32(np.inf))]
    best = None
    for c in candidates:
        if not np.isfinite(c):
            continue
        distance = abs(Fraction(float(c)) - value)
        even = (int(np.array(c, np.float32).view(np.uint32)) & 1) == 0
        key = (distance, not even)
        if best is None or key < best[0]:
            best = (key, c)
    return f32(best[1])


def probability_mass(p):
    p = float(p)
    if math.isnan(p) or p <= 0:
        return f32(0)
    return f32(min(p, MAX_MASS))


def logit_rank(x, i):
    """Sort key of the top-k contract: NaN first, then larger values, ties to the lower index."""
    x = float(x)
    return (0, 0.0, i) if math.isnan(x) else (1, -x, i)


def mass_rank(m, i):
    return (-float(m), i)


def top_k_filters(k, n):
    return 0 < k < n


def top_p_filters(top_p):
    return not math.isnan(top_p) and top_p < 1


def min_p_filters(min_p):
    return not math.isnan(min_p) and min_p > 0


def temperature_samples(t):
    return not math.isnan(t) and t > 0 and not is_subnormal_or_zero(f32(t))


def mask_logits(row, k):
    """top_k_mask_logits of one row (a float32/float16/bfloat16 array): the output row."""
    n = len(row)
    out = np.full(n, -np.inf, dtype=row.dtype)
    if not top_k_filters(k, n):
        return row.copy()
    widened = row.astype(np.float32)
    kept = sorted(range(n), key=lambda i: logit_rank(widened[i], i))[:k]
    out[kept] = row[kept]
    return out


def _filter(masses, top_k, top_p, min_p, top_k_on_masses):
    """Masses after top-k (on the masses, when top_k_on_masses), top-p, then min-p."""
    n = len(masses)
    masses = list(masses)
    if top_k_on_masses and top_k_filters(top_k, n):
        kept = set(sorted(range(n), key=lambda i: mass_rank(masses[i], i))[:top_k])
        masses = [m if i in kept else f32(0) for i, m in enumerate(masses)]
    total = sum(units(m) for m in masses)
    if top_p_filters(top_p) and total:
        target = Fraction(float(max(f32(top_p), f32(0)))) * total
        order = sorted((i for i in range(n) if masses[i] > 0),
                       key=lambda i: mass_rank(masses[i], i))
        prefix, count = 0, 0
        for i in order:
            prefix += units(masses[i])
            count += 1
            if prefix >= target:
                break
        for i in order[count:]:
            masses[i] = f32(0)
    if min_p_filters(min_p):
        fraction = Fraction(float(min(f32(min_p), f32(1))))
        least = fraction * units(max(masses))
        masses = [m if units(m) >= least else f32(0) for m in masses]
    return masses


def renorm_probs(row, top_k=0, top_p=1.0, min_p=0.0):
    masses = _filter([probability_mass(p) for p in row], top_k, top_p, min_p, True)
    total = sum(units(m) for m in masses)
    if total == 0:
        return np.zeros(len(row), np.float32)
    s = round_to_f32(Fraction(total, 2 ** 149))
    return np.array([f32(m) / s if m > 0 else f32(0) for m in masses], np.float32)


def _draw(masses, uniform):
    total = sum(units(m) for m in masses)
    u = float(uniform)
    u = 0.0 if math.isnan(u) or u < 0 else min(u, LARGEST_BELOW_ONE)
    threshold = Fraction(u) * total
    cumulative = 0
    for i, m in enumerate(masses):
        cumulative += units(m)
        if m > 0 and cumulative > threshold:
            return i
    raise AssertionError("no token: the total was 0")


def sample(row, uniform, top_k=0, top_p=1.0, min_p=0.0):
    masses = _filter([probability_mass(p) for p in row], top_k, top_p, min_p, True)
    if sum(units(m) for m in masses) == 0:
        return 0
    return _draw(masses, uniform)


def softmax_masses(row, top_k, temperature):
    """The masses of one row of logits at a sampling temperature, top-k (on the logits)
    applied."""
    n = len(row)
    widened = row.astype(np.float32)
    kept = set(range(n))
    if top_k_filters(top_k, n):
        kept = set(sorted(range(n), key=lambda i: logit_rank(widened[i], i))[:top_k])
    reciprocal = flush(f32(1) / f32(temperature))
    with np.errstate(all="ignore"):
        z = [flush(flush(widened[i]) * reciprocal) if i in kept else f32(np.nan)
             for i in range(n)]
    finite = [v for v in z if not math.isnan(v)]
    if not finite or max(finite) == -np.inf:
        return [f32(0)] * n
    most = max(finite)
    if most == np.inf:
        return [f32(1) if v == np.inf else f32(0) for v in z]
    masses = []
    for v in z:
        if math.isnan(v):
            masses.append(f32(0))
            continue
        with np.errstate(all="ignore"):
            gap = abs(float(flush(most - v)))
        masses.append(f32(0) if gap >= 110 else round_to_f32(Fraction(math.exp(-gap))))
    return masses


def sample_from_logits(row, uniform, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    widened = row.astype(np.float32)
    top1 = min(range(len(row)), key=lambda i: logit_rank(widened[i], i))
    if not temperature_samples(temperature):
        return top1
    masses = softmax_masses(row, top_k, temperature)
    masses = _filter(masses, top_k, top_p, min_p, False)
    if sum(units(m) for m in masses) == 0:
        return top1
    return _draw(masses, uniform)
