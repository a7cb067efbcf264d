"""Reliability of the Python binding: exceptions carry the library's own message, and a long run
of calls, failing ones included, leaves resident memory and the library's allocations flat."""

import gc
import os
import sys

import numpy as np
import pytest

import metaltopk
from metaltopk import _abi, _ffi

# The test-only entry points (include/metaltopk_testing.h) live in the same library; a second
# cffi handle on the same file shares its state (dlopen returns the loaded image).
_testing_ffi = None
_testing = None


def _testing_library():
    global _testing_ffi, _testing
    if _testing is None:
        import cffi

        _testing_ffi = cffi.FFI()
        _testing_ffi.cdef("""
            void mtk_testing_fail_at(unsigned site_mask, uint64_t n);
            void mtk_testing_reset(void);
            uint64_t mtk_testing_failure_points_seen(void);
            int64_t mtk_testing_live_allocations(void);
        """)
        _testing = _testing_ffi.dlopen(str(_ffi.library_path))
    return _testing


MTK_FAULT_HOST_ALLOCATION = 1


def test_value_error_carries_the_library_message():
    with pytest.raises(ValueError, match=r"k = 6 is out of range for a dimension of size 5"):
        metaltopk.topk(np.arange(5.0), 6, backend="cpu")
    with pytest.raises(ValueError, match=r"k = -1 is out of range"):
        metaltopk.topk(np.arange(5.0, dtype=np.float32), -1, backend="cpu")


def test_index_error_carries_the_library_message():
    with pytest.raises(IndexError, match=r"dim = 2 is out of range for a 2-d input"):
        metaltopk.topk(np.zeros((3, 4), np.float32), 1, dim=2, backend="cpu")


def test_runtime_error_names_the_missing_backend():
    state = metaltopk.backends()["metal"]
    if state["available"]:
        pytest.skip("Metal is available here")
    with pytest.raises(RuntimeError, match="metal"):
        metaltopk.topk(np.arange(5.0), 2, backend="metal")


def test_memory_error_carries_the_library_message():
    """An injected host-allocation failure while a context registers surfaces as MemoryError
    with the library's message, and leaves nothing allocated."""
    testing = _testing_library()
    live = testing.mtk_testing_live_allocations()
    testing.mtk_testing_fail_at(MTK_FAULT_HOST_ALLOCATION, 1)
    try:
        with pytest.raises(MemoryError, match="host allocation failed"):
            _abi.Context("cpu", 0)
        assert testing.mtk_testing_failure_points_seen() >= 1
    finally:
        testing.mtk_testing_reset()
    assert testing.mtk_testing_live_allocations() == live


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_calls_leave_memory_flat():
    """10^5 calls, a third of them failing in the library, after a warm-up: resident memory may
    not grow by more than 4 MiB (40 bytes a call), and the library holds no more allocations."""
    testing = _testing_library()
    rng = np.random.default_rng(5)
    small = rng.standard_normal((4, 64)).astype(np.float32)
    ties = rng.integers(-3, 3, size=(2, 100)).astype(np.int8)
    has_router = hasattr(metaltopk, "moe_route")
    logits = rng.standard_normal((2, 32)).astype(np.float32)

    def one_round(i):
        kind = i % 6
        if kind == 0:
            metaltopk.topk(small, 5, backend="cpu")
        elif kind == 1:
            metaltopk.topk(ties, 7, dim=1, largest=False, sorted=False, backend="cpu")
        elif kind == 2:
            try:
                metaltopk.topk(small, 65, backend="cpu")
            except ValueError:
                pass
            else:
                raise AssertionError("k = 65 of 64 was accepted")
        elif kind == 3:
            try:
                metaltopk.topk(small, 1, dim=-3, backend="cpu")
            except IndexError:
                pass
            else:
                raise AssertionError("dim = -3 of 2 was accepted")
        elif kind == 4 and has_router:
            metaltopk.moe_route(logits, 4, backend="cpu")
        else:
            try:
                metaltopk.topk(small.T, 0, dim=5, backend="cpu")
            except IndexError:
                pass

    for i in range(10_000):  # warm-up: caches, scratch, interned objects
        one_round(i)
    gc.collect()
    rss_before = _rss_bytes()
    live_before = testing.mtk_testing_live_allocations()
    for i in range(100_000):
        one_round(i)
    gc.collect()
    rss_after = _rss_bytes()
    live_after = testing.mtk_testing_live_allocations()
    growth = rss_after - rss_before
    print(f"RSS {rss_before / 2**20:.1f} MiB -> {rss_after / 2**20:.1f} MiB after 1e5 calls "
          f"({growth / 1e5:.1f} bytes a call); library allocations {live_before} -> {live_after}")
    assert live_after == live_before
    assert growth < 4 * 2**20, f"resident memory grew by {growth} bytes over 1e5 calls"


def test_ragged_memory_error_carries_the_library_message():
    """An injected host-allocation failure inside a ragged call (a fresh context plans it)
    surfaces as MemoryError with the library's message, and leaves nothing allocated."""
    testing = _testing_library()
    scores = np.arange(40, dtype=np.float32).reshape(4, 10)
    ctx = _abi.Context("cpu", 0)
    try:
        live = testing.mtk_testing_live_allocations()
        lengths_array = np.array([10, 3, 0, 7])
        lengths = _abi.describe(lengths_array.ctypes.data, "int64", (4,), (1,))
        params = _ffi.ffi.new("mtk_ragged_params*")
        params.struct_size = _ffi.ffi.sizeof("mtk_ragged_params")
        params.lengths = lengths
        params.page_size = 1
        indices = np.empty((4, 3), np.int64)
        testing.mtk_testing_fail_at(MTK_FAULT_HOST_ALLOCATION, 1)
        try:
            status = _ffi.lib.mtk_topk_ragged(
                ctx.handle, _abi.describe(scores.ctypes.data, "float32", (4, 10), (10, 1)), 3,
                1, 1, params, _ffi.ffi.NULL,
                _abi.describe(indices.ctypes.data, "int64", (4, 3), (3, 1)), _ffi.ffi.NULL)
            with pytest.raises(MemoryError, match="host allocation failed"):
                _abi.check(status, "cpu")
            assert testing.mtk_testing_failure_points_seen() >= 1
        finally:
            testing.mtk_testing_reset()
        assert testing.mtk_testing_live_allocations() == live
    finally:
        ctx.destroy()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_ragged_calls_leave_memory_flat():
    """3 * 10^4 ragged calls (numpy and, where installed, torch inputs, both transforms), a
    quarter of them rejected: resident memory may not grow by more than 4 MiB, and the library
    holds no more allocations."""
    testing = _testing_library()
    rng = np.random.default_rng(6)
    scores = rng.standard_normal((6, 300)).astype(np.float32)
    lengths = np.array([300, 0, 5, 120, -1, 400])
    offsets = np.arange(6) * 1000
    table = np.arange(6 * 300, dtype=np.int32).reshape(6, 300)
    try:
        import torch
    except ImportError:
        torch = None
    tensors = None if torch is None else (torch.from_numpy(scores), torch.from_numpy(lengths))

    def one_round(i):
        kind = i % 4
        if kind == 0:
            metaltopk.topk(scores, 16, lengths=lengths, starts=lengths // 3, backend="cpu")
        elif kind == 1:
            metaltopk.topk_page_table_transform(scores, table, lengths, 8, backend="cpu")
        elif kind == 2 and tensors is not None:
            metaltopk.topk(tensors[0], 16, lengths=tensors[1], return_values=False)
        elif kind == 2:
            metaltopk.topk_ragged_transform(scores, offsets, lengths, 8, backend="cpu")
        else:
            try:
                metaltopk.topk_ragged_transform(scores, offsets[:2], lengths, 8, backend="cpu")
            except ValueError:
                pass
            else:
                raise AssertionError("offsets of 2 rows for 6 were accepted")

    for i in range(3_000):
        one_round(i)
    gc.collect()
    rss_before = _rss_bytes()
    live_before = testing.mtk_testing_live_allocations()
    for i in range(30_000):
        one_round(i)
    gc.collect()
    growth = _rss_bytes() - rss_before
    assert testing.mtk_testing_live_allocations() == live_before
    assert growth < 4 * 2**20, f"resident memory grew by {growth} bytes over 3e4 ragged calls"


def test_sampling_memory_error_carries_the_library_message():
    """An injected host-allocation failure inside each sampling call (a fresh context plans it)
    surfaces as MemoryError with the library's message, and leaves nothing allocated."""
    testing = _testing_library()
    ffi, lib = _ffi.ffi, _ffi.lib
    probs = np.random.default_rng(7).random((64, 1000), dtype=np.float32)
    uniforms = np.full(64, 0.5, np.float32)
    samples = np.empty(64, np.int32)
    out = np.empty_like(probs)

    def described(array):
        return _abi.describe(array.ctypes.data, array.dtype.name, array.shape,
                             tuple(s // array.itemsize for s in array.strides))

    def params(**members):
        p = ffi.new("mtk_sampling_params*")
        p.struct_size = ffi.sizeof("mtk_sampling_params")
        p.top_p_value = p.temperature_value = 1.0
        for name, value in members.items():
            setattr(p, name, value)
        return p

    calls = {
        "mtk_top_k_mask_logits": lambda ctx: lib.mtk_top_k_mask_logits(
            ctx.handle, described(probs), params(top_k_value=5), described(out), ffi.NULL),
        "mtk_renorm_probs": lambda ctx: lib.mtk_renorm_probs(
            ctx.handle, described(probs), params(top_p_value=0.9), described(out), ffi.NULL),
        "mtk_sample": lambda ctx: lib.mtk_sample(
            ctx.handle, described(probs), params(top_k_value=50), described(uniforms),
            described(samples), ffi.NULL),
        "mtk_sample_from_logits": lambda ctx: lib.mtk_sample_from_logits(
            ctx.handle, described(probs), params(min_p_value=0.1), described(uniforms),
            described(samples), ffi.NULL),
    }
    for name, call in calls.items():
        ctx = _abi.Context("cpu", 0)
        try:
            live = testing.mtk_testing_live_allocations()
            testing.mtk_testing_fail_at(MTK_FAULT_HOST_ALLOCATION, 1)
            try:
                status = call(ctx)
                with pytest.raises(MemoryError, match="host allocation failed"):
                    _abi.check(status, "cpu")
                assert testing.mtk_testing_failure_points_seen() >= 1, name
            finally:
                testing.mtk_testing_reset()
            assert testing.mtk_testing_live_allocations() == live, name
        finally:
            ctx.destroy()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
def test_sampling_calls_leave_memory_flat():
    """2 * 10^4 sampling calls (numpy and, where installed, torch inputs, through the torch ops
    too), a third of them rejected for a bad argument: resident memory may not grow by more than
    4 MiB, and the library holds no more allocations."""
    from metaltopk import sampling

    testing = _testing_library()
    rng = np.random.default_rng(8)
    probs = rng.random((6, 300), dtype=np.float32)
    uniforms = rng.random(6, dtype=np.float32)
    top_k = np.array([1, 5, 0, 300, 20, -1])
    try:
        import torch
    except ImportError:
        torch = None
    tensors = None if torch is None else tuple(map(torch.from_numpy, (probs, uniforms, top_k)))
    bad_arguments = [
        (ValueError, lambda: sampling.sample(probs, uniforms, top_p=np.float32([0.5] * 3))),
        (TypeError, lambda: sampling.sample(probs, uniforms, top_k=top_k.astype(np.float32))),
        (TypeError, lambda: sampling.sample(probs, uniforms.astype(np.float64))),
    ]
    if tensors is not None:
        bad_arguments += [
            (ValueError, lambda: torch.ops.metaltopk.mtk_renorm_probs(
                tensors[0], None, 0, tensors[1][:3])),
            (TypeError, lambda: sampling.top_k_mask_logits(tensors[0], tensors[1])),
            (TypeError, lambda: sampling.sample(tensors[0], tensors[1].double())),
        ]

    def one_round(i):
        kind = i % 6
        if kind == 0:
            sampling.sample_from_logits(probs, uniforms, top_k=top_k, top_p=0.9,
                                        temperature=0.7)
        elif kind == 1:
            sampling.top_p_renorm_probs(probs, 0.8)
        elif kind == 2 and tensors is not None:
            sampling.sample(tensors[0], tensors[1], top_k=tensors[2], min_p=0.05)
        elif kind == 3 and tensors is not None:
            torch.ops.metaltopk.mtk_top_k_mask_logits(tensors[0], tensors[2])
        elif kind in (2, 3):
            sampling.top_k_mask_logits(probs, top_k)
        else:
            exception, call = bad_arguments[((i // 6) * 2 + kind - 4) % len(bad_arguments)]
            try:
                call()
            except exception:
                pass
            else:
                raise AssertionError(f"a bad argument was accepted (round {i})")

    for i in range(2_000):
        one_round(i)
    gc.collect()
    rss_before = _rss_bytes()
    live_before = testing.mtk_testing_live_allocations()
    for i in range(20_000):
        one_round(i)
    gc.collect()
    growth = _rss_bytes() - rss_before
    assert testing.mtk_testing_live_allocations() == live_before
    assert growth < 4 * 2**20, f"resident memory grew by {growth} bytes over 2e4 sampling calls"
