# metaltopk: `make` builds the library, `make demo` shows it, `make test` checks everything this
# machine can check. Each area adds its own rules in a fragment included below.

.DEFAULT_GOAL := all

PREFIX ?= /usr/local
BUILD ?= build
PYTHON ?= python3

UNAME := $(shell uname -s)
CXX := $(shell command -v clang++ 2>/dev/null || echo c++)
CC := $(shell command -v clang 2>/dev/null || echo cc)
# Which family each compiler is (1 for clang, empty otherwise): a few flags and tools exist for
# one of them only (the fuzzer is clang's; GCC does not know nvcc's `#pragma unroll`).
compiler_is_clang = $(if $(findstring __clang__,$(shell $(1) -dM -E -x $(2) /dev/null 2>/dev/null)),1)
CXX_IS_CLANG := $(call compiler_is_clang,$(CXX),c++)
CC_IS_CLANG := $(call compiler_is_clang,$(CC),c)

ifeq ($(UNAME),Darwin)
LIB_EXT := dylib
SONAME_FLAG = -install_name @rpath/libmetaltopk.$(LIB_EXT)
else
LIB_EXT := so
SONAME_FLAG = -Wl,-soname,libmetaltopk.$(LIB_EXT)
endif

LIBRARY := $(BUILD)/libmetaltopk.$(LIB_EXT)

CPPFLAGS += -Iinclude -Ilib
CXXFLAGS += -std=c++17 -O3 -fPIC -fvisibility=hidden -Wall -Wextra -pthread
LDFLAGS += -pthread
LDLIBS +=

CORE_SRC := $(wildcard lib/core/*.cpp)
CPU_SRC := $(wildcard lib/cpu/*.cpp)
HOST_OBJ := $(patsubst %.cpp,$(BUILD)/%.o,$(CORE_SRC) $(CPU_SRC))

# Backend fragments append to BACKEND_OBJ, BACKEND_DEFINES and LDLIBS.
BACKEND_OBJ :=
BACKEND_DEFINES :=
include lib/cuda/cuda.mk
include lib/metal/metal.mk

.PHONY: all demo test bench install clean python-deps test-deps
all: $(LIBRARY)

$(BUILD)/%.o: %.cpp $(wildcard include/*.h lib/core/*.hpp lib/cpu/*.hpp) Makefile
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(BACKEND_DEFINES) $(CXXFLAGS) -c $< -o $@

$(LIBRARY): $(HOST_OBJ) $(BACKEND_OBJ)
	$(CXX) -shared $(SONAME_FLAG) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Python packages the demo needs; tests add theirs in tests/tests.mk.
python-deps:
	@$(PYTHON) -c "import numpy, cffi, ml_dtypes" 2>/dev/null || \
	  $(PYTHON) -m pip install -q numpy cffi ml_dtypes

demo: $(LIBRARY) python-deps
	METALTOPK_LIBRARY=$(abspath $(LIBRARY)) $(PYTHON) python/demo.py

include tests/tests.mk
include bench/bench.mk

clean:
	rm -rf $(BUILD) python/metaltopk/libmetaltopk.* python/build python/*.egg-info
