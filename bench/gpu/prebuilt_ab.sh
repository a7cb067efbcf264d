#!/usr/bin/env bash
# A/B timing of library revisions on the peers harness, built here and timed on the GPU machine
# in one call, so that the device's minutes go to timing rather than to nvcc (a library takes
# about 7 minutes to build on 2 cores, the harness 10).
#
#   bench/gpu/prebuilt_ab.sh pack NAME=REV ...   here, where nvcc is: builds each revision's
#       library (a git worktree each, in $AB_WORK, default /tmp/prebuilt-ab), the peers harness
#       once (bench/peers/fetch.py first) and the last revision's CUDA conformance programs,
#       and packs them into .carry/prebuilt.tar.xz (carry ".carry"; 64 MiB at most). Stripped
#       and packed with xz -9, whose window spans several libraries, three take about 34 MB.
#   bench/gpu/prebuilt_ab.sh run                 on the GPU machine: unpacks, runs the last
#       revision's conformance ($CONFORMANCE: any of sampling ragged topk, default sampling),
#       then `bench/peers/run.sh` with PARTS ($PARTS, default sampling-flashinfer) for each
#       revision in turn, $ROUNDS times (default 2), and prints each case's time per revision
#       and the geometric mean of each revision against the first and against the fastest peer.
#       SANITIZE=1 then runs compute-sanitizer memcheck (--quick) and racecheck (--sanitize) on
#       the last revision's sampling conformance.
# Logs and each run's JSON go to $OUT (default ./gpu-out/ab).
set -u -o pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
TARBALL=.carry/prebuilt.tar.xz

pack() {
  local work=${AB_WORK:-/tmp/prebuilt-ab} names=() last=""
  rm -rf build-ab
  mkdir -p "$work" .carry
  git worktree prune
  for spec in "$@"; do
    local name=${spec%%=*} rev=${spec#*=}
    names+=("$name")
    last=$name
    rm -rf "$work/$name"
    git worktree add -f --detach "$work/$name" "$rev" > /dev/null || exit 1
    echo "[pack] building $name ($(git rev-parse --short "$rev"))"
    make -C "$work/$name" BUILD=build-gpu PYTHON=python3 -j"$(nproc)" build-gpu/libmetaltopk.so \
      > "$work/$name.log" 2>&1 || { tail -20 "$work/$name.log"; exit 1; }
    mkdir -p "build-ab/$name"
    cp "$work/$name/build-gpu/libmetaltopk.so" "build-ab/$name/"
    strip --strip-unneeded "build-ab/$name/libmetaltopk.so"
  done
  echo "[pack] conformance programs of $last"
  make -C "$work/$last" BUILD=build-gpu PYTHON=python3 -j"$(nproc)" \
    build-gpu/tests/cuda_sampling_conformance build-gpu/tests/cuda_ragged_conformance \
    build-gpu/tests/cuda_conformance >> "$work/$last.log" 2>&1 || exit 1
  cp "$work/$last"/build-gpu/tests/cuda_*conformance "build-ab/$last/"
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
  local out=${OUT:-$ROOT/gpu-out/ab}
  mkdir -p "$out"
  tar xJf "$TARBALL" || exit 1
  mapfile -t names < build-ab/ORDER
  local last=${names[-1]}
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  for suite in ${CONFORMANCE:-sampling}; do
    local program=cuda_${suite}_conformance
    [ "$suite" = topk ] && program=cuda_conformance
    LD_LIBRARY_PATH=$ROOT/build-ab/$last timeout 420 "build-ab/$last/$program" \
      > "$out/$program.log" 2>&1
    echo "[run] $program ($last): exit $?"
    tail -n 4 "$out/$program.log"
  done
  for round in $(seq "${ROUNDS:-2}"); do
    for name in "${names[@]}"; do
      BUILD=build-ab/$name PARTS=${PARTS:-sampling-flashinfer} OUT=$out/$name-$round \
        bench/peers/run.sh > "$out/$name-$round.log" 2>&1
      echo "[run] $name round $round: exit $?"
    done
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
  if [ -n "${SANITIZE:-}" ]; then
    local tool
    for tool in memcheck:--quick racecheck:--sanitize; do
      LD_LIBRARY_PATH=$ROOT/build-ab/$last timeout 320 compute-sanitizer --tool "${tool%%:*}" \
        --error-exitcode 9 "build-ab/$last/cuda_sampling_conformance" "${tool#*:}" \
        > "$out/${tool%%:*}-sampling.log" 2>&1
      echo "[run] ${tool%%:*} of the sampling conformance (${tool#*:}): exit $?"
      tail -n 3 "$out/${tool%%:*}-sampling.log"
    done
  fi
}

case ${1:-} in
  pack) shift; pack "$@" ;;
  run) run ;;
  *) sed -n 2,18p "$0"; exit 2 ;;
esac
