// The AOTInductor C shim over the C ABI (the contract is in metaltopk_aoti.h): reads tensor
// handles through the runtime's shim functions, allocates outputs and scratch through
// aoti_torch_empty_strided, and runs metaltopk on the tensor's device and the runtime's current
// stream. No exception leaves this file.
#include "metaltopk_aoti.h"

#include <dlfcn.h>

#include <cstdio>
#include <initializer_list>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <utility>

#include "metaltopk.h"

#ifdef METALTOPK_AOTI_EXECUTORCH_METAL
#include "executorch_metal.h"
#endif

namespace {

thread_local std::string last_error;

struct ShimFailure {
  std::string message;
};

[[noreturn]] void fail(std::string message) { throw ShimFailure{std::move(message)}; }

void check_runtime(AOTITorchError error, const char* function) {
  if (error != AOTI_TORCH_SUCCESS) fail(std::string("the runtime's ") + function + " failed");
}

void check(mtk_status status) {
  if (status != MTK_SUCCESS) fail(mtk_last_error_message());
}

// A tensor handle this call created: deleted when the call fails, released to the caller when
// it succeeds.
class OwnedTensor {
 public:
  OwnedTensor() = default;
  OwnedTensor(const OwnedTensor&) = delete;
  OwnedTensor& operator=(const OwnedTensor&) = delete;
  ~OwnedTensor() {
    if (handle_ != nullptr) aoti_torch_delete_tensor_object(handle_);
  }
  AtenTensorHandle* slot() { return &handle_; }
  AtenTensorHandle get() const { return handle_; }
  AtenTensorHandle release() { return std::exchange(handle_, nullptr); }

 private:
  AtenTensorHandle handle_ = nullptr;
};

// One library context per backend and device, made on first use and kept for the life of the
// process, as the runtime keeps its own per-device state.
mtk_context context_for(mtk_backend backend, int32_t device_index) {
  static std::mutex mutex;
  static std::map<std::pair<int, int32_t>, mtk_context> contexts;
  const std::pair<int, int32_t> key{static_cast<int>(backend), device_index};
  std::lock_guard<std::mutex> lock(mutex);
  auto found = contexts.find(key);
  if (found != contexts.end()) return found->second;
  mtk_context ctx = nullptr;
  check(mtk_context_create(backend, device_index, &ctx));
  contexts.emplace(key, ctx);
  return ctx;
}

// The runtime's code for each dtype metaltopk supports. Some runtimes lack some getters
// (ExecuTorch has no float64; its 1.2.0 has no float16 or uint8, its 1.3 no float16): those are
// looked up by name at first use, so that a runtime loaded after this library is still seen,
// and a dtype whose getter is missing is unsupported here, never mistaken for another.
struct DtypeCode {
  mtk_dtype dtype;
  const char* name;
  bool present;
  int32_t code;
};

using DtypeGetter = int32_t (*)();

DtypeCode required(mtk_dtype dtype, const char* name, DtypeGetter getter) {
  return {dtype, name, true, getter()};
}

DtypeCode optional(mtk_dtype dtype, const char* name) {
  const std::string symbol = std::string("aoti_torch_dtype_") + name;
  const auto getter = reinterpret_cast<DtypeGetter>(dlsym(RTLD_DEFAULT, symbol.c_str()));
  return {dtype, name, getter != nullptr, getter != nullptr ? getter() : 0};
}

struct DtypeTable {
  DtypeCode codes[9];
};

const DtypeTable& dtype_table() {
  static const DtypeTable table{{
      required(MTK_FLOAT32, "float32", aoti_torch_dtype_float32),
      optional(MTK_FLOAT16, "float16"),
      required(MTK_BFLOAT16, "bfloat16", aoti_torch_dtype_bfloat16),
      optional(MTK_FLOAT64, "float64"),
      required(MTK_INT8, "int8", aoti_torch_dtype_int8),
      optional(MTK_UINT8, "uint8"),
      required(MTK_INT16, "int16", aoti_torch_dtype_int16),
      required(MTK_INT32, "int32", aoti_torch_dtype_int32),
      required(MTK_INT64, "int64", aoti_torch_dtype_int64),
  }};
  return table;
}

mtk_dtype library_dtype(int32_t runtime_code, const char* argument) {
  std::string supported, missing;
  for (const DtypeCode& entry : dtype_table().codes) {
    if (entry.present && entry.code == runtime_code) return entry.dtype;
    std::string& list = entry.present ? supported : missing;
    list += (list.empty() ? "" : ", ") + std::string(entry.name);
  }
  std::string message = std::string(argument) + " has dtype code " +
                        std::to_string(runtime_code) +
                        ", which metaltopk does not support in this runtime (" + supported + ")";
  if (!missing.empty()) {
    message += "; the runtime names no " + missing + " (no aoti_torch_dtype_* getter)";
  }
  fail(message);
}

int32_t runtime_dtype(mtk_dtype dtype) {
  for (const DtypeCode& entry : dtype_table().codes) {
    if (entry.dtype == dtype && entry.present) return entry.code;
  }
  fail("the runtime has no dtype for metaltopk dtype " + std::to_string(dtype));
}

struct Input {
  mtk_tensor tensor{};
  int32_t device_type = 0;
  int32_t device_index = 0;
};

Input describe(AtenTensorHandle handle, const char* argument) {
  if (handle == nullptr) fail(std::string(argument) + " is NULL");
  Input input;
  int64_t ndim = 0;
  int64_t* sizes = nullptr;
  int64_t* strides = nullptr;
  int32_t dtype = 0;
  check_runtime(aoti_torch_get_dim(handle, &ndim), "aoti_torch_get_dim");
  if (ndim > MTK_MAX_NDIM) {
    fail(std::string(argument) + ".ndim = " + std::to_string(ndim) + " exceeds " +
         std::to_string(MTK_MAX_NDIM));
  }
  check_runtime(aoti_torch_get_sizes(handle, &sizes), "aoti_torch_get_sizes");
  check_runtime(aoti_torch_get_strides(handle, &strides), "aoti_torch_get_strides");
  check_runtime(aoti_torch_get_dtype(handle, &dtype), "aoti_torch_get_dtype");
  check_runtime(aoti_torch_get_data_ptr(handle, &input.tensor.data), "aoti_torch_get_data_ptr");
  check_runtime(aoti_torch_get_device_type(handle, &input.device_type),
                "aoti_torch_get_device_type");
  check_runtime(aoti_torch_get_device_index(handle, &input.device_index),
                "aoti_torch_get_device_index");
  input.tensor.dtype = library_dtype(dtype, argument);
  input.tensor.ndim = static_cast<int32_t>(ndim);
  for (int64_t d = 0; d < ndim; ++d) {
    input.tensor.sizes[d] = sizes[d];
    input.tensor.strides[d] = strides[d];
  }
  return input;
}

// A new contiguous tensor on the input's device, and its descriptor.
mtk_tensor allocate(const Input& like, int32_t ndim, const int64_t* sizes, mtk_dtype dtype,
                    OwnedTensor& owner) {
  mtk_tensor tensor{};
  tensor.dtype = dtype;
  tensor.ndim = ndim;
  int64_t step = 1;
  for (int32_t d = ndim - 1; d >= 0; --d) {
    tensor.sizes[d] = sizes[d];
    tensor.strides[d] = step;
    step *= sizes[d] > 1 ? sizes[d] : 1;
  }
  check_runtime(aoti_torch_empty_strided(ndim, tensor.sizes, tensor.strides, runtime_dtype(dtype),
                                         like.device_type, like.device_index, owner.slot()),
                "aoti_torch_empty_strided");
  check_runtime(aoti_torch_get_data_ptr(owner.get(), &tensor.data), "aoti_torch_get_data_ptr");
  return tensor;
}

// Scratch on the input's device (NULL for none), as int8: every runtime has it, while ExecuTorch
// 1.2.0's tensors have no uint8.
void* allocate_scratch(const Input& like, size_t bytes, OwnedTensor& owner) {
  if (bytes == 0) return nullptr;
  const int64_t size = static_cast<int64_t>(bytes);
  return allocate(like, 1, &size, MTK_INT8, owner).data;
}

void* cpu_stream(int32_t) { return nullptr; }

#ifdef METALTOPK_AOTI_CUDA
void* cuda_stream(int32_t device_index) {
  void* stream = nullptr;
  check_runtime(aoti_torch_get_current_cuda_stream(device_index, &stream),
                "aoti_torch_get_current_cuda_stream");
  return stream;
}
#endif

#ifdef METALTOPK_AOTI_MPS
#ifdef METALTOPK_AOTI_EXECUTORCH_METAL
// Under ExecuTorch's Metal runtime, its stream's command buffer (its open encoder ended, as its
// own ops do), so that the top-k runs in the stream's order, and its tensors' buffers; elsewhere
// NULL: the context's own queue and memory.
void* metal_stream(int32_t) {
  const char* error = nullptr;
  void* command_buffer = metaltopk_aoti::executorch_metal_command_buffer(&error);
  if (error != nullptr) fail(error);
  return command_buffer;
}
constexpr auto metal_native_buffer = metaltopk_aoti::executorch_metal_buffer;
#else
// Built without the ExecuTorch glue (on Linux, to test this entry's error path).
void* metal_stream(int32_t) { return nullptr; }
constexpr void* (*metal_native_buffer)(void*) = nullptr;
#endif
#endif

struct Device {
  mtk_backend backend;
  void* (*stream)(int32_t device_index);
  // The runtime's buffer behind a data pointer, which the library must be given
  // (mtk_register_buffer) before it can use the pointer; NULL: pointers are used as they are.
  void* (*native_buffer)(void* data) = nullptr;
};

// The runtime's buffers one call registered with the library, unregistered when the call ends
// (the command buffer that uses them retains them meanwhile).
class RegisteredBuffers {
 public:
  RegisteredBuffers(mtk_context ctx, const Device& device) : ctx_(ctx), device_(device) {}
  RegisteredBuffers(const RegisteredBuffers&) = delete;
  RegisteredBuffers& operator=(const RegisteredBuffers&) = delete;
  ~RegisteredBuffers() {
    for (int i = 0; i < count_; ++i) mtk_unregister_buffer(ctx_, registered_[i]);
  }
  // Memory the runtime does not know stays as it is: the library resolves it or refuses it.
  void add(const void* data) {
    if (device_.native_buffer == nullptr || data == nullptr) return;
    void* buffer = device_.native_buffer(const_cast<void*>(data));
    if (buffer == nullptr) return;
    if (count_ == kMostBuffers) fail("more runtime buffers than one call registers");
    check(mtk_register_buffer(ctx_, buffer, &registered_[count_]));
    ++count_;
  }

 private:
  static constexpr int kMostBuffers = 4;  // input, values, indices, workspace
  mtk_context ctx_;
  const Device& device_;
  void* registered_[kMostBuffers] = {};
  int count_ = 0;
};

void topk(const Device& device, AtenTensorHandle self, int64_t k, int64_t dim, int32_t largest,
          int32_t sorted, AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  if (ret0 == nullptr || ret1 == nullptr) fail("ret0 and ret1 must not be NULL");
  const Input input = describe(self, "self");
  const int32_t device_index = input.device_index < 0 ? 0 : input.device_index;
  mtk_context ctx = context_for(device.backend, device_index);
  size_t workspace_bytes = 0;
  // Validates every argument before anything is allocated.
  check(mtk_topk_workspace_size(ctx, &input.tensor, k, dim, largest, sorted, MTK_INT64,
                                &workspace_bytes));
  const int32_t ndim = input.tensor.ndim;
  int64_t sizes[MTK_MAX_NDIM] = {};
  for (int32_t d = 0; d < ndim; ++d) sizes[d] = input.tensor.sizes[d];
  if (ndim > 0) sizes[dim < 0 ? dim + ndim : dim] = k;
  OwnedTensor values_owner, indices_owner, workspace_owner;
  const mtk_tensor values = allocate(input, ndim, sizes, input.tensor.dtype, values_owner);
  const mtk_tensor indices = allocate(input, ndim, sizes, MTK_INT64, indices_owner);
  void* workspace = allocate_scratch(input, workspace_bytes, workspace_owner);
  RegisteredBuffers registered(ctx, device);
  for (const void* data : {input.tensor.data, values.data, indices.data, workspace}) {
    registered.add(data);
  }
  check(mtk_topk_with_workspace(ctx, &input.tensor, k, dim, largest, sorted, &values, &indices,
                                workspace, workspace_bytes, device.stream(input.device_index)));
  *ret0 = values_owner.release();
  *ret1 = indices_owner.release();
}

mtk_scoring scoring_of(const char* scoring) {
  const std::string name = scoring != nullptr ? scoring : "";
  if (name == "softmax") return MTK_SCORING_SOFTMAX;
  if (name == "sigmoid") return MTK_SCORING_SIGMOID;
  if (name == "none") return MTK_SCORING_NONE;
  fail("scoring = \"" + name + "\" is not one of \"softmax\", \"sigmoid\", \"none\"");
}

void moe_route(const Device& device, AtenTensorHandle logits, int64_t k, const char* scoring,
               AtenTensorHandle* bias, int64_t n_group, int64_t topk_group, int32_t renormalize,
               double scale, int32_t index_dtype, AtenTensorHandle* ret0,
               AtenTensorHandle* ret1) {
  if (ret0 == nullptr || ret1 == nullptr) fail("ret0 and ret1 must not be NULL");
  const Input input = describe(logits, "logits");
  Input bias_input;
  if (bias != nullptr) bias_input = describe(*bias, "bias");
  const mtk_dtype ids_dtype = library_dtype(index_dtype, "index_dtype");
  mtk_router_params params = MTK_ROUTER_PARAMS_INIT;
  params.k = k;
  params.scoring = scoring_of(scoring);
  params.bias = bias != nullptr ? &bias_input.tensor : nullptr;
  params.n_group = n_group;
  params.topk_group = topk_group;
  params.renormalize = renormalize;
  params.scale = static_cast<float>(scale);
  if (input.tensor.ndim != 2) {
    fail("logits.ndim = " + std::to_string(input.tensor.ndim) + " must be 2 ([tokens, experts])");
  }
  if (k < 0) fail("k = " + std::to_string(k) + " must not be negative");
  mtk_context ctx = context_for(device.backend, input.device_index < 0 ? 0 : input.device_index);
  const int64_t sizes[2] = {input.tensor.sizes[0], k};
  OwnedTensor weights_owner, ids_owner;
  const mtk_tensor weights = allocate(input, 2, sizes, MTK_FLOAT32, weights_owner);
  const mtk_tensor ids = allocate(input, 2, sizes, ids_dtype, ids_owner);
  check(mtk_moe_route(ctx, &input.tensor, &params, &weights, &ids,
                      device.stream(input.device_index)));
  *ret0 = weights_owner.release();
  *ret1 = ids_owner.release();
}

// ---- ragged rows (docs/CONTRACT.md, "Ragged rows") --------------------------------------------

// A tensor that a call reads beside its input (a ragged call's index tensors, the sampling
// ops' per-row arguments), on the input's device: the library cannot tell devices apart, so
// this is checked here; its dtype, rank and size are the library's checks.
Input describe_beside(AtenTensorHandle handle, const char* argument, const Input& input) {
  Input index = describe(handle, argument);
  if (index.device_type != input.device_type ||
      (index.device_index < 0 ? 0 : index.device_index) !=
          (input.device_index < 0 ? 0 : input.device_index)) {
    fail(std::string(argument) + " is on another device than the input");
  }
  return index;
}

// What a ragged op asks for beyond its tensors.
struct RaggedCall {
  int64_t k = 0;
  int64_t dim = -1;  // -1 or 1: rows along the last dim; -2 or 0: the transposed input's rows
  int32_t largest = 1;
  int32_t sorted = 1;
  bool return_values = false;
  mtk_dtype index_dtype = MTK_INT32;
};

// Runs mtk_topk_ragged_with_workspace with outputs and scratch allocated through the runtime:
// indices [rows, k] (or [k, rows] for dim 0) of call.index_dtype, and values of the input's
// dtype where asked (else, in *values_ret, an empty [0] tensor, as the op's schema returns).
void topk_ragged(const Device& device, const Input& scores, mtk_ragged_params& params,
                 const RaggedCall& call, AtenTensorHandle* values_ret,
                 AtenTensorHandle* indices_ret) {
  if (indices_ret == nullptr || (call.return_values && values_ret == nullptr)) {
    fail("the output handles must not be NULL");
  }
  if (scores.tensor.ndim != 2) {
    fail("input.ndim = " + std::to_string(scores.tensor.ndim) + " must be 2 ([rows, n])");
  }
  if (call.dim < -2 || call.dim > 1) {
    fail("dim = " + std::to_string(call.dim) + " is out of range for a 2-d input");
  }
  const bool along_rows = call.dim == -1 || call.dim == 1;
  mtk_tensor input = scores.tensor;
  if (!along_rows) {  // the transposed view: dim 0's columns are the rows
    std::swap(input.sizes[0], input.sizes[1]);
    std::swap(input.strides[0], input.strides[1]);
  }
  const int32_t device_index = scores.device_index < 0 ? 0 : scores.device_index;
  mtk_context ctx = context_for(device.backend, device_index);
  size_t workspace_bytes = 0;
  // Validates every argument before anything is allocated.
  check(mtk_topk_ragged_workspace_size(ctx, &input, call.k, call.largest, call.sorted, &params,
                                       call.index_dtype, &workspace_bytes));
  const int64_t rows = input.sizes[0];
  const int64_t out_sizes[2] = {along_rows ? rows : call.k, along_rows ? call.k : rows};
  // The outputs are contiguous in the caller's layout; dim 0's are described transposed.
  auto as_rows = [&](mtk_tensor tensor) {
    if (!along_rows) {
      std::swap(tensor.sizes[0], tensor.sizes[1]);
      std::swap(tensor.strides[0], tensor.strides[1]);
    }
    return tensor;
  };
  OwnedTensor values_owner, indices_owner, workspace_owner;
  const mtk_tensor indices =
      as_rows(allocate(scores, 2, out_sizes, call.index_dtype, indices_owner));
  mtk_tensor values{};
  if (call.return_values) {
    values = as_rows(allocate(scores, 2, out_sizes, input.dtype, values_owner));
  } else if (values_ret != nullptr) {
    const int64_t empty = 0;
    allocate(scores, 1, &empty, input.dtype, values_owner);
  }
  void* workspace = allocate_scratch(scores, workspace_bytes, workspace_owner);
  check(mtk_topk_ragged_with_workspace(ctx, &input, call.k, call.largest, call.sorted, &params,
                                       call.return_values ? &values : nullptr, &indices,
                                       workspace, workspace_bytes,
                                       device.stream(scores.device_index)));
  if (values_ret != nullptr) *values_ret = values_owner.release();
  *indices_ret = indices_owner.release();
}

void topk_ragged_op(const Device& device, AtenTensorHandle self, int64_t k,
                    AtenTensorHandle lengths, AtenTensorHandle* starts, int64_t dim,
                    int32_t largest, int32_t sorted, int32_t return_values,
                    AtenTensorHandle* ret0, AtenTensorHandle* ret1) {
  if (ret0 == nullptr || ret1 == nullptr) fail("ret0 and ret1 must not be NULL");
  const Input input = describe(self, "self");
  const Input lengths_input = describe_beside(lengths, "lengths", input);
  Input starts_input;
  if (starts != nullptr) starts_input = describe_beside(*starts, "starts", input);
  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  params.lengths = &lengths_input.tensor;
  params.starts = starts != nullptr ? &starts_input.tensor : nullptr;
  RaggedCall call;
  call.k = k;
  call.dim = dim;
  call.largest = largest;
  call.sorted = sorted;
  call.return_values = return_values != 0;
  call.index_dtype = MTK_INT64;
  topk_ragged(device, input, params, call, ret0, ret1);
}

void ragged_transform_op(const Device& device, AtenTensorHandle scores, AtenTensorHandle offsets,
                         AtenTensorHandle lengths, int64_t k, AtenTensorHandle* ret0) {
  if (ret0 == nullptr) fail("ret0 must not be NULL");
  const Input input = describe(scores, "scores");
  const Input offsets_input = describe_beside(offsets, "offsets", input);
  const Input lengths_input = describe_beside(lengths, "lengths", input);
  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  params.lengths = &lengths_input.tensor;
  params.transform = MTK_INDEX_TRANSFORM_RAGGED;
  params.offsets = &offsets_input.tensor;
  RaggedCall call;
  call.k = k;
  topk_ragged(device, input, params, call, nullptr, ret0);
}

void page_table_transform_op(const Device& device, AtenTensorHandle scores,
                             AtenTensorHandle src_page_table, AtenTensorHandle lengths, int64_t k,
                             AtenTensorHandle* row_to_batch, int64_t page_size,
                             AtenTensorHandle* ret0) {
  if (ret0 == nullptr) fail("ret0 must not be NULL");
  const Input input = describe(scores, "scores");
  const Input table_input = describe_beside(src_page_table, "src_page_table", input);
  const Input lengths_input = describe_beside(lengths, "lengths", input);
  Input row_to_batch_input;
  if (row_to_batch != nullptr) {
    row_to_batch_input = describe_beside(*row_to_batch, "row_to_batch", input);
  }
  mtk_ragged_params params = MTK_RAGGED_PARAMS_INIT;
  params.lengths = &lengths_input.tensor;
  params.transform = MTK_INDEX_TRANSFORM_PAGE_TABLE;
  params.page_table = &table_input.tensor;
  params.page_size = page_size;
  params.row_to_batch = row_to_batch != nullptr ? &row_to_batch_input.tensor : nullptr;
  RaggedCall call;
  call.k = k;
  topk_ragged(device, input, params, call, nullptr, ret0);
}

// ---- sampling (docs/CONTRACT.md, "Sampling filters") ------------------------------------------

// One per-row argument as the ops take it: a [rows] tensor (NULL: none) or the scalar every row
// uses.
template <typename Scalar>
struct PerRow {
  AtenTensorHandle* tensor;
  Scalar value;
};

// The filters and temperature of a sampling op; the ones an op does not take keep the C
// defaults, which the library reads as unset.
struct SamplingArguments {
  PerRow<int64_t> top_k{nullptr, 0};
  PerRow<double> top_p{nullptr, 1.0};
  PerRow<double> min_p{nullptr, 0.0};
  PerRow<double> temperature{nullptr, 1.0};
};

// The per-row tensors described, and the params pointing at them.
struct SamplingParams {
  Input tensors[4];
  mtk_sampling_params params = MTK_SAMPLING_PARAMS_INIT;

  SamplingParams(const SamplingArguments& arguments, const Input& input) {
    params.top_k_value = arguments.top_k.value;
    params.top_p_value = static_cast<float>(arguments.top_p.value);
    params.min_p_value = static_cast<float>(arguments.min_p.value);
    params.temperature_value = static_cast<float>(arguments.temperature.value);
    const AtenTensorHandle* handles[4] = {arguments.top_k.tensor, arguments.top_p.tensor,
                                          arguments.min_p.tensor, arguments.temperature.tensor};
    const char* names[4] = {"top_k", "top_p", "min_p", "temperature"};
    const mtk_tensor** slots[4] = {&params.top_k, &params.top_p, &params.min_p,
                                   &params.temperature};
    for (int i = 0; i < 4; ++i) {
      if (handles[i] == nullptr) continue;
      tensors[i] = describe_beside(*handles[i], names[i], input);
      *slots[i] = &tensors[i].tensor;
    }
  }
  SamplingParams(const SamplingParams&) = delete;
  SamplingParams& operator=(const SamplingParams&) = delete;
};

// Runs one sampling operation with its output and scratch allocated through the runtime:
// `out` [rows, n] (the logits' dtype for the mask, float32 for renormalised probabilities) or
// the samples [rows] of `index_dtype` (a runtime dtype code). `uniforms` is NULL for the
// filters.
void sampling(const Device& device, mtk_sampling_op op, AtenTensorHandle input_handle,
              AtenTensorHandle uniforms_handle, const SamplingArguments& arguments,
              int32_t index_dtype, AtenTensorHandle* ret0) {
  if (ret0 == nullptr) fail("ret0 must not be NULL");
  const bool logits = op == MTK_SAMPLING_TOP_K_MASK_LOGITS || op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
  const bool samples = op == MTK_SAMPLING_SAMPLE || op == MTK_SAMPLING_SAMPLE_FROM_LOGITS;
  const Input input = describe(input_handle, logits ? "logits" : "probs");
  const SamplingParams described(arguments, input);
  Input uniforms;
  if (samples) uniforms = describe_beside(uniforms_handle, "uniforms", input);
  const mtk_dtype output_dtype = samples ? library_dtype(index_dtype, "index_dtype")
                                 : op == MTK_SAMPLING_TOP_K_MASK_LOGITS ? input.tensor.dtype
                                                                        : MTK_FLOAT32;
  mtk_context ctx = context_for(device.backend, input.device_index < 0 ? 0 : input.device_index);
  size_t workspace_bytes = 0;
  // Validates the input, the params and the output dtype before anything is allocated.
  check(mtk_sampling_workspace_size(ctx, op, &input.tensor, &described.params, output_dtype,
                                    &workspace_bytes));
  OwnedTensor output_owner, workspace_owner;
  const mtk_tensor output = allocate(input, samples ? 1 : 2, input.tensor.sizes, output_dtype,
                                     output_owner);
  void* workspace = allocate_scratch(input, workspace_bytes, workspace_owner);
  check(mtk_sampling_with_workspace(ctx, op, &input.tensor, &described.params,
                                    samples ? &uniforms.tensor : nullptr, &output, workspace,
                                    workspace_bytes, device.stream(input.device_index)));
  *ret0 = output_owner.release();
}

void top_k_mask_logits_op(const Device& device, AtenTensorHandle logits, AtenTensorHandle* top_k,
                          int64_t top_k_value, AtenTensorHandle* ret0) {
  SamplingArguments arguments;
  arguments.top_k = {top_k, top_k_value};
  sampling(device, MTK_SAMPLING_TOP_K_MASK_LOGITS, logits, nullptr, arguments, 0, ret0);
}

SamplingArguments filters(AtenTensorHandle* top_k, int64_t top_k_value, AtenTensorHandle* top_p,
                          double top_p_value, AtenTensorHandle* min_p, double min_p_value) {
  SamplingArguments arguments;
  arguments.top_k = {top_k, top_k_value};
  arguments.top_p = {top_p, top_p_value};
  arguments.min_p = {min_p, min_p_value};
  return arguments;
}

template <typename Body>
AOTITorchError guarded(const char* function, Body&& body) noexcept {
  try {
    try {
      body();
      last_error.clear();
      return AOTI_TORCH_SUCCESS;
    } catch (const ShimFailure& failure) {
      last_error = failure.message;
    } catch (const std::bad_alloc&) {
      last_error = "host allocation failed";
    } catch (...) {
      last_error = "unexpected exception";
    }
    std::fprintf(stderr, "metaltopk: %s: %s\n", function, last_error.c_str());
  } catch (...) {  // the message itself could not be stored
  }
  return AOTI_TORCH_FAILURE;
}

constexpr Device kCpu{MTK_BACKEND_CPU, cpu_stream};

}  // namespace

extern "C" {

AOTITorchError aoti_torch_cpu_mtk_topk(AtenTensorHandle self, int64_t k, int64_t dim,
                                       int32_t largest, int32_t sorted, AtenTensorHandle* ret0,
                                       AtenTensorHandle* ret1) {
  return guarded(__func__, [&] { topk(kCpu, self, k, dim, largest, sorted, ret0, ret1); });
}

AOTITorchError aoti_torch_cpu_mtk_moe_route(AtenTensorHandle logits, int64_t k,
                                            const char* scoring, AtenTensorHandle* bias,
                                            int64_t n_group, int64_t topk_group,
                                            int32_t renormalize, double scale,
                                            int32_t index_dtype, AtenTensorHandle* ret0,
                                            AtenTensorHandle* ret1) {
  return guarded(__func__, [&] {
    moe_route(kCpu, logits, k, scoring, bias, n_group, topk_group, renormalize, scale,
              index_dtype, ret0, ret1);
  });
}

AOTITorchError aoti_torch_cpu_mtk_topk_ragged(AtenTensorHandle self, int64_t k,
                                              AtenTensorHandle lengths, AtenTensorHandle* starts,
                                              int64_t dim, int32_t largest, int32_t sorted,
                                              int32_t return_values, AtenTensorHandle* ret0,
                                              AtenTensorHandle* ret1) {
  return guarded(__func__, [&] {
    topk_ragged_op(kCpu, self, k, lengths, starts, dim, largest, sorted, return_values, ret0,
                   ret1);
  });
}

AOTITorchError aoti_torch_cpu_mtk_topk_ragged_transform(AtenTensorHandle scores,
                                                        AtenTensorHandle offsets,
                                                        AtenTensorHandle lengths, int64_t k,
                                                        AtenTensorHandle* ret0) {
  return guarded(__func__, [&] { ragged_transform_op(kCpu, scores, offsets, lengths, k, ret0); });
}

AOTITorchError aoti_torch_cpu_mtk_topk_page_table_transform(
    AtenTensorHandle scores, AtenTensorHandle src_page_table, AtenTensorHandle lengths, int64_t k,
    AtenTensorHandle* row_to_batch, int64_t page_size, AtenTensorHandle* ret0) {
  return guarded(__func__, [&] {
    page_table_transform_op(kCpu, scores, src_page_table, lengths, k, row_to_batch, page_size,
                            ret0);
  });
}

AOTITorchError aoti_torch_cpu_mtk_top_k_mask_logits(AtenTensorHandle logits,
                                                    AtenTensorHandle* top_k, int64_t top_k_value,
                                                    AtenTensorHandle* ret0) {
  return guarded(__func__, [&] { top_k_mask_logits_op(kCpu, logits, top_k, top_k_value, ret0); });
}

AOTITorchError aoti_torch_cpu_mtk_renorm_probs(AtenTensorHandle probs, AtenTensorHandle* top_k,
                                               int64_t top_k_value, AtenTensorHandle* top_p,
                                               double top_p_value, AtenTensorHandle* min_p,
                                               double min_p_value, AtenTensorHandle* ret0) {
  return guarded(__func__, [&] {
    sampling(kCpu, MTK_SAMPLING_RENORM_PROBS, probs, nullptr,
             filters(top_k, top_k_value, top_p, top_p_value, min_p, min_p_value), 0, ret0);
  });
}

AOTITorchError aoti_torch_cpu_mtk_sample(AtenTensorHandle probs, AtenTensorHandle uniforms,
                                         AtenTensorHandle* top_k, int64_t top_k_value,
                                         AtenTensorHandle* top_p, double top_p_value,
                                         AtenTensorHandle* min_p, double min_p_value,
                                         int32_t index_dtype, AtenTensorHandle* ret0) {
  return guarded(__func__, [&] {
    sampling(kCpu, MTK_SAMPLING_SAMPLE, probs, uniforms,
             filters(top_k, top_k_value, top_p, top_p_value, min_p, min_p_value), index_dtype,
             ret0);
  });
}

AOTITorchError aoti_torch_cpu_mtk_sample_from_logits(
    AtenTensorHandle logits, AtenTensorHandle uniforms, AtenTensorHandle* top_k,
    int64_t top_k_value, AtenTensorHandle* top_p, double top_p_value, AtenTensorHandle* min_p,
    double min_p_value, AtenTensorHandle* temperature, double temperature_value,
    int32_t index_dtype, AtenTensorHandle* ret0) {
  return guarded(__func__, [&] {
    SamplingArguments arguments =
        filters(top_k, top_k_value, top_p, top_p_value, min_p, min_p_value);
    arguments.temperature = {temperature, temperature_value};
    sampling(kCpu, MTK_SAMPLING_SAMPLE_FROM_LOGITS, logits, uniforms, arguments, index_dtype,
             ret0);
  });
}

#ifdef METALTOPK_AOTI_CUDA
AOTITorchError aoti_torch_cuda_mtk_topk(AtenTensorHandle self, int64_t k, int64_t dim,
                                        int32_t largest, int32_t sorted, AtenTensorHandle* ret0,
                                        AtenTensorHandle* ret1) {
  static constexpr Device cuda{MTK_BACKEND_CUDA, cuda_stream};
  return guarded(__func__, [&] { topk(cuda, self, k, dim, largest, sorted, ret0, ret1); });
}

AOTITorchError aoti_torch_cuda_mtk_moe_route(AtenTensorHandle logits, int64_t k,
                                             const char* scoring, AtenTensorHandle* bias,
                                             int64_t n_group, int64_t topk_group,
                                             int32_t renormalize, double scale,
                                             int32_t index_dtype, AtenTensorHandle* ret0,
                                             AtenTensorHandle* ret1) {
  static constexpr Device cuda{MTK_BACKEND_CUDA, cuda_stream};
  return guarded(__func__, [&] {
    moe_route(cuda, logits, k, scoring, bias, n_group, topk_group, renormalize, scale,
              index_dtype, ret0, ret1);
  });
}

AOTITorchError aoti_torch_cuda_mtk_topk_ragged(AtenTensorHandle self, int64_t k,
                                               AtenTensorHandle lengths, AtenTensorHandle* starts,
                                               int64_t dim, int32_t largest, int32_t sorted,
                                               int32_t return_values, AtenTensorHandle* ret0,
                                               AtenTensorHandle* ret1) {
  static constexpr Device cuda{MTK_BACKEND_CUDA, cuda_stream};
  return guarded(__func__, [&] {
    topk_ragged_op(cuda, self, k, lengths, starts, dim, largest, sorted, return_values, ret0,
                   ret1);
  });
}

AOTITorchError aoti_torch_cuda_mtk_topk_ragged_transform(AtenTensorHandle scores,
                                                         AtenTensorHandle offsets,
                                                         AtenTensorHandle lengths, int64_t k,
                                                         AtenTensorHandle* ret0) {
  static constexpr Device cuda{MTK_BACKEND_CUDA, cuda_stream};
  return guarded(__func__, [&] { ragged_transform_op(cuda, scores, offsets, lengths, k, ret0); });
}

AOTITorchError aoti_torch_cuda_mtk_topk_page_table_transform(
    AtenTensorHandle scores, AtenTensorHandle src_page_table, AtenTensorHandle lengths, int64_t k,
    AtenTensorHandle* row_to_batch, int64_t page_size, AtenTensorHandle* ret0) {
  static constexpr Device cuda{MTK_BACKEND_CUDA, cuda_stream};
  return guarded(__func__, [&] {
    page_table_transform_op(cuda, scores, src_page_table, lengths, k, row_to_batch, page_size,
                            ret0);
  });
}

AOTITorchError aoti_torch_cuda_mtk_top_k_mask_logits(AtenTensorHandle logits,
                                                     AtenTensorHandle* top_k, int64_t top_k_value,
                                                     AtenTensorHandle* ret0) {
  static constexpr Device cuda{MTK_BACKEND_CUDA, cuda_stream};
  return guarded(__func__, [&] { top_k_mask_logits_op(cuda, logits, top_k, top_k_value, ret0); });
}

AOTITorchError aoti_torch_cuda_mtk_renorm_probs(AtenTensorHandle probs, AtenTensorHandle* top_k,
                                                int64_t top_k_value, AtenTensorHandle* top_p,
                                                double top_p_value, AtenTensorHandle* min_p,
                                                double min_p_value, AtenTensorHandle* ret0) {
  static constexpr Device cuda{MTK_BACKEND_CUDA, cuda_stream};
  return guarded(__func__, [&] {
    sampling(cuda, MTK_SAMPLING_RENORM_PROBS, probs, nullptr,
             filters(top_k, top_k_value, top_p, top_p_value, min_p, min_p_value), 0, ret0);
  });
}

AOTITorchError aoti_torch_cuda_mtk_sample(AtenTensorHandle probs, AtenTensorHandle uniforms,
                                          AtenTensorHandle* top_k, int64_t top_k_value,
                                          AtenTensorHandle* top_p, double top_p_value,
                                          AtenTensorHandle* min_p, double min_p_value,
                                          int32_t index_dtype, AtenTensorHandle* ret0) {
  static constexpr Device cuda{MTK_BACKEND_CUDA, cuda_stream};
  return guarded(__func__, [&] {
    sampling(cuda, MTK_SAMPLING_SAMPLE, probs, uniforms,
             filters(top_k, top_k_value, top_p, top_p_value, min_p, min_p_value), index_dtype,
             ret0);
  });
}

AOTITorchError aoti_torch_cuda_mtk_sample_from_logits(
    AtenTensorHandle logits, AtenTensorHandle uniforms, AtenTensorHandle* top_k,
    int64_t top_k_value, AtenTensorHandle* top_p, double top_p_value, AtenTensorHandle* min_p,
    double min_p_value, AtenTensorHandle* temperature, double temperature_value,
    int32_t index_dtype, AtenTensorHandle* ret0) {
  static constexpr Device cuda{MTK_BACKEND_CUDA, cuda_stream};
  return guarded(__func__, [&] {
    SamplingArguments arguments =
        filters(top_k, top_k_value, top_p, top_p_value, min_p, min_p_value);
    arguments.temperature = {temperature, temperature_value};
    sampling(cuda, MTK_SAMPLING_SAMPLE_FROM_LOGITS, logits, uniforms, arguments, index_dtype,
             ret0);
  });
}

#ifdef METALTOPK_AOTI_ATEN_TOPK
AOTITorchError aoti_torch_cuda_topk(AtenTensorHandle self, int64_t k, int64_t dim,
                                    int32_t largest, int32_t sorted, AtenTensorHandle* ret0,
                                    AtenTensorHandle* ret1) {
  return aoti_torch_cuda_mtk_topk(self, k, dim, largest, sorted, ret0, ret1);
}
#endif
#endif

#ifdef METALTOPK_AOTI_MPS
AOTITorchError aoti_torch_mps_topk(AtenTensorHandle self, int64_t k, int64_t dim,
                                   int32_t largest, int32_t sorted, AtenTensorHandle* ret0,
                                   AtenTensorHandle* ret1) {
  static constexpr Device metal{MTK_BACKEND_METAL, metal_stream, metal_native_buffer};
  return guarded(__func__, [&] { topk(metal, self, k, dim, largest, sorted, ret0, ret1); });
}
#endif

const char* metaltopk_aoti_last_error(void) { return last_error.c_str(); }

}  // extern "C"
