// The host-cost fast path of torch tensors (python/metaltopk/torch/_tensors.py loads it): C
// functions that read plain CPU or CUDA tensors in place, allocate the outputs (and scratch)
// through torch's allocator on the input's device and call the library on torch's current
// stream. Python's own path does the same through cffi, but at MoE sizes its allocations and
// argument handling cost more host time than the call (BENCHMARKS.md: half of torch.topk's
// per-call time at 1x256).
//
//   topk(x, k, dim, largest, sorted, context address)
//   moe_route(logits, k, scoring code, bias or None, n_group, topk_group, renormalize, scale,
//             int64 ids?, context address)
//   topk_ragged(x, k, lengths, starts, dim, largest, sorted, return values?, transform code,
//               offsets, page table, row_to_batch, page size, int32 indices?, context address)
//     (starts, offsets, page table and row_to_batch: a tensor or None; returns (values or an
//     empty [0] tensor, indices), as the ragged ops do)
//   sampling(op code, x, top_k, top_k_value, top_p, top_p_value, min_p, min_p_value,
//            temperature, temperature_value, uniforms, int64 samples?, context address)
//     (top_k, top_p, min_p, temperature and uniforms: a tensor or None; returns (output,), the
//     op's one tensor in a tuple as the others return theirs)
//
// They never raise. Each returns its tensors on success, the library's status (an int) when
// the library refused the call (its message is in mtk_last_error_message, on this thread), and
// None where it cannot make the call at all (an unsupported dtype or rank, a bias that is not a
// tensor on the logits' device, a torch allocation failure): the Python path then runs the call
// and raises the contract's exception.
#include <Python.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <optional>
#include <utility>

#include "metaltopk.h"

namespace {

std::optional<mtk_dtype> library_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float: return MTK_FLOAT32;
    case c10::ScalarType::Half: return MTK_FLOAT16;
    case c10::ScalarType::BFloat16: return MTK_BFLOAT16;
    case c10::ScalarType::Double: return MTK_FLOAT64;
    case c10::ScalarType::Char: return MTK_INT8;
    case c10::ScalarType::Byte: return MTK_UINT8;
    case c10::ScalarType::Short: return MTK_INT16;
    case c10::ScalarType::Int: return MTK_INT32;
    case c10::ScalarType::Long: return MTK_INT64;
    default: return std::nullopt;
  }
}

mtk_tensor describe(const at::Tensor& tensor, mtk_dtype dtype) {
  mtk_tensor described{};
  described.data = tensor.data_ptr();
  described.dtype = dtype;
  described.ndim = static_cast<int32_t>(tensor.dim());
  for (int32_t d = 0; d < described.ndim; ++d) {
    described.sizes[d] = tensor.size(d);
    described.strides[d] = tensor.stride(d);
  }
  return described;
}

// Where the library runs a call on these tensors: torch's current stream of their device.
void* current_stream(const at::Tensor& tensor) {
  if (!tensor.is_cuda()) return nullptr;
  return c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
      ->getStream(tensor.device())
      .native_handle();
}

// The call's outcome as the Python caller reads it (see the top of this file).
PyObject* outcome(mtk_status status, const at::Tensor& first, const at::Tensor& second) {
  if (status != MTK_SUCCESS) return PyLong_FromLong(status);
  PyObject* wrapped_first = THPVariable_Wrap(first);
  if (wrapped_first == nullptr) return nullptr;
  PyObject* wrapped_second = THPVariable_Wrap(second);
  if (wrapped_second == nullptr) {
    Py_DECREF(wrapped_first);
    return nullptr;
  }
  PyObject* result = PyTuple_Pack(2, wrapped_first, wrapped_second);
  Py_DECREF(wrapped_first);
  Py_DECREF(wrapped_second);
  return result;
}

PyObject* topk(const at::Tensor& x, int64_t k, int64_t dim, int largest, int sorted,
               mtk_context ctx) {
  const std::optional<mtk_dtype> dtype = library_dtype(x.scalar_type());
  if (!dtype || x.dim() > MTK_MAX_NDIM || !(x.is_cuda() || x.is_cpu())) Py_RETURN_NONE;
  const mtk_tensor input = describe(x, *dtype);
  size_t workspace_bytes = 0;
  // Validates k and dim before anything is allocated.
  mtk_status status = mtk_topk_workspace_size(ctx, &input, k, dim, largest, sorted, MTK_INT64,
                                              &workspace_bytes);
  if (status != MTK_SUCCESS) return PyLong_FromLong(status);
  c10::DimVector out_sizes(x.sizes().begin(), x.sizes().end());
  if (x.dim() > 0) out_sizes[dim < 0 ? dim + x.dim() : dim] = k;
  const at::Tensor values = at::empty(out_sizes, x.options());
  const at::Tensor indices = at::empty(out_sizes, x.options().dtype(at::kLong));
  // Freed when this function returns: on CUDA the caching allocator hands a freed block out
  // again only in stream order, after the work enqueued here.
  at::Tensor scratch;
  if (workspace_bytes > 0) {
    scratch = at::empty({static_cast<int64_t>(workspace_bytes)}, x.options().dtype(at::kByte));
  }
  void* stream = current_stream(x);
  const mtk_tensor values_out = describe(values, *dtype);
  const mtk_tensor indices_out = describe(indices, MTK_INT64);
  void* workspace = scratch.defined() ? scratch.data_ptr() : nullptr;
  Py_BEGIN_ALLOW_THREADS
  status = mtk_topk_with_workspace(ctx, &input, k, dim, largest, sorted, &values_out,
                                   &indices_out, workspace, workspace_bytes, stream);
  Py_END_ALLOW_THREADS
  return outcome(status, values, indices);
}

PyObject* moe_route(const at::Tensor& logits, int64_t k, mtk_scoring scoring, PyObject* bias,
                    int64_t n_group, int64_t topk_group, int renormalize, double scale,
                    bool ids_int64, mtk_context ctx) {
  const std::optional<mtk_dtype> dtype = library_dtype(logits.scalar_type());
  if (!dtype || logits.dim() != 2 || !(logits.is_cuda() || logits.is_cpu())) Py_RETURN_NONE;
  mtk_tensor bias_described{};
  mtk_router_params params = MTK_ROUTER_PARAMS_INIT;
  if (bias != Py_None) {
    if (!THPVariable_Check(bias)) Py_RETURN_NONE;
    const at::Tensor& bias_tensor = THPVariable_Unpack(bias);
    const std::optional<mtk_dtype> bias_dtype = library_dtype(bias_tensor.scalar_type());
    if (!bias_dtype || bias_tensor.device() != logits.device() ||
        bias_tensor.dim() > MTK_MAX_NDIM) {
      Py_RETURN_NONE;
    }
    bias_described = describe(bias_tensor, *bias_dtype);
    params.bias = &bias_described;
  }
  params.k = k;
  params.scoring = scoring;
  params.n_group = n_group;
  params.topk_group = topk_group;
  params.renormalize = renormalize;
  params.scale = static_cast<float>(scale);
  // A negative k still reaches the library, which names it in its error.
  const int64_t out_sizes[2] = {logits.size(0), k > 0 ? k : 0};
  const at::Tensor weights = at::empty(out_sizes, logits.options().dtype(at::kFloat));
  const at::Tensor ids =
      at::empty(out_sizes, logits.options().dtype(ids_int64 ? at::kLong : at::kInt));
  const mtk_tensor logits_in = describe(logits, *dtype);
  const mtk_tensor weights_out = describe(weights, MTK_FLOAT32);
  const mtk_tensor ids_out = describe(ids, ids_int64 ? MTK_INT64 : MTK_INT32);
  void* stream = current_stream(logits);
  mtk_status status;
  Py_BEGIN_ALLOW_THREADS
  status = mtk_moe_route(ctx, &logits_in, &params, &weights_out, &ids_out, stream);
  Py_END_ALLOW_THREADS
  return outcome(status, weights, ids);
}

// An optional tensor beside x (a ragged call's index tensors, sampling's per-row arguments):
// false where the fast path cannot describe it (not a tensor, not on x's device, a dtype the
// library has no code for); the library checks the rest.
bool describe_index(PyObject* object, const at::Tensor& x, mtk_tensor* described,
                    const mtk_tensor** slot) {
  if (object == Py_None) return true;
  if (!THPVariable_Check(object)) return false;
  const at::Tensor& tensor = THPVariable_Unpack(object);
  const std::optional<mtk_dtype> dtype = library_dtype(tensor.scalar_type());
  if (!dtype || tensor.device() != x.device() || tensor.dim() > MTK_MAX_NDIM) return false;
  *described = describe(tensor, *dtype);
  *slot = described;
  return true;
}

PyObject* topk_ragged(const at::Tensor& x, int64_t k, PyObject* const* index_tensors, int64_t dim,
                      int largest, int sorted, bool return_values, int transform,
                      int64_t page_size, bool int32_indices, mtk_context ctx) {
  const std::optional<mtk_dtype> dtype = library_dtype(x.scalar_type());
  if (!dtype || x.dim() != 2 || !(x.is_cuda() || x.is_cpu()) || dim < -2 || dim > 1) {
    Py_RETURN_NONE;
  }
  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  params.transform = static_cast<mtk_index_transform>(transform);
  params.page_size = page_size;
  // lengths, starts, offsets, page table, row_to_batch, in the order the entry takes them.
  mtk_tensor described[5] = {};
  const mtk_tensor** slots[5] = {&params.lengths, &params.starts, &params.offsets,
                                 &params.page_table, &params.row_to_batch};
  for (int i = 0; i < 5; ++i) {
    if (!describe_index(index_tensors[i], x, &described[i], slots[i])) Py_RETURN_NONE;
  }
  mtk_tensor input = describe(x, *dtype);
  const bool along_rows = dim == -1 || dim == 1;
  if (!along_rows) {  // the transposed view: dim 0's columns are the rows
    std::swap(input.sizes[0], input.sizes[1]);
    std::swap(input.strides[0], input.strides[1]);
  }
  const mtk_dtype index_dtype = int32_indices ? MTK_INT32 : MTK_INT64;
  size_t workspace_bytes = 0;
  // Validates every argument before anything is allocated.
  mtk_status status = mtk_topk_ragged_workspace_size(ctx, &input, k, largest, sorted, &params,
                                                     index_dtype, &workspace_bytes);
  if (status != MTK_SUCCESS) return PyLong_FromLong(status);
  const int64_t rows = input.sizes[0];
  const int64_t out_sizes[2] = {along_rows ? rows : k, along_rows ? k : rows};
  const at::Tensor indices =
      at::empty(out_sizes, x.options().dtype(int32_indices ? at::kInt : at::kLong));
  const at::Tensor values =
      return_values ? at::empty(out_sizes, x.options()) : at::empty({0}, x.options());
  at::Tensor scratch;
  if (workspace_bytes > 0) {
    scratch = at::empty({static_cast<int64_t>(workspace_bytes)}, x.options().dtype(at::kByte));
  }
  // The outputs are contiguous in the caller's layout; dim 0's are described transposed.
  auto as_rows = [&](mtk_tensor tensor) {
    if (!along_rows) {
      std::swap(tensor.sizes[0], tensor.sizes[1]);
      std::swap(tensor.strides[0], tensor.strides[1]);
    }
    return tensor;
  };
  const mtk_tensor indices_out = as_rows(describe(indices, index_dtype));
  const mtk_tensor values_out = return_values ? as_rows(describe(values, *dtype)) : mtk_tensor{};
  void* stream = current_stream(x);
  void* workspace = scratch.defined() ? scratch.data_ptr() : nullptr;
  Py_BEGIN_ALLOW_THREADS
  status = mtk_topk_ragged_with_workspace(ctx, &input, k, largest, sorted, &params,
                                          return_values ? &values_out : nullptr, &indices_out,
                                          workspace, workspace_bytes, stream);
  Py_END_ALLOW_THREADS
  return outcome(status, values, indices);
}

// One sampling operation (docs/CONTRACT.md, "Sampling filters"); `per_row` holds top_k, top_p,
// min_p, temperature and the uniforms, each a tensor or None.
PyObject* sampling(mtk_sampling_op op, const at::Tensor& x, PyObject* const* per_row,
                   int64_t top_k_value, double top_p_value, double min_p_value,
                   double temperature_value, bool int64_samples, mtk_context ctx) {
  const std::optional<mtk_dtype> dtype = library_dtype(x.scalar_type());
  if (!dtype || x.dim() != 2 || !(x.is_cuda() || x.is_cpu())) Py_RETURN_NONE;
  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;
  params.top_k_value = top_k_value;
  params.top_p_value = static_cast<float>(top_p_value);
  params.min_p_value = static_cast<float>(min_p_value);
  params.temperature_value = static_cast<float>(temperature_value);
  const mtk_tensor* uniforms = nullptr;
  mtk_tensor described[5] = {};
  const mtk_tensor** slots[5] = {&params.top_k, &params.top_p, &params.min_p, &params.temperature,
                                 &uniforms};
  for (int i = 0; i < 5; ++i) {
    if (!describe_index(per_row[i], x, &described[i], slots[i])) Py_RETURN_NONE;
  }
  const bool samples = op == MTK_SAMPLING_SAMPLE || op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
  const mtk_dtype output_dtype = samples ? (int64_samples ? MTK_INT64 : MTK_INT32)
                                 : op == MTK_SAMPLING_TOP_K_MASK_LOGITS ? *dtype
                                                                        : MTK_FLOAT32;
  const mtk_tensor input = describe(x, *dtype);
  size_t workspace_bytes = 0;
  // Validates the input, the params and the output dtype before anything is allocated.
  mtk_status status =
      mtk_sampling_workspace_size(ctx, op, &input, &params, output_dtype, &workspace_bytes);
  if (status != MTK_SUCCESS) return PyLong_FromLong(status);
  const at::Tensor output =
      samples ? at::empty({x.size(0)}, x.options().dtype(int64_samples ? at::kLong : at::kInt))
              : at::empty(x.sizes(), op == MTK_SAMPLING_TOP_K_MASK_LOGITS
                                         ? x.options()
                                         : x.options().dtype(at::kFloat));
  at::Tensor scratch;
  if (workspace_bytes > 0) {
    scratch = at::empty({static_cast<int64_t>(workspace_bytes)}, x.options().dtype(at::kByte));
  }
  const mtk_tensor output_described = describe(output, output_dtype);
  void* stream = current_stream(x);
  void* workspace = scratch.defined() ? scratch.data_ptr() : nullptr;
  Py_BEGIN_ALLOW_THREADS
  status = mtk_sampling_with_workspace(ctx, op, &input, &params, uniforms, &output_described,
                                       workspace, workspace_bytes, stream);
  Py_END_ALLOW_THREADS
  if (status != MTK_SUCCESS) return PyLong_FromLong(status);
  PyObject* wrapped = THPVariable_Wrap(output);
  if (wrapped == nullptr) return nullptr;
  PyObject* result = PyTuple_Pack(1, wrapped);
  Py_DECREF(wrapped);
  return result;
}

PyObject* topk_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6 || !THPVariable_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError,
                    "topk(x: torch.Tensor, k, dim, largest, sorted, context address)");
    return nullptr;
  }
  const int64_t k = PyLong_AsLongLong(args[1]);
  const int64_t dim = PyLong_AsLongLong(args[2]);
  const int largest = PyObject_IsTrue(args[3]);
  const int sorted = PyObject_IsTrue(args[4]);
  void* ctx = PyLong_AsVoidPtr(args[5]);
  if (PyErr_Occurred()) return nullptr;
  try {
    return topk(THPVariable_Unpack(args[0]), k, dim, largest, sorted,
                static_cast<mtk_context>(ctx));
  } catch (...) {  // torch's allocator failed: the Python path reports it
    Py_RETURN_NONE;
  }
}

PyObject* moe_route_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 10 || !THPVariable_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError,
                    "moe_route(logits: torch.Tensor, k, scoring code, bias or None, n_group, "
                    "topk_group, renormalize, scale, int64 ids, context address)");
    return nullptr;
  }
  const int64_t k = PyLong_AsLongLong(args[1]);
  const long scoring = PyLong_AsLong(args[2]);
  const int64_t n_group = PyLong_AsLongLong(args[4]);
  const int64_t topk_group = PyLong_AsLongLong(args[5]);
  const int renormalize = PyObject_IsTrue(args[6]);
  const double scale = PyFloat_AsDouble(args[7]);
  const int ids_int64 = PyObject_IsTrue(args[8]);
  void* ctx = PyLong_AsVoidPtr(args[9]);
  if (PyErr_Occurred()) return nullptr;
  try {
    return moe_route(THPVariable_Unpack(args[0]), k, static_cast<mtk_scoring>(scoring), args[3],
                     n_group, topk_group, renormalize, scale, ids_int64 != 0,
                     static_cast<mtk_context>(ctx));
  } catch (...) {  // torch's allocator failed: the Python path reports it
    Py_RETURN_NONE;
  }
}

PyObject* topk_ragged_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 15 || !THPVariable_Check(args[0])) {
    PyErr_SetString(PyExc_TypeError,
                    "topk_ragged(x: torch.Tensor, k, lengths, starts, dim, largest, sorted, "
                    "return_values, transform, offsets, page_table, row_to_batch, page_size, "
                    "int32 indices, context address)");
    return nullptr;
  }
  const int64_t k = PyLong_AsLongLong(args[1]);
  const int64_t dim = PyLong_AsLongLong(args[4]);
  const int largest = PyObject_IsTrue(args[5]);
  const int sorted = PyObject_IsTrue(args[6]);
  const int return_values = PyObject_IsTrue(args[7]);
  const long transform = PyLong_AsLong(args[8]);
  const int64_t page_size = PyLong_AsLongLong(args[12]);
  const int int32_indices = PyObject_IsTrue(args[13]);
  void* ctx = PyLong_AsVoidPtr(args[14]);
  if (PyErr_Occurred()) return nullptr;
  PyObject* const index_tensors[5] = {args[2], args[3], args[9], args[10], args[11]};
  try {
    return topk_ragged(THPVariable_Unpack(args[0]), k, index_tensors, dim, largest, sorted,
                       return_values != 0, static_cast<int>(transform), page_size,
                       int32_indices != 0, static_cast<mtk_context>(ctx));
  } catch (...) {  // torch's allocator failed: the Python path reports it
    Py_RETURN_NONE;
  }
}

PyObject* sampling_entry(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 13 || !THPVariable_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError,
                    "sampling(op code, x: torch.Tensor, top_k, top_k_value, top_p, top_p_value, "
                    "min_p, min_p_value, temperature, temperature_value, uniforms, "
                    "int64 samples, context address)");
    return nullptr;
  }
  const long op = PyLong_AsLong(args[0]);
  const int64_t top_k_value = PyLong_AsLongLong(args[3]);
  const double top_p_value = PyFloat_AsDouble(args[5]);
  const double min_p_value = PyFloat_AsDouble(args[7]);
  const double temperature_value = PyFloat_AsDouble(args[9]);
  const int int64_samples = PyObject_IsTrue(args[11]);
  void* ctx = PyLong_AsVoidPtr(args[12]);
  if (PyErr_Occurred()) return nullptr;
  PyObject* const per_row[5] = {args[2], args[4], args[6], args[8], args[10]};
  try {
    return sampling(static_cast<mtk_sampling_op>(op), THPVariable_Unpack(args[1]), per_row,
                    top_k_value, top_p_value, min_p_value, temperature_value, int64_samples != 0,
                    static_cast<mtk_context>(ctx));
  } catch (...) {  // torch's allocator failed: the Python path reports it
    Py_RETURN_NONE;
  }
}

PyMethodDef methods[] = {
    {"topk", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(topk_entry)),
     METH_FASTCALL, "metaltopk's top-k of a plain CPU or CUDA tensor; see metaltopk_torch.cpp"},
    {"moe_route", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(moe_route_entry)),
     METH_FASTCALL, "metaltopk's MoE router on plain CPU or CUDA tensors; see metaltopk_torch.cpp"},
    {"topk_ragged",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(topk_ragged_entry)), METH_FASTCALL,
     "metaltopk's ragged top-k of plain CPU or CUDA tensors; see metaltopk_torch.cpp"},
    {"sampling", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(sampling_entry)),
     METH_FASTCALL,
     "metaltopk's sampling filters and sampler on plain CPU or CUDA tensors; see "
     "metaltopk_torch.cpp"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_metaltopk_torch", nullptr, -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__metaltopk_torch() { return PyModule_Create(&module); }
