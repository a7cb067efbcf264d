// The C ABI: each function validates, then delegates; `guarded` keeps every exception inside.
#include <cstring>
#include <memory>

#include "abi_enums.hpp"
#include "context.hpp"
#include "dtype.hpp"
#include "error.hpp"
#include "metaltopk.h"
#include "validate.hpp"

using mtk::checked_workspace;
using mtk::Context;
using mtk::fail;
using mtk::guarded;

namespace {

template <class T>
void require_out(T* out, const char* name) {
  if (out == nullptr) fail(MTK_ERROR_INVALID_ARGUMENT, name, " is NULL");
}

void require_backend_dtype(Context& ctx, mtk_dtype dtype) {
  if (!ctx.backend().supports_dtype(dtype)) {
    fail(MTK_ERROR_UNSUPPORTED_DTYPE, "input.dtype = ", mtk::dtype_name(dtype),
         " is not supported by the ", mtk_backend_name(ctx.backend().kind()), " backend");
  }
}

bool has_work(const mtk::TopkProblem& p) { return p.geometry.rows > 0 && p.geometry.k > 0; }

void require_indices_only_support(Context& ctx, const mtk::TopkProblem& p) {
  if (p.values == nullptr && !ctx.backend().supports_indices_only()) {
    fail(MTK_ERROR_BACKEND_UNAVAILABLE,
         "values = NULL (indices only) is not implemented on the ",
         mtk_backend_name(ctx.backend().kind()), " backend yet; pass a values tensor");
  }
}

mtk::TopkProblem checked_problem(Context& ctx, const mtk_tensor* input, int64_t k, int64_t dim,
                                 int largest, int sorted, const mtk_tensor* values,
                                 const mtk_tensor* indices) {
  mtk::TopkProblem p = mtk::make_topk_problem(input, k, dim, largest, sorted, values, indices);
  require_backend_dtype(ctx, p.dtype);
  require_indices_only_support(ctx, p);
  return p;
}

bool has_work(const mtk::RaggedProblem& p) { return has_work(p.dense); }

mtk::RaggedProblem checked_ragged_problem(Context& ctx, const mtk_tensor* input, int64_t k,
                                          int largest, int sorted,
                                          const mtk_ragged_params* params,
                                          const mtk_tensor* values, const mtk_tensor* indices) {
  mtk::RaggedProblem p =
      mtk::make_ragged_problem(input, k, largest, sorted, params, values, indices);
  require_backend_dtype(ctx, p.dense.dtype);
  return p;
}

// The [rows, k] contiguous index output a workspace query stands for.
mtk_tensor contiguous_ragged_indices(const mtk_tensor& input, int64_t k, mtk_dtype dtype) {
  mtk_tensor t{};
  t.dtype = dtype;
  t.ndim = 2;
  t.sizes[0] = input.ndim == 2 ? input.sizes[0] : 0;
  t.sizes[1] = k;
  t.strides[0] = k;
  t.strides[1] = 1;
  return t;
}

// A contiguous row-major descriptor of the top-k output shape, without data.
mtk_tensor contiguous_output(const mtk_tensor& input, int64_t k, int dim, mtk_dtype dtype) {
  const mtk::OutputShape shape = mtk::topk_output_shape(input, k, dim);
  mtk_tensor t{};
  t.dtype = dtype;
  t.ndim = shape.ndim;
  int64_t stride = 1;
  for (int d = t.ndim - 1; d >= 0; --d) {
    t.sizes[d] = shape.sizes[d];
    t.strides[d] = stride;
    // Only an empty output's sizes can overflow this product (the input checks bound them up to
    // its first 0 only); its strides are never used, so 0 serves.
    if (__builtin_mul_overflow(stride, t.sizes[d], &stride)) stride = 0;
  }
  return t;
}

// An enum argument of a C caller may hold any int; it is checked as one before C++ reads it as
// its enum type (see mtk::abi_enum_value).
void require_known_dtype_argument(const mtk_dtype& dtype, const char* name) {
  const int raw = mtk::abi_enum_value(dtype);
  if (!mtk::is_known_dtype(raw)) {
    fail(MTK_ERROR_UNSUPPORTED_DTYPE, name, " = ", raw, " is not a known mtk_dtype");
  }
}

void require_known_backend(const mtk_backend& backend) {
  const int raw = mtk::abi_enum_value(backend);
  if (!mtk::is_known_backend(raw)) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "backend = ", raw, " is not a known mtk_backend");
  }
}

int64_t element_count(const mtk_tensor& t) {
  int64_t count = 1;
  for (int d = 0; d < t.ndim; ++d) count *= t.sizes[d];
  return count;
}

// A call whose outputs the library allocates: contiguous outputs of the top-k shape, without data
// yet, and the problem they make.
struct NewOutputs {
  mtk_tensor values, indices;
  mtk::TopkProblem problem;
};

// `index_dtype` by reference: a caller's value outside the enum is checked as an int before
// C++ loads it as an mtk_dtype (see require_known_dtype_argument).
NewOutputs checked_problem_with_new_outputs(Context& ctx, const mtk_tensor* input, int64_t k,
                                            int64_t dim, int largest, int sorted,
                                            const mtk_dtype& index_dtype) {
  const int d = mtk::validate_input_dim_k(input, k, dim);
  require_known_dtype_argument(index_dtype, "indices.dtype");
  NewOutputs out{};
  out.values = contiguous_output(*input, k, d, input->dtype);
  out.indices = contiguous_output(*input, k, d, index_dtype);
  out.problem = mtk::make_topk_problem(input, k, dim, largest, sorted, &out.values, &out.indices,
                                       mtk::OutputMemory::NotYetAllocated);
  require_backend_dtype(ctx, out.problem.dtype);
  return out;
}

}  // namespace

// The caller's scratch checked against what `plan` needs, or an empty Workspace (the backend
// takes its own) where the caller gave none.
mtk::Workspace mtk::checked_workspace(const mtk::PlannedTopk& plan,
                                      const mtk::Workspace* caller_workspace) {
  if (caller_workspace == nullptr) return mtk::Workspace{};
  const size_t needed = plan.workspace_bytes;
  if (caller_workspace->bytes < needed) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "workspace_bytes = ", caller_workspace->bytes,
         " is smaller than the ", needed, " bytes this problem needs");
  }
  if (needed > 0 && caller_workspace->data == nullptr) {
    fail(MTK_ERROR_INVALID_ARGUMENT, "workspace is NULL but ", needed, " bytes are needed");
  }
  return *caller_workspace;
}

namespace {

// Plans a problem with work once and runs that plan. `caller_workspace` is the caller's scratch,
// checked against the plan here, or null: the backend takes its own.
void plan_and_run(Context& ctx, const mtk::TopkProblem& p, const mtk::Workspace* caller_workspace,
                  void* stream) {
  mtk::Backend& backend = ctx.backend();
  const std::shared_ptr<const mtk::PlannedTopk> plan = backend.plan_topk(p);
  backend.run_topk(*plan, p, checked_workspace(*plan, caller_workspace), stream);
}

void plan_and_run(Context& ctx, const mtk::RaggedProblem& p,
                  const mtk::Workspace* caller_workspace, void* stream) {
  mtk::Backend& backend = ctx.backend();
  const std::shared_ptr<const mtk::PlannedTopk> plan = backend.plan_topk_ragged(p);
  backend.run_topk_ragged(*plan, p, checked_workspace(*plan, caller_workspace), stream);
}

}  // namespace

extern "C" {

MTK_API int mtk_version(void) { return MTK_VERSION; }

MTK_API const char* mtk_status_string(mtk_status status) {
  switch (mtk::abi_enum_value(status)) {
    case MTK_SUCCESS: return "success";
    case MTK_ERROR_INVALID_ARGUMENT: return "invalid argument";
    case MTK_ERROR_INVALID_DIM: return "dim out of range";
    case MTK_ERROR_UNSUPPORTED_DTYPE: return "unsupported dtype";
    case MTK_ERROR_OUT_OF_MEMORY: return "out of memory";
    case MTK_ERROR_BACKEND_UNAVAILABLE: return "backend unavailable";
    case MTK_ERROR_DEVICE: return "device or driver failure";
    case MTK_ERROR_INVALID_CONTEXT: return "invalid context";
    case MTK_ERROR_INTERNAL: return "internal error";
  }
  return "unknown status";
}

MTK_API const char* mtk_last_error_message(void) { return mtk::last_error(); }

MTK_API const char* mtk_backend_name(mtk_backend backend) {
  switch (mtk::abi_enum_value(backend)) {
    case MTK_BACKEND_DEFAULT: return "default";
    case MTK_BACKEND_CPU: return "cpu";
    case MTK_BACKEND_CUDA: return "cuda";
    case MTK_BACKEND_METAL: return "metal";
    case MTK_BACKEND_MPSGRAPH: return "mpsgraph";
  }
  return nullptr;
}

MTK_API mtk_status mtk_backend_query(mtk_backend backend, int* compiled, int* available) {
  return guarded([&] {
    require_known_backend(backend);
    if (compiled != nullptr) *compiled = mtk::backend_compiled(backend) ? 1 : 0;
    if (available != nullptr) *available = mtk::backend_available(backend) ? 1 : 0;
  });
}

MTK_API mtk_status mtk_context_create(mtk_backend backend, int device_index, mtk_context* out) {
  if (out != nullptr) *out = nullptr;
  return guarded([&] {
    require_out(out, "out");
    require_known_backend(backend);
    auto context =
        std::make_unique<mtk_context_s>(mtk::create_backend(backend, device_index), device_index);
    *out = mtk::register_context(std::move(context));
  });
}

MTK_API mtk_status mtk_context_destroy(mtk_context ctx) {
  if (ctx == nullptr) return MTK_SUCCESS;
  return guarded([&] { mtk::destroy_context(ctx); });
}

MTK_API mtk_status mtk_context_backend(mtk_context ctx, mtk_backend* out) {
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    require_out(out, "out");
    *out = context.backend().kind();
  });
}

MTK_API mtk_status mtk_context_cache_stats(mtk_context ctx, mtk_cache_stats* out) {
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    require_out(out, "out");
    const mtk::CacheCounters counters = context.backend().cache_counters();
    *out = mtk_cache_stats{counters.hits, counters.misses, counters.entries,
                           static_cast<uint64_t>(context.backend().scratch_bytes())};
  });
}

MTK_API mtk_status mtk_context_set_num_threads(mtk_context ctx, int num_threads) {
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    if (num_threads < 0) {
      fail(MTK_ERROR_INVALID_ARGUMENT, "num_threads = ", num_threads, " is negative");
    }
    context.backend().set_num_threads(num_threads);
  });
}

MTK_API mtk_status mtk_malloc(mtk_context ctx, size_t bytes, void** out) {
  if (out != nullptr) *out = nullptr;
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    require_out(out, "out");
    if (bytes > 0) *out = context.allocate(bytes);
  });
}

MTK_API mtk_status mtk_free(mtk_context ctx, void* ptr) {
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    if (ptr != nullptr) context.deallocate(ptr);
  });
}

MTK_API mtk_status mtk_memcpy(mtk_context ctx, void* dst, const void* src, size_t bytes,
                              mtk_copy_kind kind, void* stream) {
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    const int raw_kind = mtk::abi_enum_value(kind);
    if (raw_kind != MTK_COPY_HOST_TO_DEVICE && raw_kind != MTK_COPY_DEVICE_TO_HOST &&
        raw_kind != MTK_COPY_DEVICE_TO_DEVICE) {
      fail(MTK_ERROR_INVALID_ARGUMENT, "kind = ", raw_kind, " is not a known mtk_copy_kind");
    }
    if (bytes == 0) return;
    if (dst == nullptr) fail(MTK_ERROR_INVALID_ARGUMENT, "dst is NULL for ", bytes, " bytes");
    if (src == nullptr) fail(MTK_ERROR_INVALID_ARGUMENT, "src is NULL for ", bytes, " bytes");
    context.backend().copy(dst, src, bytes, kind, stream);
  });
}

MTK_API mtk_status mtk_synchronize(mtk_context ctx, void* stream) {
  return guarded([&] { mtk::checked_context(ctx).backend().synchronize(stream); });
}

MTK_API mtk_status mtk_register_buffer(mtk_context ctx, void* buffer, void** data_out) {
  if (data_out != nullptr) *data_out = nullptr;
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    require_out(data_out, "data_out");
    if (buffer == nullptr) fail(MTK_ERROR_INVALID_ARGUMENT, "buffer is NULL");
    *data_out = context.backend().register_buffer(buffer);
  });
}

MTK_API mtk_status mtk_unregister_buffer(mtk_context ctx, void* data) {
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    if (data == nullptr) fail(MTK_ERROR_INVALID_ARGUMENT, "data is NULL");
    context.backend().unregister_buffer(data);
  });
}

MTK_API mtk_status mtk_topk(mtk_context ctx, const mtk_tensor* input, int64_t k, int64_t dim,
                            int largest, int sorted, const mtk_tensor* values,
                            const mtk_tensor* indices, void* stream) {
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    const mtk::TopkProblem p =
        checked_problem(context, input, k, dim, largest, sorted, values, indices);
    if (has_work(p)) plan_and_run(context, p, nullptr, stream);
  });
}

MTK_API mtk_status mtk_topk_workspace_size(mtk_context ctx, const mtk_tensor* input, int64_t k,
                                           int64_t dim, int largest, int sorted,
                                           mtk_dtype index_dtype, size_t* bytes) {
  if (bytes != nullptr) *bytes = 0;
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    require_out(bytes, "bytes");
    const NewOutputs call =
        checked_problem_with_new_outputs(context, input, k, dim, largest, sorted, index_dtype);
    if (has_work(call.problem)) *bytes = context.backend().plan_topk(call.problem)->workspace_bytes;
  });
}

MTK_API mtk_status mtk_topk_with_workspace(mtk_context ctx, const mtk_tensor* input, int64_t k,
                                           int64_t dim, int largest, int sorted,
                                           const mtk_tensor* values, const mtk_tensor* indices,
                                           void* workspace, size_t workspace_bytes, void* stream) {
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    const mtk::TopkProblem p =
        checked_problem(context, input, k, dim, largest, sorted, values, indices);
    const mtk::Workspace caller_workspace{workspace, workspace_bytes};
    if (has_work(p)) plan_and_run(context, p, &caller_workspace, stream);
  });
}

MTK_API mtk_status mtk_topk_ragged(mtk_context ctx, const mtk_tensor* input, int64_t k,
                                   int largest, int sorted, const mtk_ragged_params* params,
                                   const mtk_tensor* values, const mtk_tensor* indices,
                                   void* stream) {
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    const mtk::RaggedProblem p =
        checked_ragged_problem(context, input, k, largest, sorted, params, values, indices);
    if (has_work(p)) plan_and_run(context, p, nullptr, stream);
  });
}

MTK_API mtk_status mtk_topk_ragged_workspace_size(mtk_context ctx, const mtk_tensor* input,
                                                  int64_t k, int largest, int sorted,
                                                  const mtk_ragged_params* params,
                                                  mtk_dtype index_dtype, size_t* bytes) {
  if (bytes != nullptr) *bytes = 0;
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    require_out(bytes, "bytes");
    if (input == nullptr) fail(MTK_ERROR_INVALID_ARGUMENT, "input is NULL");
    require_known_dtype_argument(index_dtype, "indices.dtype");
    const mtk_tensor indices = contiguous_ragged_indices(*input, k, index_dtype);
    const mtk::RaggedProblem p =
        mtk::make_ragged_problem(input, k, largest, sorted, params, nullptr, &indices,
                                 mtk::OutputMemory::NotYetAllocated);
    require_backend_dtype(context, p.dense.dtype);
    if (has_work(p)) *bytes = context.backend().plan_topk_ragged(p)->workspace_bytes;
  });
}

MTK_API mtk_status mtk_topk_ragged_with_workspace(mtk_context ctx, const mtk_tensor* input,
                                                  int64_t k, int largest, int sorted,
                                                  const mtk_ragged_params* params,
                                                  const mtk_tensor* values,
                                                  const mtk_tensor* indices, void* workspace,
                                                  size_t workspace_bytes, void* stream) {
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    const mtk::RaggedProblem p =
        checked_ragged_problem(context, input, k, largest, sorted, params, values, indices);
    const mtk::Workspace caller_workspace{workspace, workspace_bytes};
    if (has_work(p)) plan_and_run(context, p, &caller_workspace, stream);
  });
}

MTK_API mtk_status mtk_topk_alloc(mtk_context ctx, const mtk_tensor* input, int64_t k,
                                  int64_t dim, int largest, int sorted, mtk_dtype index_dtype,
                                  mtk_tensor* values_out, mtk_tensor* indices_out, void* stream) {
  if (values_out != nullptr) values_out->data = nullptr;
  if (indices_out != nullptr) indices_out->data = nullptr;
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    require_out(values_out, "values_out");
    require_out(indices_out, "indices_out");
    NewOutputs call =
        checked_problem_with_new_outputs(context, input, k, dim, largest, sorted, index_dtype);
    mtk::TopkProblem& p = call.problem;
    const int64_t count = element_count(call.values);
    mtk::OwnedAllocation values_memory(context, count * mtk::dtype_info(call.values.dtype)->size);
    mtk::OwnedAllocation indices_memory(context, count * mtk::dtype_info(index_dtype)->size);
    p.values = call.values.data = values_memory.get();
    p.indices = call.indices.data = indices_memory.get();
    if (has_work(p)) plan_and_run(context, p, nullptr, stream);
    call.values.data = values_memory.release();
    call.indices.data = indices_memory.release();
    *values_out = call.values;
    *indices_out = call.indices;
  });
}

MTK_API mtk_status mtk_tensor_free(mtk_context ctx, mtk_tensor* tensor) {
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    require_out(tensor, "tensor");
    if (tensor->data == nullptr) return;
    context.deallocate(tensor->data);
    tensor->data = nullptr;
  });
}

MTK_API mtk_status mtk_moe_route(mtk_context ctx, const mtk_tensor* logits,
                                 const mtk_router_params* params, const mtk_tensor* weights,
                                 const mtk_tensor* ids, void* stream) {
  return guarded([&] {
    Context& context = mtk::checked_context(ctx);
    const mtk::RouterProblem p = mtk::make_router_problem(logits, params, weights, ids);
    require_backend_dtype(context, p.dtype);
    if (p.tokens > 0) context.backend().moe_route(p, stream);
  });
}

}  // extern "C"
