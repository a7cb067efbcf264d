"""An independent float64 numpy model of the router (lib/core/router_semantics.md), and the rule
that says where float32 rounding may legitimately change which experts win.

The model follows the same steps as the library (scores, selection scores, groups, top-k,
weights) one token at a time, ranking with a stable lexicographic sort on (NaN flag, value,
index) instead of ordered keys.
"""

from dataclasses import dataclass
from typing import Optional

import numpy as np

# Two float64 selection scores closer than this (relative) may swap order once computed in
# float32: exp and division are within a few ulp (1 ulp = 1.2e-7) and sums of up to 512 terms
# add a few more. Exactly equal scores are not near-ties: they come from identical inputs, which
# every implementation maps to identical bits, and the lower index wins everywhere.
NEAR_TIE_RTOL = 4e-6
NEAR_TIE_ATOL = 1e-30


def ranking(values: np.ndarray) -> np.ndarray:
    """Indices of `values` best first: NaN above everything, then larger values, ties (and
    -0.0 == +0.0) to the lower index."""
    nan = np.isnan(values)
    finite = np.where(nan, 0.0, values)
    index = np.arange(values.size)
    # lexsort's last key is the primary one.
    return np.lexsort((index, -finite, ~nan))


def scores_near_tie(a: float, b: float) -> bool:
    if np.isnan(a) or np.isnan(b) or a == b:
        return False
    return abs(a - b) <= NEAR_TIE_RTOL * max(abs(a), abs(b)) + NEAR_TIE_ATOL


@dataclass
class TokenRoute:
    ids: np.ndarray          # [k] int64, output order
    weights: np.ndarray      # [k] float64
    group_near_tie: bool     # float32 rounding could change which groups are kept
    expert_near_tie: bool    # ... or which experts win, or their order
    u: np.ndarray            # [E] weight numerators
    s: np.ndarray            # [E] scores
    selection: np.ndarray    # [E] what experts are ranked by (x on the plain path, else c)
    eligible: np.ndarray     # [E] bool: in a kept group
    group_scores: Optional[np.ndarray]  # [n_group] when grouped
    kept_group_floor: float  # the last kept group's score; -inf when ungrouped

    @property
    def near_tie(self) -> bool:
        return self.group_near_tie or self.expert_near_tie


def _boundary_near_tie(sorted_scores: np.ndarray, count: int, sorted_origins) -> bool:
    """Whether any of the first count+1 ranked scores are near-ties of their neighbour: then
    which `count` win, or their order, depends on rounding. Scores equal in float64 but computed
    from different terms (s(1) + 0.5 + s(-3) against s(-3) + 0.5 + s(1) in another order, or
    s(x) + b against s(y) + b') are near-ties too: float32 implementations round them apart."""
    # A winner's score is compared with every later score equal or near to it, not only the
    # next one: a run of equal scores of which only some share the winner's terms can reorder.
    for r in range(min(count, sorted_scores.size)):
        for later in range(r + 1, sorted_scores.size):
            a, b = sorted_scores[r], sorted_scores[later]
            if scores_near_tie(a, b):
                return True
            if a != b:
                break
            if sorted_origins[r] != sorted_origins[later]:
                return True
    return False


def route_token(x: np.ndarray, k: int, scoring: str, bias: Optional[np.ndarray], n_group: int,
                topk_group: int, renormalize: bool, scale: float) -> TokenRoute:
    x = x.astype(np.float64)
    experts = x.size
    with np.errstate(all="ignore"):
        if scoring == "softmax":
            m = np.nan if np.isnan(x).any() else x.max()
            u = np.exp(x - m)
            s = u / u.sum()
        elif scoring == "sigmoid":
            u = s = 1.0 / (1.0 + np.exp(-x))
        else:
            u = s = x.copy()
        plain = bias is None and n_group <= 1
        selection = x if plain else (s + bias.astype(np.float64) if bias is not None else s)
    # What each selection score is computed from: equal inputs give equal float32 bits anywhere.
    bias_terms = bias.astype(np.float64) if bias is not None else np.zeros(experts)
    origins = [(float(xe), float(be)) for xe, be in zip(x, bias_terms)]
    eligible = np.ones(experts, dtype=bool)
    group_near_tie = expert_near_tie = False
    group_scores = None
    kept_floor = -np.inf
    if n_group > 1:
        size = experts // n_group
        group_scores = np.empty(n_group)
        group_origins = []
        for g in range(n_group):
            members = selection[g * size:(g + 1) * size]
            best_members = ranking(members)[:2]
            group_scores[g] = members[best_members].sum()
            group_origins.append(tuple(sorted(origins[g * size + m] for m in best_members)))
        group_order = ranking(group_scores)
        kept = group_order[:topk_group]
        eligible[:] = False
        for g in kept:
            eligible[g * size:(g + 1) * size] = True
        group_near_tie = _boundary_near_tie(group_scores[group_order], topk_group,
                                            [group_origins[g] for g in group_order])
        kept_floor = group_scores[group_order[topk_group - 1]]
    candidates = np.flatnonzero(eligible)
    order = candidates[ranking(selection[candidates])]
    ids = order[:k]
    if not plain:
        expert_near_tie = _boundary_near_tie(selection[order], k, [origins[e] for e in order])
    return TokenRoute(ids=ids, weights=weights_for(ids, u, s, renormalize, scale),
                      group_near_tie=group_near_tie, expert_near_tie=expert_near_tie, u=u, s=s,
                      selection=selection, eligible=eligible, group_scores=group_scores,
                      kept_group_floor=kept_floor)


def weights_for(ids: np.ndarray, u: np.ndarray, s: np.ndarray, renormalize: bool,
                scale: float) -> np.ndarray:
    with np.errstate(all="ignore"):
        if renormalize:
            return u[ids] / u[ids].sum() * scale
        return s[ids] * scale


def route(logits: np.ndarray, k: int, scoring: str = "softmax", bias=None, n_group=None,
          topk_group=None, renormalize: bool = True, scale: float = 1.0):
    """The reference for every token: (list of TokenRoute)."""
    n_group = n_group or 1
    topk_group = topk_group if n_group > 1 else 1
    return [route_token(np.asarray(row, dtype=np.float64), k, scoring, bias, n_group, topk_group,
                        renormalize, scale) for row in logits]
