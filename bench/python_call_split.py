"""Where a `metaltopk.topk` call on a torch CUDA tensor spends its host time, on a machine
without a GPU: the CUDA path of python/metaltopk (the torch view, the outputs' allocation, the
packed descriptors and the cffi call) is run on CPU tensors against the CPU backend, with the
two CUDA-only lookups (current stream, device) stubbed. Needs torch (`make bench` installs the
CPU build). Prints the best of 5 rounds of 20000 calls of each part, in us.

Usage: METALTOPK_LIBRARY=build/libmetaltopk.so PYTHONPATH=python python3 bench/python_call_split.py
"""

import time

import torch

from metaltopk import _core, _gpu_arrays

ROUNDS, CALLS = 5, 20000


def main():
    cpu_context = _core.context("cpu")
    _core.context = lambda backend=None, device_index=0: cpu_context
    _gpu_arrays._torch_setup(torch)
    _gpu_arrays._torch_current_stream = lambda index: 0
    cpu = torch.device("cpu")

    def allocate(shape, strides, dtype_name):
        out = torch.empty_strided(shape, strides, dtype=_gpu_arrays._torch_dtypes[dtype_name],
                                  device=cpu)
        return out, out.data_ptr()

    _gpu_arrays._torch_devices[-1] = (cpu, allocate)  # a CPU tensor's get_device() is -1
    x = torch.randn(1, 256)

    def whole_call():
        return _core._topk_device_tensor(_gpu_arrays._torch_view(x, torch), 8, -1, 1, 1, None)

    values, indices = whole_call()
    expected = torch.topk(x, 8)
    assert torch.equal(values, expected.values) and torch.equal(indices, expected.indices)
    parts = [("whole call", whole_call),
             ("torch view", lambda: _gpu_arrays._torch_view(x, torch)),
             ("two outputs", lambda: (allocate((1, 8), (8, 1), "float32"),
                                      allocate((1, 8), (8, 1), "int64"))),
             ("torch.topk", lambda: torch.topk(x, 8))]
    for name, part in parts:
        best = float("inf")
        for _ in range(ROUNDS):
            start = time.perf_counter()
            for _ in range(CALLS):
                part()
            best = min(best, (time.perf_counter() - start) / CALLS * 1e6)
        print(f"{name:12s} {best:6.2f} us")


if __name__ == "__main__":
    main()
