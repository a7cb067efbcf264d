"""The torch.library ops: metaltopk::mtk_topk, metaltopk::mtk_moe_route, and the ragged ops
(docs/CONTRACT.md, "Ragged rows") metaltopk::mtk_topk_ragged, mtk_topk_ragged_transform and
mtk_topk_page_table_transform.

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

TOPK_RAGGED_SCHEMA = ("mtk_topk_ragged(Tensor self, SymInt k, Tensor lengths, "
                      "Tensor? starts=None, int dim=-1, bool largest=True, bool sorted=True, "
                      "bool return_values=True) -> (Tensor values, Tensor indices)")
RAGGED_TRANSFORM_SCHEMA = ("mtk_topk_ragged_transform(Tensor scores, Tensor offsets, "
                           "Tensor lengths, SymInt k) -> Tensor")
PAGE_TABLE_TRANSFORM_SCHEMA = ("mtk_topk_page_table_transform(Tensor scores, "
                               "Tensor src_page_table, Tensor lengths, SymInt k, "
                               "Tensor? row_to_batch=None, int page_size=1) -> Tensor")

# Kept for the life of the process: dropping a Library deregisters its ops.
_library = torch.library.Library("metaltopk", "DEF")
_library.define(TOPK_SCHEMA)
_library.define(MOE_ROUTE_SCHEMA)
_library.impl("mtk_topk", _tensors.topk_kernel, "CompositeExplicitAutograd")
_library.impl("mtk_moe_route", _tensors.moe_route_kernel, "CompositeExplicitAutograd")
for _schema, _kernel in ((TOPK_RAGGED_SCHEMA, _tensors.topk_ragged_kernel),
                         (RAGGED_TRANSFORM_SCHEMA, _tensors.topk_ragged_transform_kernel),
                         (PAGE_TABLE_TRANSFORM_SCHEMA, _tensors.topk_page_table_transform_kernel)):
    _library.define(_schema)
    _library.impl(_schema.partition("(")[0], _kernel, "CompositeExplicitAutograd")


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


# ---- ragged rows: the library's checks on shapes, dtypes and devices, for the fake kernels ----


def _ragged_rows_and_n(scores, k, dim, function):
    """(rows, n) of a ragged call's input, with the checks the library makes on it and on k."""
    if scores.dtype not in _tensors.DTYPE_NAMES:
        raise _tensors.unsupported_dtype(scores.dtype, function)
    if scores.dim() != 2:
        raise ValueError(f"metaltopk.{function}: input.ndim = {scores.dim()} must be 2 "
                         "([rows, n]) for ragged rows")
    if not -2 <= dim <= 1:
        raise IndexError(f"metaltopk.{function}: dim = {dim} is out of range for a 2-d input "
                         "(expected -2 <= dim <= 1)")
    torch._check_value(k >= 0, lambda: f"metaltopk.{function}: k = {k} is negative "
                       "(expected k >= 0)")
    rows, n = scores.shape if dim % 2 == 1 else scores.shape[::-1]
    return rows, n


def _check_row_vector(tensor, name, scores, rows, function):
    _tensors.check_index_tensor(tensor, name, scores, function)
    if tensor.dim() != 1:
        raise ValueError(f"metaltopk.{function}: {name}.ndim = {tensor.dim()} must be 1 "
                         "([rows])")
    torch._check_value(tensor.shape[0] == rows, lambda: f"metaltopk.{function}: "
                       f"{name}.sizes[0] = {tensor.shape[0]} does not match the input's {rows} "
                       "rows")


@torch.library.register_fake("metaltopk::mtk_topk_ragged")
def _topk_ragged_fake(self, k, lengths, starts=None, dim=-1, largest=True, sorted=True,
                      return_values=True):
    rows, _ = _ragged_rows_and_n(self, k, dim, "topk")
    _check_row_vector(lengths, "lengths", self, rows, "topk")
    if starts is not None:
        _check_row_vector(starts, "starts", self, rows, "topk")
    shape = (rows, k) if dim % 2 == 1 else (k, rows)
    values = self.new_empty(shape if return_values else (0,))
    return values, self.new_empty(shape, dtype=torch.int64)


@torch.library.register_fake("metaltopk::mtk_topk_ragged_transform")
def _topk_ragged_transform_fake(scores, offsets, lengths, k):
    function = "topk_ragged_transform"
    rows, _ = _ragged_rows_and_n(scores, k, -1, function)
    _check_row_vector(lengths, "lengths", scores, rows, function)
    _check_row_vector(offsets, "offsets", scores, rows, function)
    return scores.new_empty((rows, k), dtype=torch.int32)


@torch.library.register_fake("metaltopk::mtk_topk_page_table_transform")
def _topk_page_table_transform_fake(scores, src_page_table, lengths, k, row_to_batch=None,
                                    page_size=1):
    function = "topk_page_table_transform"
    rows, n = _ragged_rows_and_n(scores, k, -1, function)
    _check_row_vector(lengths, "lengths", scores, rows, function)
    _tensors.check_index_tensor(src_page_table, "src_page_table", scores, function)
    if src_page_table.dim() != 2:
        raise ValueError(f"metaltopk.{function}: src_page_table.ndim = {src_page_table.dim()} "
                         "must be 2 ([batch, pages])")
    if page_size < 1:
        raise ValueError(f"metaltopk.{function}: page_size = {page_size} must be at least 1")
    torch._check_value(src_page_table.shape[1] * page_size >= n, lambda: f"metaltopk.{function}"
                       f": src_page_table.sizes[1] = {src_page_table.shape[1]} pages of "
                       f"{page_size} cannot hold a row of {n}")
    if row_to_batch is not None:
        _check_row_vector(row_to_batch, "row_to_batch", scores, rows, function)
    else:
        torch._check_value(src_page_table.shape[0] >= rows, lambda: f"metaltopk.{function}: "
                           f"src_page_table.sizes[0] = {src_page_table.shape[0]} has fewer "
                           f"batches than the input's {rows} rows, and row_to_batch is None")
    return scores.new_empty((rows, k), dtype=torch.int32)


def _topk_ragged_setup_context(ctx, inputs, output):
    self, _, _, starts, dim, _, _, return_values = inputs
    ctx.input_shape, ctx.dim, ctx.return_values = self.shape, dim, return_values
    ctx.save_for_backward(output[1], starts)


def _topk_ragged_backward(ctx, grad_values, grad_indices):
    """As torch.topk's: each winner's gradient goes to its position, start + index."""
    if grad_values is None or not ctx.return_values:
        return (None,) * 8
    indices, starts = ctx.saved_tensors
    along_rows = ctx.dim % 2 == 1
    rows, n = ctx.input_shape if along_rows else ctx.input_shape[::-1]
    if not along_rows:
        indices, grad_values = indices.t(), grad_values.t()
    winners = indices >= 0
    positions = indices if starts is None else indices + starts.clamp(0, n).to(torch.int64)[:, None]
    positions = torch.where(winners, positions, 0)
    grad_values = torch.where(winners, grad_values, 0)
    grad = grad_values.new_zeros((rows, n)).scatter_add(1, positions, grad_values)
    return (grad if along_rows else grad.t(),) + (None,) * 7


torch.library.register_autograd("metaltopk::mtk_topk_ragged", _topk_ragged_backward,
                                setup_context=_topk_ragged_setup_context)


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
