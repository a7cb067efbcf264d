"""An independent numpy model of the top-k contract, and the inputs that stress it.

The model never looks at bit patterns to rank: it maps every element to an integer rank
(numerically equal values share one, -0.0 and +0.0 included; every NaN shares the top rank) and
takes a stable sort of the ranks, so ties keep index order. Values are gathered as raw bits, so
NaN payloads and zero signs survive exactly as rule 5 demands.
"""

import numpy as np
import ml_dtypes

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
FLOAT_DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BFLOAT16, np.dtype(np.float64)]
INT_DTYPES = [np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.int32, np.int64)]
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES

# (exponent bits, mantissa bits) of each float format.
FLOAT_LAYOUT = {"float16": (5, 10), "bfloat16": (8, 7), "float32": (8, 23), "float64": (11, 52)}


def is_float(dtype) -> bool:
    return np.dtype(dtype).name in FLOAT_LAYOUT


def bits(a: np.ndarray) -> np.ndarray:
    """The raw bit patterns of an array, for exact comparisons of floats."""
    a = np.ascontiguousarray(a)
    return a.view(f"u{a.itemsize}")


def ranks(x: np.ndarray) -> np.ndarray:
    """Integer ranks in the contract's order (rule 2), same shape as x."""
    if is_float(x.dtype):
        with np.errstate(invalid="ignore"):  # signalling NaNs quieten, harmlessly here
            wide = x.astype(np.float64)
        nan = np.isnan(wide)
        wide = np.where(nan, 0.0, wide) + 0.0  # -0.0 + 0.0 is +0.0
        distinct, inverse = np.unique(wide, return_inverse=True)
        return np.where(nan, len(distinct), inverse.reshape(x.shape))
    distinct, inverse = np.unique(x.astype(np.int64), return_inverse=True)
    return inverse.reshape(x.shape)


def stable_order(x: np.ndarray, dim: int, largest: bool) -> np.ndarray:
    """Indices of a stable sort along dim (rule 3), descending when largest."""
    r = ranks(x)
    return np.argsort(-r if largest else r, axis=dim, kind="stable")


def gather(x: np.ndarray, indices: np.ndarray, dim: int) -> np.ndarray:
    """take_along_axis on the raw bits, so no float conversion can touch a NaN payload."""
    return np.take_along_axis(bits(x), indices, axis=dim).view(x.dtype)


def reference_topk(x, k: int, dim: int = -1, largest: bool = True, order=None):
    """The contract's sorted (values, indices); `order` may pass a precomputed stable_order."""
    x = np.asarray(x)
    if x.ndim == 0:
        if k not in (0, 1) or dim not in (0, -1):
            raise ValueError("0-d input takes k in {0, 1} and dim in {0, -1}")
        return x.copy(), np.array(0, dtype=np.int64)
    if order is None:
        order = stable_order(x, dim, largest)
    indices = np.take(order, np.arange(k), axis=dim).astype(np.int64)
    return gather(x, indices, dim), indices


# ---- inputs ---------------------------------------------------------------------------------


def float_specials(dtype) -> np.ndarray:
    """NaNs of both signs and several payloads (quiet, signalling, all-ones, odd), infinities,
    signed zeros, the smallest subnormals and the largest finite values, as dtype."""
    dtype = np.dtype(dtype)
    exp_bits, mant_bits = FLOAT_LAYOUT[dtype.name]
    width = 1 + exp_bits + mant_bits
    sign = 1 << (width - 1)
    exp_all = ((1 << exp_bits) - 1) << mant_bits
    quiet = 1 << (mant_bits - 1)
    mant_all = (1 << mant_bits) - 1
    magnitudes = [exp_all | quiet, exp_all | 1, exp_all | mant_all, exp_all | quiet | 0x5,
                  exp_all, 0, 1, exp_all - 1]
    patterns = magnitudes + [m | sign for m in magnitudes]
    return np.array(patterns, dtype=f"u{dtype.itemsize}").view(dtype)


def int_specials(dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    return np.array(sorted({info.min, info.min + 1, -1 if info.min < 0 else 2, 0, 1,
                            info.max - 1, info.max}), dtype=dtype)


def random_values(rng, shape, dtype, kind: str) -> np.ndarray:
    """kind: "spread" (wide, mostly distinct), "ties" (a handful of values) or "specials"
    (ties mixed with NaN/inf/zero/extreme patterns)."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64))
    if kind == "spread":
        if is_float(dtype):
            data = (rng.standard_normal(size) * 100).astype(dtype)
        else:
            info = np.iinfo(dtype)
            data = rng.integers(info.min, info.max, size=size, dtype=dtype, endpoint=True)
    elif kind == "ties":
        low = 0 if dtype.kind == "u" else -3
        data = rng.integers(low, low + 7, size=size).astype(dtype)
    elif kind == "specials":
        low = 0 if dtype.kind == "u" else -2
        data = rng.integers(low, low + 4, size=size).astype(dtype)
        pool = float_specials(dtype) if is_float(dtype) else int_specials(dtype)
        mask = rng.random(size) < 0.3
        picks = rng.integers(0, len(pool), size=int(mask.sum()))
        bits(data)[mask] = bits(pool)[picks]  # as bits: no float move may quiet a NaN
    else:
        raise ValueError(kind)
    return data.reshape(shape)


def distinct_values(rng, rows: int, n: int, dtype) -> np.ndarray:
    """Tie-free, NaN-free [rows, n] data: each row a permutation of integers the dtype holds
    exactly (n <= 256 for the 8-bit types and bfloat16, n <= 2048 for float16)."""
    dtype = np.dtype(dtype)
    exact_limit = {1: 256}.get(dtype.itemsize, 1 << 53)
    exact_limit = {"bfloat16": 256, "float16": 2048}.get(dtype.name, exact_limit)
    assert n <= exact_limit, (dtype, n)
    span = np.arange(n) - (0 if dtype.kind == "u" else n // 2)
    return np.stack([rng.permutation(span) for _ in range(rows)]).astype(dtype)
