# `make bench`: benchmarks, one target per backend area hung under `bench`.
#
# bench-cpu: the CPU backend against torch.topk (2 threads) and numpy on the CPU shapes (MoE,
# sampling, select), in one process (bench/bench_cpu.py; results in bench/results/cpu.json, the
# design and measurements in bench/CPU_NOTES.md).
# bench-router: the fused MoE router (CPU) against the torch composite (bench/bench_router.py;
# results in bench/results/router_cpu.json).
# BENCH_ARGS passes options through, e.g. BENCH_ARGS="--seconds 2".

BENCH_ARGS ?=

.PHONY: bench-cpu bench-router
bench: bench-cpu bench-router

bench-cpu: $(LIBRARY) python-deps
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install -q torch==2.13.0
	METALTOPK_LIBRARY=$(abspath $(LIBRARY)) PYTHONPATH=$(abspath python) \
	  $(PYTHON) bench/bench_cpu.py $(BENCH_ARGS)

bench-router: $(LIBRARY) python-deps
	@$(PYTHON) -c "import torch" 2>/dev/null || $(PYTHON) -m pip install -q torch==2.13.0
	METALTOPK_LIBRARY=$(abspath $(LIBRARY)) PYTHONPATH=$(abspath python) \
	  $(PYTHON) bench/bench_router.py

# bench-cpu-kernel: single-thread CPU time of the CPU backend per shape (bench/CPU_NOTES.md);
# not part of `make bench`, which compares against the anchors.
CPU_KERNEL_TIME := $(BUILD)/bench/cpu_kernel_time

$(CPU_KERNEL_TIME): bench/cpu_kernel_time.c include/metaltopk.h $(LIBRARY)
	@mkdir -p $(dir $@)
	$(CC) -std=c11 -O2 -Wall -Wextra -Werror -Iinclude $< -o $@ -L$(BUILD) -lmetaltopk -lm \
	  -Wl,-rpath,$(abspath $(BUILD))

.PHONY: bench-cpu-kernel
bench-cpu-kernel: $(CPU_KERNEL_TIME)
	$(CPU_KERNEL_TIME)

# The GPU benchmarks' C++ and CUDA harnesses (tests/gpu/run_all.sh runs them on the H200).
include bench/gpu/gpu.mk
