#!/usr/bin/env bash
# The Metal half of run_e2e.sh, for an Apple Silicon Mac: ExecuTorch's runtime with its Metal
# delegate runs programs lowered with MetalPartitioner whose top-k is metaltopk's
# (aoti_torch_mps_topk on the runtime's own buffers and stream: adapters/aoti/executorch_metal.mm),
# checked against eager. UNVERIFIED: written on Linux from ExecuTorch v1.2.0's sources; no Mac
# has run it (see docs/TORCH.md).
#
#   tests/executorch/run_e2e_metal.sh EXECUTORCH_SRC [OUT]
#
# EXECUTORCH_SRC: ExecuTorch's source tree with its submodules, of the release $PYTHON has
#   installed (executorch, and torchao, which 1.2.0's MetalBackend imports for its options).
# OUT: where the results file goes (default bench/results/executorch_metal.json).
# Steps, each logged under $WORK (default /tmp/metaltopk-executorch-metal), as run_e2e.sh: build
# metaltopk and its C shim (the macOS build includes the ExecuTorch Metal glue); configure and
# build executor_runner with -DEXECUTORCH_BUILD_METAL=ON; export the sampler and router, plain and
# after replace_topk; run each with the shim inserted (DYLD_INSERT_LIBRARIES); compare with
# eager. UNTIL=configure or UNTIL=build stop early, as in run_e2e.sh.
set -euo pipefail

SRC=$(cd "${1:?usage: run_e2e_metal.sh EXECUTORCH_SRC [OUT]}" && pwd)
REPO=$(cd "$(dirname "$0")/../.." && pwd)
RESULTS=${2:-$REPO/bench/results/executorch_metal.json}
WORK=${WORK:-/tmp/metaltopk-executorch-metal}
RUNS=${RUNS:-100}
JOBS=${JOBS:-$(sysctl -n hw.ncpu)}
PYTHON=${PYTHON:-python3}
MTK_BUILD=${MTK_BUILD:-$REPO/build-executorch-metal}
UNTIL=${UNTIL:-}
CMAKE=${CMAKE:-cmake}
mkdir -p "$WORK"

say() { echo "== $(date -u +%H:%M:%S) $*"; }
logged() {  # logged NAME command...: runs it into $WORK/NAME.log, shows the end on failure
  local log=$WORK/$1.log; shift
  if ! "$@" > "$log" 2>&1; then tail -40 "$log"; echo "FAILED: see $log"; exit 1; fi
}

[ "$(uname -s)" = Darwin ] || { echo "run_e2e_metal.sh runs on macOS (tests/executorch/run_e2e.sh is CUDA's)"; exit 1; }
export PYTHONPATH=$REPO/python${PYTHONPATH:+:$PYTHONPATH}
"$PYTHON" -c "import torch, executorch; from importlib.metadata import version; \
print('torch', torch.__version__, 'executorch', version('executorch'), \
      'mps' if torch.backends.mps.is_available() else 'no MPS device')"

say "metaltopk and its C shim in $MTK_BUILD"
logged metaltopk make -C "$REPO" -j"$JOBS" BUILD="$MTK_BUILD" PYTHON="$PYTHON" aoti
SHIM=$MTK_BUILD/libmetaltopk_aoti.dylib
export METALTOPK_LIBRARY=$MTK_BUILD/libmetaltopk.dylib
nm -gU "$SHIM" | grep -q ' _aoti_torch_mps_topk$' || { echo "$SHIM has no aoti_torch_mps_topk"; exit 1; }

say "ExecuTorch's runtime with the Metal delegate in $WORK/et-build"
logged et-configure "$CMAKE" -S "$SRC" -B "$WORK/et-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DPYTHON_EXECUTABLE="$(command -v "$PYTHON")" -DEXECUTORCH_BUILD_METAL=ON \
  -DEXECUTORCH_BUILD_PTHREADPOOL=OFF -DEXECUTORCH_BUILD_CPUINFO=OFF \
  -DEXECUTORCH_BUILD_EXECUTOR_RUNNER=ON -DEXECUTORCH_BUILD_EXTENSION_FLAT_TENSOR=ON \
  -DEXECUTORCH_BUILD_EXTENSION_DATA_LOADER=ON -DEXECUTORCH_BUILD_EXTENSION_NAMED_DATA_MAP=ON \
  -DEXECUTORCH_BUILD_EXTENSION_TENSOR=ON -DEXECUTORCH_ENABLE_LOGGING=ON
[ "$UNTIL" = configure ] && { say "configured (UNTIL=configure)"; exit 0; }
logged et-build "$CMAKE" --build "$WORK/et-build" --target executor_runner -j"$JOBS"
RUNNER=$WORK/et-build/executor_runner
[ "$UNTIL" = build ] && { say "built $RUNNER (UNTIL=build)"; exit 0; }

if [ -z "${FLATC_EXECUTABLE:-}" ]; then
  FLATC_EXECUTABLE=$(find "$WORK/et-build" -name flatc -type f -perm -u+x | head -1)
  if [ -z "$FLATC_EXECUTABLE" ]; then
    logged flatc-build "$CMAKE" --build "$WORK/et-build" --target flatc -j"$JOBS"
    FLATC_EXECUTABLE=$(find "$WORK/et-build" -name flatc -type f -perm -u+x | head -1)
  fi
  [ -n "$FLATC_EXECUTABLE" ] || { echo "no flatc in $WORK/et-build"; exit 1; }
fi
export FLATC_EXECUTABLE

say "exporting the models (MetalPartitioner, plain and replace_topk)"
rm -rf "$WORK/programs"
logged export "$PYTHON" "$REPO/tests/executorch/executorch_export.py" export "$WORK/programs" \
  --backend metal

say "running them in executor_runner with $SHIM inserted"
: > "$WORK/timings.txt"
for program in "$WORK"/programs/*/; do
  name=$(basename "$program")
  data=$(ls "$program"*.ptd)
  run() {
    DYLD_INSERT_LIBRARIES=$SHIM "$RUNNER" --model_path "$program/model.pte" --data_path "$data" \
      --inputs "$program/input-0.bin" "$@"
  }
  logged "run-$name" run --output_file "$program/output"
  logged "time-$name" run --num_executions "$RUNS"
  ms=$(sed -n 's/.*executed successfully [0-9]* time(s) in \([0-9.]*\) ms.*/\1/p' \
       "$WORK/time-$name.log")
  echo "$name ${ms:-nan} $RUNS" >> "$WORK/timings.txt"
  echo "$name: $RUNS runs in $ms ms"
done

say "comparing with eager"
"$PYTHON" "$REPO/tests/executorch/executorch_export.py" check "$WORK/programs" "$RESULTS" \
  --timings "$WORK/timings.txt" --backend metal
say "results in $RESULTS"
