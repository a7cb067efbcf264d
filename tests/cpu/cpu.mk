# The CPU backend's exactness test: randomised problems over every dtype, geometry and switch
# point of the kernels, called below the C ABI and compared bit for bit with a brute-force
# reference (tests/cpu/test_cpu_topk.cpp). Hooked into `make test` through TEST_TARGETS.

CPU_TEST := $(BUILD)/tests/cpu/test_cpu_topk
# The backend registers itself with the core (backend_registry.cpp), so the core comes along.
CPU_TEST_OBJ := $(HOST_OBJ)
CPU_TEST_ITERATIONS ?= 3000

TEST_TARGETS += test-cpu
.PHONY: test-cpu

$(CPU_TEST): tests/cpu/test_cpu_topk.cpp $(CPU_TEST_OBJ)
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) $< $(CPU_TEST_OBJ) -o $@ $(LDFLAGS)

test-cpu: $(CPU_TEST)
	$(CPU_TEST) $(CPU_TEST_ITERATIONS)
