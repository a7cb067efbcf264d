# tests/gpu/bench_c_abi: the eager per-call cost of mtk_topk on CUDA from C++ (bench_cuda.py runs
# it; tests/gpu/run_all.sh builds it). Needs the CUDA toolkit for cuda_runtime.h and cudart,
# which is linked statically as the library's is, so the binary needs no runtime search path.
ifneq ($(wildcard $(NVCC)),)
BENCH_C_ABI := $(BUILD)/tests/bench_c_abi

$(BENCH_C_ABI): tests/gpu/bench_c_abi.cpp include/metaltopk.h $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -pthread -Iinclude -I$(CUDA_HOME)/include $< -o $@ \
	  -L$(BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(BUILD)) \
	  -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt
endif
