// The OpenCL side of the PoCL harnesses (tests/metal/pocl_*harness.cpp): owned OpenCL handles,
// the PoCL device, and the offline-compiled SPIR program of the Metal kernels with its kernels
// by name; and what every harness's main shares: the CPU backend's context it compares the
// kernels with, and the start and failure handling of main.
#pragma once

#define CL_TARGET_OPENCL_VERSION 120
#include <CL/cl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "metaltopk.h"

namespace mtk_pocl {

inline void check_cl(cl_int status, const char* what) {
  if (status != CL_SUCCESS) throw std::runtime_error(std::string(what) + " failed with OpenCL error " + std::to_string(status));
}

inline void check_mtk(mtk_status status, const char* what) {
  if (status != MTK_SUCCESS) throw std::runtime_error(std::string(what) + ": " + mtk_last_error_message());
}

// Owns one OpenCL object; `Release` is its clRelease* function.
template <class Handle, cl_int (*Release)(Handle)>
class ClHandle {
 public:
  ClHandle() = default;
  explicit ClHandle(Handle h) : h_(h) {}
  ClHandle(ClHandle&& other) noexcept : h_(other.h_) { other.h_ = nullptr; }
  ClHandle& operator=(ClHandle&& other) noexcept {
    std::swap(h_, other.h_);
    return *this;
  }
  ClHandle(const ClHandle&) = delete;
  ClHandle& operator=(const ClHandle&) = delete;
  ~ClHandle() {
    if (h_) Release(h_);
  }
  Handle get() const { return h_; }

 private:
  Handle h_ = nullptr;
};

using ClContext = ClHandle<cl_context, clReleaseContext>;
using ClQueue = ClHandle<cl_command_queue, clReleaseCommandQueue>;
using ClProgram = ClHandle<cl_program, clReleaseProgram>;
using ClKernel = ClHandle<cl_kernel, clReleaseKernel>;
using ClBuffer = ClHandle<cl_mem, clReleaseMemObject>;

// The PoCL device, the SPIR program and its kernels by name.
class PoclRuntime {
 public:
  explicit PoclRuntime(const std::string& spir_path) {
    cl_platform_id platform;
    check_cl(clGetPlatformIDs(1, &platform, nullptr), "clGetPlatformIDs");
    check_cl(clGetDeviceIDs(platform, CL_DEVICE_TYPE_ALL, 1, &device_, nullptr), "clGetDeviceIDs");
    cl_int status;
    context_ = ClContext(clCreateContext(nullptr, 1, &device_, nullptr, nullptr, &status));
    check_cl(status, "clCreateContext");
    queue_ = ClQueue(clCreateCommandQueue(context_.get(), device_, 0, &status));
    check_cl(status, "clCreateCommandQueue");

    std::ifstream file(spir_path, std::ios::binary);
    if (!file) throw std::runtime_error("cannot read " + spir_path);
    const std::vector<unsigned char> binary((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    const unsigned char* bytes = binary.data();
    const size_t length = binary.size();
    cl_int binary_status;
    program_ = ClProgram(clCreateProgramWithBinary(context_.get(), 1, &device_, &length, &bytes, &binary_status, &status));
    check_cl(status, "clCreateProgramWithBinary");
    status = clBuildProgram(program_.get(), 1, &device_, "-x spir -spir-std=1.2", nullptr, nullptr);
    if (status != CL_SUCCESS) {
      char log[16384] = {};
      clGetProgramBuildInfo(program_.get(), device_, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, nullptr);
      throw std::runtime_error(std::string("clBuildProgram failed:\n") + log);
    }
  }

  cl_kernel kernel(const std::string& name) {
    auto found = kernels_.find(name);
    if (found != kernels_.end()) return found->second.get();
    cl_int status;
    ClKernel k(clCreateKernel(program_.get(), name.c_str(), &status));
    check_cl(status, ("clCreateKernel " + name).c_str());
    return kernels_.emplace(name, std::move(k)).first->second.get();
  }

  ClBuffer buffer(size_t bytes, const void* init) {
    cl_int status;
    const cl_mem_flags flags = CL_MEM_READ_WRITE | (init ? CL_MEM_COPY_HOST_PTR : 0);
    ClBuffer b(clCreateBuffer(context_.get(), flags, std::max<size_t>(bytes, 16), const_cast<void*>(init), &status));
    check_cl(status, "clCreateBuffer");
    return b;
  }

  void read(const ClBuffer& b, void* out, size_t bytes) {
    check_cl(clEnqueueReadBuffer(queue_.get(), b.get(), CL_TRUE, 0, bytes, out, 0, nullptr, nullptr), "clEnqueueReadBuffer");
  }

  // Runs `function` once on a column of `threadgroups_y` threadgroups of `threads` threads, bound
  // as the router and sampling kernels are: `buffers`, then threadgroup memory of each size.
  template <size_t Buffers, size_t ThreadgroupBuffers>
  void run_kernel(const std::string& function, const cl_mem (&buffers)[Buffers],
                  const uint32_t (&threadgroup_bytes)[ThreadgroupBuffers], uint32_t threads, uint32_t threadgroups_y) {
    cl_kernel k = kernel(function);
    for (cl_uint a = 0; a < Buffers; ++a) check_cl(clSetKernelArg(k, a, sizeof(cl_mem), &buffers[a]), "clSetKernelArg");
    for (cl_uint t = 0; t < ThreadgroupBuffers; ++t) {
      check_cl(clSetKernelArg(k, Buffers + t, threadgroup_bytes[t], nullptr), "clSetKernelArg(local)");
    }
    const size_t global[2] = {threads, threadgroups_y};
    const size_t local[2] = {threads, 1};
    check_cl(clEnqueueNDRangeKernel(queue_.get(), k, 2, nullptr, global, local, 0, nullptr, nullptr),
             ("clEnqueueNDRangeKernel " + function).c_str());
  }

  cl_command_queue queue() const { return queue_.get(); }

 private:
  cl_device_id device_ = nullptr;
  ClContext context_;
  ClQueue queue_;
  ClProgram program_;
  std::map<std::string, ClKernel> kernels_;
};

// The CPU backend's context: every kernel result is compared with the CPU backend's.
using CpuContext = std::unique_ptr<std::remove_pointer_t<mtk_context>, decltype(&mtk_context_destroy)>;

inline CpuContext create_cpu_context() {
  mtk_context ctx = nullptr;
  check_mtk(mtk_context_create(MTK_BACKEND_CPU, 0, &ctx), "mtk_context_create(cpu)");
  return CpuContext(ctx, mtk_context_destroy);
}

// A harness's main: `run(spir_path)` gives the exit status; a throw anywhere is a failure.
template <class Run>
int harness_main(int argc, char** argv, Run run) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <kernels.bc>\n", argv[0]);
    return 2;
  }
  try {
    return run(argv[1]);
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
}

}  // namespace mtk_pocl
