// The AOTInductor shim (adapters/aoti/) against a stand-in for ExecuTorch 1.2.0's slim-tensor
// shims (backends/aoti/common_shims_slim.cpp, backends/cuda/runtime/shims/): of the functions
// the shim imports, exactly the ones 1.2.0 implements. It has no aoti_torch_dtype_float16,
// aoti_torch_dtype_uint8 or aoti_torch_dtype_float64, and like 1.2.0's SlimTensor its
// empty_strided rejects those dtypes' codes (torch's numbering: uint8 0, float16 5, float64 7).
// Linking proves the shim needs no missing function; the run proves that a float16 or uint8
// tensor is rejected as unsupported with a clear message (never read as another dtype), that
// nothing is allocated in a dtype the runtime lacks (the scratch included), and that the
// dtypes the runtime has still give the library's results.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "metaltopk.h"
#include "metaltopk_aoti.h"

struct AtenTensorOpaque {
  std::vector<int64_t> sizes, strides;
  int32_t dtype;
  std::vector<unsigned char> storage;
};

namespace {

// ExecuTorch 1.2.0's slim ScalarType (torch's codes for the dtypes it has).
enum SlimDtype : int32_t { kI8 = 1, kI16 = 2, kI32 = 3, kI64 = 4, kF32 = 6, kBool = 11,
                           kBF16 = 15 };
// Codes a torch-built model could hand over for dtypes 1.2.0 lacks.
constexpr int32_t kTorchUint8 = 0, kTorchFloat16 = 5;
constexpr int32_t kCpu = 0;

long live_tensors = 0;
std::vector<int32_t> allocated_dtypes;

bool slim_has(int32_t dtype) {
  switch (dtype) {
    case kI8: case kI16: case kI32: case kI64: case kF32: case kBool: case kBF16: return true;
    default: return false;
  }
}

size_t element_size(int32_t dtype) {
  switch (dtype) {
    case kI8: case kBool: case kTorchUint8: return 1;
    case kI16: case kBF16: case kTorchFloat16: return 2;
    case kI32: case kF32: return 4;
    default: return 8;
  }
}

AtenTensorHandle new_tensor(std::vector<int64_t> sizes, int32_t dtype) {
  std::vector<int64_t> strides(sizes.size());
  int64_t step = 1, elements = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = step;
    step *= sizes[d] > 1 ? sizes[d] : 1;
    elements *= sizes[d];
  }
  auto* t = new AtenTensorOpaque{std::move(sizes), std::move(strides), dtype, {}};
  t->storage.resize(static_cast<size_t>(elements) * element_size(dtype));
  ++live_tensors;
  return t;
}

}  // namespace

extern "C" {

int32_t aoti_torch_device_type_cpu() { return kCpu; }
int32_t aoti_torch_device_type_cuda() { return 1; }
int32_t aoti_torch_dtype_float32() { return kF32; }
int32_t aoti_torch_dtype_bfloat16() { return kBF16; }
int32_t aoti_torch_dtype_int8() { return kI8; }
int32_t aoti_torch_dtype_int16() { return kI16; }
int32_t aoti_torch_dtype_int32() { return kI32; }
int32_t aoti_torch_dtype_int64() { return kI64; }

AOTITorchError aoti_torch_empty_strided(int64_t ndim, const int64_t* sizes, const int64_t*,
                                        int32_t dtype, int32_t device_type, int32_t,
                                        AtenTensorHandle* ret) {
  allocated_dtypes.push_back(dtype);
  if (device_type != kCpu || !slim_has(dtype)) return AOTI_TORCH_FAILURE;
  *ret = new_tensor({sizes, sizes + ndim}, dtype);
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_delete_tensor_object(AtenTensorHandle tensor) {
  --live_tensors;
  delete tensor;
  return AOTI_TORCH_SUCCESS;
}

AOTITorchError aoti_torch_get_data_ptr(AtenTensorHandle t, void** ret) {
  *ret = t->storage.empty() ? nullptr : t->storage.data();
  return AOTI_TORCH_SUCCESS;
}
AOTITorchError aoti_torch_get_dim(AtenTensorHandle t, int64_t* ret) {
  *ret = static_cast<int64_t>(t->sizes.size());
  return AOTI_TORCH_SUCCESS;
}
AOTITorchError aoti_torch_get_sizes(AtenTensorHandle t, int64_t** ret) {
  *ret = t->sizes.data();
  return AOTI_TORCH_SUCCESS;
}
AOTITorchError aoti_torch_get_strides(AtenTensorHandle t, int64_t** ret) {
  *ret = t->strides.data();
  return AOTI_TORCH_SUCCESS;
}
AOTITorchError aoti_torch_get_dtype(AtenTensorHandle t, int32_t* ret) {
  *ret = t->dtype;
  return AOTI_TORCH_SUCCESS;
}
AOTITorchError aoti_torch_get_device_type(AtenTensorHandle, int32_t* ret) {
  *ret = kCpu;
  return AOTI_TORCH_SUCCESS;
}
AOTITorchError aoti_torch_get_device_index(AtenTensorHandle, int32_t* ret) {
  *ret = -1;
  return AOTI_TORCH_SUCCESS;
}

}  // extern "C"

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "FAIL %s\n", what.c_str());
  }
}

bool contains(const char* text, const char* part) { return std::strstr(text, part) != nullptr; }

mtk_tensor view(AtenTensorHandle t, mtk_dtype dtype) {
  mtk_tensor d{};
  d.data = t->storage.data();
  d.dtype = dtype;
  d.ndim = static_cast<int32_t>(t->sizes.size());
  for (int32_t i = 0; i < d.ndim; ++i) {
    d.sizes[i] = t->sizes[i];
    d.strides[i] = t->strides[i];
  }
  return d;
}

// A [rows, n] float32 tensor with ties.
AtenTensorHandle float_input(int64_t rows, int64_t n) {
  AtenTensorHandle t = new_tensor({rows, n}, kF32);
  float* data = reinterpret_cast<float*>(t->storage.data());
  for (int64_t i = 0; i < rows * n; ++i) data[i] = static_cast<float>((i * 7919) % 13) - 6.0f;
  return t;
}

// The supported dtypes run, allocate only dtypes the runtime has, and match the library.
void float32_topk_matches_the_library() {
  const int64_t rows = 4, n = 3000, k = 50;
  AtenTensorHandle input = float_input(rows, n);
  allocated_dtypes.clear();
  AtenTensorHandle values = nullptr, indices = nullptr;
  expect(aoti_torch_cpu_mtk_topk(input, k, -1, 1, 1, &values, &indices) == AOTI_TORCH_SUCCESS,
         std::string("float32 topk failed: ") + metaltopk_aoti_last_error());
  for (int32_t dtype : allocated_dtypes) {
    expect(slim_has(dtype), "allocated dtype code " + std::to_string(dtype) +
                                ", which ExecuTorch 1.2.0 lacks");
  }
  if (values != nullptr && indices != nullptr) {
    expect(values->dtype == kF32 && indices->dtype == kI64, "output dtypes");
    AtenTensorHandle want_values = new_tensor({rows, k}, kF32);
    AtenTensorHandle want_indices = new_tensor({rows, k}, kI64);
    mtk_context ctx = nullptr;
    expect(mtk_context_create(MTK_BACKEND_CPU, 0, &ctx) == MTK_SUCCESS, "context");
    const mtk_tensor in = view(input, MTK_FLOAT32);
    const mtk_tensor out_values = view(want_values, MTK_FLOAT32);
    const mtk_tensor out_indices = view(want_indices, MTK_INT64);
    expect(mtk_topk(ctx, &in, k, -1, 1, 1, &out_values, &out_indices, nullptr) == MTK_SUCCESS,
           "direct mtk_topk");
    mtk_context_destroy(ctx);
    expect(values->storage == want_values->storage && indices->storage == want_indices->storage,
           "float32 topk differs from mtk_topk");
    aoti_torch_delete_tensor_object(want_values);
    aoti_torch_delete_tensor_object(want_indices);
    aoti_torch_delete_tensor_object(values);
    aoti_torch_delete_tensor_object(indices);
  }
  aoti_torch_delete_tensor_object(input);
}

// A tensor of a dtype whose getter the runtime lacks is refused, naming the missing getter.
void missing_dtype_is_unsupported(int32_t code, const char* name) {
  AtenTensorHandle input = new_tensor({2, 64}, code);
  const long before = live_tensors;
  AtenTensorHandle untouched0 = reinterpret_cast<AtenTensorHandle>(0x10);
  AtenTensorHandle untouched1 = untouched0;
  expect(aoti_torch_cpu_mtk_topk(input, 4, -1, 1, 1, &untouched0, &untouched1) ==
             AOTI_TORCH_FAILURE,
         std::string(name) + " input was accepted");
  const char* message = metaltopk_aoti_last_error();
  expect(contains(message, ("dtype code " + std::to_string(code)).c_str()) &&
             contains(message, "does not support in this runtime") &&
             contains(message, "the runtime names no") && contains(message, name),
         std::string(name) + ": unclear message: " + message);
  expect(untouched0 == reinterpret_cast<AtenTensorHandle>(0x10) && untouched1 == untouched0,
         std::string(name) + ": a failed call wrote its outputs");
  expect(live_tensors == before, std::string(name) + ": a failed call leaked tensors");
  aoti_torch_delete_tensor_object(input);
}

void router_index_dtypes() {
  AtenTensorHandle logits = float_input(3, 64);
  AtenTensorHandle weights = nullptr, ids = nullptr;
  expect(aoti_torch_cpu_mtk_moe_route(logits, 8, "softmax", nullptr, 0, 0, 1, 1.0, kI32,
                                      &weights, &ids) == AOTI_TORCH_SUCCESS,
         std::string("router failed: ") + metaltopk_aoti_last_error());
  if (ids != nullptr) {
    expect(weights->dtype == kF32 && ids->dtype == kI32, "router output dtypes");
    aoti_torch_delete_tensor_object(weights);
    aoti_torch_delete_tensor_object(ids);
  }
  const long before = live_tensors;
  expect(aoti_torch_cpu_mtk_moe_route(logits, 8, "softmax", nullptr, 0, 0, 1, 1.0, kTorchUint8,
                                      &weights, &ids) == AOTI_TORCH_FAILURE &&
             contains(metaltopk_aoti_last_error(), "index_dtype has dtype code 0"),
         std::string("index_dtype uint8 not refused clearly: ") + metaltopk_aoti_last_error());
  expect(live_tensors == before, "router: a failed call leaked tensors");
  aoti_torch_delete_tensor_object(logits);
}

}  // namespace

int main() {
  float32_topk_matches_the_library();
  missing_dtype_is_unsupported(kTorchFloat16, "float16");
  missing_dtype_is_unsupported(kTorchUint8, "uint8");
  router_index_dtypes();
  expect(live_tensors == 0, "tensors left alive: " + std::to_string(live_tensors));
  std::printf("shim against ExecuTorch 1.2.0's shim set: %s\n", failures == 0 ? "ok" : "FAILED");
  return failures == 0 ? 0 : 1;
}
