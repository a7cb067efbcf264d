// The MPSGraph backend: ExecuTorch's original top-k (an MPSGraph per shape) done right. Graphs
// are cached with hit/miss counts, indices are widened to int64 inside the graph, `largest` and
// `sorted` are honoured, and everything MPSGraph is not documented to handle goes to the Metal
// kernels (lib/metal/mpsgraph_plan.cpp plan_mpsgraph_topk decides; docs/METAL.md lists the rules).
// Memory, copies and synchronisation are the Metal backend's (same device state).
#include "metal_device_backend.h"

#if defined(__APPLE__)
#import <MetalPerformanceShaders/MetalPerformanceShaders.h>
#import <MetalPerformanceShadersGraph/MetalPerformanceShadersGraph.h>
#else
#import "mpsgraph_stubs.h"  // Linux syntax checks only (tests/metal/stubs)
#endif

#include <functional>
#include <memory>
#include <mutex>
#include <tuple>

#include "core/dtype.hpp"
#include "metal/mpsgraph_plan.hpp"

namespace mtk {
namespace metal {
namespace {

MPSDataType mps_data_type(mtk_dtype dtype) {
  switch (dtype) {
    case MTK_FLOAT32: return MPSDataTypeFloat32;
    case MTK_FLOAT16: return MPSDataTypeFloat16;
    case MTK_BFLOAT16: return MPSDataTypeBFloat16;
    case MTK_INT32: return MPSDataTypeInt32;
    case MTK_INT64: return MPSDataTypeInt64;
    default: break;
  }
  fail(MTK_ERROR_INTERNAL, "dtype ", dtype_name(dtype), " reached the MPSGraph path");
}

// Everything a cached graph depends on.
struct GraphKey {
  mtk_dtype dtype;
  bool indices_int64;
  bool largest;
  int64_t k;
  int64_t shape0, shape1;
  int axis;
  bool axis_form, transpose, negate;

  bool operator==(const GraphKey& o) const {
    return std::tie(dtype, indices_int64, largest, k, shape0, shape1, axis, axis_form, transpose, negate) ==
           std::tie(o.dtype, o.indices_int64, o.largest, o.k, o.shape0, o.shape1, o.axis, o.axis_form, o.transpose,
                    o.negate);
  }
};

struct GraphKeyHash {
  size_t operator()(const GraphKey& key) const {
    size_t h = 0;
    auto mix = [&h](int64_t v) { h = h * 1000003u ^ std::hash<int64_t>()(v); };
    mix(key.dtype);
    mix(key.indices_int64);
    mix(key.largest);
    mix(key.k);
    mix(key.shape0);
    mix(key.shape1);
    mix(key.axis);
    mix(key.axis_form * 4 + key.transpose * 2 + key.negate);
    return h;
  }
};

// A built graph and its input and output tensors (owned by the graph).
struct CachedGraph {
  ObjcRef<MPSGraph*> graph;
  MPSGraphTensor* input = nil;
  MPSGraphTensor* values = nil;
  MPSGraphTensor* indices = nil;
};

NSArray<NSNumber*>* shape_of(int64_t a, int64_t b) {
  return @[ [NSNumber numberWithLongLong:a], [NSNumber numberWithLongLong:b] ];
}

std::shared_ptr<CachedGraph> build_graph(const GraphKey& key) {
  auto built = std::make_shared<CachedGraph>();
  objc_call("building an MPSGraph top-k", [&] {
    built->graph = ObjcRef<MPSGraph*>::adopt([[MPSGraph alloc] init]);
    MPSGraph* g = built->graph.get();
    const NSUInteger k = static_cast<NSUInteger>(key.k);
    built->input = [g placeholderWithShape:shape_of(key.shape0, key.shape1) dataType:mps_data_type(key.dtype) name:nil];
    NSArray<MPSGraphTensor*>* result = nil;
    if (key.axis_form) {
      if (@available(macOS 14.0, *)) {
        result = key.largest ? [g topKWithSourceTensor:built->input axis:key.axis k:k name:nil]
                             : [g bottomKWithSourceTensor:built->input axis:key.axis k:k name:nil];
      } else {
        fail(MTK_ERROR_INTERNAL, "MPSGraph axis form planned on an OS without it");
      }
    } else {
      // The last axis only: move the top-k axis last, and find the smallest as -topK(-x).
      MPSGraphTensor* source = built->input;
      if (key.transpose) source = [g transposeTensor:source dimension:0 withDimension:1 name:nil];
      if (key.negate) source = [g negativeWithTensor:source name:nil];
      result = [g topKWithSourceTensor:source k:k name:nil];
      MPSGraphTensor* values = [result objectAtIndex:0];
      MPSGraphTensor* indices = [result objectAtIndex:1];
      if (key.negate) values = [g negativeWithTensor:values name:nil];
      if (key.transpose) {
        values = [g transposeTensor:values dimension:0 withDimension:1 name:nil];
        indices = [g transposeTensor:indices dimension:0 withDimension:1 name:nil];
      }
      result = @[ values, indices ];
    }
    built->values = [result objectAtIndex:0];
    built->indices = [result objectAtIndex:1];
    // MPSGraph returns int32 indices; widen on the GPU, not in a CPU loop.
    if (key.indices_int64) {
      built->indices = [g castTensor:built->indices toType:MPSDataTypeInt64 name:@"indices_int64"];
    }
  });
  return built;
}

class MpsGraphBackend final : public MetalDeviceBackend {
 public:
  explicit MpsGraphBackend(int device_index) : MetalDeviceBackend(device_index) {
    if (@available(macOS 14.0, *)) capabilities_.macos14 = true;
  }

  mtk_backend kind() const override { return MTK_BACKEND_MPSGRAPH; }

  void run_topk(const PlannedTopk& planned, const TopkProblem& problem, Workspace workspace, void* stream) override {
    const RowGeometry& g = problem.geometry;
    MpsGraphBinding binding;
    binding.caller_command_buffer = MetalDevice::caller_command_buffer(stream) != nil;
    const MetalExtents extents = metal_tensor_extents(problem);
    const BufferSlice input = device_.resolve_tensor(problem.input, extents.input, "input");
    const BufferSlice values = device_.resolve_tensor(problem.values, extents.values, "values");
    const BufferSlice indices = device_.resolve_tensor(problem.indices, extents.indices, "indices");
    binding.input_offset = input.offset;
    binding.values_offset = values.offset;
    binding.indices_offset = indices.offset;
    const MpsGraphTopk route = plan_mpsgraph_topk(problem, capabilities_, binding);
    if (!route.use_graph) {
      encode_metal_topk(device_, static_cast<const MetalPlannedTopk&>(planned).plan, problem, workspace, stream);
      return;
    }

    const GraphKey key{problem.dtype, route.indices_int64, problem.largest, g.k, route.shape[0], route.shape[1],
                       route.axis, route.axis_form, route.transpose, route.negate};
    const std::shared_ptr<CachedGraph> graph = graphs_.get_or_create(key, [&] { return build_graph(key); });
    const int64_t out0 = route.axis == 0 ? g.k : route.shape[0];
    const int64_t out1 = route.axis == 1 ? g.k : route.shape[1];

    // Apple does not document MPSGraph as safe to encode from several threads at once.
    std::lock_guard<std::mutex> lock(encode_mutex_);
    objc_call("encoding MPSGraph top-k", [&] {
      ObjcRef<MPSGraphTensorData*> in = ObjcRef<MPSGraphTensorData*>::adopt([[MPSGraphTensorData alloc]
          initWithMTLBuffer:input.buffer.get() shape:shape_of(route.shape[0], route.shape[1])
                   dataType:mps_data_type(problem.dtype)]);
      ObjcRef<MPSGraphTensorData*> out_values = ObjcRef<MPSGraphTensorData*>::adopt([[MPSGraphTensorData alloc]
          initWithMTLBuffer:values.buffer.get() shape:shape_of(out0, out1) dataType:mps_data_type(problem.dtype)]);
      ObjcRef<MPSGraphTensorData*> out_indices = ObjcRef<MPSGraphTensorData*>::adopt([[MPSGraphTensorData alloc]
          initWithMTLBuffer:indices.buffer.get() shape:shape_of(out0, out1)
                   dataType:mps_data_type(problem.index_dtype)]);
      NSDictionary<MPSGraphTensor*, MPSGraphTensorData*>* feeds = @{graph->input : in.get()};
      NSDictionary<MPSGraphTensor*, MPSGraphTensorData*>* results =
          @{graph->values : out_values.get(), graph->indices : out_indices.get()};
      // Only the context's own queue gets here (plan_mpsgraph_topk routes caller command
      // buffers, which MPSGraph may commit). commitAndContinue may replace the underlying
      // command buffer, so the MPSCommandBuffer itself is what synchronize waits for.
      ObjcRef<MPSCommandBuffer*> command_buffer =
          ObjcRef<MPSCommandBuffer*>::retain([MPSCommandBuffer commandBufferFromCommandQueue:device_.queue()]);
      if (!command_buffer) fail(MTK_ERROR_DEVICE, "Metal could not create a command buffer");
      [graph->graph.get() encodeToCommandBuffer:command_buffer.get()
                                          feeds:feeds
                               targetOperations:nil
                              resultsDictionary:results
                            executionDescriptor:nil];
      [command_buffer.get() commit];
      device_.remember_committed(ObjcRef<id<MTLCommandBuffer>>::retain(command_buffer.get()));
    });
  }

  // Graphs and the Metal pipelines of routed problems, together.
  CacheCounters cache_counters() const override {
    const CacheCounters graphs = graphs_.counters();
    const CacheCounters pipelines = device_.pipeline_counters();
    return CacheCounters{graphs.hits + pipelines.hits, graphs.misses + pipelines.misses,
                         graphs.entries + pipelines.entries};
  }
 private:
  MpsGraphCapabilities capabilities_;
  LruCache<GraphKey, std::shared_ptr<CachedGraph>, GraphKeyHash> graphs_{128};
  std::mutex encode_mutex_;
};

}  // namespace
}  // namespace metal

namespace {

std::unique_ptr<Backend> make_mpsgraph_backend(int device_index) {
  return std::make_unique<metal::MpsGraphBackend>(device_index);
}

// Chosen by name only: MTK_BACKEND_DEFAULT prefers the hand-written Metal kernels.
const BackendRegistration mpsgraph_registration(MTK_BACKEND_MPSGRAPH, 0, make_mpsgraph_backend,
                                                metal_backend_available);

}  // namespace

}  // namespace mtk
