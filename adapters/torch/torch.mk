# The torch fast path (adapters/torch/): the Python extension _metaltopk_torch beside libmetaltopk,
# compiled against the torch and the Python that the build uses (TORCH_DIR and TORCH_FOUND come
# from adapters/aoti/aoti.mk). A torch extension runs only with the torch it was compiled
# against, so the build writes that torch's version beside it; the Python package loads the
# extension only when the version matches and otherwise keeps its cffi path. `make` builds it
# where that Python has torch and its C headers (python3-dev); without them the package still
# works, on the cffi path.

TORCH_EXT_SUFFIX := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))" 2>/dev/null)
TORCH_EXTENSION = $(BUILD)/_metaltopk_torch$(TORCH_EXT_SUFFIX)
TORCH_EXTENSION_STAMP := $(BUILD)/_metaltopk_torch.torch_version
TORCH_EXT_SRC := adapters/torch/metaltopk_torch.cpp
PYTHON_INCLUDE := $(shell $(PYTHON) -c "import sysconfig; print(sysconfig.get_paths()['include'])" 2>/dev/null)
TORCH_CXX11_ABI = $(shell $(PYTHON) -c "import torch; print(int(torch.compiled_with_cxx11_abi()))")
TORCH_EXT_CXXFLAGS = -std=c++17 -O2 -fPIC -fvisibility=hidden -Wall -Wextra -Werror -Iinclude \
  -isystem $(TORCH_DIR)/include -isystem $(TORCH_DIR)/include/torch/csrc/api/include \
  -isystem $(PYTHON_INCLUDE) -D_GLIBCXX_USE_CXX11_ABI=$(TORCH_CXX11_ABI)

ifeq ($(UNAME),Darwin)
TORCH_EXT_LINK = -undefined dynamic_lookup -Wl,-rpath,@loader_path -Wl,-rpath,$(TORCH_DIR)/lib
else
TORCH_EXT_LINK = -Wl,-rpath,'$$ORIGIN' -Wl,-rpath,$(TORCH_DIR)/lib
endif

TORCH_EXTENSION_BUILT := $(and $(TORCH_FOUND),$(wildcard $(PYTHON_INCLUDE)/Python.h))
ifneq ($(TORCH_EXTENSION_BUILT),)
all: $(TORCH_EXTENSION_STAMP)
endif

$(TORCH_EXTENSION): $(TORCH_EXT_SRC) include/metaltopk.h $(LIBRARY) adapters/torch/torch.mk
	@test -n "$(TORCH_DIR)" || { echo "the torch fast path needs torch in $(PYTHON)"; exit 1; }
	$(CXX) $(TORCH_EXT_CXXFLAGS) -shared $(TORCH_EXT_SRC) -o $@ -L$(BUILD) -lmetaltopk \
	  -L$(TORCH_DIR)/lib -ltorch_python -ltorch_cpu -lc10 $(TORCH_EXT_LINK)

$(TORCH_EXTENSION_STAMP): $(TORCH_EXTENSION)
	$(PYTHON) -c "import torch; print(torch.__version__)" > $@

.PHONY: torch-extension
torch-extension: $(TORCH_EXTENSION_STAMP)
