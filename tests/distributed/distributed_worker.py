"""One rank of test_distributed.py: joins a 4-process gloo world, makes the subgroups of sizes 2
({0, 1}) and 3 ({1, 2, 3}: group ranks differ from world ranks), and runs every case of
distributed_cases.py in each group it belongs to, then in the world (size 4). One JSON line per
(group size, case) is appended to the output file as soon as the case ends, so a hang or crash
still leaves the results of the cases before it.

    python distributed_worker.py RANK WORLD INIT_FILE OUTPUT_FILE
"""

import json
import sys
import time
import traceback
from datetime import timedelta

import torch
import torch.distributed as dist

from distributed_cases import CASES, Context

# Groups in the order every rank visits them: (size, world ranks).
GROUPS = ((2, (0, 1)), (3, (1, 2, 3)), (4, (0, 1, 2, 3)))
# A collective that waits longer than this raises instead of hanging (the parent also kills the
# workers at its deadline). Generous: a rank legitimately waits in a group's first collective
# while its peers finish the cases of an earlier group, on 2 busy cores.
COLLECTIVE_TIMEOUT = timedelta(seconds=120)


def main():
    rank, world, init_file, output = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank,
                            world_size=world, timeout=COLLECTIVE_TIMEOUT)
    groups = [(size, ranks, dist.new_group(list(ranks)) if size < world else None)
              for size, ranks in GROUPS]
    with open(output, "a") as out:
        for size, ranks, group in groups:
            if rank not in ranks:
                continue
            ctx = Context(dist.get_rank(group) if group is not None else rank, size, group)
            for name, case in CASES.items():
                start = time.perf_counter()
                try:
                    case(ctx)
                    error = None
                except BaseException:  # noqa: BLE001 -- recorded for the parent
                    error = traceback.format_exc(limit=6)[-4000:]
                out.write(json.dumps({"size": size, "case": name, "rank": ctx.rank,
                                      "error": error, "calls": ctx.calls,
                                      "seconds": round(time.perf_counter() - start, 3)}) + "\n")
                out.flush()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
