"""metaltopk on torch CUDA tensors and CuPy arrays (python/metaltopk/_gpu_arrays.py), on the GPU.

Checked against an independent numpy reference (tests/reference.py) bit for bit, and against
torch.topk on the device the way docs/CONTRACT.md allows (values NaN-aware equal, values are the
gathered input bits, indices unique). Skipped where torch has no CUDA device.
"""

import sys
from pathlib import Path

import numpy as np
import pytest

import metaltopk

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or not metaltopk.backends()["cuda"]["available"]:
    pytest.skip("needs a CUDA device and the CUDA backend", allow_module_level=True)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/reference.py
from reference import reference_topk  # noqa: E402

TORCH_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8,
                torch.uint8, torch.int16, torch.int32, torch.int64]


def to_numpy(t):
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).cpu().numpy().view(ml_dtypes.bfloat16)
    return t.cpu().numpy()


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view(np.dtype(f"u{a.dtype.itemsize}"))


def stress(shape, dtype, generator):
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=generator, device="cuda", dtype=torch.float32) * 3
        x = x.round() if generator.initial_seed() % 2 else x  # tie-heavy half the time
        x = x.to(dtype)
        flat = x.view(-1)
        picks = torch.randint(0, flat.numel(), (max(1, flat.numel() // 20),), device="cuda",
                              generator=generator)
        specials = torch.tensor([float("nan"), -float("nan"), float("inf"), -float("inf"), 0.0,
                                 -0.0], device="cuda", dtype=dtype)
        flat[picks] = specials[picks % len(specials)]
        return x
    info = torch.iinfo(dtype)
    low, high = max(info.min, -5), min(info.max, 5)
    return torch.randint(low, high + 1, shape, device="cuda", dtype=dtype, generator=generator)


CASES = [((1, 256), 8, -1), ((128, 256), 8, -1), ((37, 1000), 33, -1), ((256, 64), 8, 0),
         ((4, 5000), 100, -1), ((3, 70000), 50, 1), ((2, 3, 300), 5, 2), ((2, 300, 3), 5, 1),
         ((2, 40000), 2500, -1)]


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("shape,k,dim", CASES)
@pytest.mark.parametrize("largest", [True, False])
def test_torch_matches_reference(dtype, shape, k, dim, largest):
    g = torch.Generator(device="cuda").manual_seed(hash((shape, k, dim, str(dtype))) % 1000)
    x = stress(shape, dtype, g)
    values, indices = metaltopk.topk(x, k, dim=dim, largest=largest)
    assert isinstance(values, torch.Tensor) and values.device == x.device
    assert values.dtype == x.dtype and indices.dtype == torch.int64
    want_values, want_indices = reference_topk(to_numpy(x), k, dim, largest)
    np.testing.assert_array_equal(indices.cpu().numpy(), want_indices)
    np.testing.assert_array_equal(bits(to_numpy(values)), bits(want_values))


@pytest.mark.parametrize("shape,k,dim", CASES)
def test_agrees_with_torch_topk(shape, k, dim):
    g = torch.Generator(device="cuda").manual_seed(11)
    x = torch.randn(shape, generator=g, device="cuda")  # tie-free in practice
    values, indices = metaltopk.topk(x, k, dim=dim)
    ref_values, _ = torch.topk(x, k, dim=dim)
    torch.testing.assert_close(values, ref_values, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(torch.gather(x, dim, indices), values)
    assert indices.sort(dim=dim).values.diff(dim=dim).gt(0).all()


@pytest.mark.parametrize("shape,k,dim", [((1, 256), 8, -1), ((128, 256), 8, -1),
                                         ((2, 300, 3), 5, 1), ((37, 1000), 0, -1),
                                         ((0, 5), 2, -1), ((), 1, 0)])
def test_outputs_are_own_contiguous_tensors_on_the_input_device(shape, k, dim):
    """The outputs come from torch.empty_strided with the strides topk computes: they must be
    what torch.empty would give, each with its own storage, on every device."""
    for index in range(torch.cuda.device_count()):
        x = torch.randn(shape, device=f"cuda:{index}")
        values, indices = metaltopk.topk(x, k, dim=dim)
        for out, dtype in ((values, x.dtype), (indices, torch.int64)):
            assert out.device == x.device and out.dtype == dtype and not out.requires_grad
            assert out.stride() == torch.empty(out.shape).stride()
        if values.numel():
            assert values.untyped_storage().data_ptr() != indices.untyped_storage().data_ptr()
        ref_values, _ = torch.topk(x, k, dim=dim)
        assert torch.equal(values, ref_values)
        assert torch.equal(torch.gather(x, dim, indices), values)


def test_strided_views_and_unsorted():
    g = torch.Generator(device="cuda").manual_seed(3)
    base = stress((64, 3000), torch.bfloat16, g)
    for view in (base[:, ::3], base.t(), base[::2].flip(1), base[:, 100:1100]):
        for dim in (0, 1):
            k = min(40, view.shape[dim])
            values, indices = metaltopk.topk(view, k, dim=dim)
            want_values, want_indices = reference_topk(to_numpy(view.contiguous()), k, dim, True)
            np.testing.assert_array_equal(indices.cpu().numpy(), want_indices)
            np.testing.assert_array_equal(bits(to_numpy(values)), bits(want_values))
            loose_values, loose_indices = metaltopk.topk(view, k, dim=dim, sorted=False)
            np.testing.assert_array_equal(np.sort(loose_indices.cpu().numpy(), axis=dim),
                                          np.sort(want_indices, axis=dim))


def test_runs_on_the_current_stream_and_in_a_cuda_graph():
    x = torch.randn(64, 151936, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        metaltopk.topk(x, 50)  # warm: plan and scratch exist before capture
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            values, indices = metaltopk.topk(x, 50)
    torch.cuda.current_stream().wait_stream(side)
    for _ in range(2):
        x.copy_(torch.randn_like(x))
        graph.replay()
        torch.cuda.synchronize()
        ref_values, _ = torch.topk(x, 50)
        assert torch.equal(values, ref_values)
        assert torch.equal(torch.gather(x, 1, indices), values)


def test_a_call_waits_for_the_kernel_whose_outputs_it_reads():
    """Every kernel may be scheduled before the one ahead of it on the stream has finished
    (programmatic dependent launch) and must wait for it before touching memory. The multi-block
    select's last kernel lets its successor launch at once, so each call here reads outputs that
    are still being written when it starts; the caching allocator hands back last round's
    blocks, so a read too early sees last round's results."""
    generator = torch.Generator(device="cuda").manual_seed(7)
    x = torch.empty(1, 2 ** 24, device="cuda")
    for _ in range(4):
        x.normal_(generator=generator)
        values, _ = metaltopk.topk(x, 4096)
        routed, _ = metaltopk.topk(values.view(16, 256), 8)
        last, _ = metaltopk.topk(routed.view(1, 128), 5)
        expected = torch.topk(x, 4096).values
        assert torch.equal(values, expected)
        expected_routed = torch.topk(expected.view(16, 256), 8).values
        assert torch.equal(routed, expected_routed)
        assert torch.equal(last, torch.topk(expected_routed.view(1, 128), 5).values)


def test_scratch_growth_during_capture_fails_clearly():
    y = torch.randn(2, 2 ** 22, device="cuda")
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        with pytest.raises(ValueError, match="captur"):
            with torch.cuda.graph(graph, stream=stream):
                metaltopk.topk(y, 4000)


def test_unsupported_dtype_is_type_error():
    with pytest.raises(TypeError):
        metaltopk.topk(torch.zeros(4, dtype=torch.bool, device="cuda"), 1)


def test_cupy_arrays():
    cupy = pytest.importorskip("cupy")
    rng = np.random.default_rng(5)
    host = rng.integers(-3, 4, size=(33, 2000)).astype(np.float32)
    x = cupy.asarray(host)[:, ::2]
    values, indices = metaltopk.topk(x, 17)
    assert isinstance(values, cupy.ndarray) and isinstance(indices, cupy.ndarray)
    want_values, want_indices = reference_topk(host[:, ::2], 17, -1, True)
    np.testing.assert_array_equal(cupy.asnumpy(indices), want_indices)
    np.testing.assert_array_equal(cupy.asnumpy(values), want_values)
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        values, indices = metaltopk.topk(x, 17, largest=False)
        stream.synchronize()
    want_values, want_indices = reference_topk(host[:, ::2], 17, -1, False)
    np.testing.assert_array_equal(cupy.asnumpy(indices), want_indices)
