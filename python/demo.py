"""metaltopk on the two workloads it was built for, next to numpy (argpartition + sort).

    make demo        (or: python python/demo.py)
"""

import sys
import time
from pathlib import Path

import numpy as np
from ml_dtypes import bfloat16

try:
    import metaltopk
except ImportError:  # running from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import metaltopk


def numpy_topk(x, k):
    """The usual numpy idiom: partition out the k largest, then sort just those."""
    part = np.argpartition(-x, k - 1, axis=-1)[:, :k]
    part_values = np.take_along_axis(x, part, axis=-1)
    order = np.argsort(-part_values, axis=-1, kind="stable")
    return np.take_along_axis(part_values, order, -1), np.take_along_axis(part, order, -1)


def median_seconds(fn, repeats=7):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def show(title, x, k):
    values, indices = metaltopk.topk(x, k)
    print(f"\n{title}: {x.shape[0]} x {x.shape[1]} {x.dtype}, k = {k}")
    print(f"  row 0 top {min(k, 5)}: values {values[0, :5].astype(np.float32).tolist()}")
    print(f"                indices {indices[0, :5].tolist()}")

    # numpy has no bfloat16 arithmetic, so it gets the same numbers as float32.
    x_numpy = x.astype(np.float32)
    numpy_values, numpy_indices = numpy_topk(x_numpy, k)
    same = np.array_equal(values.astype(np.float32), numpy_values)
    print(f"  values agree with numpy: {same}")

    ours = median_seconds(lambda: metaltopk.topk(x, k))
    theirs = median_seconds(lambda: numpy_topk(x_numpy, k))
    print(f"  metaltopk {ours * 1e3:8.3f} ms   numpy {theirs * 1e3:8.3f} ms   "
          f"speed-up {theirs / ours:5.1f}x")


def main():
    print(f"metaltopk {metaltopk.__version__} ({metaltopk.library_path}), "
          f"default backend: {metaltopk.default_backend()}")
    rng = np.random.default_rng(0)
    show("MoE router (256 experts, top-8)",
         rng.standard_normal((4096, 256), dtype=np.float32).astype(bfloat16), 8)
    show("Sampling (Qwen vocabulary, top-50)",
         rng.standard_normal((64, 151936), dtype=np.float32), 50)


if __name__ == "__main__":
    main()
