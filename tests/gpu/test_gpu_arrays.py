"""metaltopk on torch CUDA tensors (python/metaltopk/torch/) and CuPy arrays (_cupy.py), on the GPU.

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
def test_torch_matches_reference(dtype, shape, k, dim, largest, torch_path):
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


def test_strided_views_and_unsorted(torch_path):
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


# One shape of each class the CUDA backend plans differently: warp per row (MoE), dim-0 tiles,
# block per row, multi-block select with scratch (sampling), sampled-threshold select (huge).
CAPTURE_SHAPES = [((1, 256), 8, -1, torch.bfloat16), ((4096, 256), 8, -1, torch.bfloat16),
                  ((256, 4096), 8, 0, torch.bfloat16), ((1, 151936), 50, -1, torch.float32),
                  ((64, 151936), 50, -1, torch.bfloat16), ((256, 151936), 50, -1, torch.float32),
                  ((256, 262144), 256, -1, torch.float32), ((1, 2 ** 28), 100, -1, torch.float32),
                  ((1, 2 ** 26), 1000, -1, torch.bfloat16)]


@pytest.mark.parametrize("shape,k,dim,dtype", CAPTURE_SHAPES,
                         ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else str(v))
@pytest.mark.parametrize("through", ["topk", "op"])
def test_captured_in_torchs_pattern_then_replayed_with_new_data(shape, k, dim, dtype, through,
                                                               torch_path):
    """torch's documented capture: warm up on a side stream, then capture with
    torch.cuda.graph on its own stream, with no warm-up of metaltopk's scratch at all: outputs
    and scratch come from torch's allocator, which serves the capture from the graph's pool."""
    call = metaltopk.topk if through == "topk" else torch.ops.metaltopk.mtk_topk
    generator = torch.Generator(device="cuda").manual_seed(hash(shape) % 1000)
    x = torch.randn(shape, device="cuda", generator=generator).to(dtype)
    scratch_before = metaltopk.cache_stats("cuda")["scratch_bytes"]
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.relu(x)  # warm-up, as torch's recipe does, of anything but metaltopk
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        values, indices = call(x, k, dim)
    for round in range(2):
        x.copy_(torch.randn(shape, device="cuda", generator=generator).to(dtype))
        if round:
            x[..., :7] = x[..., 7:14]  # ties across the row's start
        graph.replay()
        want_values, want_indices = metaltopk.topk(x, k, dim)
        torch.cuda.synchronize()
        assert torch.equal(indices, want_indices)
        assert torch.equal(values.view(torch.int16) if dtype == torch.bfloat16 else values,
                           want_values.view(torch.int16) if dtype == torch.bfloat16 else want_values)
    assert metaltopk.cache_stats("cuda")["scratch_bytes"] == scratch_before


def test_router_captured_and_replayed():
    logits = torch.randn(128, 256, device="cuda", dtype=torch.bfloat16)
    bias = torch.randn(256, device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        weights, ids = metaltopk.moe_route(logits, 8, scoring="sigmoid", bias=bias, n_group=8,
                                           topk_group=4)
    logits.copy_(torch.randn_like(logits))
    graph.replay()
    want_weights, want_ids = metaltopk.moe_route(logits, 8, scoring="sigmoid", bias=bias,
                                                 n_group=8, topk_group=4)
    torch.cuda.synchronize()
    assert torch.equal(ids, want_ids) and torch.equal(weights, want_weights)


def test_gradients_on_cuda():
    x = torch.randn(64, 1000, device="cuda", dtype=torch.float64, requires_grad=True)
    twin = x.detach().clone().requires_grad_()
    metaltopk.topk(x, 40)[0].pow(2).sum().backward()
    torch.topk(twin, 40)[0].pow(2).sum().backward()
    assert torch.equal(x.grad, twin.grad)


def test_compiled_fullgraph_on_cuda():
    def sample(x, inverse_temperature):  # products only: compiled and eager round them alike
        values, indices = metaltopk.topk(x * inverse_temperature, 50)
        return values * 2, indices

    x, t = torch.randn(8, 151936, device="cuda"), torch.tensor(1.25, device="cuda")
    got = torch.compile(sample, fullgraph=True)(x, t)
    want = sample(x, t)
    assert all(torch.equal(a, b) for a, b in zip(got, want))


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


def test_unsupported_dtype_is_type_error(torch_path):
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
