# tests/executorch: metaltopk as the top-k fallback of ExecuTorch's AOTI backends.
# shim_et120_test links the AOTInductor shim against a stand-in for ExecuTorch 1.2.0's shim
# functions (no float16, uint8 or float64 getters), as the ExecuTorch runner would load it: no
# torch library linked, the runtime's symbols exported by the program. The Python half
# (test_executorch.py) runs with the torch tests where executorch is installed; run_e2e.sh is the
# GPU machine's end-to-end run. On Linux, test-executorch-metal runs the shim's ExecuTorch Metal
# glue (adapters/aoti/executorch_metal.mm) through GNUstep against a stand-in for the runtime's
# symbols, and syntax-checks the shim's Metal entry point.

ET_TEST_OUT := $(BUILD)/tests/executorch
ET_TEST_SHIM_NAME := metaltopk_aoti_et120_test
ET_TEST_SHIM := $(ET_TEST_OUT)/lib$(ET_TEST_SHIM_NAME).$(LIB_EXT)

ifeq ($(UNAME),Darwin)
ET_TEST_EXPORTS :=
ET_TEST_SHIM_LINK := -undefined dynamic_lookup -install_name @rpath/lib$(ET_TEST_SHIM_NAME).$(LIB_EXT) \
  -framework Foundation
else
ET_TEST_EXPORTS := -rdynamic
ET_TEST_SHIM_LINK := -Wl,-soname,lib$(ET_TEST_SHIM_NAME).$(LIB_EXT)
endif

$(ET_TEST_SHIM): $(AOTI_SRC) $(AOTI_HEADERS) $(LIBRARY) tests/executorch/executorch.mk \
    $(TORCH_BUILD_INPUTS)
	$(call check_torch_flags,the ExecuTorch shim test)
	@mkdir -p $(dir $@)
	$(CXX) $(AOTI_CXXFLAGS) -shared $(AOTI_SRC) -o $@ \
	  -L$(BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(BUILD)) $(ET_TEST_SHIM_LINK)

$(ET_TEST_OUT)/shim_et120_test: tests/executorch/shim_et120_test.cpp $(ET_TEST_SHIM)
	$(CXX) $(AOTI_CXXFLAGS) $(ET_TEST_EXPORTS) $< -o $@ \
	  -L$(ET_TEST_OUT) -l$(ET_TEST_SHIM_NAME) -L$(BUILD) -lmetaltopk \
	  -Wl,-rpath,$(abspath $(ET_TEST_OUT)) -Wl,-rpath,$(abspath $(BUILD))

.PHONY: test-executorch-shim
test-executorch-shim: $(ET_TEST_OUT)/shim_et120_test
	$<

ifneq ($(TORCH_FOUND),)
TEST_TARGETS += test-executorch-shim
endif

ifneq ($(UNAME),Darwin)
ET_METAL_TEST := $(ET_TEST_OUT)/executorch_metal_test
ET_METAL_GLUE := adapters/aoti/executorch_metal.mm adapters/aoti/executorch_metal.h

# METAL_OBJC* are lib/metal/metal.mk's GNUstep settings; here they link instead of only parsing.
$(ET_METAL_TEST): tests/executorch/executorch_metal_test.mm $(ET_METAL_GLUE) \
    tests/metal/stubs/metal_stubs.h tests/executorch/executorch.mk
	@command -v gnustep-config >/dev/null || { echo "gnustep-config missing: apt-get install libgnustep-base-dev gnustep-make"; exit 1; }
	@mkdir -p $(dir $@) $(METAL_OBJC_INC)
	@ln -sfn "$$(gcc -print-file-name=include)/objc" $(METAL_OBJC_INC)/objc
	$(filter-out -fsyntax-only,$(METAL_OBJC)) -Iadapters/aoti \
	  tests/executorch/executorch_metal_test.mm adapters/aoti/executorch_metal.mm -o $@ \
	  $(shell gnustep-config --base-libs 2>/dev/null)

.PHONY: test-executorch-metal-glue test-executorch-metal
test-executorch-metal-glue: $(ET_METAL_TEST)
	$<

# The shim's Metal entry with the glue, compiled as on macOS (torch's headers needed).
test-executorch-metal: test-executorch-metal-glue $(TORCH_BUILD_INPUTS)
	$(call check_torch_flags,the shim's Metal entry point)
	$(CXX) $(AOTI_CXXFLAGS) -DMETALTOPK_AOTI_MPS -DMETALTOPK_AOTI_EXECUTORCH_METAL -fsyntax-only \
	  $(AOTI_SRC)

TEST_TARGETS += $(if $(TORCH_FOUND),test-executorch-metal,test-executorch-metal-glue)
endif
