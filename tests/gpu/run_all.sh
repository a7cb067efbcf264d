#!/usr/bin/env bash
# Everything the GPU machine checks, in one call (device time is scarce; see bench/CUDA_NOTES.md):
#   build for sm_90 -> exhaustive CUDA conformance -> benchmark (Python, torch and the C-ABI
#   harness bench/gpu/bench_c_abi in one table) -> fused-router tests and benchmark
#   (warp_collectives timing its selection steps in cycles, then bench_router_cuda.py with its
#   C-ABI harness bench/gpu/bench_router_c_abi) -> pytest (CUDA params + torch/CuPy interop) ->
#   the torch integration (ops, capture, AOTInductor on CUDA) and its host-cost benchmark ->
#   compute-sanitizer memcheck and racecheck -> the fault-injection sweep with the CUDA backend.
# Usage: tests/gpu/run_all.sh [steps...]   steps: build conformance bench router router-bench
#        pytest torch host-cost sanitize faults (default: all), adapters (instead of build: the
#        torch adapters against a library copied into $BUILD), sanitize-cluster (the sanitizers
#        on the cluster kernel's shapes alone, also part of sanitize), sanitize-ragged (the
#        sanitizers on the ragged conformance's quick set), sampling (build and run the sampling
#        conformance alone, then its quick set under the sanitizers; the conformance step runs
#        it too), large-k (the conformance's large-k shapes alone), distributed-smoke (one-GPU
#        NCCL world of bench/distributed_topk.py), and ncu and ncu-source (kernels named in
#        $NCU_SHAPES: counters, or stall samples per SASS instruction summarised by
#        bench/gpu/sass_stalls.py), and split (each kernel's own duration, $NCU_SHAPES being
#        shapes); split-ragged and ncu-source-prefill do the same on the peers harness's ragged
#        shapes. Logs and the benchmark JSON go to $OUT (or ./gpu-out).
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-gpu}
STEPS=${*:-build conformance bench router router-bench pytest torch host-cost sanitize faults}
export PYTHONUNBUFFERED=1

if ls .whl/*.whl >/dev/null 2>&1 && ! python3 -c "import cffi" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export METALTOPK_LIBRARY=$PWD/$BUILD/libmetaltopk.so
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
SUMMARY=$OUT/summary.txt
: > "$SUMMARY"
note() { echo "$*" | tee -a "$SUMMARY"; }

# step NAME SECONDS COMMAND...: runs with a time limit, logs to $OUT/NAME.log, records status.
step() {
  local name=$1 limit=$2
  shift 2
  local start=$SECONDS
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local status=$?
  note "$name: exit $status in $((SECONDS - start)) s"
  tail -n 15 "$OUT/$name.log"
  return $status
}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee -a "$SUMMARY"
for s in $STEPS; do
  case $s in
    build)
      step build 300 make BUILD="$BUILD" PYTHON=python3 -j"$(nproc)" all \
        "$BUILD/tests/cuda_conformance" "$BUILD/tests/cuda_ragged_conformance" \
        "$BUILD/tests/cuda_sampling_conformance" \
        "$BUILD/bench/gpu/bench_c_abi" \
        "$BUILD/bench/gpu/bench_router_c_abi" "$BUILD/bench/gpu/launch_floor" \
        "$BUILD/bench/gpu/warp_collectives" \
        "$BUILD/tests/reliability/fault_sweep" "$BUILD/tests/aoti/aoti_runner" \
        "$BUILD/tests/aoti/shim_runtime_test" || exit 1 ;;
    adapters)
      # The torch adapters and the AOTInductor test programs against a library already in $BUILD
      # (built on another machine, e.g. by bench/gpu/prebuilt_ab.sh pack): make -o keeps it.
      step adapters 180 make -o "$BUILD/libmetaltopk.so" BUILD="$BUILD" PYTHON=python3 \
        -j"$(nproc)" torch-adapters "$BUILD/tests/aoti/aoti_runner" \
        "$BUILD/tests/aoti/shim_runtime_test" || exit 1 ;;
    conformance)
      step conformance 360 "$BUILD/tests/cuda_conformance"
      step ragged-conformance 240 "$BUILD/tests/cuda_ragged_conformance"
      step sampling-conformance 420 "$BUILD/tests/cuda_sampling_conformance" ;;
    large-k)
      # k 2048-4096 on batched long rows alone (the conformance step runs them too).
      step large-k-conformance 240 "$BUILD/tests/cuda_conformance" --large-k ;;
    sampling)
      # The sampling filters on their own: build the library and the conformance program, run
      # it (CUDA == CPU bit for bit, batch invariance, graph replay), then the sanitizers on its
      # quick set.
      step sampling-build 300 make BUILD="$BUILD" PYTHON=python3 -j"$(nproc)" \
        "$BUILD/tests/cuda_sampling_conformance" || exit 1
      step sampling-conformance 420 "$BUILD/tests/cuda_sampling_conformance"
      step memcheck-sampling 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$BUILD/tests/cuda_sampling_conformance" --quick
      step racecheck-sampling 300 compute-sanitizer --tool racecheck --error-exitcode 9 \
        "$BUILD/tests/cuda_sampling_conformance" --sanitize ;;
    sanitize-ragged)
      step memcheck-ragged 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$BUILD/tests/cuda_ragged_conformance" --quick
      step racecheck-ragged 300 compute-sanitizer --tool racecheck --error-exitcode 9 \
        "$BUILD/tests/cuda_ragged_conformance" --quick ;;
    pytest)
      step pytest 120 python3 -m pytest -q -rs -p no:cacheprovider tests/test_conformance.py \
        tests/gpu/test_gpu_arrays.py -k "cuda or gpu" ;;
    torch)
      step shim-runtime 60 "$BUILD/tests/aoti/shim_runtime_test"
      step torch-pytest 420 env METALTOPK_AOTI_RUNNER="$PWD/$BUILD/tests/aoti/aoti_runner" \
        METALTOPK_EXPECT_TORCH_FAST_PATH=1 \
        python3 -m pytest -q -rs -p no:cacheprovider tests/gpu/test_gpu_arrays.py tests/torch ;;
    host-cost)
      step host-cost 120 python3 bench/torch_host_cost.py --json "$OUT/torch_host_cost_h200.json" ;;
    distributed-smoke)
      step distributed-smoke 120 python3 bench/distributed_topk.py --smoke ;;
    sanitize)
      step memcheck 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$BUILD/tests/cuda_conformance" --quick
      step racecheck 420 compute-sanitizer --tool racecheck --error-exitcode 9 \
        "$BUILD/tests/cuda_conformance" --quick ;&
    sanitize-cluster)
      # The quick set's rows are too short for the cluster kernel: its code paths on their own,
      # in ten launches (--cluster, 120 launches, ran out of 300 s under racecheck).
      step memcheck-cluster 150 compute-sanitizer --tool memcheck --error-exitcode 9 \
        "$BUILD/tests/cuda_conformance" --cluster-sanitize
      step racecheck-cluster 300 compute-sanitizer --tool racecheck --error-exitcode 9 \
        "$BUILD/tests/cuda_conformance" --cluster-sanitize ;;
    router)
      step router-pytest 240 python3 -m pytest -q -rs -p no:cacheprovider \
        tests/router/test_router.py tests/router/test_router_torch_cuda.py -k cuda ;;
    router-bench)
      step warp-collectives 30 "$BUILD/bench/gpu/warp_collectives"
      step router-bench 260 python3 bench/gpu/bench_router_cuda.py \
        --json "$OUT/bench_router_cuda.json" --c-abi-bench "$BUILD/bench/gpu/bench_router_c_abi" ;;
    bench)
      step launch-floor 30 "$BUILD/bench/gpu/launch_floor"
      step bench 240 python3 bench/gpu/bench_cuda.py --json "$OUT/bench_cuda.json" \
        --c-abi-bench "$BUILD/bench/gpu/bench_c_abi" ${BENCH_ARGS:-} ;;
    faults)
      step fault-sweep 120 "$BUILD/tests/reliability/fault_sweep" ;;
    ncu)
      # Nsight Compute on one launch of a kernel per NCU_SHAPES entry, kernel@shape (shape as
      # bench_c_abi takes it), e.g. NCU_SHAPES="finish_kernel@sampling:256:151936:50:float32:-1".
      for spec in ${NCU_SHAPES:-}; do
        kernel=${spec%%@*} shape=${spec#*@}
        step "ncu-$kernel-${shape//:/_}" 90 ncu --clock-control none --launch-skip 2 \
          --launch-count 1 -k "regex:$kernel" --section SpeedOfLight \
          --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
          --section Occupancy --section LaunchStats \
          "$BUILD/bench/gpu/bench_c_abi" --calls 3 --reps 1 --singles 1 "$shape"
      done ;;
    split)
      # Each kernel of one call on its own (ncu serialises them, so the overlap of dependent
      # launches is gone; no cache flush, clocks as they run): what every stage of the pipeline
      # costs, for NCU_SHAPES given as shapes (bench/gpu/kernel_split.py lists the last call's).
      for shape in ${NCU_SHAPES:-}; do
        step "split-${shape//:/_}" 90 ncu --clock-control none --cache-control none \
          --metrics gpu__time_duration.sum,sm__cycles_active.avg,gpc__cycles_elapsed.max \
          "$BUILD/bench/gpu/bench_c_abi" --calls 3 --reps 1 --singles 1 "$shape"
        python3 bench/gpu/kernel_split.py "$OUT/split-${shape//:/_}.log" | tee -a "$SUMMARY"
      done ;;
    ncu-source)
      # Where the kernel's warps stall, instruction by instruction: the page is a large CSV, its
      # summary (by stall reason, then the most sampled instructions) goes beside it.
      # NCU_SAMPLING_INTERVAL=0 samples every 32 cycles, for kernels of one or a few blocks.
      for spec in ${NCU_SHAPES:-}; do
        kernel=${spec%%@*} shape=${spec#*@}
        name="ncu-source-$kernel-${shape//:/_}"
        step "$name" 90 ncu --clock-control none --launch-skip 2 --launch-count 1 \
          ${NCU_SAMPLING_INTERVAL:+--warp-sampling-interval "$NCU_SAMPLING_INTERVAL"} \
          -k "regex:$kernel" --section SourceCounters --section WarpStateStats --page source \
          --print-source sass --csv "$BUILD/bench/gpu/bench_c_abi" --calls 3 --reps 1 --singles 1 \
          "$shape" && python3 bench/gpu/sass_stalls.py "$OUT/$name.log" 30 > "$OUT/$name.txt"
      done ;;
    split-ragged)
      # Every kernel's duration on the peers harness's ragged shapes named in RAGGED_FILTERS
      # (peers_bench --filter texts), metaltopk's launches and the peers' (bench/peers/run.sh
      # builds peers_bench), one launch of each call.
      for filter in ${RAGGED_FILTERS:-decode_64x131072 decode_256x131072 prefill dsv4}; do
        name="split-ragged-$filter"
        step "$name" 120 ncu --clock-control none --metrics gpu__time_duration.sum --csv \
          bench/peers/bin/peers_bench --only ragged --filter "${filter//_/ }" --calls 1 --reps 1 \
          --graph-calls 1 --replays 1 &&
          python3 bench/gpu/kernel_durations.py "$OUT/$name.log" | tee -a "$SUMMARY"
      done ;;
    ncu-source-prefill)
      # ncu-source for the block kernel of the ragged prefill (8192 causal rows, one block each).
      step ncu-source-prefill 120 ncu --clock-control none --launch-skip 2 --launch-count 1 \
        -k regex:block_select --section SourceCounters --section WarpStateStats --page source \
        --print-source sass --csv bench/peers/bin/peers_bench --only ragged --filter prefill \
        --calls 3 --reps 1 &&
        python3 bench/gpu/sass_stalls.py "$OUT/ncu-source-prefill.log" 30 > "$OUT/ncu-source-prefill.txt" ;;
    *) note "unknown step $s" ;;
  esac
done
cat "$SUMMARY"
