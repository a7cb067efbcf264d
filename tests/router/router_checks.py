"""Shared by the router tests: input generators, the backends to run, and the comparison of a
result with the float64 reference (router_reference.py)."""

import ml_dtypes
import numpy as np

import metaltopk
import router_reference as ref

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
LOGIT_DTYPES = [np.dtype(np.float32), np.dtype(np.float16), BFLOAT16]

# Weights are float32 results of exp, divisions and sums (S over up to 512 experts, U over k):
# each within a few ulp of float64, so 2e-6 relative with a floor for underflowed weights. U is
# summed left to right in float32, whose error grows with k by up to an ulp per term.
WEIGHT_RTOL = 2e-6
WEIGHT_ATOL = 1e-30


def weight_rtol(k):
    return WEIGHT_RTOL + k * 6e-8

# Grouping per expert count: (n_group, topk_group). Includes single-expert groups and more
# groups than a warp has lanes, which the CUDA kernel stores in several register slots.
GROUPINGS = {
    8: [(4, 2), (8, 5)],
    64: [(8, 3), (64, 10)],
    128: [(8, 4), (4, 4)],
    256: [(8, 4), (64, 12)],
    512: [(16, 4), (128, 5)],
}


def available_backends():
    return [name for name, state in metaltopk.backends().items()
            if state["available"] and name in ("cpu", "cuda")]


def make_logits(rng, tokens, experts, dtype, kind="normal", layout="contiguous"):
    """[tokens, experts] logits. kind "normal": spread values (few exact ties, except the ones
    bf16/f16 rounding makes); "ties": small integers, so most experts tie with others.
    layout "strided": every other expert of every other row of a wider array."""
    if kind == "normal":
        values = rng.standard_normal((tokens, experts)) * 2.0
    elif kind == "ties":
        values = rng.integers(-3, 4, size=(tokens, experts)).astype(np.float64)
    else:
        raise ValueError(kind)
    if layout == "contiguous":
        return values.astype(dtype)
    if layout == "strided":
        wide = np.zeros((2 * tokens, 2 * experts + 1), dtype=dtype)
        view = wide[::2, 1::2]
        view[...] = values.astype(dtype)
        return view
    if layout == "transposed":  # expert stride = tokens
        return np.ascontiguousarray(values.T.astype(dtype)).T
    raise ValueError(layout)


def make_bias(rng, experts, kind="normal"):
    if kind == "ties":
        return rng.choice([0.0, 0.25, 0.5], size=experts).astype(np.float32)
    return (rng.standard_normal(experts) * 0.5).astype(np.float32)


def check_route(weights, ids, logits, k, *, scoring="softmax", bias=None, n_group=None,
                topk_group=None, renormalize=True, scale=1.0):
    """Asserts (weights, ids) against the reference: ids exactly, except where the reference
    finds a near-tie (router_reference.NEAR_TIE_RTOL) that float32 rounding may resolve either
    way; there the ids must still be a valid answer under that tolerance. Weights must match the
    reference's weights of the ids returned. Returns the number of near-tie tokens."""
    weights = np.asarray(weights)
    ids = np.asarray(ids)
    tokens = logits.shape[0]
    assert weights.shape == (tokens, k) and weights.dtype == np.float32
    assert ids.shape == (tokens, k)
    routes = ref.route(np.asarray(logits).astype(np.float64), k, scoring, bias, n_group,
                       topk_group, renormalize, scale)
    near_ties = 0
    for t, route in enumerate(routes):
        got = ids[t].astype(np.int64)
        if not route.near_tie:
            np.testing.assert_array_equal(got, route.ids, err_msg=f"token {t}")
        else:
            near_ties += 1
            _check_near_tie_route(got, route, t)
        rtol = weight_rtol(k)
        if renormalize:
            # U = sum of the selected u; signed u ("none" scoring) can cancel, and float32
            # rounding of the terms then grows by sum|u| / |U| relative to U.
            chosen = route.u[got]
            with np.errstate(all="ignore"):
                condition = np.abs(chosen).sum() / abs(chosen.sum())
            if np.isfinite(condition):
                rtol *= max(1.0, condition)
        np.testing.assert_allclose(
            weights[t], ref.weights_for(got, route.u, route.s, renormalize, scale),
            rtol=rtol, atol=WEIGHT_ATOL, equal_nan=True, err_msg=f"token {t}")
    return near_ties


def _within(a, b):
    return (np.isnan(a) and np.isnan(b)) or a == b or ref.scores_near_tie(a, b)


def _check_near_tie_route(got, route, t):
    assert len(set(got.tolist())) == got.size, f"token {t}: repeated ids {got}"
    if route.group_near_tie:
        # Any group within tolerance of the last kept one may have been kept instead.
        size = route.selection.size // route.group_scores.size
        for e in got:
            score = route.group_scores[e // size]
            assert (score >= route.kept_group_floor or np.isnan(score)
                    or _within(score, route.kept_group_floor)), f"token {t}: expert {e}"
        return
    assert route.eligible[got].all(), f"token {t}: ids {got} outside the kept groups"
    for r, e in enumerate(got):
        assert _within(route.selection[e], route.selection[route.ids[r]]), (
            f"token {t} rank {r}: expert {e} ({route.selection[e]}) vs "
            f"{route.ids[r]} ({route.selection[route.ids[r]]})")
