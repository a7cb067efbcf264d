"""The CUDA router on torch CUDA tensors, on the compiled fast path and on the Python path:
results as the reference and the CPU backend give them, on the caller's stream, inside CUDA
graphs. Skips without a GPU (test_router.py covers numpy inputs on every available backend, the
CUDA one included)."""

import numpy as np
import pytest

import metaltopk
import router_checks as rc

torch = pytest.importorskip("torch")
if not torch.cuda.is_available() or not metaltopk.backends()["cuda"]["available"]:
    pytest.skip("needs a CUDA GPU and metaltopk's CUDA backend", allow_module_level=True)

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def _host(t):
    """A torch tensor as the numpy array the reference reads (bf16 via ml_dtypes)."""
    array = t.detach().float().cpu().numpy()
    return array.astype(rc.BFLOAT16) if t.dtype == torch.bfloat16 else array.astype(
        str(t.dtype).replace("torch.", ""))


@pytest.mark.parametrize("dtype", list(TORCH_DTYPES))
@pytest.mark.parametrize("experts,k", [(8, 2), (64, 8), (128, 8), (256, 8), (512, 10),
                                       (100, 6), (1000, 8)])
@pytest.mark.parametrize("config", ["plain", "sigmoid-bias", "grouped", "none-unnormalised"])
@pytest.mark.parametrize("strided", [False, True])
def test_torch_tensors_match_reference(dtype, experts, k, config, strided, torch_path):
    gen = torch.Generator(device="cuda").manual_seed(experts * 31 + k)
    wide = torch.randn(200, 2 * experts, generator=gen, device="cuda").to(TORCH_DTYPES[dtype])
    logits = wide[::2, ::2] if strided else wide[:100, :experts].contiguous()
    bias = torch.randn(experts, generator=gen, device="cuda") * 0.3
    kwargs = {
        "plain": {},
        "sigmoid-bias": {"scoring": "sigmoid", "bias": bias},
        "grouped": {"scoring": "sigmoid", "bias": bias, "n_group": 4, "topk_group": 2,
                    "scale": 2.5},
        "none-unnormalised": {"scoring": "none", "renormalize": False, "scale": 0.5},
    }[config]
    weights, ids = metaltopk.moe_route(logits, k, **kwargs)
    assert weights.is_cuda and ids.is_cuda and ids.dtype == torch.int32
    host_kwargs = {key: (_host(v) if isinstance(v, torch.Tensor) else v)
                   for key, v in kwargs.items()}
    host_logits = _host(logits)
    rc.check_route(weights.cpu().numpy(), ids.cpu().numpy(), host_logits, k, **host_kwargs)
    if config == "plain":  # bit-identical ids on every backend
        _, cpu_ids = metaltopk.moe_route(host_logits, k, backend="cpu")
        np.testing.assert_array_equal(ids.cpu().numpy(), cpu_ids)


def test_special_values_ids_are_the_topk_contracts(torch_path):
    specials = torch.tensor([float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.0, -1.0])
    gen = torch.Generator().manual_seed(1)
    for experts in (8, 64, 256, 512, 700):
        picks = torch.randint(0, specials.numel(), (32, experts), generator=gen)
        logits = specials[picks].cuda()
        for scoring in ("softmax", "sigmoid", "none"):
            weights, ids = metaltopk.moe_route(logits, 8, scoring=scoring,
                                               index_dtype=np.int64)
            _, expected = metaltopk.topk(logits, 8)
            torch.testing.assert_close(ids, expected, rtol=0, atol=0)
            rc.check_route(weights.cpu().numpy(), ids.cpu().numpy(), logits.cpu().numpy(), 8,
                           scoring=scoring)


def test_runs_on_the_current_stream_and_in_graphs(torch_path):
    logits = torch.randn(4096, 256, device="cuda").to(torch.bfloat16)
    expected_w, expected_ids = metaltopk.moe_route(logits, 8)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        w, ids = metaltopk.moe_route(logits, 8)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            graph_w, graph_ids = metaltopk.moe_route(logits, 8)
    torch.cuda.current_stream().wait_stream(side)
    torch.testing.assert_close(w, expected_w, rtol=0, atol=0)
    torch.testing.assert_close(ids, expected_ids, rtol=0, atol=0)
    graph_w.zero_()
    graph_ids.zero_()
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(graph_w, expected_w, rtol=0, atol=0)
    torch.testing.assert_close(graph_ids, expected_ids, rtol=0, atol=0)


def test_bias_must_live_on_the_logits_device(torch_path):
    logits = torch.randn(4, 16, device="cuda")
    with pytest.raises(ValueError, match="bias"):
        metaltopk.moe_route(logits, 2, bias=np.zeros(16, np.float32))
    with pytest.raises(ValueError, match="backend"):
        metaltopk.moe_route(logits, 2, backend="cpu")
