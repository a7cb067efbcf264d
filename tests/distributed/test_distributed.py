"""metaltopk.distributed.topk on CPU shards over gloo, at group sizes 2, 3 and 4.

One set of 4 worker processes (distributed_worker.py) runs every case of distributed_cases.py in
a group of 2, a group of 3 and the world of 4; each case checks its result on every rank
exactly against metaltopk.topk on the concatenated input. Each test here reports one (size,
case) from the workers' output. Collectives time out after 120 s and the workers are killed at
a deadline, so a hang fails the tests instead of blocking the run.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import metaltopk  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # reference.py, imported by the cases
sys.path.insert(0, str(HERE))
from distributed_cases import CASES  # noqa: E402
from distributed_worker import GROUPS  # noqa: E402

WORLD = 4
DEADLINE_S = 300  # the whole suite; it takes under a minute on 2 busy cores


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    directory = tmp_path_factory.mktemp("distributed")
    paths = [str(Path(metaltopk.__file__).resolve().parents[1]), str(HERE.parent), str(HERE)]
    if os.environ.get("PYTHONPATH"):
        paths.append(os.environ["PYTHONPATH"])
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(paths),
               METALTOPK_LIBRARY=str(metaltopk.library_path), OMP_NUM_THREADS="1",
               PYTHONWARNINGS="ignore::FutureWarning")
    processes, logs = [], []
    for rank in range(WORLD):
        log = open(directory / f"rank{rank}.log", "w+")
        logs.append(log)
        processes.append(subprocess.Popen(
            [sys.executable, str(HERE / "distributed_worker.py"), str(rank), str(WORLD),
             str(directory / "rendezvous"), str(directory / f"rank{rank}.jsonl")],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True))
    start = time.monotonic()
    timed_out = False
    for process in processes:
        try:
            process.wait(timeout=max(1.0, DEADLINE_S - (time.monotonic() - start)))
        except subprocess.TimeoutExpired:
            timed_out = True
            break
    if timed_out:
        for process in processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)  # each worker leads its own session
                process.wait()
    results = {}
    for rank in range(WORLD):
        path = directory / f"rank{rank}.jsonl"
        if path.exists():
            for line in path.read_text().splitlines():
                record = json.loads(line)
                results[(record["size"], record["case"], record["rank"])] = record
    tails = []
    for rank, log in enumerate(logs):
        log.seek(0)
        tails.append(f"--- rank {rank} (exit {processes[rank].returncode}) ---\n"
                     + log.read()[-3000:])
        log.close()
    return {"results": results, "timed_out": timed_out, "seconds": time.monotonic() - start,
            "codes": [p.returncode for p in processes], "logs": "\n".join(tails)}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("size", [size for size, _ in GROUPS])
def test_case(workers, size, name):
    failures = []
    for rank in range(size):
        record = workers["results"].get((size, name, rank))
        if record is None:
            why = "timed out" if workers["timed_out"] else "exited"
            pytest.fail(f"group rank {rank} never reported (the workers {why})\n"
                        + workers["logs"])
        if record["error"]:
            failures.append(f"group rank {rank}:\n{record['error']}")
    assert not failures, "\n".join(failures)


def test_workers_finish_cleanly(workers):
    assert not workers["timed_out"], f"workers killed after {DEADLINE_S} s\n" + workers["logs"]
    assert workers["codes"] == [0] * WORLD, workers["logs"]
