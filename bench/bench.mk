# `make bench`: benchmarks, one target per backend area hung under `bench`.
#
# bench-cpu: the CPU backend against torch.topk (2 threads) and numpy on every CPU shape of
# BENCHMARKS.md, in one process (bench/bench_cpu.py; results and history in bench/CPU_NOTES.md).
# bench-router: the fused MoE router (CPU) against the torch composite (bench/bench_router.py).
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
