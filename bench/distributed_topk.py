"""Top-k over vocabulary-split logits on several GPUs: metaltopk.distributed.topk against the
usual all_gather of the full logits + torch.topk (and, for reference, the same two-stage
algorithm in plain torch).

Setting: tensor-parallel LLM sampling, logits [B, V] split along V across the ranks, k = 50.
Every rank holds its shard [B, V / world]; every rank needs the global top-k.

Compared, on every rank, each after an exactness check:
- metaltopk_distributed: metaltopk.distributed.topk(shard, k) (local select, candidates
  all-gathered, merge; plus its small metadata all_gather);
- allgather_torch_topk: all_gather of the full logits (all_gather_into_tensor, then the copy
  that puts the vocabulary back together), torch.topk;
- torch_two_stage: torch.topk locally, all_gather of values and indices, torch.topk of the
  candidates (the same algorithm as metaltopk's, in torch; its tie order is torch's own).
Times: per call with CUDA events around the call after a barrier (median, p10, p90 over
--iters), host wall time of the same calls, and back-to-back (--iters calls in a row, no
barrier, no CUDA graphs; the total over the count). Bytes: every collective of one call,
recorded as it is issued (send and receive buffers per rank, and the ring all_gather's wire
bytes per rank, (world - 1) x send).

NVLink multicast (NVLS / symmetric memory) stays off: NCCL_NVLS_ENABLE=0,
TORCH_SYMM_MEM_DISABLE_MULTICAST=1 and NVSHMEM_DISABLE_NVLS=1 are set here before torch loads.

Usage:
  python3 bench/distributed_topk.py --json out.json          # spawns 2 ranks, one GPU each
  torchrun --nproc-per-node 2 bench/distributed_topk.py --json out.json
  python3 bench/distributed_topk.py --smoke [--json out.json]   # world size 1, one GPU, NCCL:
                                                                # exactness checks + a short run
  python3 bench/distributed_topk.py --device cpu --world 2 --vocab 4096 --iters 5
                                                                # harness check without GPUs (gloo)
"""

import os

# Before torch (and NCCL) load, also inherited by spawned ranks.
for _name, _value in (("NCCL_NVLS_ENABLE", "0"), ("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"),
                      ("NVSHMEM_DISABLE_NVLS", "1")):
    os.environ[_name] = _value

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

try:
    import metaltopk  # noqa: E402
except ImportError:  # a source checkout without PYTHONPATH=python
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))
    import metaltopk  # noqa: E402
import metaltopk.distributed as mtd  # noqa: E402

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", type=int, default=2, help="ranks to spawn (without torchrun)")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=151936, help="global vocabulary size")
    parser.add_argument("--k", type=int, default=50)
    parser.add_argument("--dtype", choices=list(DTYPES), default="float32")
    parser.add_argument("--iters", type=int, default=200)
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: gloo and wall-clock timers, to check the harness without GPUs")
    parser.add_argument("--smoke", action="store_true",
                        help="world size 1 on one GPU with NCCL: exactness checks, short timing")
    parser.add_argument("--json", type=Path, help="write the results here (rank 0)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.world = 1
        args.iters = min(args.iters, 20)
        args.warmup = min(args.warmup, 3)
    if args.vocab % args.world and not args.smoke:
        parser.error(f"--vocab {args.vocab} does not split evenly over {args.world} ranks")
    return args


# ---- timers and byte accounting ---------------------------------------------------------------


class Timer:
    """CUDA events on a GPU (milliseconds of device time between the records), else wall time."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def start(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event
        return time.perf_counter()

    def stop(self, start):
        if self.cuda:
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            end.synchronize()
            return start.elapsed_time(end)
        return (time.perf_counter() - start) * 1e3


class CollectiveLog:
    """The send and receive buffer sizes of every all_gather that the compared functions issue
    while measure() runs: the torch baselines call all_gather_into_tensor below, and
    metaltopk.distributed's collective is wrapped by install()."""

    def __init__(self):
        self.records = None

    def record(self, name, output, input):
        if self.records is not None:
            self.records.append({"op": name, "send_bytes": input.numel() * input.element_size(),
                                 "recv_bytes": output.numel() * output.element_size()})

    def install(self):
        original = mtd._all_gather_single

        def recorded(output, input, *args, **kwargs):
            self.record("metaltopk.distributed:" + original.__name__, output, input)
            return original(output, input, *args, **kwargs)

        mtd._all_gather_single = recorded

    def measure(self, fn, world):
        self.records = []
        try:
            fn()
        finally:
            records, self.records = self.records, None
        send = sum(r["send_bytes"] for r in records)
        recv = sum(r["recv_bytes"] for r in records)
        return {"collectives": records, "send_bytes_per_rank": send,
                "recv_bytes_per_rank": recv, "ring_wire_bytes_per_rank": (world - 1) * send}


LOG = CollectiveLog()
_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def all_gather_into_tensor(output, input):
    """The collective of the torch baselines, counted by LOG."""
    LOG.record(_gather.__name__, output, input)
    return _gather(output, input)


# ---- the compared functions -------------------------------------------------------------------


def make_baseline(world, k):
    def allgather_torch_topk(shard):
        rows, width = shard.shape
        full = torch.empty((world, rows, width), dtype=shard.dtype, device=shard.device)
        all_gather_into_tensor(full.view(-1), shard.contiguous().view(-1))
        logits = full.permute(1, 0, 2).reshape(rows, world * width)  # the vocabulary in order
        return torch.topk(logits, k, dim=-1)

    return allgather_torch_topk


def make_two_stage(world, k, rank):
    def torch_two_stage(shard):
        rows, width = shard.shape
        values, indices = torch.topk(shard, k, dim=-1)
        indices = indices + rank * width
        all_values = torch.empty((world, rows, k), dtype=values.dtype, device=shard.device)
        all_indices = torch.empty((world, rows, k), dtype=indices.dtype, device=shard.device)
        all_gather_into_tensor(all_values.view(-1), values.view(-1))
        all_gather_into_tensor(all_indices.view(-1), indices.view(-1))
        values = all_values.permute(1, 0, 2).reshape(rows, world * k)
        indices = all_indices.permute(1, 0, 2).reshape(rows, world * k)
        top, where = torch.topk(values, k, dim=-1)
        return top, torch.gather(indices, 1, where)

    return torch_two_stage


def make_metaltopk(k):
    def metaltopk_distributed(shard):
        return mtd.topk(shard, k)

    return metaltopk_distributed


# ---- exactness --------------------------------------------------------------------------------


def bits(t):
    return t.contiguous().view(BITS[t.element_size()])


def check_exact(label, got, want):
    values, indices = got
    want_values, want_indices = want
    if values.dtype != want_values.dtype or indices.dtype != torch.int64:
        raise SystemExit(f"{label}: dtypes {values.dtype}/{indices.dtype}")
    if tuple(values.shape) != tuple(want_values.shape) or values.device != want_values.device:
        raise SystemExit(f"{label}: shape {tuple(values.shape)} on {values.device}, want "
                         f"{tuple(want_values.shape)} on {want_values.device}")
    if not torch.equal(indices, want_indices.to(indices.device)):
        bad = (indices != want_indices).nonzero()[:5].tolist()
        raise SystemExit(f"{label}: indices differ from metaltopk.topk at {bad}")
    if not torch.equal(bits(values), bits(want_values)):
        raise SystemExit(f"{label}: values differ from metaltopk.topk (as bits)")


def single_device(x, k, dim=-1, largest=True, sorted=True):
    """metaltopk.topk on the whole input: torch tensors on x's device in and out."""
    return metaltopk.topk(x, k, dim, largest, sorted)


def smoke_checks(device, rank, world):
    """Exactness of metaltopk.distributed.topk against metaltopk.topk on awkward inputs, on this
    device and group (world 1 in --smoke: every shard is the whole input)."""
    assert world == 1
    generator = torch.Generator(device="cpu").manual_seed(7)
    cases = []
    x = torch.randn(8, 3000, generator=generator)
    cases.append(("f32 spread", x, 50, -1))
    ties = torch.randint(-2, 3, (5, 700), generator=generator).to(torch.bfloat16)
    cases.append(("bf16 ties", ties, 123, -1))
    special = torch.randn(4, 999, generator=generator)
    special[:, ::7] = float("nan")
    special[:, 3::11] = -float("nan")
    special[:, 5::13] = -0.0
    special[:, 6::17] = 0.0
    special[:, 1::19] = float("inf")
    cases.append(("f32 NaN/inf/+-0", special, 300, -1))
    cases.append(("f16 dim 0 transposed", torch.randn(640, 6, generator=generator)
                  .half().t().contiguous().t(), 33, 0))
    cases.append(("i8 middle dim", torch.randint(-128, 128, (3, 257, 2), generator=generator)
                  .to(torch.int8), 9, 1))
    cases.append(("f64 k=0", torch.randn(2, 10, generator=generator, dtype=torch.float64), 0,
                  -1))
    cases.append(("i64 k=n", torch.randint(-5, 5, (2, 40), generator=generator), 40, -1))
    checked = 0
    for label, x, k, dim in cases:
        x = x.to(device)
        for largest in (True, False):
            want = single_device(x, k, dim, largest, True)
            check_exact(f"smoke {label} largest={largest}", mtd.topk(x, k, dim=dim,
                                                                       largest=largest), want)
            values, indices = mtd.topk(x, k, dim=dim, largest=largest, sorted=False)
            if not torch.equal(indices.sort(dim).values, want[1].sort(dim).values):
                raise SystemExit(f"smoke {label} largest={largest} sorted=False: index sets")
            if not torch.equal(bits(values), bits(torch.gather(x, dim, indices))):
                raise SystemExit(f"smoke {label} largest={largest} sorted=False: values")
            checked += 2
    offset_values, offset_indices = mtd.topk(cases[0][1].to(device), 5, offset=2**40)
    want = single_device(cases[0][1].to(device), 5)
    check_exact("smoke explicit offset", (offset_values, offset_indices - 2**40), want)
    for label, call, error in (("k > total", lambda: mtd.topk(x, 10**6), ValueError),
                               ("dim", lambda: mtd.topk(x, 1, dim=5), IndexError),
                               ("dtype", lambda: mtd.topk(x.to(torch.complex64), 1), TypeError)):
        try:
            call()
        except error:
            pass
        else:
            raise SystemExit(f"smoke: {label} did not raise {error.__name__}")
    return checked + 4


# ---- one rank -----------------------------------------------------------------------------


def timings(fn, shard, timer, iters, warmup, device):
    for _ in range(warmup):
        fn(shard)
    synchronize(device)
    per_call, host = [], []
    for _ in range(iters):
        dist.barrier()
        synchronize(device)
        wall = time.perf_counter()
        start = timer.start()
        fn(shard)
        per_call.append(timer.stop(start))
        host.append((time.perf_counter() - wall) * 1e3)
    dist.barrier()
    synchronize(device)
    start = timer.start()
    for _ in range(iters):
        fn(shard)
    back_to_back = timer.stop(start) / iters
    quantiles = statistics.quantiles(per_call, n=10) if len(per_call) > 1 else per_call * 9
    return {"median_ms": statistics.median(per_call), "p10_ms": quantiles[0],
            "p90_ms": quantiles[-1], "host_median_ms": statistics.median(host),
            "back_to_back_ms": back_to_back, "iters": iters}


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def run_rank(rank, world, local_rank, args, init_method):
    if args.device == "cuda":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        dist.init_process_group("nccl", init_method=init_method, rank=rank, world_size=world,
                                device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", init_method=init_method, rank=rank, world_size=world)
    try:
        return bench_rank(rank, world, device, args)
    finally:
        dist.destroy_process_group()


def bench_rank(rank, world, device, args):
    dtype = DTYPES[args.dtype]
    width = args.vocab // world
    generator = torch.Generator(device="cpu").manual_seed(1234)
    logits = torch.randn(args.batch, args.vocab, generator=generator).to(dtype).to(device)
    shard = logits[:, rank * width:(rank + 1) * width].contiguous()
    want = single_device(logits, args.k)

    functions = {"metaltopk_distributed": make_metaltopk(args.k),
                 "allgather_torch_topk": make_baseline(world, args.k),
                 "torch_two_stage": make_two_stage(world, args.k, rank)}
    # Exactness first: metaltopk's contract exactly; the torch ones as a valid torch.topk result
    # (the same values; indices may differ among tied values).
    check_exact("metaltopk_distributed", functions["metaltopk_distributed"](shard), want)
    for name in ("allgather_torch_topk", "torch_two_stage"):
        values, _ = functions[name](shard)
        if not torch.equal(bits(values), bits(want[0])):
            raise SystemExit(f"{name}: values differ from metaltopk.topk")
    smoke = smoke_checks(device, rank, world) if args.smoke else None

    LOG.install()
    timer = Timer(device)
    results = {}
    for name, fn in functions.items():
        results[name] = timings(fn, shard, timer, args.iters, args.warmup, device)
        results[name]["bytes"] = LOG.measure(lambda: fn(shard), world)
    gathered = [None] * world
    dist.all_gather_object(gathered, results)
    if rank:
        return None
    return {"results": gathered[0], "per_rank": gathered, "smoke_checks": smoke}


def nccl_version():
    version = torch.cuda.nccl.version()
    return ".".join(map(str, version)) if isinstance(version, tuple) else str(version)


def describe(args, world, device_name):
    return {"world": world, "batch": args.batch, "vocab": args.vocab, "k": args.k,
            "dtype": args.dtype, "iters": args.iters, "warmup": args.warmup,
            "device": device_name, "torch": torch.__version__,
            "nccl": nccl_version() if args.device == "cuda" else None,
            "metaltopk": metaltopk.__version__,
            "env": {name: os.environ.get(name) for name in (
                "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS")}}


def finish(args, world, outcome):
    device_name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    report = {"meta": describe(args, world, device_name), **outcome}
    for name, result in outcome["results"].items():
        print(f"{name:24s} median {result['median_ms']:8.3f} ms  back-to-back "
              f"{result['back_to_back_ms']:8.3f} ms  host {result['host_median_ms']:8.3f} ms  "
              f"recv {result['bytes']['recv_bytes_per_rank']:>12,d} B/rank")
    if outcome.get("smoke_checks") is not None:
        print(f"smoke: {outcome['smoke_checks']} exact checks passed")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {args.json}")


def spawned(rank, world, args, init_method):
    outcome = run_rank(rank, world, rank, args, init_method)
    if outcome is not None:  # rank 0
        finish(args, world, outcome)


def main(argv=None):
    args = parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:  # torchrun
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        outcome = run_rank(rank, world, int(os.environ.get("LOCAL_RANK", rank)), args, "env://")
        if outcome is not None:
            finish(args, world, outcome)
        return
    if args.device == "cuda" and torch.cuda.device_count() < args.world:
        raise SystemExit(f"needs {args.world} GPUs, found {torch.cuda.device_count()}")
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as directory:
        mp.start_processes(spawned, args=(args.world, args, f"file://{directory}/rendezvous"),
                           nprocs=args.world, join=True, start_method="spawn")


if __name__ == "__main__":
    main()
