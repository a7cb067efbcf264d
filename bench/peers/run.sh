#!/usr/bin/env bash
# metaltopk against the serving engines' kernels on the GPU machine, in one command (issue #21):
#   build (only what is missing) -> bin/peers_bench (FlashInfer radix top-k, CUB DeviceTopK and
#   DeviceBatchedTopK, vLLM topk_softmax and grouped_topk, FlashInfer's noAuxTc DeepSeek-V3
#   router, each against metaltopk on the same inputs) -> the ragged sparse-attention shapes of
#   issue #31 (FlashInfer's page-table and ragged transforms, vLLM's top_k_per_row_decode and
#   _prefill, CUB DeviceBatchedTopK with per-segment sizes, against mtk_topk_ragged) ->
#   the sampling shapes of issue #33 (FlashInfer's sampling kernels against metaltopk's
#   mtk_sampling_with_workspace, then vllm_sampler.py: vLLM's Triton and PyTorch sampler path)
#   -> sglang_gate.py (SGLang's Triton moe_fused_gate against metaltopk) -> one JSON list.
# Usage: bench/peers/run.sh            (from anywhere; needs bench/peers/third_party from
#                                       fetch.py, carried, since the GPU machine has no network)
# Env: BUILD (metaltopk's build folder; default build-gpu if it has the library, else build),
#      OUT (default ./gpu-out/peers), ROUTER_LIMIT / PEERS_LIMIT / RAGGED_LIMIT /
#      SAMPLING_LIMIT / VLLM_LIMIT / SGLANG_LIMIT (seconds for the router, top-k, ragged and
#      sampling parts of peers_bench, vllm_sampler.py and sglang_gate.py, default
#      90 / 170 / 300 / 300 / 240 / 80), PEERS_ARGS (extra arguments for peers_bench, e.g.
#      "--filter moe"), VLLM_ARGS (the same for vllm_sampler.py, e.g. "--filter 256x"),
#      PARTS (default "router topk ragged sampling sglang"; e.g.
#      PARTS=ragged; PARTS=sampling is peers_bench's sampling family and vllm_sampler.py, which
#      PARTS=sampling-flashinfer and PARTS=sampling-vllm run alone: two runs into one OUT
#      combine, since the summary reads every part's file there).
# Writes $OUT/peers_h200.json (all rows; copy it to bench/results/), $OUT/peers_bench_*.log,
# $OUT/sglang_gate.log, and prints a summary table.
set -u -o pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-$ROOT/gpu-out/peers}
mkdir -p "$OUT"
if [ -z "${BUILD:-}" ]; then
  BUILD=build
  [ -f build-gpu/libmetaltopk.so ] && BUILD=build-gpu
fi
JOBS=$(nproc)
start=$SECONDS
say() { echo "[run.sh $((SECONDS - start))s] $*"; }

if [ ! -f bench/peers/third_party/VERSIONS ]; then
  say "bench/peers/third_party is missing: run python3 bench/peers/fetch.py where PyPI is" \
      "reachable and carry bench/peers/third_party"
  exit 1
fi
if [ ! -f "$BUILD/libmetaltopk.so" ]; then
  say "building metaltopk ($BUILD)"
  timeout 240 make BUILD="$BUILD" -j"$JOBS" all > "$OUT/build-metaltopk.log" 2>&1 ||
    { tail -20 "$OUT/build-metaltopk.log"; exit 1; }
fi
export LD_LIBRARY_PATH=$ROOT/$BUILD${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
BIN=bench/peers/bin/peers_bench
# A binary from before the sampling part (issue #33) loads but lacks it: rebuilt too.
usage=$("$BIN" --help 2> /dev/null)
if ! "$BIN" --probe > /dev/null 2>&1 || [[ "$usage" != *sampling* ]]; then
  say "building the harness (precompiled binary missing, stale or not loadable here)"
  "$BIN" --probe 2>&1 | head -3
  make -C bench/peers clean > /dev/null
  timeout 300 make -C bench/peers BUILD="$BUILD" -j"$JOBS" > "$OUT/build-peers.log" 2>&1 ||
    { tail -30 "$OUT/build-peers.log"; exit 1; }
fi
"$BIN" --probe
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader || true

# The routers first, each part under its own limit: the huge selects cannot starve them.
PARTS=${PARTS:-router topk ragged sampling sglang}
PARTS=" $PARTS "
PARTS=${PARTS/ sampling / sampling-flashinfer sampling-vllm }
peers_status=0
for part in router topk ragged sampling; do
  token=$part
  [ "$part" = sampling ] && token=sampling-flashinfer
  case " $PARTS " in *" $token "*) ;; *) continue ;; esac
  say "peers_bench --only $part (progress on stderr, one JSON row per line)"
  limit=${PEERS_LIMIT:-170}
  [ "$part" = router ] && limit=${ROUTER_LIMIT:-90}
  [ "$part" = ragged ] && limit=${RAGGED_LIMIT:-300}
  [ "$part" = sampling ] && limit=${SAMPLING_LIMIT:-300}
  timeout "$limit" "$BIN" --only "$part" --json "$OUT/peers_bench_$part.json" ${PEERS_ARGS:-} \
    2>&1 | tee "$OUT/peers_bench_$part.log" | grep --line-buffered -v '^{'
  status=${PIPESTATUS[0]}
  say "peers_bench --only $part: exit $status"
  [ "$status" -eq 0 ] || peers_status=$status
done

case " $PARTS " in
  *" sampling-vllm "*)
    say "vllm_sampler.py (vLLM's Triton and PyTorch sampler path)"
    timeout "${VLLM_LIMIT:-240}" python3 bench/peers/vllm_sampler.py \
      --json "$OUT/peers_vllm_sampler.json" --library "$ROOT/$BUILD/libmetaltopk.so" \
      ${VLLM_ARGS:-} 2>&1 |
      tee "$OUT/vllm_sampler.log" | grep --line-buffered -v '^{'
    status=${PIPESTATUS[0]}
    say "vllm_sampler.py: exit $status"
    [ "$status" -eq 0 ] || peers_status=$status ;;
esac

sglang_status=0
case " $PARTS " in
  *" sglang "*)
    say "sglang_gate.py (SGLang's Triton moe_fused_gate)"
    timeout "${SGLANG_LIMIT:-80}" python3 bench/peers/sglang_gate.py \
      --json "$OUT/peers_sglang.json" --library "$ROOT/$BUILD/libmetaltopk.so" 2>&1 |
      tee "$OUT/sglang_gate.log" | grep --line-buffered -v '^{'
    sglang_status=${PIPESTATUS[0]}
    say "sglang_gate.py: exit $sglang_status" ;;
esac

python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = []
for name in ("peers_bench_router.json", "peers_bench_topk.json", "peers_bench_ragged.json",
             "peers_bench_sampling.json", "peers_vllm_sampler.json", "peers_sglang.json"):
    path = os.path.join(out, name)
    if os.path.exists(path):
        rows += json.load(open(path))
# vllm_sampler.py times vLLM alone: metaltopk's side of its rows is peers_bench's for the same
# (shape, op, dtype, params).
def key(r):
    return (r["shape"], r.get("op"), r["dtype"], r.get("params"))
# The sampling operations' rows carry "op" (the top-k shapes of family "sampling" do not).
metaltopk = {key(r): r for r in rows if r.get("op") and not r["peer"].startswith("vllm")}
for r in rows:
    if r.get("op") and r["peer"].startswith("vllm") and key(r) in metaltopk:
        m = metaltopk[key(r)]
        for field in ("metaltopk_us", "metaltopk_loop_us", "metaltopk_status"):
            r[field] = m.get(field)
        r["speedup"] = (r["peer_us"] / r["metaltopk_us"]
                        if r.get("peer_us") and r.get("metaltopk_us") else None)
json.dump(rows, open(os.path.join(out, "peers_h200.json"), "w"), indent=1)
print(f"{len(rows)} rows -> {os.path.join(out, 'peers_h200.json')}")
fmt = "{:<44} {:>6} {:<5} {:<36} {:>9} {:>9} {:>7} {:>8}  {}"
print(fmt.format("shape", "k", "dtype", "peer", "peer us", "mtk us", "x", "read us", "status"))
def f(v):
    return "-" if v is None else f"{v:.1f}"
for r in rows:
    if r.get("op"):
        continue
    x = r.get("speedup")
    status = r["status"]
    if r.get("metaltopk_status"):  # ragged rows: metaltopk's own check or refusal
        status += f" (metaltopk: {r['metaltopk_status']})"
    print(fmt.format(r["shape"], r["k"], r["dtype"], r["peer"], f(r.get("peer_us")),
                     f(r.get("metaltopk_us")), "-" if x is None else f"{x:.2f}",
                     f(r.get("read_once_us")), status))
sampling = [r for r in rows if r.get("op")]
if sampling:
    fmt = "{:<12} {:<33} {:<4} {:<33} {:<50} {:>9} {:>9} {:>7}  {}"
    print(fmt.format("shape", "op", "type", "params", "peer", "peer us", "mtk us", "x",
                     "status (metaltopk)"))
    for r in sampling:
        x = r.get("speedup")
        print(fmt.format(r["shape"], r["op"], r["dtype"], r["params"], r["peer"],
                         f(r.get("peer_us")), f(r.get("metaltopk_us")),
                         "-" if x is None else f"{x:.2f}",
                         f"{r['status']} ({r.get('metaltopk_status') or '-'})"))
    # Issue #33's target: metaltopk against the fastest peer of each case, and the geomean.
    fastest = {}
    for r in sampling:
        if r.get("peer_us") and r.get("metaltopk_us"):
            k = key(r)
            if k not in fastest or r["peer_us"] < fastest[k]["peer_us"]:
                fastest[k] = r
    if fastest:
        import math
        ratios = [r["peer_us"] / r["metaltopk_us"] for r in fastest.values()]
        worst = min(fastest.values(), key=lambda r: r["peer_us"] / r["metaltopk_us"])
        print(f"sampling: {len(ratios)} cases against their fastest peer: geomean "
              f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}x, lowest "
              f"{min(ratios):.2f}x ({worst['shape']} {worst['op']} {worst['dtype']} "
              f"{worst['params']} vs {worst['peer']})")
PY
say "done (peers_bench exit $peers_status, sglang_gate exit $sglang_status)"
[ "$peers_status" -eq 0 ] && [ "$sglang_status" -eq 0 ]
