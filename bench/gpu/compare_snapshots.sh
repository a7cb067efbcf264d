#!/usr/bin/env bash
# A/B timing of several revisions in one device call. Each snapshot is a `git archive` tar of a
# revision, made on the development machine (the device gets a copy of the working tree, not the
# history): `git archive -o main.tar main && git archive -o try.tar my-branch`. The snapshots are
# built side by side, then each one's C harness (bench/gpu/bench_c_abi, which checks its results
# bit for bit against the CPU backend before timing) runs the shapes; the variants take turns,
# ROUNDS times, so that drift of the card hits them alike, and the spread between rounds shows
# what counts as noise.
#
# Usage: bench/gpu/compare_snapshots.sh NAME=SNAPSHOT.tar ... [-- SHAPE ...]
#   SHAPE as bench_c_abi takes it (family:rows:n:k:dtype:dim); default: the long-row shapes of
#   bench_cuda.py. The first snapshot is the baseline of the ratios.
# Logs go to $OUT (or ./gpu-out); the table (median of the rounds' eager us per call, sorted=True,
# with their range, and the ratio to the baseline) is printed last.
# CONFORMANCE="ARGS" (e.g. "--sampled", or "" for the whole suite) also builds each snapshot's
# tests/cuda/cuda_conformance and runs it with ARGS before any timing: a branch is timed only
# once it is correct on the card.
set -u -o pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/gpu-out}
ROUNDS=${ROUNDS:-3}
WORK=${WORK:-/tmp/compare-snapshots}
mkdir -p "$OUT"

names=()
tars=()
shapes=()
while [ $# -gt 0 ]; do
  case $1 in
    --) shift; shapes=("$@"); break ;;
    *=*) names+=("${1%%=*}"); tars+=("${1#*=}"); shift ;;
    *) echo "usage: $0 NAME=SNAPSHOT.tar ... [-- SHAPE ...]" >&2; exit 2 ;;
  esac
done
if [ ${#names[@]} -eq 0 ]; then
  echo "usage: $0 NAME=SNAPSHOT.tar ... [-- SHAPE ...]" >&2
  exit 2
fi
if [ ${#shapes[@]} -eq 0 ]; then
  shapes=(sampling:256:151936:50:float32:-1 sampling:256:151936:1024:float32:-1
          sampling:256:262144:256:float32:-1 select:1:268435456:100:float32:-1
          select:1:268435456:10000:float32:-1 select:1:67108864:1000:bfloat16:-1)
fi

jobs=$(( $(nproc) / ${#names[@]} ))
[ "$jobs" -ge 1 ] || jobs=1
for i in "${!names[@]}"; do
  dir=$WORK/${names[$i]}
  rm -rf "$dir" && mkdir -p "$dir" && tar -xf "${tars[$i]}" -C "$dir" || exit 1
  # Revisions from before the GPU benchmarks moved to bench/gpu build the harness in tests/.
  harness=build/bench/gpu/bench_c_abi
  [ -f "$dir/bench/gpu/bench_c_abi.cpp" ] || harness=build/tests/bench_c_abi
  echo "$harness" > "$dir/.harness"
  targets=("$harness")
  [ -n "${CONFORMANCE+set}" ] && targets+=(build/tests/cuda_conformance)
  (cd "$dir" && make -j"$jobs" BUILD=build "${targets[@]}" \
    > "$OUT/build-${names[$i]}.log" 2>&1) &
done
wait
for name in "${names[@]}"; do
  if [ ! -x "$WORK/$name/$(cat "$WORK/$name/.harness")" ]; then
    echo "build of $name failed:"
    tail -n 20 "$OUT/build-$name.log"
    exit 1
  fi
done

if [ -n "${CONFORMANCE+set}" ]; then
  # The suites run side by side on the card (they check results, not times): one suite's wall
  # time for all.
  start=$SECONDS
  pids=()
  for name in "${names[@]}"; do
    # shellcheck disable=SC2086 # CONFORMANCE holds the suite's arguments, split on purpose
    "$WORK/$name/build/tests/cuda_conformance" $CONFORMANCE > "$OUT/conformance-$name.log" 2>&1 &
    pids+=($!)
  done
  failed=0
  for i in "${!names[@]}"; do
    wait "${pids[$i]}"
    status=$?
    echo "conformance of ${names[$i]} ($CONFORMANCE): exit $status after $((SECONDS - start)) s"
    tail -n 1 "$OUT/conformance-${names[$i]}.log"
    [ $status -eq 0 ] || failed=1
  done
  [ $failed -eq 0 ] || exit 1
fi

for round in $(seq "$ROUNDS"); do
  for name in "${names[@]}"; do
    "$WORK/$name/$(cat "$WORK/$name/.harness")" --calls 50 --reps 7 "${shapes[@]}" \
      > "$OUT/bench-$name-round$round.log" 2>&1 || { echo "$name failed in round $round:";
                                                    tail -n 20 "$OUT/bench-$name-round$round.log";
                                                    exit 1; }
  done
done

python3 - "$OUT" "$ROUNDS" "${names[@]}" <<'EOF'
import json
import statistics
import sys

out, rounds, names = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
times = {}  # (shape, name) -> eager us per round, sorted=True
for name in names:
    for r in range(1, rounds + 1):
        for line in open(f"{out}/bench-{name}-round{r}.log"):
            if not line.startswith("{"):
                continue
            row = json.loads(line)
            if not row["sorted"]:
                continue
            shape = f"{row['family']} {row['rows']}x{row['n']} k={row['k']} {row['dtype']}"
            if row["dim"] != -1:
                shape += f" dim {row['dim']}"
            times.setdefault((shape, name), []).append(row["eager_us"])
shapes = list(dict.fromkeys(shape for shape, _ in times))
print(f"{'shape':40}" + "".join(f" | {n:>22}" for n in names))
for shape in shapes:
    base = statistics.median(times[(shape, names[0])])
    cells = []
    for name in names:
        t = times[(shape, name)]
        med = statistics.median(t)
        cells.append(f"{med:7.1f} ({min(t):.1f}-{max(t):.1f}) {med / base:4.2f}")
    print(f"{shape:40}" + "".join(f" | {c:>22}" for c in cells))
EOF
