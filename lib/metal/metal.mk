# Metal and MPSGraph backends: built on macOS; checked on Linux by `make test-metal`.
#
# The kernels (lib/metal/*.metal and the headers they include) are embedded into the library as
# one source string and compiled on the Mac at run time; the Objective-C++ glue is built with
# manual retain/release everywhere (Debian's GNUstep has no ARC, and one discipline is checked).

METAL_KERNEL_SOURCES := lib/metal/mtk_dialect.h lib/core/float_formats.hpp lib/core/ragged_window.hpp \
                        lib/metal/topk_params.h \
                        lib/metal/topk_kernels.h \
                        lib/metal/topk.metal lib/metal/router_params.h lib/metal/router_kernels.h \
                        lib/metal/moe_route.metal lib/core/sampling_math.hpp lib/metal/sampling_params.h \
                        lib/metal/sampling_kernels.h lib/metal/sampling.metal
METAL_GLUE := lib/metal/metal_device.mm lib/metal/metal_backend.mm lib/metal/mpsgraph_backend.mm
METAL_GLUE_HEADERS := lib/metal/objc_ref.h lib/metal/metal_device.h lib/metal/metal_device_backend.h \
                      lib/metal/metal_memory_map.hpp
METAL_EMBEDDED := $(BUILD)/lib/metal/metal_sources.cpp

$(METAL_EMBEDDED): $(METAL_KERNEL_SOURCES) lib/metal/embed_metal_sources.sh
	@mkdir -p $(dir $@)
	sh lib/metal/embed_metal_sources.sh $@ kMetalTopkSource $(METAL_KERNEL_SOURCES)

$(BUILD)/lib/metal/metal_sources.o: $(METAL_EMBEDDED)
	$(CXX) $(CXXFLAGS) -c $< -o $@

# The dispatch plans (top-k, router, MPSGraph routing, and what they share): portable C++ that
# only the Metal glue calls. They are compiled into the library on every platform, as they were
# when they lived in lib/core, so every build (sanitizer builds and both compilers included)
# compiles them with the library's flags; test-metal links them into the plan tests and the PoCL
# harnesses as well.
METAL_PLAN_NAMES := metal_plan_common metal_topk_plan metal_router_plan mpsgraph_plan metal_sampling_plan
METAL_PLAN_HEADERS := $(patsubst %,lib/metal/%.hpp,$(METAL_PLAN_NAMES)) lib/metal/topk_params.h \
                      lib/metal/router_params.h lib/metal/sampling_params.h
METAL_PLAN_OBJ := $(patsubst %,$(BUILD)/lib/metal/%.o,$(METAL_PLAN_NAMES))
BACKEND_OBJ += $(METAL_PLAN_OBJ)
$(METAL_PLAN_OBJ): $(METAL_PLAN_HEADERS)

# The memory map (which address is which buffer; registrations of other runtimes' buffers):
# portable C++ as well, compiled into the library everywhere, tested by test-metal-memory-map.
METAL_MEMORY_MAP_OBJ := $(BUILD)/lib/metal/metal_memory_map.o
BACKEND_OBJ += $(METAL_MEMORY_MAP_OBJ)
$(METAL_MEMORY_MAP_OBJ): lib/metal/metal_memory_map.hpp

ifeq ($(UNAME),Darwin)
BACKEND_OBJ += $(patsubst %.mm,$(BUILD)/%.o,$(METAL_GLUE)) $(BUILD)/lib/metal/metal_sources.o
LDLIBS += -framework Metal -framework MetalPerformanceShaders -framework MetalPerformanceShadersGraph \
          -framework Foundation

$(BUILD)/lib/metal/%.o: lib/metal/%.mm $(METAL_GLUE_HEADERS) $(METAL_PLAN_HEADERS) \
                        $(wildcard include/*.h lib/core/*.hpp) lib/metal/metal.mk
	@mkdir -p $(dir $@)
	$(CXX) -x objective-c++ -fno-objc-arc -fobjc-exceptions $(CPPFLAGS) -Ilib/metal \
	  $(CXXFLAGS) -c $< -o $@
endif

# ---- make test-metal ----------------------------------------------------------------------
# Linux: (a) every .metal file type-checks as C++ for OpenCL against tests/metal/compat, in
# both branches of the dialect, and so does the embedded single-file source; (b) every kernel
# runs through PoCL from the portable plan and matches the CPU backend bit for bit; (c) the
# .mm glue parses with GNUstep against tests/metal/stubs; plus the plan's unit tests.
# macOS: the plan tests; the conformance suite (tests/tests.mk) runs the backends themselves.

METAL_TEST_DIR := $(BUILD)/tests/metal
METAL_CLANG ?= clang
METAL_CLCPP := $(METAL_CLANG) -x clcpp -cl-std=clc++ -Xclang -finclude-default-header \
               -Itests/metal/compat -Ilib/metal -Wno-unknown-attributes -Werror
METAL_PLAN_SRC := $(patsubst %,lib/metal/%.cpp,$(METAL_PLAN_NAMES)) lib/core/dtype.cpp

TEST_TARGETS += test-metal

.PHONY: test-metal test-metal-plan test-metal-memory-map test-metal-kernels test-metal-embedded test-metal-pocl test-metal-pocl-router \
        test-metal-pocl-ragged test-metal-pocl-sampling test-metal-objc

$(METAL_TEST_DIR)/test_plan: tests/metal/test_plan.cpp tests/host_expect.hpp $(METAL_PLAN_SRC) $(METAL_PLAN_HEADERS)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O1 -Wall -Wextra -Werror $(CPPFLAGS) tests/metal/test_plan.cpp $(METAL_PLAN_SRC) -o $@

test-metal-plan: $(METAL_TEST_DIR)/test_plan
	$(METAL_TEST_DIR)/test_plan

# Under ASan and UBSan: the test is about who holds a buffer and for how long.
$(METAL_TEST_DIR)/test_memory_map: tests/metal/test_memory_map.cpp lib/metal/metal_memory_map.cpp \
                                   lib/metal/metal_memory_map.hpp lib/core/error.hpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O1 -g -Wall -Wextra -Werror -pthread -fsanitize=address,undefined \
	  -fno-sanitize-recover=all $(CPPFLAGS) tests/metal/test_memory_map.cpp lib/metal/metal_memory_map.cpp -o $@

test-metal-memory-map: $(METAL_TEST_DIR)/test_memory_map
	$(METAL_TEST_DIR)/test_memory_map

$(METAL_TEST_DIR)/dump_embedded_source: tests/metal/dump_embedded_source.cpp $(METAL_EMBEDDED)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 $^ -o $@

ifeq ($(UNAME),Darwin)
test-metal: test-metal-plan test-metal-memory-map
else
test-metal: test-metal-plan test-metal-memory-map test-metal-kernels test-metal-embedded test-metal-objc test-metal-pocl \
            test-metal-pocl-ragged test-metal-pocl-router test-metal-pocl-sampling

test-metal-kernels:
	@for source in lib/metal/*.metal; do \
	  echo "type-check $$source (PoCL branch; Apple branch; Apple branch with the threadgroup scan)"; \
	  $(METAL_CLCPP) -fsyntax-only $$source || exit 1; \
	  $(METAL_CLCPP) -DMTK_TYPECHECK_APPLE_BRANCH -fsyntax-only $$source || exit 1; \
	  $(METAL_CLCPP) -DMTK_TYPECHECK_APPLE_BRANCH -DMTK_SIMD_VIA_THREADGROUP -fsyntax-only $$source || exit 1; \
	done

test-metal-embedded: $(METAL_TEST_DIR)/dump_embedded_source
	$(METAL_TEST_DIR)/dump_embedded_source > $(METAL_TEST_DIR)/embedded.metal
	$(METAL_CLCPP) -fsyntax-only $(METAL_TEST_DIR)/embedded.metal
	@echo "embedded kernel source: one self-contained translation unit, type-checks"

$(METAL_TEST_DIR)/kernels.bc: tests/metal/pocl_kernels.clcpp $(METAL_KERNEL_SOURCES) tests/metal/compat/metal_stdlib
	@mkdir -p $(dir $@)
	$(METAL_CLANG) -cc1 -triple spir64-unknown-unknown -emit-llvm-bc -x clcpp -cl-std=clc++ \
	  -finclude-default-header -Itests/metal/compat -Ilib/metal -Wno-unknown-attributes -O2 $< -o $@

$(METAL_TEST_DIR)/pocl_harness: tests/metal/pocl_harness.cpp tests/metal/pocl_runtime.hpp tests/metal/pocl_test_data.hpp \
                                tests/metal/pocl_topk_support.hpp $(METAL_PLAN_SRC) $(METAL_PLAN_HEADERS) \
                                lib/core/ordered_key.hpp $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror $(CPPFLAGS) tests/metal/pocl_harness.cpp $(METAL_PLAN_SRC) \
	  -o $@ -L$(BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(BUILD)) -lOpenCL

test-metal-pocl: $(METAL_TEST_DIR)/pocl_harness $(METAL_TEST_DIR)/kernels.bc
	$(METAL_TEST_DIR)/pocl_harness $(METAL_TEST_DIR)/kernels.bc

# Ragged rows and indices only (mtk_topk_ragged; values = NULL in both calls) against the CPU backend.
$(METAL_TEST_DIR)/pocl_ragged_harness: tests/metal/pocl_ragged_harness.cpp tests/metal/pocl_runtime.hpp \
                                       tests/metal/pocl_test_data.hpp tests/metal/pocl_topk_support.hpp \
                                       $(METAL_PLAN_SRC) $(METAL_PLAN_HEADERS) $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror $(CPPFLAGS) tests/metal/pocl_ragged_harness.cpp $(METAL_PLAN_SRC) \
	  -o $@ -L$(BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(BUILD)) -lOpenCL

test-metal-pocl-ragged: $(METAL_TEST_DIR)/pocl_ragged_harness $(METAL_TEST_DIR)/kernels.bc
	$(METAL_TEST_DIR)/pocl_ragged_harness $(METAL_TEST_DIR)/kernels.bc

$(METAL_TEST_DIR)/pocl_router_harness: tests/metal/pocl_router_harness.cpp tests/metal/pocl_runtime.hpp \
                                       $(METAL_PLAN_SRC) $(METAL_PLAN_HEADERS) $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror $(CPPFLAGS) tests/metal/pocl_router_harness.cpp $(METAL_PLAN_SRC) \
	  -o $@ -L$(BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(BUILD)) -lOpenCL

test-metal-pocl-router: $(METAL_TEST_DIR)/pocl_router_harness $(METAL_TEST_DIR)/kernels.bc
	$(METAL_TEST_DIR)/pocl_router_harness $(METAL_TEST_DIR)/kernels.bc

# The sampling filters and samplers (mtk_top_k_mask_logits, mtk_renorm_probs, mtk_sample,
# mtk_sample_from_logits) against the CPU backend.
$(METAL_TEST_DIR)/pocl_sampling_harness: tests/metal/pocl_sampling_harness.cpp tests/metal/pocl_runtime.hpp \
                                         tests/metal/pocl_test_data.hpp \
                                         $(METAL_PLAN_SRC) $(METAL_PLAN_HEADERS) $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 -O2 -Wall -Wextra -Werror $(CPPFLAGS) tests/metal/pocl_sampling_harness.cpp $(METAL_PLAN_SRC) \
	  -o $@ -L$(BUILD) -lmetaltopk -Wl,-rpath,$(abspath $(BUILD)) -lOpenCL

test-metal-pocl-sampling: $(METAL_TEST_DIR)/pocl_sampling_harness $(METAL_TEST_DIR)/kernels.bc
	$(METAL_TEST_DIR)/pocl_sampling_harness $(METAL_TEST_DIR)/kernels.bc

# GNUstep's Objective-C headers live in GCC's include directory; clang finds them through a
# private symlink. Always clang, whatever CXX is: the check is of the glue's source against the
# stubs (-fobjc-runtime is clang's), not of the host compiler. -MMD/-MP from gnustep-config would write dependency files: dropped.
METAL_OBJC_INC := $(METAL_TEST_DIR)/objc-inc
METAL_OBJC_CXX ?= clang++
METAL_OBJC := $(METAL_OBJC_CXX) -x objective-c++ -std=c++17 -fobjc-runtime=gcc -I$(METAL_OBJC_INC) \
              $(filter-out -MMD -MP,$(shell gnustep-config --objc-flags 2>/dev/null)) $(CPPFLAGS) \
              -Ilib/metal -Itests/metal/stubs -fsyntax-only -Wall -Wextra -Werror

test-metal-objc:
	@command -v gnustep-config >/dev/null || { echo "gnustep-config missing: apt-get install libgnustep-base-dev gnustep-make"; exit 1; }
	@mkdir -p $(METAL_OBJC_INC)
	@ln -sfn "$$(gcc -print-file-name=include)/objc" $(METAL_OBJC_INC)/objc
	@for source in $(METAL_GLUE); do \
	  echo "syntax-check $$source (GNUstep, manual retain/release, stub Metal/MPSGraph declarations)"; \
	  $(METAL_OBJC) $$source || exit 1; \
	done
endif
