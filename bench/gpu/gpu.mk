# GPU benchmarks and profilers (bench/gpu/), built only where the CUDA backend is (nvcc found,
# CUDA not 0: a CPU-only build has no CUDA_ARCH_FLAGS for them); included by
# bench/bench.mk. bench/gpu/bench_c_abi and bench_router_c_abi: the eager per-call cost of mtk_topk and of
# mtk_moe_route on CUDA from C++ (bench_cuda.py and bench_router_cuda.py run them;
# tests/gpu/run_all.sh builds them). Needs the CUDA toolkit for cuda_runtime.h and cudart, which
# is linked statically as the library's is, so the binaries need no runtime search path.
ifneq ($(and $(filter-out 0,$(CUDA)),$(wildcard $(NVCC))),)
BENCH_C_ABI := $(BUILD)/bench/gpu/bench_c_abi
BENCH_ROUTER_C_ABI := $(BUILD)/bench/gpu/bench_router_c_abi

$(BENCH_C_ABI) $(BENCH_ROUTER_C_ABI): $(BUILD)/bench/gpu/%: bench/gpu/%.cpp bench/gpu/c_abi_bench.hpp \
    include/metaltopk.h $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -pthread -Iinclude -I$(CUDA_HOME)/include $< -o $@ \
	  -L$(BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(BUILD)) \
	  -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt

# The launch floor the MoE eager numbers are read against (bench/gpu/launch_floor.cu).
LAUNCH_FLOOR := $(BUILD)/bench/gpu/launch_floor

$(LAUNCH_FLOOR): bench/gpu/launch_floor.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -std=c++17 $(CUDA_ARCH_FLAGS) $< -o $@

# The threshold pass's read alone, in several orders (bench/gpu/stream_floor.cu).
STREAM_FLOOR := $(BUILD)/bench/gpu/stream_floor

$(STREAM_FLOOR): bench/gpu/stream_floor.cu
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 $(CUDA_ARCH_FLAGS) $< -o $@

# Clusters of the split sampling kernels' shape that run at once (bench/gpu/split_capacity.cu).
SPLIT_CAPACITY := $(BUILD)/bench/gpu/split_capacity

$(SPLIT_CAPACITY): bench/gpu/split_capacity.cu lib/cuda/sampling_block.cuh
	@mkdir -p $(dir $@)
	$(NVCC) -O2 -std=c++17 $(CUDA_ARCH_FLAGS) -Iinclude -Ilib $< -o $@

# The router's selection steps in SM cycles (bench/gpu/warp_collectives.cu).
WARP_COLLECTIVES := $(BUILD)/bench/gpu/warp_collectives

$(WARP_COLLECTIVES): bench/gpu/warp_collectives.cu $(wildcard lib/cuda/moe_route_*.cuh) lib/core/float_formats.hpp lib/core/problem.hpp
	@mkdir -p $(dir $@)
	$(NVCC) -O3 -std=c++17 $(CUDA_ARCH_FLAGS) -Iinclude -Ilib $< -o $@

# In `make test`: the harnesses build, and each runs one small shape (exit 2, no device, counts
# as skipped), so CI keeps them compiling although only the GPU machine times anything.
.PHONY: test-gpu-harnesses
test-gpu-harnesses: $(BENCH_C_ABI) $(BENCH_ROUTER_C_ABI) $(LAUNCH_FLOOR) $(WARP_COLLECTIVES) \
    $(STREAM_FLOOR) $(SPLIT_CAPACITY)
	@for run in "$(BENCH_C_ABI) moe:4:256:8:bfloat16:-1" \
	    "$(BENCH_ROUTER_C_ABI) softmax:4:64:8:softmax:0:0:1:0" "$(LAUNCH_FLOOR)" \
	    "$(WARP_COLLECTIVES)" "$(STREAM_FLOOR) 4 4096" "$(SPLIT_CAPACITY)"; do \
	  $$run; status=$$?; \
	  if [ $$status -eq 2 ]; then echo "test-gpu-harnesses: $${run%% *} skipped (no CUDA device)"; \
	  elif [ $$status -ne 0 ]; then exit $$status; fi; \
	done

TEST_TARGETS += test-gpu-harnesses
endif
