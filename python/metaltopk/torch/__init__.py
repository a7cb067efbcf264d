"""metaltopk for PyTorch programs: torch ops, torch tensors, export and AOTInductor.

Importing metaltopk imports this module when torch is importable. Then:

- `torch.ops.metaltopk.mtk_topk(x, k, dim=-1, largest=True, sorted=True)` stands in for
  torch.topk (same schema, autograd like torch.topk's), and
  `torch.ops.metaltopk.mtk_moe_route(logits, k, scoring="softmax", bias=None, n_group=0,
  topk_group=0, renormalize=True, scale=1.0, index_dtype=torch.int32)` is the fused router; both
  have CPU and CUDA kernels and fake kernels, so they work under torch.compile(fullgraph=True),
  torch.export and CUDA graph capture.
- `torch.ops.metaltopk.mtk_topk_ragged(x, k, lengths, starts=None, dim=-1, largest=True,
  sorted=True, return_values=True)`, `mtk_topk_ragged_transform(scores, offsets, lengths, k)` and
  `mtk_topk_page_table_transform(scores, src_page_table, lengths, k, row_to_batch=None,
  page_size=1)` are the ragged rows of sparse attention (docs/CONTRACT.md), with fake kernels
  and AOTInductor shims as well.
- `mtk_top_k_mask_logits`, `mtk_renorm_probs`, `mtk_sample` and `mtk_sample_from_logits` are
  the sampling filters and sampler (docs/CONTRACT.md, "Sampling filters"; schemas in
  _sampling.py), each per-row argument a `Tensor?` and a scalar; metaltopk.sampling calls them
  on torch tensors, with fake kernels and AOTInductor shims too.
- `metaltopk.topk` and `metaltopk.moe_route` take torch tensors on any device and return torch
  tensors on the same device; outputs and scratch come from torch's allocator.
- `replace_topk(exported_program)` rewrites an exported program's aten.topk (and, optionally,
  the softmax -> topk -> renormalise router pattern) into these ops.
- `aoti_config()` is the AOTInductor configuration that makes a compiled model call the C shim
  library `libmetaltopk_aoti` directly (adapters/aoti/).
"""

import torch

from . import _ops, _sampling, _tensors  # noqa: F401  (define the ops)
from ._aoti import AOTI_LIBRARY_NAME, aoti_config, aoti_library_path, load_aoti_library
from ._export import replace_topk



class TorchArrays(_tensors.TorchArrays):
    """The handler metaltopk/__init__.py registers for torch tensors: top-k, ragged rows and the
    router (_tensors.py), and metaltopk.sampling's functions (_sampling.py, which imports
    metaltopk.sampling and so cannot be imported by it)."""

    sampling = staticmethod(_sampling.front_door)


# What metaltopk/__init__.py registers TorchArrays for, and the type of traced sizes.
TENSOR_TYPE = torch.Tensor
SYMBOLIC_INT_TYPE = torch.SymInt
topk_op = torch.ops.metaltopk.mtk_topk.default
moe_route_op = torch.ops.metaltopk.mtk_moe_route.default
topk_ragged_op = torch.ops.metaltopk.mtk_topk_ragged.default
topk_ragged_transform_op = torch.ops.metaltopk.mtk_topk_ragged_transform.default
topk_page_table_transform_op = torch.ops.metaltopk.mtk_topk_page_table_transform.default
top_k_mask_logits_op = _sampling.mask_logits_op
renorm_probs_op = _sampling.renorm_probs_op
sample_op = _sampling.sample_op
sample_from_logits_op = _sampling.sample_from_logits_op

__all__ = ["topk_op", "moe_route_op", "topk_ragged_op", "topk_ragged_transform_op",
           "topk_page_table_transform_op", "top_k_mask_logits_op", "renorm_probs_op",
           "sample_op", "sample_from_logits_op", "replace_topk", "aoti_config", "aoti_library_path",
           "load_aoti_library", "AOTI_LIBRARY_NAME"]
