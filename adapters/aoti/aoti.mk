# The AOTInductor C shim (adapters/aoti/): libmetaltopk_aoti beside libmetaltopk, compiled
# against torch's stable C shim header. `make` builds it when the Python that the build uses has
# torch. The runtime functions it calls (aoti_torch_*) come from libtorch, which it links (torch
# loads its libraries privately, so a process's Python torch does not provide them globally);
# for an ExecuTorch runtime, which implements the same functions, build it with
# AOTI_RUNTIME_LIBS= so they stay undefined and bind to the runtime at load time. CUDA entry
# points are compiled in when that torch was built with CUDA, the origin's aoti_torch_mps_topk on
# macOS (where the runtime's symbols are always looked up at load time; under ExecuTorch's Metal
# runtime it encodes on the runtime's stream into the runtime's buffers: executorch_metal.mm).
#
# This file also finds the torch that both torch parts (this shim and adapters/torch/torch.mk's
# fast path) are built against, and how: tools/torch-flags.py takes the C++ standard, folders and
# ABI define from that torch's extension tooling (torch 2.14's headers need C++20; the library
# itself stays C++17) into $(TORCH_FLAGS_FILE). $(TORCH_KEY_FILE) holds that torch's version and
# folder and changes only when they do, so both parts are rebuilt for another torch, never
# shipped stale. `make all` builds them where torch is found, and warns instead of failing when
# they do not build (the library is built first and works without them); `make torch-adapters`
# builds them or fails.

TORCH_KEY := $(shell $(PYTHON) tools/torch-flags.py --key 2>/dev/null)
TORCH_DIR := $(word 2,$(TORCH_KEY))
TORCH_FOUND := $(if $(TORCH_DIR),1)
TORCH_KEY_FILE := $(BUILD)/torch/key
TORCH_FLAGS_FILE := $(BUILD)/torch/flags.mk

# Warnings are errors in this repository's builds; `pip install` sets ADAPTER_WERROR= so that a
# newer torch's deprecations cost no user the fast path.
ADAPTER_WERROR ?= -Werror

.PHONY: torch-key-check
$(TORCH_KEY_FILE): torch-key-check
	@mkdir -p $(@D)
	@[ "$$(cat $@ 2>/dev/null)" = "$(TORCH_KEY)" ] || echo "$(TORCH_KEY)" > $@

# Its stderr is torch's import-time chatter; a failure lands in the file (TORCH_FLAGS_ERROR).
$(TORCH_FLAGS_FILE): $(TORCH_KEY_FILE) tools/torch-flags.py
	$(PYTHON) tools/torch-flags.py > $@.tmp 2>/dev/null && mv $@.tmp $@

ifneq ($(TORCH_FOUND),)
-include $(TORCH_FLAGS_FILE)
endif

# Prerequisites of every torch part: rebuilt for another torch, stopped with the reason where
# torch cannot be imported.
TORCH_BUILD_INPUTS := $(if $(TORCH_FOUND),$(TORCH_KEY_FILE) $(TORCH_FLAGS_FILE))
check_torch_flags = @test -n "$(TORCH_FOUND)" || { echo "$(1) needs torch in $(PYTHON)"; exit 1; }; \
  test -z "$(TORCH_FLAGS_ERROR)" || { echo "$(1) skipped: $(TORCH_FLAGS_ERROR)"; exit 1; }; \
  test -n "$(TORCH_CXX_STD)" || { echo "$(1) skipped: tools/torch-flags.py failed in $(PYTHON)"; exit 1; }

AOTI_LIBRARY := $(BUILD)/libmetaltopk_aoti.$(LIB_EXT)
AOTI_SRC := adapters/aoti/metaltopk_aoti.cpp
AOTI_HEADERS := adapters/aoti/metaltopk_aoti.h include/metaltopk.h

ifeq ($(UNAME),Darwin)
AOTI_SONAME = -install_name @rpath/libmetaltopk_aoti.$(LIB_EXT)
AOTI_RUNTIME_SYMBOLS := -undefined dynamic_lookup -Wl,-rpath,@loader_path -framework Foundation
# aoti_torch_mps_topk adopts ExecuTorch's Metal buffers and stream where that runtime is the
# process's (Objective-C++, manual retain/release: clang's default).
AOTI_DEVICE_DEFINES = -DMETALTOPK_AOTI_MPS -DMETALTOPK_AOTI_EXECUTORCH_METAL
AOTI_SRC += adapters/aoti/executorch_metal.mm
AOTI_HEADERS += adapters/aoti/executorch_metal.h
else
AOTI_SONAME = -Wl,-soname,libmetaltopk_aoti.$(LIB_EXT)
TORCH_CUDA = $(wildcard $(TORCH_LIBRARY_DIR)/libtorch_cuda.so)
AOTI_RUNTIME_LIBS = -L$(TORCH_LIBRARY_DIR) -ltorch_cpu -lc10 $(if $(TORCH_CUDA),-ltorch_cuda) \
  -Wl,-rpath,$(TORCH_LIBRARY_DIR)
AOTI_RUNTIME_SYMBOLS = -Wl,-rpath,'$$ORIGIN' -Wl,--version-script=adapters/aoti/exports.map \
  $(AOTI_RUNTIME_LIBS)
# Built for a runtime other than libtorch (AOTI_RUNTIME_LIBS empty), the CUDA shim also
# provides torch.topk's own aoti_torch_cuda_topk, which ExecuTorch's CUDA runtime lacks.
AOTI_DEVICE_DEFINES = $(if $(TORCH_CUDA),-DUSE_CUDA -DMETALTOPK_AOTI_CUDA \
  $(if $(strip $(AOTI_RUNTIME_LIBS)),,-DMETALTOPK_AOTI_ATEN_TOPK))
endif
AOTI_CXXFLAGS = $(TORCH_CXX_STD) -O2 -fPIC -fvisibility=hidden -Wall -Wextra $(ADAPTER_WERROR) \
  -Iinclude -Iadapters/aoti $(TORCH_INCLUDE_FLAGS) $(TORCH_ABI_FLAG)

$(AOTI_LIBRARY): $(AOTI_SRC) $(AOTI_HEADERS) $(LIBRARY) adapters/aoti/aoti.mk adapters/aoti/exports.map \
    $(TORCH_BUILD_INPUTS)
	@rm -f $@  # a failed build leaves no shim of another torch behind
	$(call check_torch_flags,the AOTInductor shim)
	$(CXX) $(AOTI_CXXFLAGS) $(AOTI_DEVICE_DEFINES) -shared $(AOTI_SONAME) $(AOTI_SRC) -o $@ \
	  -L$(BUILD) -lmetaltopk $(AOTI_RUNTIME_SYMBOLS)

.PHONY: aoti torch-adapters optional-torch-adapters
aoti: $(AOTI_LIBRARY)

# adapters/torch/torch.mk adds the fast path.
torch-adapters: $(AOTI_LIBRARY)

ifneq ($(TORCH_FOUND),)
all: optional-torch-adapters
endif

optional-torch-adapters: $(LIBRARY)
	+@$(MAKE) --no-print-directory torch-adapters || \
	  echo "WARNING: the torch parts (AOTInductor shim, torch fast path) did not build for the torch in $(PYTHON) (see above); $(LIBRARY) is built, and the Python package works without them (through cffi)" >&2
