"""metaltopk.topk and moe_route on torch tensors and other DLPack producers, on the CPU.

torch in, torch out: checked bit for bit against the numpy model of the contract
(tests/reference.py), for every dtype (bfloat16 included), strided views, 0-d and empty inputs,
both directions; plus gradients like torch.topk's, the contract's exception types, and inputs
from a DLPack producer that metaltopk has no integration for. Plain tensors take the compiled
fast path (adapters/torch/) where `make` built it, and the results and errors are checked on it
and on the Python path both.
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make test-deps)")
import metaltopk  # noqa: E402
from metaltopk._ffi import library_path  # noqa: E402
from metaltopk.torch import _tensors  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import reference as ref  # noqa: E402

TORCH_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8,
                torch.uint8, torch.int16, torch.int32, torch.int64]


def test_make_test_runs_on_the_fast_path():
    """`make` builds the fast path wherever torch is found, and `make test` says so."""
    if not os.environ.get("METALTOPK_EXPECT_TORCH_FAST_PATH"):
        pytest.skip("not run by `make test` with torch")
    assert _tensors._fast_topk is not None


def test_a_fast_path_built_for_another_torch_is_not_loaded(tmp_path):
    assert _tensors._load_fast_path(tmp_path) is None  # nothing built there
    if _tensors._fast_topk is None:
        pytest.skip("the torch fast path was not built beside the library")
    for file in Path(library_path).parent.glob(_tensors.EXTENSION_NAME + "*"):
        (tmp_path / file.name).write_bytes(file.read_bytes())
    loaded = _tensors._load_fast_path(tmp_path)
    assert callable(loaded.topk) and callable(loaded.moe_route)
    (tmp_path / (_tensors.EXTENSION_NAME + ".torch_version")).write_text("1.0.0\n")
    with pytest.warns(RuntimeWarning, match="built for torch 1.0.0"):
        assert _tensors._load_fast_path(tmp_path) is None


def to_numpy(t):
    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ref.BFLOAT16)
    return t.numpy()


def from_numpy(a):
    if a.dtype == ref.BFLOAT16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def numpy_dtype(dtype):
    return ref.BFLOAT16 if dtype == torch.bfloat16 else np.dtype(str(dtype).split(".")[1])


def check(x, values, indices, k, dim, largest):
    want_values, want_indices = ref.reference_topk(to_numpy(x), k, dim, largest)
    assert isinstance(values, torch.Tensor) and isinstance(indices, torch.Tensor)
    assert values.dtype == x.dtype and indices.dtype == torch.int64
    assert values.device == x.device and indices.device == x.device
    np.testing.assert_array_equal(indices.numpy(), want_indices)
    np.testing.assert_array_equal(ref.bits(to_numpy(values)), ref.bits(want_values))
    # Fresh, contiguous outputs, as torch.topk's are.
    for out in (values, indices):
        assert out.stride() == torch.empty(out.shape).stride()


CASES = [((1, 256), 8, -1), ((128, 256), 8, -1), ((37, 1000), 33, 0), ((2, 3, 300), 5, 2),
         ((2, 300, 3), 5, 1), ((4, 6), 0, -1), ((0, 5), 2, -1), ((3, 0), 0, -1), ((), 1, 0),
         ((), 0, -1), ((1, 20000), 1000, -1)]


@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=str)
@pytest.mark.parametrize("shape,k,dim", CASES)
@pytest.mark.parametrize("largest", [True, False])
def test_matches_the_contract(dtype, shape, k, dim, largest, torch_path):
    rng = np.random.default_rng(abs(hash((shape, k, str(dtype)))) % 2**32)
    x = from_numpy(ref.random_values(rng, shape, numpy_dtype(dtype), "specials"))
    values, indices = metaltopk.topk(x, k, dim=dim, largest=largest)
    check(x, values, indices, k, dim, largest)


def test_the_op_gives_what_topk_gives():
    x = from_numpy(ref.random_values(np.random.default_rng(1), (64, 500), ref.BFLOAT16, "ties"))
    for largest in (True, False):
        direct = metaltopk.topk(x, 17, 0, largest)
        op = torch.ops.metaltopk.mtk_topk(x, 17, 0, largest)
        for a, b in zip(direct, op):
            assert torch.equal(a.view(torch.int16) if a.dtype == torch.bfloat16 else a,
                               b.view(torch.int16) if b.dtype == torch.bfloat16 else b)


def test_strided_views_and_unsorted(torch_path):
    base = from_numpy(ref.random_values(np.random.default_rng(3), (64, 3000), ref.BFLOAT16,
                                        "specials"))
    for view in (base[:, ::3], base.t(), base.flip(1), base[:, 100:1100], base.expand(2, 64, 3000)):
        for dim in (0, -1):
            k = min(40, view.shape[dim])
            values, indices = metaltopk.topk(view, k, dim=dim)
            check(view, values, indices, k, dim, True)
            _, loose = metaltopk.topk(view, k, dim=dim, sorted=False)
            assert torch.equal(loose.sort(dim=dim).values, indices.sort(dim=dim).values)


def test_gradients_are_torch_topks():
    torch.manual_seed(0)
    for shape, k, dim in (((5, 40), 7, -1), ((40, 5), 3, 0), ((3, 4, 9), 4, 1)):
        x = torch.randn(shape, dtype=torch.float64, requires_grad=True)  # tie-free
        twin = x.detach().clone().requires_grad_()
        values, indices = metaltopk.topk(x, k, dim=dim)
        assert values.requires_grad and not indices.requires_grad
        weights = torch.randn(values.shape, dtype=torch.float64)
        (values * weights).sum().backward()
        (torch.topk(twin, k, dim=dim).values * weights).sum().backward()
        assert torch.equal(x.grad, twin.grad)
        assert torch.autograd.gradcheck(lambda t: metaltopk.topk(t, k, dim=dim)[0], (x,))


def test_no_gradient_where_torch_gives_none():
    x = torch.randn(4, 10, requires_grad=True)
    with torch.no_grad():
        values, _ = metaltopk.topk(x, 3)
    assert not values.requires_grad
    values, _ = metaltopk.topk(x.detach(), 3)
    assert not values.requires_grad
    parameter = torch.nn.Parameter(torch.randn(4, 10))
    values, _ = metaltopk.topk(parameter, 2)
    assert values.requires_grad


def test_errors_are_the_contracts_exceptions(torch_path):
    x = torch.randn(2, 5)
    with pytest.raises(ValueError, match="k"):
        metaltopk.topk(x, 6)
    with pytest.raises(ValueError, match="k"):
        metaltopk.topk(x, -1)
    with pytest.raises(IndexError, match="dim"):
        metaltopk.topk(x, 1, dim=2)
    with pytest.raises(ValueError, match="k"):
        metaltopk.topk(torch.tensor(3.5), 2)
    for dtype in (torch.bool, torch.complex64, torch.uint16):
        with pytest.raises(TypeError, match="not supported"):
            metaltopk.topk(torch.zeros(4, dtype=dtype), 1)
    with pytest.raises(ValueError, match="backend"):
        metaltopk.topk(x, 1, backend="cuda")
    # The same types through the op, whose arguments are checked before any kernel runs.
    with pytest.raises(ValueError, match="k"):
        torch.ops.metaltopk.mtk_topk(x, 6)
    with pytest.raises(IndexError, match="dim"):
        torch.ops.metaltopk.mtk_topk(x, 1, 2)


def test_meta_tensors_give_shapes():
    x = torch.empty(7, 300, device="meta")
    for values, indices in (torch.ops.metaltopk.mtk_topk(x, 9, 1), metaltopk.topk(x, 9, 1)):
        assert values.shape == indices.shape == (7, 9) and indices.dtype == torch.int64
        assert values.device.type == "meta"


def test_moe_route_on_torch_tensors(torch_path):
    rng = np.random.default_rng(9)
    logits = from_numpy(ref.distinct_values(rng, 33, 128, ref.BFLOAT16))
    bias = torch.from_numpy(rng.standard_normal(128).astype(np.float32))
    weights, ids = metaltopk.moe_route(logits, 8)
    assert weights.dtype == torch.float32 and ids.dtype == torch.int32
    _, want = metaltopk.topk(logits, 8)
    assert torch.equal(ids.long(), want)
    torch.testing.assert_close(weights.sum(-1), torch.ones(33))
    # numpy arrays go to the default backend, which is CUDA where a GPU is; a CPU tensor runs on
    # the CPU backend, whose float32 exp may differ from the GPU's by an ulp.
    want_numpy = metaltopk.moe_route(to_numpy(logits), 8, scoring="sigmoid", bias=to_numpy(bias),
                                     n_group=8, topk_group=4, index_dtype=np.int64, backend="cpu")
    got = metaltopk.moe_route(logits, 8, scoring="sigmoid", bias=bias, n_group=8, topk_group=4,
                              index_dtype=torch.int64)
    np.testing.assert_array_equal(got[1].numpy(), want_numpy[1])
    np.testing.assert_array_equal(got[0].numpy(), want_numpy[0])
    with pytest.raises(ValueError, match="scoring"):
        metaltopk.moe_route(logits, 8, scoring="tanh")
    with pytest.raises(ValueError, match="bias must be a tensor"):
        metaltopk.moe_route(logits, 8, bias=to_numpy(bias))
    with pytest.raises(TypeError, match="index_dtype"):
        metaltopk.moe_route(logits, 8, index_dtype=torch.int16)


def test_router_errors_are_the_contracts_exceptions(torch_path):
    logits = torch.randn(5, 128).to(torch.bfloat16)
    for k in (129, 0, -1):
        with pytest.raises(ValueError, match="k"):
            metaltopk.moe_route(logits, k)
    with pytest.raises(ValueError, match="ndim"):
        metaltopk.moe_route(logits[None], 8)
    with pytest.raises(TypeError, match="bias"):
        metaltopk.moe_route(logits, 8, bias=torch.zeros(128, dtype=torch.float64))
    with pytest.raises(ValueError, match="bias"):
        metaltopk.moe_route(logits, 8, bias=torch.zeros(127))
    with pytest.raises(ValueError, match="n_group"):
        metaltopk.moe_route(logits, 8, n_group=3, topk_group=1)
    for dtype in (torch.int8, torch.bool):
        with pytest.raises(TypeError, match="dtype"):
            metaltopk.moe_route(torch.zeros(5, 128, dtype=dtype), 8)


class ForeignArray:
    """A DLPack producer metaltopk knows nothing about, as JAX's arrays are: it exports through
    __dlpack__ and imports through its namespace's from_dlpack."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, **kwargs):
        return self.array.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.array.__dlpack_device__()

    def __array_namespace__(self):
        return sys.modules[__name__].ForeignNamespace


class ForeignNamespace:
    @staticmethod
    def from_dlpack(x):
        return ForeignArray(np.from_dlpack(x))


def test_dlpack_producers_get_their_own_kind_back():
    x = ref.random_values(np.random.default_rng(4), (16, 300), np.float32, "specials")
    values, indices = metaltopk.topk(ForeignArray(x), 20, largest=False)
    assert isinstance(values, ForeignArray) and isinstance(indices, ForeignArray)
    want_values, want_indices = ref.reference_topk(x, 20, -1, False)
    np.testing.assert_array_equal(indices.array, want_indices)
    np.testing.assert_array_equal(ref.bits(values.array), ref.bits(want_values))


def test_jax_arrays():
    jnp = pytest.importorskip("jax.numpy", reason="jax is not installed")
    x = ref.random_values(np.random.default_rng(5), (8, 1000), ref.BFLOAT16, "specials")
    values, indices = metaltopk.topk(jnp.asarray(x), 30)
    assert type(values).__module__.startswith("jax")
    want_values, want_indices = ref.reference_topk(x, 30, -1, True)
    np.testing.assert_array_equal(np.asarray(indices), want_indices)
    np.testing.assert_array_equal(ref.bits(np.asarray(values)), ref.bits(want_values))
