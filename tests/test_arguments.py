"""Arguments are checked as torch.topk checks them, and every error names the argument.

A newcomer's cases (issue 36): largest=None, sorted="yes", float k and dim, k = 2**63, a backend
that is no backend name, moe_route errors in Python's words, moe_route on logits that require
grad. Each runs on numpy inputs and, where torch is installed, on torch CPU tensors.
"""

import numpy as np
import pytest

import metaltopk

try:
    import torch
except ImportError:
    torch = None

KINDS = ["numpy"] + (["torch"] if torch is not None else [])


def make(kind, array):
    return torch.from_numpy(array) if kind == "torch" else array


@pytest.fixture(params=KINDS)
def kind(request):
    return request.param


@pytest.mark.parametrize("name", ["largest", "sorted"])
@pytest.mark.parametrize("value", [None, "no", "yes", 1, 0, 1.0, [True]])
def test_choice_flags_must_be_bools(kind, name, value):
    x = make(kind, np.arange(5.0))
    with pytest.raises(TypeError, match=rf"metaltopk.topk: {name} must be a bool, not "):
        metaltopk.topk(x, 2, **{name: value})


def test_numpy_bools_are_bools(kind):
    x = make(kind, np.arange(5.0))
    values, indices = metaltopk.topk(x, 2, largest=np.bool_(False), sorted=np.bool_(True))
    assert np.asarray(indices).tolist() == [0, 1]


@pytest.mark.parametrize("name,value", [("k", 2.0), ("k", "2"), ("k", None), ("k", True),
                                        ("dim", 0.0), ("dim", None), ("dim", False)])
def test_k_and_dim_must_be_integers(kind, name, value):
    x = make(kind, np.arange(5.0))
    arguments = {"k": 2, "dim": 0, name: value}
    with pytest.raises(TypeError, match=rf"metaltopk.topk: {name} must be an integer, not "):
        metaltopk.topk(x, arguments["k"], dim=arguments["dim"])


def test_numpy_integers_are_integers(kind):
    x = make(kind, np.arange(5.0))
    values, indices = metaltopk.topk(x, np.int64(2), dim=np.int32(0))
    assert np.asarray(indices).tolist() == [4, 3]


@pytest.mark.parametrize("k", [2**63, -2**63 - 1, 2**100])
def test_k_beyond_int64_is_a_value_error_naming_k(kind, k):
    with pytest.raises(ValueError, match=rf"metaltopk.topk: k = {k} is out of range"):
        metaltopk.topk(make(kind, np.arange(5.0)), k)


def test_dim_beyond_int64_is_an_index_error(kind):
    with pytest.raises(IndexError, match="dim"):
        metaltopk.topk(make(kind, np.arange(5.0)), 1, dim=2**64)


@pytest.mark.parametrize("backend", ["nonsense", "CPU", 0, "", b"cpu"])
def test_a_backend_that_is_no_name_says_so(kind, backend):
    x = make(kind, np.arange(5.0))
    with pytest.raises(ValueError, match=r"backend = .* is not one of 'default', 'cpu', 'cuda'"):
        metaltopk.topk(x, 2, backend=backend)


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_a_torch_tensor_on_another_backend_names_its_device():
    with pytest.raises(ValueError, match=r"lives on cpu but backend = 'metal'"):
        metaltopk.topk(torch.arange(5.0), 2, backend="metal")
    values, _ = metaltopk.topk(torch.arange(5.0), 2, backend="cpu")
    assert values.tolist() == [4.0, 3.0]


def test_an_unavailable_backend_says_what_is_missing():
    for name, state in metaltopk.backends().items():
        if state["available"]:
            continue
        with pytest.raises(RuntimeError) as raised:
            metaltopk.topk(np.arange(5.0), 2, backend=name)
        message = str(raised.value)
        assert name in message
        if not state["compiled"]:
            assert "not compiled into this library" in message
        else:  # compiled in: the message says which of driver or device is missing
            assert any(words in message for words in ("driver", "device")), message


# ---- moe_route ------------------------------------------------------------------------------

LOGITS = np.random.default_rng(0).standard_normal((3, 64)).astype(np.float32)


def route(kind, k=4, bias=None, **options):
    if bias is not None:
        bias = make(kind, bias)
    return metaltopk.moe_route(make(kind, LOGITS), k, bias=bias, **options)


@pytest.mark.parametrize("options,error,message", [
    ({"bias": np.zeros(32, np.float32)}, ValueError, r"moe_route: bias must have shape \[64\]"),
    ({"n_group": 8}, ValueError, r"n_group = 8 needs topk_group"),
    ({"n_group": 8, "topk_group": 9}, ValueError,
     r"topk_group = 9 is out of range \(expected 1 <= topk_group <= n_group = 8\)"),
    ({"n_group": 3, "topk_group": 1}, ValueError, r"moe_route: n_group = 3 does not divide"),
    ({"k": 65}, ValueError, r"moe_route: k = 65 is out of range"),
    ({"k": 2.0}, TypeError, r"moe_route: k must be an integer, not float"),
    ({"n_group": 8.0, "topk_group": 2}, TypeError, r"n_group must be an integer"),
    ({"n_group": 8, "topk_group": "2"}, TypeError, r"topk_group must be an integer"),
    ({"renormalize": None}, TypeError, r"renormalize must be a bool"),
    ({"scale": "2"}, TypeError, r"scale must be a real number"),
    ({"scoring": "softmax2"}, ValueError, r"scoring = 'softmax2' is not one of"),
    ({"backend": "nonsense"}, ValueError, r"backend = 'nonsense' is not one of"),
], ids=lambda case: str(case)[:40])
def test_moe_route_errors_name_python_arguments(kind, options, error, message):
    with pytest.raises(error, match=message) as raised:
        route(kind, **options)
    assert "params." not in str(raised.value)


def test_moe_route_accepts_numpy_scalars(kind):
    weights, ids = route(kind, k=np.int64(4), n_group=np.int32(8), topk_group=np.int64(2),
                         renormalize=np.bool_(True), scale=np.float32(2.0))
    assert np.asarray(ids).shape == (3, 4)
    np.testing.assert_allclose(np.asarray(weights).sum(axis=1), 2.0, rtol=1e-6)


@pytest.mark.skipif(torch is None, reason="needs torch")
def test_moe_route_on_logits_that_require_grad_raises():
    logits = torch.from_numpy(LOGITS).requires_grad_()
    with pytest.raises(RuntimeError, match="router has no gradient"):
        metaltopk.moe_route(logits, 4)
    with torch.no_grad():
        _, ids = metaltopk.moe_route(logits, 4)
    _, expected = metaltopk.moe_route(logits.detach(), 4)
    assert torch.equal(ids, expected)


@pytest.mark.skipif(torch is None, reason="needs torch")
@pytest.mark.parametrize("call,error,name", [
    (lambda x: metaltopk.topk(x, 20), ValueError, "k = 20"),
    (lambda x: metaltopk.topk(x, 2, dim=5), IndexError, "dim = 5"),
    (lambda x: metaltopk.topk(x, 2, largest=None), TypeError, "largest"),
    (lambda x: metaltopk.moe_route(x, 20), ValueError, "k = 20"),
], ids=["k", "dim", "largest", "route-k"])
def test_errors_under_torch_compile(call, error, name):
    """The contract's type under torch.compile; with fullgraph=True, Dynamo's RuntimeError
    that quotes the message (docs/TORCH.md says what to catch)."""
    torch._dynamo.reset()
    with pytest.raises(error, match=name):
        torch.compile(call)(torch.randn(4, 10))
    torch._dynamo.reset()
    with pytest.raises(RuntimeError, match=name):
        torch.compile(call, fullgraph=True)(torch.randn(4, 10))


def test_help_lists_backends_and_exceptions():
    doc = metaltopk.topk.__doc__
    for word in ('"cpu"', '"cuda"', '"metal"', '"mpsgraph"', "TypeError", "ValueError",
                 "IndexError", "RuntimeError"):
        assert word in doc, word
