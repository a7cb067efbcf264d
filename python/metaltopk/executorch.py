"""metaltopk.executorch: metaltopk as the top-k fallback of ExecuTorch's AOTInductor backends.

The public name of metaltopk.torch.executorch, which holds the code (everything that imports
torch lives under metaltopk/torch/): both names are the same module. Importing it imports torch.
"""

import sys

from .torch import executorch as _executorch

sys.modules[__name__] = _executorch
