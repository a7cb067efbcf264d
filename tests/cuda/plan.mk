# The CUDA plan's unit tests (tests/cuda/test_plan.cpp): host C++ only, so they run on every
# machine, with or without nvcc or a GPU.
CUDA_PLAN_TEST := $(BUILD)/tests/cuda/test_plan
CUDA_PLAN_SRC := lib/cuda/topk_plan.cpp lib/core/dtype.cpp

$(CUDA_PLAN_TEST): tests/cuda/test_plan.cpp tests/host_expect.hpp $(CUDA_PLAN_SRC) $(CUDA_PLAN_HEADERS) lib/core/dtype.hpp \
    lib/core/error.hpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O1 -Wall -Wextra -Werror $(CPPFLAGS) tests/cuda/test_plan.cpp $(CUDA_PLAN_SRC) -o $@

.PHONY: test-cuda-plan
test-cuda-plan: $(CUDA_PLAN_TEST)
	$(CUDA_PLAN_TEST)

TEST_TARGETS += test-cuda-plan

# The packing of a row's winners for the radix sort of radix_sort_rows_kernel: host C++ too.
PACKED_WINNERS_TEST := $(BUILD)/tests/cuda/test_packed_winners

$(PACKED_WINNERS_TEST): tests/cuda/test_packed_winners.cpp tests/host_expect.hpp lib/cuda/topk_packed_winners.hpp \
    lib/core/float_formats.hpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror $(CPPFLAGS) tests/cuda/test_packed_winners.cpp -o $@

.PHONY: test-packed-winners
test-packed-winners: $(PACKED_WINNERS_TEST)
	$(PACKED_WINNERS_TEST)

TEST_TARGETS += test-packed-winners
