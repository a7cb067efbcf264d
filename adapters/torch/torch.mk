# The torch fast path (adapters/torch/): the Python extension _metaltopk_torch beside libmetaltopk,
# compiled against the torch and the Python that the build uses, with the flags that torch needs
# (TORCH_DIR, TORCH_FOUND, the TORCH_* flags and TORCH_BUILD_INPUTS come from
# adapters/aoti/aoti.mk). A torch extension runs only with the torch it was compiled against, so
# the build writes that torch's version beside it; the Python package loads the extension only
# when the version matches and otherwise keeps its cffi path. `make` builds it where that Python
# has torch and its C headers (python3-dev); without them the package still works, on the cffi
# path.

TORCH_EXT_SUFFIX := $(lastword $(TORCH_KEY))
TORCH_EXTENSION = $(BUILD)/_metaltopk_torch$(TORCH_EXT_SUFFIX)
TORCH_EXTENSION_STAMP := $(BUILD)/_metaltopk_torch.torch_version
TORCH_EXT_SRC := adapters/torch/metaltopk_torch.cpp
PYTHON_INCLUDE := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_paths()['include'])" 2>/dev/null)
TORCH_EXT_CXXFLAGS = $(TORCH_CXX_STD) -O2 -fPIC -fvisibility=hidden -Wall -Wextra $(ADAPTER_WERROR) \
  -Iinclude $(TORCH_INCLUDE_FLAGS) -isystem $(PYTHON_INCLUDE) $(TORCH_ABI_FLAG)

ifeq ($(UNAME),Darwin)
TORCH_EXT_LINK = -undefined dynamic_lookup -Wl,-rpath,@loader_path -Wl,-rpath,$(TORCH_LIBRARY_DIR)
else
TORCH_EXT_LINK = -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,$(TORCH_LIBRARY_DIR)
endif

TORCH_EXTENSION_BUILT := $(and $(TORCH_FOUND),$(wildcard $(PYTHON_INCLUDE)/Python.h))
ifneq ($(TORCH_EXTENSION_BUILT),)
torch-adapters: $(TORCH_EXTENSION_STAMP)
else
torch-adapters: python-headers-missing
endif

.PHONY: python-headers-missing
python-headers-missing:
	@echo "the torch fast path needs the Python headers ($(PYTHON_INCLUDE)/Python.h; python3-dev on Debian and Ubuntu)"; exit 1

$(TORCH_EXTENSION): $(TORCH_EXT_SRC) include/metaltopk.h $(LIBRARY) adapters/torch/torch.mk \
    $(TORCH_BUILD_INPUTS)
	@rm -f $@ $(TORCH_EXTENSION_STAMP)  # a failed build leaves no extension of another torch behind
	$(call check_torch_flags,the torch fast path)
	$(CXX) $(TORCH_EXT_CXXFLAGS) -shared $(TORCH_EXT_SRC) -o $@ -L$(BUILD) -lmetaltopk \
	  -L$(TORCH_LIBRARY_DIR) -ltorch_python -ltorch_cpu -lc10 $(TORCH_EXT_LINK)

$(TORCH_EXTENSION_STAMP): $(TORCH_EXTENSION)
	echo "$(TORCH_VERSION)" > $@

.PHONY: torch-extension
torch-extension: $(TORCH_EXTENSION_STAMP)
