# CUDA backend conformance: the exhaustive bit-exact driver (tests/cuda/cuda_conformance.cpp).
# It exits 2 when no CUDA device is present, which counts as skipped here (CI has no GPU; the
# GPU runs go through tests/gpu/run_all.sh on the device machine).
CUDA_CONFORMANCE := $(BUILD)/tests/cuda_conformance
CUDA_CONFORMANCE_ARGS ?=

$(CUDA_CONFORMANCE): tests/cuda/cuda_conformance.cpp tests/cuda/conformance_support.hpp \
    include/metaltopk.h $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -pthread -Iinclude $< -o $@ -L$(BUILD) -lmetaltopk \
	  -Wl,-rpath,$(abspath $(BUILD))

.PHONY: test-cuda
test-cuda: $(CUDA_CONFORMANCE)
	@$(CUDA_CONFORMANCE) $(CUDA_CONFORMANCE_ARGS); status=$$?; \
	  if [ $$status -eq 2 ]; then echo "test-cuda: skipped (no CUDA device)"; else exit $$status; fi

TEST_TARGETS += test-cuda

# Ragged rows and indices only on CUDA against the CPU backend, and a CUDA graph replayed with
# new lengths (tests/cuda/cuda_ragged_conformance.cpp): needs cuda_runtime.h and cudart, linked
# statically as the library's is. Exit 2 (no device) counts as skipped, as above.
ifneq ($(wildcard $(NVCC)),)
CUDA_RAGGED_CONFORMANCE := $(BUILD)/tests/cuda_ragged_conformance

$(CUDA_RAGGED_CONFORMANCE): tests/cuda/cuda_ragged_conformance.cpp \
    tests/cuda/conformance_support.hpp include/metaltopk.h $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -pthread -Iinclude -I$(CUDA_HOME)/include $< -o $@ \
	  -L$(BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(BUILD)) \
	  -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt

.PHONY: test-cuda-ragged
test-cuda-ragged: $(CUDA_RAGGED_CONFORMANCE)
	@$(CUDA_RAGGED_CONFORMANCE); status=$$?; \
	  if [ $$status -eq 2 ]; then echo "test-cuda-ragged: skipped (no CUDA device)"; \
	  else exit $$status; fi

TEST_TARGETS += test-cuda-ragged

# The sampling filters and samplers on CUDA against the CPU backend, batch invariance and a CUDA
# graph replayed with new per-row parameters (tests/cuda/cuda_sampling_conformance.cpp). Exit 2
# (no device) counts as skipped, as above.
CUDA_SAMPLING_CONFORMANCE := $(BUILD)/tests/cuda_sampling_conformance

$(CUDA_SAMPLING_CONFORMANCE): tests/cuda/cuda_sampling_conformance.cpp \
    tests/cuda/conformance_support.hpp include/metaltopk.h $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror -pthread -Iinclude -I$(CUDA_HOME)/include $< -o $@ \
	  -L$(BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(BUILD)) \
	  -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt

.PHONY: test-cuda-sampling
test-cuda-sampling: $(CUDA_SAMPLING_CONFORMANCE)
	@$(CUDA_SAMPLING_CONFORMANCE); status=$$?; \
	  if [ $$status -eq 2 ]; then echo "test-cuda-sampling: skipped (no CUDA device)"; \
	  else exit $$status; fi

TEST_TARGETS += test-cuda-sampling
endif

# The warp, block and multi-block kernels' logic on the host (tests/cuda/emulation): needs no
# nvcc and no GPU.
WARP_EMULATION := $(BUILD)/tests/cuda_warp_emulation
BLOCK_EMULATION := $(BUILD)/tests/cuda_block_emulation
EMULATION_HEADERS := tests/cuda/emulation/fiber_cuda.hpp lib/cuda/topk_warp_kernels.cuh \
  lib/cuda/device_utils.cuh lib/cuda/topk_config.hpp $(wildcard lib/core/*.hpp)
# The kernels are device code compiled here by a host compiler. GCC does not know nvcc's (and
# clang's) `#pragma unroll`, a hint only, and it cannot see that the tile kernel reads a lane's
# raw[j] under the very condition that wrote it (-Wmaybe-uninitialized): both warnings are off
# for GCC, on these two programs only.
EMULATION_FLAGS := -std=c++17 -O2 -Wall -Wextra -Werror -Iinclude -Ilib -Itests/cuda/emulation \
  $(if $(CXX_IS_CLANG),,-Wno-unknown-pragmas -Wno-maybe-uninitialized)

$(WARP_EMULATION): tests/cuda/emulation/test_warp_kernels.cpp $(EMULATION_HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) $(EMULATION_FLAGS) $< -o $@

$(BLOCK_EMULATION): tests/cuda/emulation/test_block_kernels.cpp $(EMULATION_HEADERS) \
    $(wildcard lib/cuda/topk_*.cuh) lib/cuda/topk_config.hpp lib/core/key_threshold.hpp
	@mkdir -p $(dir $@)
	$(CXX) $(EMULATION_FLAGS) $< -o $@

# The sampling kernel's row functions (lib/cuda/sampling_rows.cuh, one block a row, and
# lib/cuda/sampling_split.cuh, a cluster a row) against the CPU backend, which they reach
# through the library's C ABI.
SAMPLING_EMULATION := $(BUILD)/tests/cuda_sampling_emulation

$(SAMPLING_EMULATION): tests/cuda/emulation/test_sampling_kernels.cpp \
    tests/cuda/emulation/fiber_cuda.hpp tests/cuda/conformance_support.hpp \
    lib/cuda/sampling_rows.cuh lib/cuda/sampling_split.cuh lib/cuda/sampling_block.cuh \
    lib/core/sampling_math.hpp lib/core/float_formats.hpp include/metaltopk.h $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CXX) $(EMULATION_FLAGS) $< -o $@ -L$(BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(BUILD))

.PHONY: test-cuda-emulation
test-cuda-emulation: $(WARP_EMULATION) $(BLOCK_EMULATION) $(SAMPLING_EMULATION)
	$(WARP_EMULATION) --quick
	$(BLOCK_EMULATION) --quick
	$(SAMPLING_EMULATION) --quick

TEST_TARGETS += test-cuda-emulation
