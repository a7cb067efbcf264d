# Tests, installation and packaging.
#
#   make test                   build, install test dependencies, then run every test target
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
TEST_PIP_PACKAGES += pytest:pytest ml_dtypes:ml_dtypes cffi:cffi numpy:numpy torch:torch==2.13.0

# Every test target; the ones of this file run first, other areas' after them.
TEST_TARGETS := test-c test-install test-python $(TEST_TARGETS)

-include $(wildcard tests/*/*.mk)

.PHONY: test test-deps test-c test-install test-python test-pip install

# -k: one failing area does not hide the others' results; the exit status still reports it.
test: $(LIBRARY) test-deps
	@$(MAKE) -k --no-print-directory $(TEST_TARGETS)

test-deps: python-deps
	@for spec in $(TEST_PIP_PACKAGES); do \
	  module=$${spec%%:*}; package=$${spec#*:}; \
	  $(PYTHON) -c "import $$module" 2>/dev/null || \
	    { echo "pip install $$package"; $(PYTHON) -m pip install -q "$$package" || exit 1; }; \
	done

# ---- C ABI test: every public function, against the library just built ---------------------

TEST_ABI := $(BUILD)/tests/test_abi
TEST_CFLAGS := -std=c11 -O1 -g -Wall -Wextra -Wpedantic -Werror

$(TEST_ABI): tests/c/test_abi.c include/metaltopk.h include/metaltopk_testing.h $(LIBRARY)
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

# The torch tests compile AOTInductor packages against the C shim and run them from C++ too.
test-python: $(LIBRARY) $(AOTI_LIBRARY) $(AOTI_RUNNER)
	METALTOPK_LIBRARY=$(abspath $(LIBRARY)) PYTHONPATH=$(abspath python) \
	  METALTOPK_AOTI_RUNNER=$(abspath $(AOTI_RUNNER)) $(PYTEST) $(PYTEST_ARGS) tests

# `pip install ./python` into a fresh virtual environment, then a check of that installed copy
# from outside the checkout (slow: pip builds the library again). Not part of `make test`;
# .ci/run runs it.
PIP_VENV := $(abspath $(BUILD))/pip-venv

test-pip:
	rm -rf $(PIP_VENV)
	$(PYTHON) -m venv --system-site-packages $(PIP_VENV)
	$(PIP_VENV)/bin/python -m pip install -q ./python
	cd $(PIP_VENV) && env -u METALTOPK_LIBRARY -u PYTHONPATH \
	  $(PIP_VENV)/bin/python $(abspath tests/check_installed_package.py)
