# metaltopk: `make` builds the library, `make demo` shows it, `make test` checks everything this
# machine can check. Each area adds its own rules in a fragment included below.

.DEFAULT_GOAL := all

PREFIX ?= /usr/local
BUILD ?= build
# Where tools/python-env.sh puts the Python packages `make test` and `make demo` need when
# PYTHON takes no pip installs (Debian's python3, PEP 668). Once it exists it is the default
# PYTHON: it sees the system's packages too (--system-site-packages).
PY_VENV ?= build/venv
PYTHON ?= $(if $(wildcard $(PY_VENV)/bin/python),$(abspath $(PY_VENV))/bin/python,python3)
# Parallel jobs for the library build of `make demo` and `make test` (and .ci/run's).
JOBS ?= $(shell nproc 2>/dev/null || sysctl -n hw.ncpu 2>/dev/null || echo 2)

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

# Backend fragments append to BACKEND_OBJ and LDLIBS; their backends register themselves with
# the core when the library loads (lib/core/backend.hpp).
BACKEND_OBJ :=
include lib/cuda/cuda.mk
include lib/metal/metal.mk

.PHONY: all demo test bench install clean python-deps test-deps
all: $(LIBRARY)

$(BUILD)/%.o: %.cpp $(wildcard include/*.h lib/core/*.hpp lib/cpu/*.hpp) Makefile
	@mkdir -p $(dir $@)
	$(CXX) $(CPPFLAGS) $(CXXFLAGS) -c $< -o $@

$(LIBRARY): $(HOST_OBJ) $(BACKEND_OBJ)
	$(CXX) -shared $(SONAME_FLAG) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# Python packages the demo needs (module:pip requirement); tests add theirs in tests/tests.mk.
DEMO_PIP_PACKAGES := numpy:numpy cffi:cffi ml_dtypes:ml_dtypes
# Prints the interpreter that has the packages given, installing them first where needed.
PYTHON_ENV = bash tools/python-env.sh "$(PYTHON)" "$(PY_VENV)"

python-deps:
	@$(PYTHON_ENV) $(DEMO_PIP_PACKAGES) >/dev/null

# The library, in parallel unless the caller already runs make with -j, its commands in
# $(BUILD)/build.log (shown when it fails); one line says what is built. A shell snippet for
# recipes (marked + so the jobserver reaches the sub-make).
LIBRARY_BUILD_JOBS = $(if $(findstring -j,$(MAKEFLAGS))$(findstring jobserver,$(MAKEFLAGS)),,-j$(JOBS))
LIBRARY_CONTENTS = $(if $(CUDA_OBJ),CUDA kernels: $(words $(CUDA_OBJ)) files,no nvcc: CPU backend only)
build_library_logged = mkdir -p $(BUILD) && \
  if $(MAKE) -q --no-print-directory $(LIBRARY) 2>/dev/null; then \
    echo "the library is up to date ($(LIBRARY))"; \
  else \
    echo "building the library ($(LIBRARY_CONTENTS), $(or $(LIBRARY_BUILD_JOBS),-j of the caller)), commands in $(BUILD)/build.log..."; \
    $(MAKE) --no-print-directory $(LIBRARY_BUILD_JOBS) $(LIBRARY) > $(BUILD)/build.log 2>&1 || \
      { tail -n 40 $(BUILD)/build.log; echo "the library did not build: see $(BUILD)/build.log"; exit 1; }; \
  fi

demo:
	+@echo "checking the Python packages ($(foreach spec,$(DEMO_PIP_PACKAGES),$(firstword $(subst :, ,$(spec)))))..."; \
	python=$$($(PYTHON_ENV) $(DEMO_PIP_PACKAGES)) || exit 1; \
	$(build_library_logged); \
	echo "running the demo..."; \
	METALTOPK_LIBRARY=$(abspath $(LIBRARY)) "$$python" python/demo.py

include adapters/aoti/aoti.mk
include adapters/torch/torch.mk
include tests/tests.mk
include bench/bench.mk

clean:
	rm -rf $(BUILD) python/metaltopk/libmetaltopk.* python/build python/*.egg-info
