# CUDA backend: compiled into the same library when nvcc exists. The runtime is linked
# statically, so the library still loads on machines with no driver or GPU; there the backend
# reports itself unavailable.
# CUDA=0 leaves the CUDA backend out even where nvcc exists (a CPU-only build in seconds instead
# of minutes, e.g. on a machine with nvcc but no GPU; `pip install` takes METALTOPK_CUDA=0).
CUDA ?= 1
CUDA_HOME ?= /usr/local/cuda
NVCC ?= $(CUDA_HOME)/bin/nvcc

# The plan (which kernels, grid, scratch layout) is host C++ that needs no nvcc:
# tests/cuda/plan.mk unit-tests it on every machine.
CUDA_PLAN_HEADERS := lib/cuda/topk_plan.hpp lib/cuda/topk_config.hpp

ifneq ($(and $(filter-out 0,$(CUDA)),$(wildcard $(NVCC))),)
# sm_90 machine code for Hopper, plus compute_90 PTX that newer GPUs JIT-compile.
CUDA_ARCH_FLAGS ?= -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
NVCCFLAGS ?= -O3 -std=c++17 $(CUDA_ARCH_FLAGS) -Xcompiler -fPIC,-fvisibility=hidden \
  -Xcompiler -Wall,-Wextra,-Wno-unknown-pragmas
CUDA_SRC := $(wildcard lib/cuda/*.cu)
CUDA_OBJ := $(patsubst %.cu,$(BUILD)/%.o,$(CUDA_SRC))

BACKEND_OBJ += $(CUDA_OBJ) $(BUILD)/lib/cuda/topk_plan.o
$(BUILD)/lib/cuda/topk_plan.o: $(CUDA_PLAN_HEADERS) lib/cuda/cuda.mk
LDLIBS += -L$(CUDA_HOME)/lib64 -lcudart_static -ldl -lrt

# nvcc writes each object's header list (-MMD, beside the object as .d), so that a header
# change recompiles only the sources that include it: each .cu takes minutes.
$(BUILD)/lib/cuda/%.o: lib/cuda/%.cu lib/cuda/cuda.mk
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -MMD -MP -Iinclude -Ilib -c $< -o $@
-include $(CUDA_OBJ:.o=.d)
endif
