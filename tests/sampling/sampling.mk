# Sampling filters and sampling (docs/CONTRACT.md, "Sampling filters"): hand-computed cases and
# every error through the C ABI (test_sampling.c), the refusal of backends without sampling
# kernels below the ABI (test_sampling_refusal.cpp), and the portable exact arithmetic against
# the host's own (test_sampling_math.cpp), which must also compile as Metal kernel code (the
# dialect's type-check, as test-metal-kernels does) and, where nvcc is, as CUDA device code. The
# Python suite against tests/sampling_reference.py
# runs with test-python.

SAMPLING_C_TEST := $(BUILD)/tests/sampling/test_sampling
SAMPLING_REFUSAL_TEST := $(BUILD)/tests/sampling/test_sampling_refusal
SAMPLING_MATH_TEST := $(BUILD)/tests/sampling/test_sampling_math

$(SAMPLING_C_TEST): tests/sampling/test_sampling.c tests/c/abi_test_support.h include/metaltopk.h \
    $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Iinclude $< -o $@ -lm -L$(BUILD) -lmetaltopk \
	  -Wl,-rpath,$(abspath $(BUILD))

$(SAMPLING_REFUSAL_TEST): tests/sampling/test_sampling_refusal.cpp \
    tests/core/stand_in_backends.hpp $(HOST_OBJ)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) $< $(HOST_OBJ) -o $@ $(LDFLAGS)

$(SAMPLING_MATH_TEST): tests/sampling/test_sampling_math.cpp lib/core/sampling_math.hpp \
    lib/core/float_formats.hpp
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) -std=c++17 -O2 -Wall -Wextra -Werror $< -o $@

ifneq ($(CUDA_OBJ),)
SAMPLING_CUDA_CHECK := $(BUILD)/tests/sampling/sampling_math_cuda.o
$(SAMPLING_CUDA_CHECK): tests/sampling/sampling_math_cuda.cu lib/core/sampling_math.hpp \
    lib/core/float_formats.hpp
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -Iinclude -Ilib -c $< -o $@
endif

.PHONY: test-sampling
test-sampling: $(SAMPLING_C_TEST) $(SAMPLING_REFUSAL_TEST) $(SAMPLING_MATH_TEST) \
    $(SAMPLING_CUDA_CHECK)
	$(SAMPLING_C_TEST)
	$(SAMPLING_REFUSAL_TEST)
	$(SAMPLING_MATH_TEST)
	$(METAL_CLCPP) -fsyntax-only tests/sampling/sampling_math_typecheck.metal

TEST_TARGETS += test-sampling
