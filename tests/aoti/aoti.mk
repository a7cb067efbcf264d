# tests/aoti: the AOTInductor shim (adapters/aoti/) in a runtime that is not libtorch
# (shim_runtime_test.cpp: every failure path, no leaks), and the C++ program that runs AOTInductor
# packages through AOTIModelPackageLoader for the torch tests (tests/torch/test_torch_ops.py).
# Both need torch's headers, so they run where torch is installed (make test installs it).

AOTI_TEST_OUT := $(BUILD)/tests/aoti
# Its own name: with the shim's, a build folder on LD_LIBRARY_PATH (a runner sets one for other
# programs) would hand the test the production shim, which lacks the MPS entry.
AOTI_TEST_SHIM_NAME := metaltopk_aoti_runtime_test
AOTI_TEST_SHIM := $(AOTI_TEST_OUT)/lib$(AOTI_TEST_SHIM_NAME).$(LIB_EXT)
AOTI_RUNNER := $(AOTI_TEST_OUT)/aoti_runner

ifeq ($(UNAME),Darwin)
AOTI_TEST_EXPORTS :=
AOTI_TEST_SHIM_LINK := -undefined dynamic_lookup -install_name @rpath/lib$(AOTI_TEST_SHIM_NAME).$(LIB_EXT)
else
AOTI_TEST_EXPORTS := -rdynamic
AOTI_TEST_SHIM_LINK := -Wl,-soname,lib$(AOTI_TEST_SHIM_NAME).$(LIB_EXT)
endif

# The shim as an ExecuTorch runtime would take it: no torch library linked, so its runtime
# symbols bind to the test program's, and linking the program fails on any function the test's
# runtime lacks. The origin's MPS entry is compiled in, so its error path runs here too.
$(AOTI_TEST_SHIM): $(AOTI_SRC) $(AOTI_HEADERS) $(LIBRARY) tests/aoti/aoti.mk
	@mkdir -p $(dir $@)
	$(CXX) $(AOTI_CXXFLAGS) -DMETALTOPK_AOTI_MPS -shared $(AOTI_SRC) -o $@ \
	  -L$(BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(BUILD)) $(AOTI_TEST_SHIM_LINK)

$(AOTI_TEST_OUT)/shim_runtime_test: tests/aoti/shim_runtime_test.cpp $(AOTI_TEST_SHIM) \
    include/metaltopk_testing.h
	$(CXX) $(AOTI_CXXFLAGS) -DMETALTOPK_AOTI_MPS $(AOTI_TEST_EXPORTS) $< -o $@ \
	  -L$(AOTI_TEST_OUT) -l$(AOTI_TEST_SHIM_NAME) -L$(BUILD) -lmetaltopk \
	  -Wl,-rpath,$(abspath $(AOTI_TEST_OUT)) -Wl,-rpath,$(abspath $(BUILD))

# A CUDA torch's device support lives in libtorch_cuda, which the runner uses no symbol of.
AOTI_RUNNER_CUDA = $(if $(TORCH_CUDA),-Wl$(comma)--no-as-needed -ltorch_cuda -Wl$(comma)--as-needed)
comma := ,

# The runner links the shim library, as a serving program must: compiled models name it but
# carry no path to it.
# Compiled with the standard and flags that torch needs (adapters/aoti/aoti.mk).
$(AOTI_RUNNER): tests/aoti/aoti_runner.cpp tests/aoti/aoti.mk $(AOTI_LIBRARY) $(TORCH_BUILD_INPUTS)
	@mkdir -p $(dir $@)
	$(CXX) $(TORCH_CXX_STD) -O1 $(TORCH_ABI_FLAG) $(TORCH_INCLUDE_FLAGS) $< -o $@ -L$(TORCH_DIR)/lib -ltorch \
	  -ltorch_cpu -lc10 $(AOTI_RUNNER_CUDA) -Wl,--no-as-needed -L$(BUILD) -lmetaltopk_aoti \
	  -Wl,--as-needed -Wl,-rpath,$(TORCH_DIR)/lib -Wl,-rpath,$(abspath $(BUILD))

.PHONY: test-aoti
test-aoti: $(AOTI_TEST_OUT)/shim_runtime_test
	$<

ifneq ($(TORCH_FOUND),)
TEST_TARGETS += test-aoti
endif
