#!/usr/bin/env bash
# Registers, stack, spills and static shared memory of every kernel in the CUDA sources given
# (default: all of lib/cuda/*.cu), as ptxas reports them for sm_90, one line a kernel; with
# NVDISASM set to an nvdisasm binary, also the local-memory loads and stores (LDL/STL) in each
# kernel's SASS, the spills and the local arrays alike. Needs nvcc, no GPU.
#   bench/gpu/kernel_resources.sh lib/cuda/sampling.cu | grep sampling_rows_kernel
set -euo pipefail
cd "$(dirname "$0")/../.."
NVCC=${NVCC:-nvcc}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
sources=("$@")
[ ${#sources[@]} -eq 0 ] && sources=(lib/cuda/*.cu)
for src in "${sources[@]}"; do
  cubin="$work/$(basename "$src" .cu).cubin"
  "$NVCC" -O3 -std=c++17 -gencode arch=compute_90,code=sm_90 -Xptxas -v -cubin \
    ${NVDISASM:+-lineinfo} -Iinclude -Ilib "$src" -o "$cubin" 2> "$work/ptxas.log"
  local_ops=/dev/null
  if [ -n "${NVDISASM:-}" ]; then
    local_ops="$work/local.txt"
    "$NVDISASM" -c "$cubin" | awk '/^[[:space:]]*\.text\./ { f = $1; sub(/^\.text\./, "", f); sub(/:$/, "", f) }
      /[[:space:]](STL|LDL)[. ]/ { n[f]++ } END { for (f in n) print f, n[f] }' > "$local_ops"
  fi
  python3 - "$work/ptxas.log" "$local_ops" "$src" <<'PY'
import re, sys
log, local_path, src = sys.argv[1:4]
local = {}
for line in open(local_path):
    name, count = line.split()
    local[name] = int(count)
kernel = None
for line in open(log):
    m = re.search(r"Function properties for (\S+)", line)
    if m:
        kernel = m.group(1)
        stack = stores = loads = 0
        continue
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m and kernel:
        stack, stores, loads = map(int, m.groups())
    m = re.search(r"Used (\d+) registers.*?(?:(\d+) bytes smem)?$", line.strip())
    if m and kernel:
        smem = m.group(2) or "0"
        extra = f" local_ops={local.get(kernel, 0)}" if local_path != "/dev/null" else ""
        print(f"{src} {kernel} registers={m.group(1)} stack={stack} spill_stores={stores} "
              f"spill_loads={loads} smem={smem}{extra}")
        kernel = None
PY
done
