"""The torch composites the fused router replaces, shared by the tests and the benchmarks."""

import torch


def torch_softmax_composite(logits, k):
    """The composite the fused op replaces: softmax in float32, top-k, renormalise."""
    scores = torch.softmax(logits.float(), dim=-1)
    values, ids = torch.topk(scores, k, dim=-1)
    return values / values.sum(dim=-1, keepdim=True), ids.int()


def torch_deepseek_v3(logits, k, bias, n_group, topk_group, scale):
    """DeepSeek-V3's grouped router: sigmoid scores, bias for selection, groups by the sum of
    their top-2, weights from the unbiased scores, renormalised and scaled. Excluded experts are
    masked with -inf (the model masks with 0, equivalent for its positive scores)."""
    scores = torch.sigmoid(logits.float())
    choice = scores + bias
    tokens, experts = choice.shape
    group_scores = choice.view(tokens, n_group, -1).topk(2, dim=-1)[0].sum(dim=-1)
    kept = torch.topk(group_scores, topk_group, dim=-1)[1]
    group_mask = torch.zeros_like(group_scores).scatter_(1, kept, 1.0)
    expert_mask = group_mask.unsqueeze(-1).expand(tokens, n_group, experts // n_group)
    masked = choice.masked_fill(expert_mask.reshape(tokens, -1) == 0, float("-inf"))
    ids = torch.topk(masked, k, dim=-1)[1]
    weights = scores.gather(1, ids)
    weights = weights / weights.sum(dim=-1, keepdim=True) * scale
    return weights, ids.int()
