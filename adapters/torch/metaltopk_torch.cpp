// The host-cost fast path of torch tensors (python/metaltopk/torch/_tensors.py loads it): one
// C function, topk(x, k, dim, largest, sorted, context), that reads a plain CPU or CUDA tensor in
// place, allocates the outputs and scratch through torch's allocator on the input's device and
// runs mtk_topk_with_workspace on torch's current stream. Python's own path does the same through
// cffi, but at MoE sizes its allocations and argument handling cost more host time than the call
// (BENCHMARKS.md: half of torch.topk's per-call time at 1x256).
//
// It never raises. It returns (values, indices) on success, the library's status (an int) when
// the library refused the call (its message is in mtk_last_error_message, on this thread), and
// None where it cannot make the call at all (an unsupported dtype or rank, a torch allocation
// failure): the Python path then runs the call and raises the contract's exception.
#include <Python.h>

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/csrc/autograd/python_variable.h>

#include <cstdint>
#include <optional>

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

// The call's outcome as the Python caller reads it (see the top of this file).
PyObject* topk(const at::Tensor& x, int64_t k, int64_t dim, int largest, int sorted,
               mtk_context ctx) {
  const std::optional<mtk_dtype> dtype = library_dtype(x.scalar_type());
  const bool on_cuda = x.is_cuda();
  if (!dtype || x.dim() > MTK_MAX_NDIM || !(on_cuda || x.is_cpu())) Py_RETURN_NONE;
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
  void* stream = on_cuda ? c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
                               ->getStream(x.device())
                               .native_handle()
                         : nullptr;
  const mtk_tensor values_out = describe(values, *dtype);
  const mtk_tensor indices_out = describe(indices, MTK_INT64);
  void* workspace = scratch.defined() ? scratch.data_ptr() : nullptr;
  Py_BEGIN_ALLOW_THREADS
  status = mtk_topk_with_workspace(ctx, &input, k, dim, largest, sorted, &values_out,
                                   &indices_out, workspace, workspace_bytes, stream);
  Py_END_ALLOW_THREADS
  if (status != MTK_SUCCESS) return PyLong_FromLong(status);
  PyObject* wrapped_values = THPVariable_Wrap(values);
  if (wrapped_values == nullptr) return nullptr;
  PyObject* wrapped_indices = THPVariable_Wrap(indices);
  if (wrapped_indices == nullptr) {
    Py_DECREF(wrapped_values);
    return nullptr;
  }
  PyObject* result = PyTuple_Pack(2, wrapped_values, wrapped_indices);
  Py_DECREF(wrapped_values);
  Py_DECREF(wrapped_indices);
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

PyMethodDef methods[] = {
    {"topk", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(topk_entry)),
     METH_FASTCALL, "metaltopk's top-k of a plain CPU or CUDA tensor; see metaltopk_torch.cpp"},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module = {PyModuleDef_HEAD_INIT, "_metaltopk_torch", nullptr, -1, methods,
                      nullptr, nullptr, nullptr, nullptr};

}  // namespace

PyMODINIT_FUNC PyInit__metaltopk_torch() { return PyModule_Create(&module); }
