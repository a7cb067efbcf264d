# Tests, installation and packaging.
#
#   make test                   install missing system packages (tools/install-system-deps.sh;
#                               SYSTEM_DEPS=skip leaves the system alone) and Python packages
#                               (tools/python-env.sh: into PYTHON, or into the venv PY_VENV where
#                               PYTHON refuses pip), build the library, then run every test target
#   make test CXX=g++ CC=gcc    the same with GCC (clang is preferred when present)
#   make install PREFIX=/opt/x  header, library, pkg-config file and CMake package
#
# Other areas hook in without editing this file: a fragment (lib/*/*.mk, or tests/<area>/*.mk,
# included below) adds its target to TEST_TARGETS (e.g. `TEST_TARGETS += test-metal`) and, if it
# needs more Python packages, to TEST_PIP_PACKAGES.

DESTDIR ?=
LIBDIR ?= $(PREFIX)/lib
INCLUDEDIR ?= $(PREFIX)/include
PYTEST ?= $(PYTHON) -m pytest
PYTEST_ARGS ?= -rs

MTK_VERSION_PART = $(shell sed -n 's/^\#define MTK_VERSION_$(1) \([0-9]*\)$$/\1/p' include/metaltopk.h)
MTK_VERSION_STRING := $(call MTK_VERSION_PART,MAJOR).$(call MTK_VERSION_PART,MINOR).$(call MTK_VERSION_PART,PATCH)

# Python packages the tests import: (module to probe, what pip installs when it is missing).
# torch is a CPU build on Linux, and optional: tools/python-env.sh says how and why.
TEST_PIP_PACKAGES += $(DEMO_PIP_PACKAGES) pytest:pytest torch:torch==2.13.0

# Every test target; the ones of this file run first, other areas' after them.
TEST_TARGETS := test-c test-install test-python $(TEST_TARGETS)

-include $(wildcard tests/*/*.mk)

.PHONY: test test-deps test-library test-c test-install test-python test-pip test-torch-newest install

SYSTEM_DEPS ?= install
INSTALL_SYSTEM_DEPS = $(if $(filter skip,$(SYSTEM_DEPS)),true,PYTHON="$(PYTHON)" bash tools/install-system-deps.sh)

# System packages first: the sub-makes below parse the Makefile again, so a clang installed here
# builds everything (CXX prefers clang++ when present). Then the Python packages, whose
# interpreter the sub-makes get as PYTHON; the library (in parallel, as for the demo); every test
# target, -k: one failing area does not hide the others' results; the exit status still reports it.
test:
	+@$(INSTALL_SYSTEM_DEPS)
	+@python=$$($(PYTHON_ENV) $(TEST_PIP_PACKAGES)) || exit 1; \
	[ "$$python" = "$(PYTHON)" ] || echo "test Python: $$python"; \
	$(MAKE) --no-print-directory PYTHON="$$python" test-library && \
	$(MAKE) -k --no-print-directory PYTHON="$$python" $(TEST_TARGETS)

test-library:
	+@$(build_library_logged)

# The Python packages alone; prints the interpreter that has them.
test-deps:
	@python=$$($(PYTHON_ENV) $(TEST_PIP_PACKAGES)) && echo "test Python: $$python"

# ---- C ABI test: every public function, against the library just built ---------------------

TEST_ABI := $(BUILD)/tests/test_abi
TEST_CFLAGS := -std=c11 -O1 -g -Wall -Wextra -Wpedantic -Werror

$(TEST_ABI): tests/c/test_abi.c tests/c/abi_test_support.h include/metaltopk.h \
    include/metaltopk_testing.h $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CC) $(TEST_CFLAGS) -Iinclude $< -o $@ -L$(BUILD) -lmetaltopk \
	  -Wl,-rpath,$(abspath $(BUILD))

test-c: $(TEST_ABI)
	$(TEST_ABI)

# ---- install ------------------------------------------------------------------------------

# The name the linker records in consumers (the top-level Makefile's -soname / -install_name).
INSTALLED_SONAME := $(if $(filter Darwin,$(UNAME)),@rpath/)libmetaltopk.$(LIB_EXT)

install: $(LIBRARY)
	install -d $(DESTDIR)$(INCLUDEDIR) $(DESTDIR)$(LIBDIR)/pkgconfig \
	  $(DESTDIR)$(LIBDIR)/cmake/metaltopk
	install -m 644 include/metaltopk.h $(DESTDIR)$(INCLUDEDIR)/
	install -m 755 $(LIBRARY) $(DESTDIR)$(LIBDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@LIBDIR@|$(LIBDIR)|g' \
	  -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' -e 's|@VERSION@|$(MTK_VERSION_STRING)|g' \
	  packaging/metaltopk.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/metaltopk.pc
	sed -e 's|@LIBDIR@|$(LIBDIR)|g' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|g' \
	  -e 's|@LIBRARY_FILE@|libmetaltopk.$(LIB_EXT)|g' -e 's|@SONAME@|$(INSTALLED_SONAME)|g' \
	  packaging/metaltopkConfig.cmake.in > $(DESTDIR)$(LIBDIR)/cmake/metaltopk/metaltopkConfig.cmake
	sed -e 's|@VERSION@|$(MTK_VERSION_STRING)|g' \
	  -e 's|@VERSION_MAJOR@|$(call MTK_VERSION_PART,MAJOR)|g' \
	  -e 's|@VERSION_MINOR@|$(call MTK_VERSION_PART,MINOR)|g' \
	  packaging/metaltopkConfigVersion.cmake.in \
	  > $(DESTDIR)$(LIBDIR)/cmake/metaltopk/metaltopkConfigVersion.cmake

# ---- consumers of an installed copy: pkg-config and CMake find_package -----------------------

STAGE := $(abspath $(BUILD))/stage

test-install:
	@rm -rf $(STAGE) $(BUILD)/tests/cmake
	$(MAKE) --no-print-directory install PREFIX=$(STAGE)
	@mkdir -p $(BUILD)/tests
	PKG_CONFIG_PATH=$(STAGE)/lib/pkgconfig; export PKG_CONFIG_PATH; \
	  $(CXX) -std=c++17 -Wall -Wextra -Werror tests/cpp/test_install.cpp \
	    $$(pkg-config --cflags metaltopk) $$(pkg-config --libs metaltopk) \
	    -Wl,-rpath,$$(pkg-config --variable=libdir metaltopk) -o $(BUILD)/tests/test_install_pc
	$(BUILD)/tests/test_install_pc
	cmake -S tests/cpp -B $(BUILD)/tests/cmake -DCMAKE_PREFIX_PATH=$(STAGE) \
	  -DCMAKE_CXX_COMPILER=$(CXX) -DCMAKE_BUILD_TYPE=Release > $(BUILD)/tests/cmake.log || \
	  { cat $(BUILD)/tests/cmake.log; exit 1; }
	cmake --build $(BUILD)/tests/cmake
	$(BUILD)/tests/cmake/test_install

# ---- Python: the conformance suite through the package in python/ ----------------------------

# The torch tests compile AOTInductor packages against the C shim and run them from C++ too, and
# check that the torch fast path built here is the one they run on.
test-python: $(LIBRARY) $(if $(TORCH_FOUND),$(AOTI_LIBRARY) $(AOTI_RUNNER)) \
  $(if $(TORCH_EXTENSION_BUILT),$(TORCH_EXTENSION_STAMP))
	METALTOPK_LIBRARY=$(abspath $(LIBRARY)) PYTHONPATH=$(abspath python) \
	  METALTOPK_AOTI_RUNNER=$(abspath $(AOTI_RUNNER)) \
	  METALTOPK_EXPECT_TORCH_FAST_PATH=$(if $(TORCH_EXTENSION_BUILT),1) $(PYTEST) $(PYTEST_ARGS) tests

# `pip install ./python` into a fresh virtual environment, checked from outside the checkout
# (slow: pip builds the library again). Two installs from this one checkout with two torch
# states, in the order that once shipped a stale build: first without build isolation, so the
# build sees PYTHON's torch (the venv sees PYTHON's packages) and the package must carry the
# shim and the fast path for that torch, both loading; then isolated, where pip's build
# environment has no torch, and the package must carry neither. CPU only (METALTOPK_CUDA=0): the
# CUDA kernels are make test's. Not part of `make test`; .ci/run runs it.
PIP_VENV := $(abspath $(BUILD))/pip-venv
CHECK_INSTALLED = cd $(PIP_VENV) && env -u METALTOPK_LIBRARY -u PYTHONPATH \
  $(PIP_VENV)/bin/python $(abspath tests/check_installed_package.py)

test-pip:
	rm -rf $(PIP_VENV)
	$(PYTHON) -m venv --system-site-packages $(PIP_VENV)
	$(PIP_VENV)/bin/python -m pip install -q "setuptools>=61" wheel
	METALTOPK_CUDA=0 $(PIP_VENV)/bin/python -m pip install -q --no-build-isolation ./python
	$(CHECK_INSTALLED) $(if $(TORCH_EXTENSION_BUILT),--torch-parts=built)
	METALTOPK_CUDA=0 $(PIP_VENV)/bin/python -m pip install -q --force-reinstall --no-deps ./python
	$(CHECK_INSTALLED) --torch-parts=absent

# The torch tests again, against the newest torch that pip can install, in a virtual environment
# of its own (tests/torch-newest.sh: it says so and passes where none can be installed). .ci/run
# runs it after make test, which tests the pinned torch.
TORCH_NEWEST_VENV := $(abspath $(BUILD))/venv-torch-newest

test-torch-newest:
	bash tests/torch-newest.sh "$(PYTHON)" "$(TORCH_NEWEST_VENV)"
