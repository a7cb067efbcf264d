# The AOTInductor C shim (adapters/aoti/): libmetaltopk_aoti beside libmetaltopk, compiled
# against torch's stable C shim header. `make` builds it when the Python that the build uses has
# torch. The runtime functions it calls (aoti_torch_*) come from libtorch, which it links (torch
# loads its libraries privately, so a process's Python torch does not provide them globally);
# for an ExecuTorch runtime, which implements the same functions, build it with
# AOTI_RUNTIME_LIBS= so they stay undefined and bind to the runtime at load time. CUDA entry
# points are compiled in when that torch was built with CUDA, the origin's aoti_torch_mps_topk on
# macOS (where the runtime's symbols are always looked up at load time).

TORCH_DIR = $(shell $(PYTHON) -c "import importlib.util as u, os; s = u.find_spec('torch'); \
  print(os.path.dirname(s.origin) if s else '')" 2>/dev/null)
AOTI_LIBRARY := $(BUILD)/libmetaltopk_aoti.$(LIB_EXT)
AOTI_SRC := adapters/aoti/metaltopk_aoti.cpp
AOTI_HEADERS := adapters/aoti/metaltopk_aoti.h include/metaltopk.h

ifeq ($(UNAME),Darwin)
AOTI_SONAME = -install_name @rpath/libmetaltopk_aoti.$(LIB_EXT)
AOTI_RUNTIME_SYMBOLS := -undefined dynamic_lookup -Wl,-rpath,@loader_path
AOTI_DEVICE_DEFINES = -DMETALTOPK_AOTI_MPS
else
AOTI_SONAME = -Wl,-soname,libmetaltopk_aoti.$(LIB_EXT)
TORCH_CUDA = $(wildcard $(TORCH_DIR)/lib/libtorch_cuda.so)
AOTI_RUNTIME_LIBS = -L$(TORCH_DIR)/lib -ltorch_cpu -lc10 $(if $(TORCH_CUDA),-ltorch_cuda) \
  -Wl,-rpath,$(TORCH_DIR)/lib
AOTI_RUNTIME_SYMBOLS = -Wl,-rpath,'$$ORIGIN' $(AOTI_RUNTIME_LIBS)
AOTI_DEVICE_DEFINES = $(if $(TORCH_CUDA),-DUSE_CUDA -DMETALTOPK_AOTI_CUDA)
endif
AOTI_CXXFLAGS = -std=c++17 -O2 -fPIC -Wall -Wextra -Werror -Iinclude -Iadapters/aoti \
  -isystem $(TORCH_DIR)/include

TORCH_FOUND := $(shell $(PYTHON) -c "import importlib.util as u; print(1 if u.find_spec('torch') \
  else '')" 2>/dev/null)
ifneq ($(TORCH_FOUND),)
all: $(AOTI_LIBRARY)
endif

$(AOTI_LIBRARY): $(AOTI_SRC) $(AOTI_HEADERS) $(LIBRARY) adapters/aoti/aoti.mk
	@test -n "$(TORCH_DIR)" || { echo "the AOTInductor shim needs torch (for its C shim header) in $(PYTHON)"; exit 1; }
	$(CXX) $(AOTI_CXXFLAGS) $(AOTI_DEVICE_DEFINES) -shared $(AOTI_SONAME) $(AOTI_SRC) -o $@ \
	  -L$(BUILD) -lmetaltopk $(AOTI_RUNTIME_SYMBOLS)

.PHONY: aoti
aoti: $(AOTI_LIBRARY)
