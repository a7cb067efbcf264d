#!/usr/bin/env bash
# Instructions per mtk_topk call outside the backend (bench/core_call_instructions.c under
# callgrind): mtk_topk's inclusive count minus the CPU backend's topk, over the calls.
# Usage: bench/core_call_instructions.sh [BUILD]   (a build directory holding libmetaltopk.so)
set -eu -o pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
${CC:-cc} -std=c11 -O2 -Wall -Wextra -Werror -Iinclude bench/core_call_instructions.c \
  -o "$work/probe" -L"$BUILD" -lmetaltopk -Wl,-rpath,"$(cd "$BUILD" && pwd)"
calls=$(valgrind --tool=callgrind --callgrind-out-file="$work/out" "$work/probe" 2>/dev/null |
  awk '/^calls/ {print $2}')
callgrind_annotate --inclusive=yes "$work/out" 2>/dev/null | awk -v calls="$calls" '
  { gsub(",", "", $1) }
  / \?\?\?:mtk_topk / { total = $1 }
  /CpuBackend::(plan|run)_topk\(/ { backend += $1 }
  END {
    if (!total || !backend) { print "core_call_instructions: counts not found" > "/dev/stderr"; exit 1 }
    printf "mtk_topk outside the backend: %.0f instructions a call (%d calls)\n", (total - backend) / calls, calls
  }'
