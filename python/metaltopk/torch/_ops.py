"""The torch.library ops: metaltopk::mtk_topk and metaltopk::mtk_moe_route.

mtk_topk has torch.topk's schema and argument order, so it can stand in for aten.topk anywhere
(replace_topk does that to exported programs). The names carry the mtk_ prefix because
AOTInductor calls a custom op's C shim `aoti_torch_<device>_<op name>`, and libtorch already
exports `aoti_torch_cpu_topk`.

Each op has one kernel for every device (the kernels switch on the device themselves), a fake
kernel for tracing (torch.compile, export, meta tensors), and mtk_topk has torch.topk's autograd:
the gradient of the values goes to the selected positions.
"""

import torch

from . import _tensors

TOPK_SCHEMA = ("mtk_topk(Tensor self, SymInt k, int dim=-1, bool largest=True, "
               "bool sorted=True) -> (Tensor values, Tensor indices)")
MOE_ROUTE_SCHEMA = ("mtk_moe_route(Tensor logits, int k, str scoring=\"softmax\", "
                    "Tensor? bias=None, int n_group=0, int topk_group=0, bool renormalize=True, "
                    "float scale=1.0, ScalarType index_dtype=int) -> (Tensor weights, Tensor ids)")

# Kept for the life of the process: dropping a Library deregisters its ops.
_library = torch.library.Library("metaltopk", "DEF")
_library.define(TOPK_SCHEMA)
_library.define(MOE_ROUTE_SCHEMA)
_library.impl("mtk_topk", _tensors.topk_kernel, "CompositeExplicitAutograd")
_library.impl("mtk_moe_route", _tensors.moe_route_kernel, "CompositeExplicitAutograd")


def _topk_output_shape(self, k, dim, function="topk"):
    """The contract's checks on shapes alone, as the library makes them, for the fake kernel."""
    if self.dtype not in _tensors.DTYPE_NAMES:
        raise _tensors.unsupported_dtype(self.dtype, function)
    rank = max(self.dim(), 1)
    if not -rank <= dim < rank:
        raise IndexError(f"metaltopk.{function}: dim = {dim} is out of range for a tensor of "
                         f"{self.dim()} dimensions (expected [{-rank}, {rank - 1}])")
    dim %= rank
    size = self.shape[dim] if self.dim() else 1
    torch._check_value(k >= 0, lambda: f"metaltopk.{function}: k = {k} must not be negative")
    torch._check_value(k <= size, lambda: f"metaltopk.{function}: k = {k} exceeds the size "
                       f"{size} of dim {dim}")
    shape = list(self.shape)
    if shape:
        shape[dim] = k
    return shape


@torch.library.register_fake("metaltopk::mtk_topk")
def _topk_fake(self, k, dim=-1, largest=True, sorted=True):
    shape = _topk_output_shape(self, k, dim)
    return self.new_empty(shape), self.new_empty(shape, dtype=torch.int64)


@torch.library.register_fake("metaltopk::mtk_moe_route")
def _moe_route_fake(logits, k, scoring="softmax", bias=None, n_group=0, topk_group=0,
                    renormalize=True, scale=1.0, index_dtype=torch.int32):
    torch._check_value(logits.dim() == 2, lambda: "metaltopk.moe_route: logits.ndim = "
                       f"{logits.dim()} must be 2 ([tokens, experts])")
    torch._check_value(1 <= k <= logits.shape[1], lambda: f"metaltopk.moe_route: k = {k} must "
                       f"be in [1, {logits.shape[1]}]")
    shape = (logits.shape[0], k)
    return (logits.new_empty(shape, dtype=torch.float32),
            logits.new_empty(shape, dtype=index_dtype))


class _TopkFunction(torch.autograd.Function):
    """torch.topk's gradient: the values' gradient goes to the selected positions."""

    @staticmethod
    def forward(ctx, self, k, dim, largest, sorted):
        values, indices = torch.ops.metaltopk.mtk_topk.default(self, k, dim, largest, sorted)
        ctx.dim, ctx.input_shape = dim, self.shape
        ctx.mark_non_differentiable(indices)
        ctx.save_for_backward(indices)
        return values, indices

    @staticmethod
    def backward(ctx, grad_values, grad_indices):
        (indices,) = ctx.saved_tensors
        if not ctx.input_shape:  # 0-d: the value is the input itself
            return grad_values, None, None, None, None
        grad = grad_values.new_zeros(ctx.input_shape).scatter(ctx.dim, indices, grad_values)
        return grad, None, None, None, None


_after_autograd = torch._C._after_autograd_keyset


def _topk_autograd(keyset, self, k, dim=-1, largest=True, sorted=True):
    """The op's Autograd kernel. torch.library.register_autograd would do the same, but its
    generic wrapper costs more host time than a small top-k call itself; here a plain tensor
    that needs no gradient goes straight to the kernel, and everything else (gradients, fake,
    functional and meta tensors) takes the usual path below autograd."""
    if self.requires_grad and torch.is_grad_enabled():
        return _TopkFunction.apply(self, k, dim, largest, sorted)
    if type(self) is torch.Tensor and not self.is_meta:
        return _tensors.topk_kernel(self, k, dim, largest, sorted)
    return torch.ops.metaltopk.mtk_topk.default.redispatch(keyset & _after_autograd, self, k,
                                                           dim, largest, sorted)


_library.impl("mtk_topk", _topk_autograd, "Autograd", with_keyset=True)
