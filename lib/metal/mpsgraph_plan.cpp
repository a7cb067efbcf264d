#include "mpsgraph_plan.hpp"

namespace mtk {

MpsGraphTopk plan_mpsgraph_topk(const TopkProblem& problem, const MpsGraphCapabilities& caps,
                                const MpsGraphBinding& binding) {
  MpsGraphTopk out;
  auto route = [&](const char* reason) {
    out.use_graph = false;
    out.route_reason = reason;
    return out;
  };
  const RowGeometry& g = problem.geometry;
  const bool float_type = problem.dtype == MTK_FLOAT32 || problem.dtype == MTK_FLOAT16 ||
                          (problem.dtype == MTK_BFLOAT16 && caps.macos14);
  if (!float_type) return route("dtype not supported by MPSGraph top-k on this OS");
  if (g.k > kMpsGraphMaxK) return route("k > 16: MPSGraph top-k returned zeros past position 16 on macOS 12/13");
  if (g.n > INT32_MAX) return route("row longer than MPSGraph's int32 indices");
  if (binding.caller_command_buffer) return route("MPSGraph may commit a caller's command buffer");
  if (binding.input_offset != 0 || binding.values_offset != 0 || binding.indices_offset != 0) {
    return route("tensor not at the start of its MTLBuffer (MPSGraphTensorData takes no offset)");
  }
  // Dense 2-D views only: [rows, n] with n innermost, or [n, rows] with the rows innermost.
  const int64_t rows = g.rows;
  const bool one_batch = g.batch_ndim <= 1;
  const int64_t in_batch = g.batch_ndim == 1 ? g.input_batch_strides[0] : 0;
  const int64_t v_batch = g.batch_ndim == 1 ? g.values_batch_strides[0] : 0;
  const int64_t i_batch = g.batch_ndim == 1 ? g.indices_batch_strides[0] : 0;
  const bool rows_outer = one_batch && g.input_stride == 1 && g.values_stride == 1 && g.indices_stride == 1 &&
                          (rows == 1 || (in_batch == g.n && v_batch == g.k && i_batch == g.k));
  const bool rows_inner = one_batch && rows > 1 && in_batch == 1 && v_batch == 1 && i_batch == 1 &&
                          g.input_stride == rows && g.values_stride == rows && g.indices_stride == rows;
  if (!rows_outer && !rows_inner) return route("input or outputs are not dense along the top-k axis");

  out.use_graph = true;
  out.shape[0] = rows_outer ? rows : g.n;
  out.shape[1] = rows_outer ? g.n : rows;
  out.axis = rows_outer ? 1 : 0;
  out.axis_form = caps.macos14;
  out.transpose = !caps.macos14 && out.axis == 0;
  out.negate = !caps.macos14 && !problem.largest;
  out.indices_int64 = problem.index_dtype == MTK_INT64;
  return out;
}

}  // namespace mtk
