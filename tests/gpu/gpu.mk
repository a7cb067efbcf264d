# tests/gpu/bench_c_abi and bench_router_c_abi: the eager per-call cost of mtk_topk and of
# mtk_moe_route on CUDA from C++ (bench_cuda.py and bench_router_cuda.py run them;
# tests/gpu/run_all.sh builds them). Needs the CUDA toolkit for cuda_runtime.h and cudart, which
# is linked statically as the library's is, so the binaries need no runtime search path.
ifneq ($(wildcard $(NVCC)),)
BENCH_C_ABI := $(BUILD)/tests/bench_c_abi
BENCH_ROUTER_C_ABI := $(BUILD)/tests/bench_router_c_abi

$(BENCH_C_ABI) $(BENCH_ROUTER_C_ABI): $(BUILD)/tests/%: tests/gpu/%.cpp tests/gpu/c_abi_bench.hpp \
    include/metaltopk.h $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -pthread -Iinclude -I$(CUDA_HOME)/include $< -o $@ \
	  -L$(BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(BUILD)) \
	  -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt
endif
