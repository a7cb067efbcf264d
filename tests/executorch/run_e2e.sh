#!/usr/bin/env bash
# End to end on a CUDA GPU: ExecuTorch's runtime with its CUDA delegate runs programs lowered with
# CudaPartitioner whose top-k is metaltopk's (issue 34), checked against eager.
#
#   tests/executorch/run_e2e.sh EXECUTORCH_SRC [WHEELS] [OUT]
#
# EXECUTORCH_SRC: ExecuTorch's source tree with its submodules (../shared/third_party/
#   executorch-v1.2.0-runtime-src.tgz unpacked: its executorch/ folder).
# WHEELS: the wheels tests/executorch/fetch.py downloads (default tests/executorch/wheels):
#   executorch, the packages its lowering imports that the machine lacks, and CMake >= 3.29.
#   They are installed into a folder of their own ($WORK/site), not into the machine's Python.
# OUT: where the results file goes (default bench/results/executorch_h200.json).
#
# Steps, each logged under $WORK (default /tmp/metaltopk-executorch): build metaltopk and its C
# shim for a runtime other than libtorch (`make aoti AOTI_RUNTIME_LIBS=`, in build-executorch/);
# configure and build ExecuTorch's executor_runner with -DEXECUTORCH_BUILD_CUDA=ON; export the
# sampler and router models, plain and after replace_topk (executorch_export.py); run each in
# executor_runner with the shim preloaded, once for the outputs and $RUNS times for the time;
# compare with eager and write the results. UNTIL=configure stops after configuring ExecuTorch
# (what a machine without a GPU can check), UNTIL=build after building the runner (to split the
# run over two calls of a machine that limits a command's time; the builds are incremental in
# $WORK and $MTK_BUILD); MTK_BUILD names another build folder for metaltopk.
set -euo pipefail

SRC=$(cd "${1:?usage: run_e2e.sh EXECUTORCH_SRC [WHEELS] [OUT]}" && pwd)
REPO=$(cd "$(dirname "$0")/../.." && pwd)
WHEELS=$(cd "${2:-$REPO/tests/executorch/wheels}" && pwd)
RESULTS=${3:-$REPO/bench/results/executorch_h200.json}
WORK=${WORK:-/tmp/metaltopk-executorch}
RUNS=${RUNS:-100}
JOBS=${JOBS:-$(nproc)}
PYTHON=${PYTHON:-python3}
MTK_BUILD=${MTK_BUILD:-$REPO/build-executorch}
UNTIL=${UNTIL:-}
mkdir -p "$WORK"

say() { echo "== $(date -u +%H:%M:%S) $*"; }
logged() {  # logged NAME command...: runs it into $WORK/NAME.log, shows the end on failure
  local log=$WORK/$1.log; shift
  if ! "$@" > "$log" 2>&1; then tail -40 "$log"; echo "FAILED: see $log"; exit 1; fi
}

say "installing the carried wheels into $WORK/site"
rm -rf "$WORK/site"
logged pip-install "$PYTHON" -m pip install --no-index --no-deps --no-compile --no-cache-dir \
  --target "$WORK/site" "$WHEELS"/*.whl
export PYTHONPATH=$WORK/site:$REPO/python${PYTHONPATH:+:$PYTHONPATH}
CMAKE=$WORK/site/bin/cmake
[ -x "$CMAKE" ] || CMAKE=$(command -v cmake)
"$PYTHON" - "$CMAKE" <<'PY'
import subprocess, sys
version = subprocess.run([sys.argv[1], "--version"], capture_output=True, text=True).stdout.split()[2]
if tuple(int(p) for p in version.split(".")[:2]) < (3, 29):
    sys.exit(f"{sys.argv[1]} is CMake {version}; ExecuTorch's CUDA delegate needs 3.29 or newer")
print(f"cmake {version} at {sys.argv[1]}")
PY
"$PYTHON" -c "import torch, executorch; from importlib.metadata import version; \
print('torch', torch.__version__, 'executorch', version('executorch'), \
      torch.cuda.get_device_name() if torch.cuda.is_available() else 'no GPU')"

say "metaltopk and its C shim for ExecuTorch (no libtorch linked) in $MTK_BUILD"
logged metaltopk make -C "$REPO" -j"$JOBS" BUILD="$MTK_BUILD" PYTHON="$PYTHON" AOTI_RUNTIME_LIBS= aoti
SHIM=$MTK_BUILD/libmetaltopk_aoti.so
export METALTOPK_LIBRARY=$MTK_BUILD/libmetaltopk.so
nm -D --defined-only "$SHIM" | grep -q ' aoti_torch_cuda_topk$' \
  || { echo "$SHIM has no CUDA entries (was torch found with CUDA?)"; exit 1; }

say "ExecuTorch's runtime with the CUDA delegate in $WORK/et-build"
# pthreadpool and cpuinfo are the XNNPACK/optimized kernels' submodules, which the runner does
# not need (and the carried source tree leaves out). Logging stays on in the release build: the
# runner logs its execution time. torch's CMake files add every architecture of
# TORCH_CUDA_ARCH_LIST (without it, a list from sm_50 on, which nvcc 13 refuses).
export TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0}
logged et-configure "$CMAKE" -S "$SRC" -B "$WORK/et-build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DPYTHON_EXECUTABLE="$(command -v "$PYTHON")" -DEXECUTORCH_BUILD_CUDA=ON \
  -DEXECUTORCH_BUILD_PTHREADPOOL=OFF -DEXECUTORCH_BUILD_CPUINFO=OFF \
  -DEXECUTORCH_BUILD_EXECUTOR_RUNNER=ON -DEXECUTORCH_BUILD_EXTENSION_FLAT_TENSOR=ON \
  -DEXECUTORCH_BUILD_EXTENSION_DATA_LOADER=ON -DEXECUTORCH_BUILD_EXTENSION_NAMED_DATA_MAP=ON \
  -DEXECUTORCH_BUILD_EXTENSION_TENSOR=ON -DEXECUTORCH_ENABLE_LOGGING=ON \
  -DCMAKE_CUDA_ARCHITECTURES="${TORCH_CUDA_ARCH_LIST//./}" \
  -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}"
[ "$UNTIL" = configure ] && { say "configured (UNTIL=configure)"; exit 0; }
logged et-build "$CMAKE" --build "$WORK/et-build" --target executor_runner -j"$JOBS"
RUNNER=$WORK/et-build/executor_runner
[ "$UNTIL" = build ] && { say "built $RUNNER (UNTIL=build)"; exit 0; }

# The wheel carries no flatc; the lowering serialises the .ptd with the one ExecuTorch's build
# makes from its flatbuffers submodule.
if [ -z "${FLATC_EXECUTABLE:-}" ]; then
  FLATC_EXECUTABLE=$(find "$WORK/et-build" -name flatc -type f -perm -u+x | head -1)
  if [ -z "$FLATC_EXECUTABLE" ]; then
    logged flatc-build "$CMAKE" --build "$WORK/et-build" --target flatc -j"$JOBS"
    FLATC_EXECUTABLE=$(find "$WORK/et-build" -name flatc -type f -perm -u+x | head -1)
  fi
  [ -n "$FLATC_EXECUTABLE" ] || { echo "no flatc in $WORK/et-build"; exit 1; }
fi
export FLATC_EXECUTABLE
say "flatc: $FLATC_EXECUTABLE"

say "exporting the models (CudaPartitioner, plain and replace_topk)"
rm -rf "$WORK/programs"
logged export "$PYTHON" "$REPO/tests/executorch/executorch_export.py" export "$WORK/programs"

say "running them in executor_runner with $SHIM preloaded"
: > "$WORK/timings.txt"
for program in "$WORK"/programs/*/; do
  name=$(basename "$program")
  data=$(ls "$program"*.ptd)
  run() {
    LD_PRELOAD=$SHIM "$RUNNER" --model_path "$program/model.pte" --data_path "$data" \
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
  --timings "$WORK/timings.txt"
say "results in $RESULTS"
