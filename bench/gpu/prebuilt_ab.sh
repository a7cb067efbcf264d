#!/usr/bin/env bash
# A/B timing of library revisions on the peers harness, built here and timed on the GPU machine
# in one call, so that the device's minutes go to timing rather than to nvcc (a library takes
# about 7 minutes to build on 2 cores, the harness 2).
#
#   bench/gpu/prebuilt_ab.sh pack NAME=REV ...   here, where nvcc is: builds each revision's
#       library (a git worktree each, in $AB_WORK, default /tmp/prebuilt-ab), the peers harness
#       once (bench/peers/fetch.py first) and each revision's CUDA conformance programs,
#       and packs them into .carry/prebuilt.tar.xz (carry ".carry"; 64 MiB at most). The first
#       revision builds from scratch (about 7 minutes on 2 cores); each later one starts from its
#       objects and recompiles only what the files that differ from it touch. Stripped and
#       packed with xz -9, whose window spans several libraries, three take about 34 MB.
#   bench/gpu/prebuilt_ab.sh run                 on the GPU machine: unpacks; runs the quick
#       conformance ($CONFORMANCE: any of sampling ragged topk, default sampling) of every
#       revision but the first; then `bench/peers/run.sh` with PARTS ($PARTS, default
#       sampling-flashinfer) for each revision in turn, up to $ROUNDS times (default 2), and
#       prints each case's time per revision and the geometric mean of each revision against the
#       first and against the fastest peer; then the last revision's full conformance.
#       SANITIZE=1 then runs compute-sanitizer memcheck (--quick) and racecheck (--sanitize) on
#       its sampling conformance, SANITIZE=cluster both on its top-k conformance's cluster cases
#       (--cluster-sanitize). With CALL_LIMIT (seconds) set, a round starts only while twice the
#       last round's time is left, and every step is cut off before the limit.
# Logs and each run's JSON go to $OUT (default ./gpu-out/ab).
set -u -o pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
TARBALL=.carry/prebuilt.tar.xz

pack() {
  local work=${AB_WORK:-/tmp/prebuilt-ab} names=() first="" first_rev="" last=""
  rm -rf build-ab
  mkdir -p "$work" .carry
  git worktree prune
  for spec in "$@"; do
    local name=${spec%%=*} rev=${spec#*=}
    names+=("$name")
    last=$name
    rm -rf "$work/$name"
    git worktree add -f --detach "$work/$name" "$rev" > /dev/null || exit 1
    if [ -n "$first" ]; then
      # A new worktree's files are all newer than any object: the first revision's objects are
      # dated now, then the files that differ from it after them, so make rebuilds what they touch.
      cp -a "$work/$first/build-gpu" "$work/$name/"
      find "$work/$name/build-gpu" -type f -exec touch {} +
      sleep 1
      (cd "$work/$name" && git diff --name-only --diff-filter=d "$first_rev" HEAD | xargs -r touch)
    else
      first=$name first_rev=$(git rev-parse "$rev")
    fi
    echo "[pack] building $name ($(git rev-parse --short "$rev"))"
    make -C "$work/$name" BUILD=build-gpu PYTHON=python3 -j"$(nproc)" build-gpu/libmetaltopk.so \
      > "$work/$name.log" 2>&1 || { tail -20 "$work/$name.log"; exit 1; }
    mkdir -p "build-ab/$name"
    cp "$work/$name/build-gpu/libmetaltopk.so" "build-ab/$name/"
    strip --strip-unneeded "build-ab/$name/libmetaltopk.so"
  done
  echo "[pack] conformance programs of every revision"
  for name in "${names[@]}"; do
    make -C "$work/$name" BUILD=build-gpu PYTHON=python3 -j"$(nproc)" \
      build-gpu/tests/cuda_sampling_conformance build-gpu/tests/cuda_ragged_conformance \
      build-gpu/tests/cuda_conformance >> "$work/$name.log" 2>&1 || exit 1
    cp "$work/$name"/build-gpu/tests/cuda_*conformance "build-ab/$name/"
  done
  [ -f bench/peers/third_party/VERSIONS ] || python3 bench/peers/fetch.py || exit 1
  echo "[pack] peers harness"
  make -C bench/peers BUILD="build-ab/$last" -j"$(nproc)" > "$work/peers.log" 2>&1 ||
    { tail -20 "$work/peers.log"; exit 1; }
  printf '%s\n' "${names[@]}" > build-ab/ORDER
  XZ_OPT="-T0 -9" tar cJf "$TARBALL" build-ab bench/peers/bin/peers_bench \
    bench/peers/third_party/VERSIONS
  ls -la "$TARBALL"
}

run() {
  local out=${OUT:-$ROOT/gpu-out/ab} suite program name
  mkdir -p "$out"
  tar xJf "$TARBALL" || exit 1
  mapfile -t names < build-ab/ORDER
  local last=${names[-1]}
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  for name in "${names[@]:1}"; do
    for suite in ${CONFORMANCE:-sampling}; do
      program=$(conformance_program "$suite")
      checked "$name" "$program-quick" 120 "build-ab/$name/$program" --quick
    done
  done
  local round=0 round_seconds=0 round_start
  while [ "$round" -lt "${ROUNDS:-2}" ] && [ "$(seconds_left)" -gt $((2 * round_seconds)) ]; do
    round=$((round + 1)) round_start=$SECONDS
    for name in "${names[@]}"; do
      BUILD=build-ab/$name PARTS=${PARTS:-sampling-flashinfer} OUT=$out/$name-$round \
        timeout "$(cut_off 3600)" bench/peers/run.sh > "$out/$name-$round.log" 2>&1
      echo "[run $SECONDS s] $name round $round: exit $?"
    done
    round_seconds=$((SECONDS - round_start))
  done
  python3 - "$out" "${names[@]}" <<'PY'
import glob, json, math, sys
out, names = sys.argv[1], sys.argv[2:]
mine = {}     # (case, name) -> metaltopk times over the rounds
fastest = {}  # case -> the fastest peer's time, over every run
for name in names:
    for path in glob.glob(f"{out}/{name}-*/peers_bench_*.json"):
        for row in json.load(open(path)):
            if row.get("metaltopk_us") is None or row.get("peer_us") is None:
                continue
            case = (row.get("op") or row.get("family"), row["shape"], row["dtype"],
                    row.get("params") or str(row.get("k")))
            mine.setdefault((case, name), []).append(row["metaltopk_us"])
            fastest[case] = min(fastest.get(case, math.inf), row["peer_us"])
def median(v):
    v = sorted(v)
    return v[len(v) // 2]
cases = sorted(fastest)
print("case | " + " | ".join(names) + " | fastest peer (us)")
logs = {name: [] for name in names}
for case in cases:
    times = [median(mine.get((case, name), [math.nan])) for name in names]
    print(" ".join(case), "|", " | ".join(f"{t:.1f}" for t in times), "|", f"{fastest[case]:.1f}")
    for name, t in zip(names, times):
        logs[name].append((t, times[0], fastest[case]))
for name in names:
    pairs = [p for p in logs[name] if not math.isnan(p[0])]
    base = math.exp(sum(math.log(b / t) for t, b, _ in pairs) / len(pairs))
    peer = math.exp(sum(math.log(f / t) for t, _, f in pairs) / len(pairs))
    print(f"{name}: {base:.3f}x the first revision, {peer:.3f}x the fastest peer "
          f"(geometric means over {len(pairs)} cases)")
PY
  for suite in ${CONFORMANCE:-sampling}; do
    program=$(conformance_program "$suite")
    checked "$last" "$program" 420 "build-ab/$last/$program"
  done
  case ${SANITIZE:-} in
    1) sanitized sampling memcheck --quick; sanitized sampling racecheck --sanitize ;;
    cluster) sanitized topk memcheck --cluster-sanitize
             sanitized topk racecheck --cluster-sanitize ;;
  esac
}

# Seconds left of CALL_LIMIT (unbounded without it), and a step's time limit cut to fit them.
seconds_left() { echo $(( ${CALL_LIMIT:-1000000} - SECONDS )); }
cut_off() {
  local left=$(( $(seconds_left) - 15 ))
  echo $(( left < $1 ? (left > 1 ? left : 1) : $1 ))
}

conformance_program() {
  if [ "$1" = topk ]; then echo cuda_conformance; else echo "cuda_$1_conformance"; fi
}

# checked NAME LOG SECONDS PROGRAM ARGS...: runs one revision's test program within the time
# left, its log in $out/NAME-LOG.log.
checked() {
  local name=$1 log=$2 limit=$3
  shift 3
  LD_LIBRARY_PATH=$ROOT/build-ab/$name timeout "$(cut_off "$limit")" stdbuf -oL -eL "$@" \
    > "$out/$name-$log.log" 2>&1
  echo "[run $SECONDS s] $log ($name): exit $?"
  tail -n 3 "$out/$name-$log.log"
}

# sanitized SUITE TOOL SET: the last revision's conformance set SET under compute-sanitizer.
sanitized() {
  checked "$last" "$2-$1" 320 compute-sanitizer --tool "$2" --error-exitcode 9 \
    "build-ab/$last/$(conformance_program "$1")" "$3"
}

case ${1:-} in
  pack) shift; pack "$@" ;;
  run) run ;;
  *) sed -n '2,/^# Logs/p' "$0"; exit 2 ;;
esac
