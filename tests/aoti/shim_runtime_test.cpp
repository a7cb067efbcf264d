// The AOTInductor shim (adapters/aoti/) in a runtime that is not libtorch: this file implements
// the C shim functions the shim may call, over tensors of its own, as ExecuTorch's AOTI backends
// do over theirs (and like them, it has no float64). Linking proves the shim needs nothing
// else. The runtime counts its live tensors and can fail its n-th allocation; together with the
// library's own failure points (metaltopk_testing.h) that sweeps every failure path of every
// entry point: each must return AOTI_TORCH_FAILURE with a message, leave ret0 and ret1
// untouched, and leave no tensor and no library allocation behind. The clean calls must match
// mtk_topk / mtk_moe_route / mtk_topk_ragged called directly.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <vector>

#include "metaltopk.h"
#include "metaltopk_aoti.h"
#include "metaltopk_testing.h"

// ---- the runtime ------------------------------------------------------------------------------

// Host allocations through operator new, of the shim and the library alike (this program's
// operator new is the process's): while armed, the n-th one throws.
namespace {
bool new_armed = false;
long new_seen = 0, new_target = 0;
}  // namespace

void* operator new(size_t bytes) {
  if (new_armed && ++new_seen == new_target) throw std::bad_alloc();
  if (void* p = std::malloc(bytes != 0 ? bytes : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

struct AtenTensorOpaque {
  std::vector<int64_t> sizes, strides;
  int32_t dtype;
  int32_t device_type;
  int32_t device_index;
  std::vector<unsigned char> storage;
};

namespace {

// torch's ScalarType numbering, as a runtime may choose its own.
enum RuntimeDtype : int32_t { kU8 = 0, kI8 = 1, kI16 = 2, kI32 = 3, kI64 = 4, kF16 = 5,
                              kF32 = 6, kF64 = 7, kBool = 11, kBF16 = 15 };
constexpr int32_t kCpu = 0;

long live_tensors = 0;
long allocations_seen = 0;
long fail_allocation_at = 0;  // 0: never

size_t element_size(int32_t dtype) {
  switch (dtype) {
    case kU8: case kI8: case kBool: return 1;
    case kI16: case kF16: case kBF16: return 2;
    case kI32: case kF32: return 4;
    default: return 8;
  }
}

AtenTensorHandle new_tensor(std::vector<int64_t> sizes, std::vector<int64_t> strides,
                            int32_t dtype) {
  auto* t = new AtenTensorOpaque{std::move(sizes), std::move(strides), dtype, kCpu, -1, {}};
  size_t extent = 1;
  for (size_t d = 0; d < t->sizes.size(); ++d) {
    if (t->sizes[d] == 0) extent = 0;
  }
  if (extent != 0) {
    for (size_t d = 0; d < t->sizes.size(); ++d) extent += (t->sizes[d] - 1) * t->strides[d];
  }
  t->storage.resize(extent * element_size(dtype));
  ++live_tensors;
  return t;
}

}  // namespace

extern "C" {

int32_t aoti_torch_device_type_cpu() { return kCpu; }
int32_t aoti_torch_device_type_cuda() { return 1; }
int32_t aoti_torch_dtype_float32() { return kF32; }
int32_t aoti_torch_dtype_float16() { return kF16; }
int32_t aoti_torch_dtype_bfloat16() { return kBF16; }
int32_t aoti_torch_dtype_int8() { return kI8; }
int32_t aoti_torch_dtype_uint8() { return kU8; }
int32_t aoti_torch_dtype_int16() { return kI16; }
int32_t aoti_torch_dtype_int32() { return kI32; }
int32_t aoti_torch_dtype_int64() { return kI64; }

AOTITorchError aoti_torch_empty_strided(int64_t ndim, const int64_t* sizes, const int64_t* strides,
                                        int32_t dtype, int32_t device_type, int32_t device_index,
                                        AtenTensorHandle* ret) {
  if (fail_allocation_at != 0 && ++allocations_seen == fail_allocation_at) {
    return AOTI_TORCH_FAILURE;
  }
  if (device_type != kCpu) return AOTI_TORCH_FAILURE;
  AtenTensorHandle t = new_tensor({sizes, sizes + ndim}, {strides, strides + ndim}, dtype);
  t->device_index = device_index;
  *ret = t;
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
AOTITorchError aoti_torch_get_device_type(AtenTensorHandle t, int32_t* ret) {
  *ret = t->device_type;
  return AOTI_TORCH_SUCCESS;
}
AOTITorchError aoti_torch_get_device_index(AtenTensorHandle t, int32_t* ret) {
  *ret = t->device_index;
  return AOTI_TORCH_SUCCESS;
}

}  // extern "C"

// ---- the tests --------------------------------------------------------------------------------

namespace {

int failures = 0;

void expect(bool ok, const std::string& what) {
  if (!ok) {
    ++failures;
    std::fprintf(stderr, "FAIL %s\n", what.c_str());
  }
}

mtk_tensor describe(AtenTensorHandle t) {
  mtk_tensor d{};
  d.data = t->storage.empty() ? nullptr : t->storage.data();
  d.dtype = t->dtype == kF32    ? MTK_FLOAT32
            : t->dtype == kBF16 ? MTK_BFLOAT16
            : t->dtype == kI32  ? MTK_INT32
                                : MTK_INT64;
  d.ndim = static_cast<int32_t>(t->sizes.size());
  for (int32_t i = 0; i < d.ndim; ++i) {
    d.sizes[i] = t->sizes[i];
    d.strides[i] = t->strides[i];
  }
  return d;
}

// A [rows, n] float32 tensor (optionally transposed in memory) of tie-heavy values.
AtenTensorHandle float_input(int64_t rows, int64_t n, bool transposed) {
  AtenTensorHandle t = transposed ? new_tensor({rows, n}, {1, rows}, kF32)
                                  : new_tensor({rows, n}, {n, 1}, kF32);
  float* data = reinterpret_cast<float*>(t->storage.data());
  for (int64_t i = 0; i < rows * n; ++i) data[i] = static_cast<float>((i * 7919) % 13) - 6.0f;
  return t;
}

bool same_bytes(AtenTensorHandle a, const std::vector<unsigned char>& b) {
  return a->storage == b;
}

// A [size] int64 (or int32) tensor holding `values` in turn.
AtenTensorHandle index_vector(int64_t size, bool int32, const std::vector<int64_t>& values) {
  AtenTensorHandle t = new_tensor({size}, {1}, int32 ? kI32 : kI64);
  for (int64_t i = 0; i < size; ++i) {
    const int64_t v = values[static_cast<size_t>(i) % values.size()];
    if (int32) {
      const int32_t narrow = static_cast<int32_t>(v);
      std::memcpy(t->storage.data() + i * 4, &narrow, 4);
    } else {
      std::memcpy(t->storage.data() + i * 8, &v, 8);
    }
  }
  return t;
}

// Deletes the tensors a call returned; a single-output call leaves ret1 as it was.
void delete_outputs(AtenTensorHandle ret0, AtenTensorHandle ret1, int outputs) {
  aoti_torch_delete_tensor_object(ret0);
  if (outputs == 2) aoti_torch_delete_tensor_object(ret1);
}

// Calls `call` clean once, checks it with `verify`, then makes every failure point of the
// runtime and of the library fail in turn. `outputs`: 1 for the ops with one output (ret1
// unused).
void sweep(const std::string& name, const std::function<AOTITorchError(AtenTensorHandle*,
                                                                       AtenTensorHandle*)>& call,
           const std::function<void(AtenTensorHandle, AtenTensorHandle)>& verify,
           int outputs = 2) {
  const long tensors_before = live_tensors;
  AtenTensorHandle ret0 = nullptr, ret1 = nullptr;
  expect(call(&ret0, &ret1) == AOTI_TORCH_SUCCESS, name + ": clean call failed: " +
         metaltopk_aoti_last_error());
  expect(live_tensors == tensors_before + outputs, name + ": a clean call leaves its outputs");
  if (ret0 != nullptr && (ret1 != nullptr || outputs == 1)) verify(ret0, ret1);
  if (ret0 != nullptr) aoti_torch_delete_tensor_object(ret0);
  if (ret1 != nullptr) aoti_torch_delete_tensor_object(ret1);

  int failed_paths = 0;
  for (long n = 1;; ++n) {  // the runtime's allocations
    allocations_seen = 0;
    fail_allocation_at = n;
    AtenTensorHandle untouched0 = reinterpret_cast<AtenTensorHandle>(0x10);
    AtenTensorHandle untouched1 = untouched0;
    const AOTITorchError status = call(&untouched0, &untouched1);
    fail_allocation_at = 0;
    if (status == AOTI_TORCH_SUCCESS) {
      delete_outputs(untouched0, untouched1, outputs);
      break;
    }
    ++failed_paths;
    expect(std::strstr(metaltopk_aoti_last_error(), "aoti_torch_empty_strided") != nullptr,
           name + ": allocation " + std::to_string(n) + " failed without naming it");
    expect(untouched0 == reinterpret_cast<AtenTensorHandle>(0x10) && untouched1 == untouched0,
           name + ": a failed call wrote its outputs");
    expect(live_tensors == tensors_before,
           name + ": allocation " + std::to_string(n) + " failing leaked tensors");
  }
  const int64_t library_before = mtk_testing_live_allocations();
  for (uint64_t n = 1;; ++n) {  // the library's own failure points
    mtk_testing_fail_at(MTK_FAULT_ALL_SITES, n);
    AtenTensorHandle out0 = nullptr, out1 = nullptr;
    const AOTITorchError status = call(&out0, &out1);
    mtk_testing_reset();
    if (status == AOTI_TORCH_SUCCESS) {
      delete_outputs(out0, out1, outputs);
      break;
    }
    ++failed_paths;
    expect(*mtk_last_error_message() != '\0' &&
               std::strcmp(metaltopk_aoti_last_error(), mtk_last_error_message()) == 0,
           name + ": library fault " + std::to_string(n) + " lost the library's message");
    expect(out0 == nullptr && out1 == nullptr, name + ": a failed call wrote its outputs");
    expect(live_tensors == tensors_before && mtk_testing_live_allocations() == library_before,
           name + ": library fault " + std::to_string(n) + " leaked");
  }
  for (long n = 1;; ++n) {  // host allocations through operator new
    AtenTensorHandle out0 = nullptr, out1 = nullptr;
    new_seen = 0;
    new_target = n;
    new_armed = true;
    const AOTITorchError status = call(&out0, &out1);
    new_armed = false;
    if (status == AOTI_TORCH_SUCCESS) {
      delete_outputs(out0, out1, outputs);
      break;
    }
    ++failed_paths;
    expect(*metaltopk_aoti_last_error() != '\0',
           name + ": operator new " + std::to_string(n) + " failing left no message");
    expect(out0 == nullptr && out1 == nullptr, name + ": a failed call wrote its outputs");
    expect(live_tensors == tensors_before && mtk_testing_live_allocations() == library_before,
           name + ": operator new " + std::to_string(n) + " failing leaked");
  }
  std::printf("%-34s clean call checked, %d failure paths swept\n", name.c_str(), failed_paths);
}

void test_topk(int64_t rows, int64_t n, int64_t k, int64_t dim, bool transposed, int largest,
               int sorted) {
  AtenTensorHandle input = float_input(rows, n, transposed);
  const std::vector<unsigned char> input_bytes = input->storage;
  const std::string name = "topk " + std::to_string(rows) + "x" + std::to_string(n) + " k=" +
                           std::to_string(k) + " dim=" + std::to_string(dim) +
                           (transposed ? " transposed" : "");
  sweep(name,
        [&](AtenTensorHandle* v, AtenTensorHandle* i) {
          return aoti_torch_cpu_mtk_topk(input, k, dim, largest, sorted, v, i);
        },
        [&](AtenTensorHandle values, AtenTensorHandle indices) {
          mtk_context ctx = nullptr;
          mtk_context_create(MTK_BACKEND_CPU, 0, &ctx);
          AtenTensorHandle want_values = new_tensor(values->sizes, values->strides, kF32);
          AtenTensorHandle want_indices = new_tensor(indices->sizes, indices->strides, kI64);
          const mtk_tensor in = describe(input), wv = describe(want_values),
                           wi = describe(want_indices);
          expect(mtk_topk(ctx, &in, k, dim, largest, sorted, &wv, &wi, nullptr) == MTK_SUCCESS,
                 name + ": mtk_topk failed");
          expect(values->dtype == kF32 && indices->dtype == kI64, name + ": output dtypes");
          expect(same_bytes(values, want_values->storage) &&
                     same_bytes(indices, want_indices->storage),
                 name + ": results differ from mtk_topk's");
          expect(same_bytes(input, input_bytes), name + ": the input changed");
          aoti_torch_delete_tensor_object(want_values);
          aoti_torch_delete_tensor_object(want_indices);
          mtk_context_destroy(ctx);
        });
  aoti_torch_delete_tensor_object(input);
}

void test_moe_route() {
  AtenTensorHandle logits = new_tensor({33, 64}, {64, 1}, kBF16);
  uint16_t* raw = reinterpret_cast<uint16_t*>(logits->storage.data());
  for (int64_t i = 0; i < 33 * 64; ++i) {
    const float value = static_cast<float>((i * 37) % 61) / 8.0f - 3.0f;
    uint32_t bits;
    std::memcpy(&bits, &value, 4);
    raw[i] = static_cast<uint16_t>(bits >> 16);
  }
  AtenTensorHandle bias = new_tensor({64}, {1}, kF32);
  float* bias_data = reinterpret_cast<float*>(bias->storage.data());
  for (int64_t e = 0; e < 64; ++e) bias_data[e] = std::sin(static_cast<float>(e));
  sweep("moe_route sigmoid grouped, bias",
        [&](AtenTensorHandle* w, AtenTensorHandle* i) {
          return aoti_torch_cpu_mtk_moe_route(logits, 6, "sigmoid", &bias, 8, 4, 1, 2.5, kI32,
                                              w, i);
        },
        [&](AtenTensorHandle weights, AtenTensorHandle ids) {
          mtk_context ctx = nullptr;
          mtk_context_create(MTK_BACKEND_CPU, 0, &ctx);
          AtenTensorHandle want_weights = new_tensor({33, 6}, {6, 1}, kF32);
          AtenTensorHandle want_ids = new_tensor({33, 6}, {6, 1}, kI32);
          const mtk_tensor in = describe(logits), b = describe(bias), ww = describe(want_weights);
          mtk_tensor wi = describe(want_ids);
          wi.dtype = MTK_INT32;
          const mtk_router_params params{sizeof params, 6, MTK_SCORING_SIGMOID, &b, 8, 4, 1, 2.5f};
          expect(mtk_moe_route(ctx, &in, &params, &ww, &wi, nullptr) == MTK_SUCCESS,
                 "moe_route: mtk_moe_route failed");
          expect(weights->dtype == kF32 && ids->dtype == kI32, "moe_route: output dtypes");
          expect(same_bytes(weights, want_weights->storage) && same_bytes(ids, want_ids->storage),
                 "moe_route: results differ from mtk_moe_route's");
          aoti_torch_delete_tensor_object(want_weights);
          aoti_torch_delete_tensor_object(want_ids);
          mtk_context_destroy(ctx);
        });
  aoti_torch_delete_tensor_object(bias);
  aoti_torch_delete_tensor_object(logits);
}

// The three ragged ops against mtk_topk_ragged called directly with the same params.
void expect_ragged_result(const std::string& name, AtenTensorHandle input, int64_t k,
                          bool along_rows, const mtk_ragged_params& params, AtenTensorHandle values,
                          AtenTensorHandle indices, bool int32_indices) {
  mtk_context ctx = nullptr;
  mtk_context_create(MTK_BACKEND_CPU, 0, &ctx);
  mtk_tensor in = describe(input);
  if (!along_rows) {
    std::swap(in.sizes[0], in.sizes[1]);
    std::swap(in.strides[0], in.strides[1]);
  }
  AtenTensorHandle want_values = new_tensor({in.sizes[0], k}, {k, 1}, kF32);
  AtenTensorHandle want_indices =
      new_tensor({in.sizes[0], k}, {k, 1}, int32_indices ? kI32 : kI64);
  const mtk_tensor wv = describe(want_values), wi = describe(want_indices);
  expect(mtk_topk_ragged(ctx, &in, k, 1, 1, &params, values != nullptr ? &wv : nullptr, &wi,
                         nullptr) == MTK_SUCCESS,
         name + ": mtk_topk_ragged failed: " + mtk_last_error_message());
  // The op's outputs are contiguous in the caller's layout: [k, rows] for dim 0.
  auto as_rows = [&](AtenTensorHandle t, int32_t dtype) {
    if (along_rows) return t->storage;
    AtenTensorHandle transposed = new_tensor({in.sizes[0], k}, {k, 1}, dtype);
    const size_t item = element_size(dtype);
    for (int64_t r = 0; r < in.sizes[0]; ++r)
      for (int64_t j = 0; j < k; ++j)
        std::memcpy(transposed->storage.data() + (r * k + j) * item,
                    t->storage.data() + (j * in.sizes[0] + r) * item, item);
    std::vector<unsigned char> bytes = transposed->storage;
    aoti_torch_delete_tensor_object(transposed);
    return bytes;
  };
  expect(indices->dtype == (int32_indices ? kI32 : kI64) &&
             as_rows(indices, indices->dtype) == want_indices->storage,
         name + ": indices differ from mtk_topk_ragged's");
  if (values != nullptr) {
    expect(values->dtype == kF32 && as_rows(values, kF32) == want_values->storage,
           name + ": values differ from mtk_topk_ragged's");
  }
  aoti_torch_delete_tensor_object(want_values);
  aoti_torch_delete_tensor_object(want_indices);
  mtk_context_destroy(ctx);
}

void test_ragged() {
  AtenTensorHandle input = float_input(9, 300, false);
  AtenTensorHandle lengths = index_vector(9, false, {300, 0, 15, 16, -2, 400, 1, 290, 77});
  AtenTensorHandle starts = index_vector(9, true, {0, 5, -1, 299, 40, 3, 7, 12, 250});
  AtenTensorHandle offsets = index_vector(9, false, {1000, -7, 1 << 30, 5});
  AtenTensorHandle table = new_tensor({4, 20}, {20, 1}, kI32);
  for (int64_t e = 0; e < 80; ++e) {
    const int32_t entry = static_cast<int32_t>(e * 37 % 80);
    std::memcpy(table->storage.data() + e * 4, &entry, 4);
  }
  AtenTensorHandle row_to_batch = index_vector(9, true, {3, 0, 1, -1, 2, 4});
  const mtk_tensor lengths_t = describe(lengths), starts_t = describe(starts),
                   offsets_t = describe(offsets), table_t = describe(table),
                   row_to_batch_t = describe(row_to_batch);

  mtk_ragged_params windows = MTK_RAGGED_PARAMS_INIT;
  windows.lengths = &lengths_t;
  windows.starts = &starts_t;
  sweep("topk_ragged 9x300 k=16 starts",
        [&](AtenTensorHandle* v, AtenTensorHandle* i) {
          return aoti_torch_cpu_mtk_topk_ragged(input, 16, lengths, &starts, -1, 1, 1, 1, v, i);
        },
        [&](AtenTensorHandle values, AtenTensorHandle indices) {
          expect_ragged_result("topk_ragged", input, 16, true, windows, values, indices, false);
        });
  AtenTensorHandle columns = float_input(300, 9, true);
  mtk_ragged_params plain = MTK_RAGGED_PARAMS_INIT;
  plain.lengths = &lengths_t;
  sweep("topk_ragged dim=0 indices only",
        [&](AtenTensorHandle* v, AtenTensorHandle* i) {
          return aoti_torch_cpu_mtk_topk_ragged(columns, 20, lengths, nullptr, 0, 1, 1, 0, v, i);
        },
        [&](AtenTensorHandle values, AtenTensorHandle indices) {
          expect(values->sizes == std::vector<int64_t>{0} && values->dtype == kF32,
                 "topk_ragged indices only: values is not an empty [0] float32 tensor");
          expect_ragged_result("topk_ragged dim=0", columns, 20, false, plain, nullptr, indices,
                               false);
        });
  mtk_ragged_params ragged = MTK_RAGGED_PARAMS_INIT;
  ragged.lengths = &lengths_t;
  ragged.transform = MTK_INDEX_TRANSFORM_RAGGED;
  ragged.offsets = &offsets_t;
  sweep("topk_ragged_transform 9x300 k=32",
        [&](AtenTensorHandle* out, AtenTensorHandle*) {
          return aoti_torch_cpu_mtk_topk_ragged_transform(input, offsets, lengths, 32, out);
        },
        [&](AtenTensorHandle indices, AtenTensorHandle) {
          expect_ragged_result("topk_ragged_transform", input, 32, true, ragged, nullptr,
                               indices, true);
        },
        1);
  mtk_ragged_params paged = MTK_RAGGED_PARAMS_INIT;
  paged.lengths = &lengths_t;
  paged.transform = MTK_INDEX_TRANSFORM_PAGE_TABLE;
  paged.page_table = &table_t;
  paged.page_size = 16;
  paged.row_to_batch = &row_to_batch_t;
  sweep("topk_page_table_transform k=32",
        [&](AtenTensorHandle* out, AtenTensorHandle*) {
          return aoti_torch_cpu_mtk_topk_page_table_transform(input, table, lengths, 32,
                                                              &row_to_batch, 16, out);
        },
        [&](AtenTensorHandle indices, AtenTensorHandle) {
          expect_ragged_result("topk_page_table_transform", input, 32, true, paged, nullptr,
                               indices, true);
        },
        1);
  for (AtenTensorHandle t : {input, columns, lengths, starts, offsets, table, row_to_batch}) {
    aoti_torch_delete_tensor_object(t);
  }
}

// A [size] float32 tensor holding `values` in turn.
AtenTensorHandle float_vector(int64_t size, const std::vector<float>& values) {
  AtenTensorHandle t = new_tensor({size}, {1}, kF32);
  for (int64_t i = 0; i < size; ++i) {
    std::memcpy(t->storage.data() + i * 4, &values[static_cast<size_t>(i) % values.size()], 4);
  }
  return t;
}

// The sampling shims, each against its C entry on the same tensors.
void test_sampling() {
  constexpr int64_t rows = 9, n = 200;
  AtenTensorHandle logits = float_input(rows, n, false);
  AtenTensorHandle probs = new_tensor({rows, n}, {n, 1}, kF32);
  float* probs_data = reinterpret_cast<float*>(probs->storage.data());
  for (int64_t i = 0; i < rows * n; ++i) probs_data[i] = static_cast<float>((i * 31) % 17) / 64;
  AtenTensorHandle uniforms = float_vector(rows, {0.0f, 0.3f, 0.999f, 0.5f, 0.71f});
  AtenTensorHandle top_k = index_vector(rows, true, {0, 1, 5, 200, -3, 17, 40});
  AtenTensorHandle top_p = float_vector(rows, {0.5f, 0.9f, 1.0f, 0.2f});
  AtenTensorHandle temperature = float_vector(rows, {0.7f, 1.0f, 0.0f, 2.0f});
  const mtk_tensor logits_t = describe(logits), probs_t = describe(probs),
                   uniforms_t = describe(uniforms), top_k_t = describe(top_k),
                   top_p_t = describe(top_p), temperature_t = describe(temperature);
  mtk_context ctx = nullptr;
  mtk_context_create(MTK_BACKEND_CPU, 0, &ctx);
  // The shim's output against the C entry's into a tensor of the same shape and dtype.
  auto expect_entry = [&](const std::string& name, AtenTensorHandle got, int32_t dtype,
                          const std::function<mtk_status(const mtk_tensor*)>& entry) {
    AtenTensorHandle want = new_tensor(got->sizes, got->strides, dtype);
    mtk_tensor want_t = describe(want);
    if (dtype == kI32) want_t.dtype = MTK_INT32;
    expect(entry(&want_t) == MTK_SUCCESS, name + ": the C entry failed");
    expect(got->dtype == dtype && same_bytes(got, want->storage),
           name + ": results differ from the C entry's");
    aoti_torch_delete_tensor_object(want);
  };

  mtk_sampling_params mask = MTK_SAMPLING_PARAMS_INIT;
  mask.top_k = &top_k_t;
  sweep("top_k_mask_logits per-row top_k",
        [&](AtenTensorHandle* out, AtenTensorHandle*) {
          return aoti_torch_cpu_mtk_top_k_mask_logits(logits, &top_k, 0, out);
        },
        [&](AtenTensorHandle out, AtenTensorHandle) {
          expect_entry("top_k_mask_logits", out, kF32, [&](const mtk_tensor* want) {
            return mtk_top_k_mask_logits(ctx, &logits_t, &mask, want, nullptr);
          });
        },
        1);
  mtk_sampling_params renorm = MTK_SAMPLING_PARAMS_INIT;
  renorm.top_k_value = 30;
  renorm.top_p = &top_p_t;
  renorm.min_p_value = 0.05f;
  sweep("renorm_probs top_k, top_p, min_p",
        [&](AtenTensorHandle* out, AtenTensorHandle*) {
          return aoti_torch_cpu_mtk_renorm_probs(probs, nullptr, 30, &top_p, 1.0, nullptr, 0.05,
                                                 out);
        },
        [&](AtenTensorHandle out, AtenTensorHandle) {
          expect_entry("renorm_probs", out, kF32, [&](const mtk_tensor* want) {
            return mtk_renorm_probs(ctx, &probs_t, &renorm, want, nullptr);
          });
        },
        1);
  mtk_sampling_params sample = MTK_SAMPLING_PARAMS_INIT;
  sample.top_k = &top_k_t;
  sample.top_p_value = 0.9f;
  sweep("sample per-row top_k, top_p int64",
        [&](AtenTensorHandle* out, AtenTensorHandle*) {
          return aoti_torch_cpu_mtk_sample(probs, uniforms, &top_k, 0, nullptr, 0.9, nullptr, 0.0,
                                           kI64, out);
        },
        [&](AtenTensorHandle out, AtenTensorHandle) {
          expect_entry("sample", out, kI64, [&](const mtk_tensor* want) {
            return mtk_sample(ctx, &probs_t, &sample, &uniforms_t, want, nullptr);
          });
        },
        1);
  mtk_sampling_params from_logits = MTK_SAMPLING_PARAMS_INIT;
  from_logits.top_k_value = 50;
  from_logits.top_p = &top_p_t;
  from_logits.min_p_value = 0.01f;
  from_logits.temperature = &temperature_t;
  sweep("sample_from_logits temperature",
        [&](AtenTensorHandle* out, AtenTensorHandle*) {
          return aoti_torch_cpu_mtk_sample_from_logits(logits, uniforms, nullptr, 50, &top_p, 1.0,
                                                       nullptr, 0.01, &temperature, 1.0, kI32,
                                                       out);
        },
        [&](AtenTensorHandle out, AtenTensorHandle) {
          expect_entry("sample_from_logits", out, kI32, [&](const mtk_tensor* want) {
            return mtk_sample_from_logits(ctx, &logits_t, &from_logits, &uniforms_t, want,
                                          nullptr);
          });
        },
        1);
  mtk_context_destroy(ctx);
  for (AtenTensorHandle t : {logits, probs, uniforms, top_k, top_p, temperature}) {
    aoti_torch_delete_tensor_object(t);
  }
}

// Calls that must fail before anything is allocated, with a message naming the problem.
void test_rejections() {
  AtenTensorHandle input = float_input(4, 10, false);
  AtenTensorHandle doubles = new_tensor({4, 10}, {10, 1}, kF64);
  AtenTensorHandle flags = new_tensor({4, 10}, {10, 1}, kBool);
  AtenTensorHandle logits3d = new_tensor({2, 4, 10}, {40, 10, 1}, kF32);
  AtenTensorHandle lengths = index_vector(4, false, {3});
  AtenTensorHandle float_lengths = new_tensor({4}, {1}, kF32);
  AtenTensorHandle gpu_lengths = new_tensor({4}, {1}, kI64);
  gpu_lengths->device_type = aoti_torch_device_type_cuda();
  AtenTensorHandle table = new_tensor({4, 2}, {2, 1}, kI64);
  AtenTensorHandle uniforms = float_vector(4, {0.5f});
  AtenTensorHandle short_top_p = float_vector(3, {0.5f});
  AtenTensorHandle gpu_uniforms = float_vector(4, {0.5f});
  gpu_uniforms->device_type = aoti_torch_device_type_cuda();
  const long before = live_tensors;
  struct Case {
    const char* what;
    std::function<AOTITorchError(AtenTensorHandle*, AtenTensorHandle*)> call;
    const char* message_part;
  };
  const Case cases[] = {
      {"k too large", [&](auto v, auto i) { return aoti_torch_cpu_mtk_topk(input, 11, -1, 1, 1, v, i); }, "k"},
      {"negative k", [&](auto v, auto i) { return aoti_torch_cpu_mtk_topk(input, -1, -1, 1, 1, v, i); }, "k"},
      {"dim out of range", [&](auto v, auto i) { return aoti_torch_cpu_mtk_topk(input, 1, 2, 1, 1, v, i); }, "dim"},
      {"float64 without a runtime getter", [&](auto v, auto i) { return aoti_torch_cpu_mtk_topk(doubles, 1, -1, 1, 1, v, i); }, "dtype code 7"},
      {"bool", [&](auto v, auto i) { return aoti_torch_cpu_mtk_topk(flags, 1, -1, 1, 1, v, i); }, "dtype code 11"},
      {"NULL self", [&](auto v, auto i) { return aoti_torch_cpu_mtk_topk(nullptr, 1, -1, 1, 1, v, i); }, "self is NULL"},
      {"NULL ret0", [&](auto, auto i) { return aoti_torch_cpu_mtk_topk(input, 1, -1, 1, 1, nullptr, i); }, "ret0"},
      {"unknown scoring", [&](auto w, auto i) { return aoti_torch_cpu_mtk_moe_route(input, 2, "tanh", nullptr, 0, 0, 1, 1.0, kI32, w, i); }, "tanh"},
      {"3-d logits", [&](auto w, auto i) { return aoti_torch_cpu_mtk_moe_route(logits3d, 2, "softmax", nullptr, 0, 0, 1, 1.0, kI32, w, i); }, "ndim"},
      {"int16 ids", [&](auto w, auto i) { return aoti_torch_cpu_mtk_moe_route(input, 2, "softmax", nullptr, 0, 0, 1, 1.0, kI16, w, i); }, "ids"},
      {"float lengths", [&](auto v, auto i) { return aoti_torch_cpu_mtk_topk_ragged(input, 2, float_lengths, nullptr, -1, 1, 1, 1, v, i); }, "lengths.dtype"},
      {"lengths on another device", [&](auto v, auto i) { return aoti_torch_cpu_mtk_topk_ragged(input, 2, gpu_lengths, nullptr, -1, 1, 1, 1, v, i); }, "lengths is on another device"},
      {"NULL lengths", [&](auto v, auto i) { return aoti_torch_cpu_mtk_topk_ragged(input, 2, nullptr, nullptr, -1, 1, 1, 1, v, i); }, "lengths is NULL"},
      {"ragged dim out of range", [&](auto v, auto i) { return aoti_torch_cpu_mtk_topk_ragged(input, 2, lengths, nullptr, 2, 1, 1, 1, v, i); }, "dim"},
      {"offsets of the wrong size", [&](auto out, auto) { return aoti_torch_cpu_mtk_topk_ragged_transform(input, table, lengths, 2, out); }, "offsets.ndim"},
      {"too few pages", [&](auto out, auto) { return aoti_torch_cpu_mtk_topk_page_table_transform(input, table, lengths, 2, nullptr, 4, out); }, "page_table.sizes[1]"},
      {"page size 0", [&](auto out, auto) { return aoti_torch_cpu_mtk_topk_page_table_transform(input, table, lengths, 2, nullptr, 0, out); }, "page_size"},
      {"top_p of the wrong length", [&](auto out, auto) { return aoti_torch_cpu_mtk_renorm_probs(input, nullptr, 0, &short_top_p, 1.0, nullptr, 0.0, out); }, "top_p.sizes[0] = 3 does not match the 4 rows"},
      {"float top_k", [&](auto out, auto) { return aoti_torch_cpu_mtk_top_k_mask_logits(input, &float_lengths, 0, out); }, "top_k.dtype = float32 must be int32 or int64"},
      {"int64 uniforms", [&](auto out, auto) { return aoti_torch_cpu_mtk_sample(input, lengths, nullptr, 0, nullptr, 1.0, nullptr, 0.0, kI32, out); }, "uniforms.dtype = int64 must be float32"},
      {"uniforms on another device", [&](auto out, auto) { return aoti_torch_cpu_mtk_sample_from_logits(input, gpu_uniforms, nullptr, 0, nullptr, 1.0, nullptr, 0.0, nullptr, 1.0, kI32, out); }, "uniforms is on another device"},
      {"NULL uniforms", [&](auto out, auto) { return aoti_torch_cpu_mtk_sample(input, nullptr, nullptr, 0, nullptr, 1.0, nullptr, 0.0, kI32, out); }, "uniforms is NULL"},
      {"int16 samples", [&](auto out, auto) { return aoti_torch_cpu_mtk_sample(input, uniforms, nullptr, 0, nullptr, 1.0, nullptr, 0.0, kI16, out); }, "samples.dtype = int16"},
      {"3-d probs", [&](auto out, auto) { return aoti_torch_cpu_mtk_renorm_probs(logits3d, nullptr, 5, nullptr, 1.0, nullptr, 0.0, out); }, "probs.ndim = 3"},
      {"bool probs", [&](auto out, auto) { return aoti_torch_cpu_mtk_sample(flags, uniforms, nullptr, 0, nullptr, 1.0, nullptr, 0.0, kI32, out); }, "dtype code 11"},
#ifdef METALTOPK_AOTI_MPS
      {"mps without the Metal backend", [&](auto v, auto i) { return aoti_torch_mps_topk(input, 1, -1, 1, 1, v, i); }, "metal"},
#endif
  };
  for (const Case& c : cases) {
    AtenTensorHandle out0 = nullptr, out1 = nullptr;
    const AOTITorchError status = c.call(&out0, &out1);
    const std::string message = metaltopk_aoti_last_error();
    expect(status == AOTI_TORCH_FAILURE, std::string(c.what) + ": accepted");
    expect(message.find(c.message_part) != std::string::npos,
           std::string(c.what) + ": message \"" + message + "\" lacks \"" + c.message_part + "\"");
    expect(out0 == nullptr && out1 == nullptr && live_tensors == before,
           std::string(c.what) + ": wrote or leaked tensors");
  }
  std::printf("%-34s %zu rejected with their messages\n", "bad arguments",
              sizeof(cases) / sizeof(cases[0]));
  for (AtenTensorHandle t : {input, doubles, flags, logits3d, lengths, float_lengths, gpu_lengths,
                             table, uniforms, short_top_p, gpu_uniforms}) {
    aoti_torch_delete_tensor_object(t);
  }
}

}  // namespace

int main() {
  test_topk(1, 256, 8, -1, false, 1, 1);
  test_topk(64, 3000, 50, -1, false, 1, 0);
  test_topk(300, 40, 7, 0, true, 0, 1);
  test_topk(1, 1 << 16, 500, 1, false, 1, 1);
  test_moe_route();
  test_ragged();
  test_sampling();
  test_rejections();
  expect(live_tensors == 0, "tensors left at exit: " + std::to_string(live_tensors));
  if (failures != 0) {
    std::fprintf(stderr, "shim_runtime_test: %d failures\n", failures);
    return 1;
  }
  std::printf("shim_runtime_test: passed\n");
  return 0;
}
