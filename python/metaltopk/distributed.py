"""metaltopk.distributed: top-k across the ranks of torch.distributed.

The public name of metaltopk.torch.distributed, which holds the code: everything that imports
torch lives under metaltopk/torch/. Importing this module imports torch.
"""

from .torch.distributed import topk

__all__ = ["topk"]
