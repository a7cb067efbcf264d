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
- `metaltopk.topk` and `metaltopk.moe_route` take torch tensors on any device and return torch
  tensors on the same device; outputs and scratch come from torch's allocator.
- `replace_topk(exported_program)` rewrites an exported program's aten.topk (and, optionally,
  the softmax -> topk -> renormalise router pattern) into these ops.
- `aoti_config()` is the AOTInductor configuration that makes a compiled model call the C shim
  library `libmetaltopk_aoti` directly (adapters/aoti/).
"""

import torch

from . import _ops  # noqa: F401  (defines the ops)
from ._tensors import TorchArrays
from ._aoti import AOTI_LIBRARY_NAME, aoti_config, aoti_library_path, load_aoti_library
from ._export import replace_topk

# What metaltopk/__init__.py registers TorchArrays for, and the type of traced sizes.
TENSOR_TYPE = torch.Tensor
SYMBOLIC_INT_TYPE = torch.SymInt
topk_op = torch.ops.metaltopk.mtk_topk.default
moe_route_op = torch.ops.metaltopk.mtk_moe_route.default
topk_ragged_op = torch.ops.metaltopk.mtk_topk_ragged.default
topk_ragged_transform_op = torch.ops.metaltopk.mtk_topk_ragged_transform.default
topk_page_table_transform_op = torch.ops.metaltopk.mtk_topk_page_table_transform.default

__all__ = ["topk_op", "moe_route_op", "topk_ragged_op", "topk_ragged_transform_op",
           "topk_page_table_transform_op", "replace_topk", "aoti_config", "aoti_library_path",
           "load_aoti_library", "AOTI_LIBRARY_NAME"]
