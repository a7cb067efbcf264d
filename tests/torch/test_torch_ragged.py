"""Ragged top-k and the index transforms (docs/CONTRACT.md, "Ragged rows") on torch tensors and
other DLPack producers: eager on every device torch has here (CUDA cases run where torch sees a
GPU, tests/gpu/run_all.sh's torch step), the three torch ops under opcheck, torch.compile with
fullgraph, torch.export and AOTInductor packages that call the C shim.

Every result is compared exactly with the independent numpy model (tests/ragged_reference.py).
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make test-deps)")
import metaltopk  # noqa: E402
from metaltopk import _dispatch  # noqa: E402
from metaltopk._abi import DeviceTensor  # noqa: E402
from metaltopk.torch import _tensors, aoti_library_path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import ragged_reference as rr  # noqa: E402
import reference as ref  # noqa: E402
from aoti_packages import assert_calls_shims, compile_package, run_from_cpp  # noqa: E402

ragged_op = torch.ops.metaltopk.mtk_topk_ragged.default
ragged_transform_op = torch.ops.metaltopk.mtk_topk_ragged_transform.default
page_table_op = torch.ops.metaltopk.mtk_topk_page_table_transform.default


def cuda_runs_ragged_rows():
    """Whether there is a CUDA device whose backend has ragged kernels (a backend without them
    refuses by name: tests/test_ragged.py checks that)."""
    if not torch.cuda.is_available() or not metaltopk.backends()["cuda"]["available"]:
        return False
    try:
        metaltopk.topk(torch.zeros(1, 4, device="cuda"), 1,
                       lengths=torch.ones(1, dtype=torch.int32, device="cuda"))
    except RuntimeError as error:
        if "not implemented" in str(error):
            return False
        raise
    return True


CUDA = pytest.mark.skipif(not cuda_runs_ragged_rows(),
                          reason="needs a CUDA device and the CUDA backend's ragged kernels")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]
TORCH_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8,
                torch.uint8, torch.int16, torch.int32, torch.int64]


@pytest.fixture(params=["compiled", "python"])
def ragged_path(request, monkeypatch):
    """Runs a test on the compiled torch fast path (adapters/torch/), then on the Python path."""
    if request.param == "python":
        monkeypatch.setattr(_tensors, "_fast_ragged", None)
    elif _tensors._fast_ragged is None:
        pytest.skip("the torch fast path was not built beside the library")
    return request.param


def test_make_test_runs_ragged_rows_on_the_fast_path():
    if not os.environ.get("METALTOPK_EXPECT_TORCH_FAST_PATH"):
        pytest.skip("not run by `make test` with torch")
    assert _tensors._fast_ragged is not None


def to_numpy(t):
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ref.BFLOAT16)
    return t.numpy()


def from_numpy(a, device="cpu"):
    if a.dtype == ref.BFLOAT16:
        return torch.from_numpy(a.view(np.int16).copy()).view(torch.bfloat16).to(device)
    return torch.from_numpy(np.ascontiguousarray(a)).to(device)


def numpy_dtype(dtype):
    return ref.BFLOAT16 if dtype == torch.bfloat16 else np.dtype(str(dtype).split(".")[1])


def assert_exact(values, indices, want_values, want_indices, device):
    assert isinstance(indices, torch.Tensor) and indices.device.type == device
    np.testing.assert_array_equal(to_numpy(indices), want_indices)
    if values is not None:
        assert values.device.type == device
        np.testing.assert_array_equal(ref.bits(to_numpy(values)), ref.bits(want_values))


def lengths_for(rng, rows, n, k):
    """0, 1, k-1, k, n, past the end and negative, then random ones."""
    special = [0, 1, k - 1, k, n, n + 5, -3, k + 1]
    picked = special + list(rng.integers(-2, n + 3, size=max(0, rows - len(special))))
    return np.array(picked[:rows])


# ---- eager ------------------------------------------------------------------------------------

SCORES = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]], np.float32)


@pytest.mark.usefixtures("ragged_path")
@pytest.mark.parametrize("device", DEVICES)
def test_contract_examples(device):
    x = torch.tensor(SCORES, device=device)
    values, indices = metaltopk.topk(x, 2, lengths=[3, 0])
    assert values.tolist() == [[4, 3], [0, 0]] and indices.tolist() == [[2, 0], [-1, -1]]
    assert indices.dtype == torch.int64 and values.device == x.device
    lengths = torch.tensor([9, 2], device=device)
    starts = torch.tensor([1, 3], dtype=torch.int32, device=device)
    indices = metaltopk.topk(x, 2, lengths=lengths, starts=starts, return_values=False)
    assert isinstance(indices, torch.Tensor) and indices.tolist() == [[3, 1], [0, 1]]
    got = metaltopk.topk_ragged_transform(x, torch.tensor([100, 200], device=device),
                                          torch.tensor([5, 1], device=device), 2)
    assert got.dtype == torch.int32 and got.device == x.device
    assert got.tolist() == [[104, 102], [200, -1]]
    got = metaltopk.topk_page_table_transform(x, torch.tensor([[7, 3, 5]], device=device),
                                              [5, 5], 2, row_to_batch=[0, 0], page_size=2)
    assert got.dtype == torch.int32 and got.tolist() == [[10, 6], [14, 6]]


@pytest.mark.usefixtures("ragged_path")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", TORCH_DTYPES, ids=lambda d: str(d).split(".")[1])
def test_every_dtype_against_the_model(dtype, device):
    rng = np.random.default_rng(TORCH_DTYPES.index(dtype))
    for n, k in ((1, 1), (33, 7), (700, 64), (5000, 600)):
        x = ref.random_values(rng, (9, n), numpy_dtype(dtype), "specials")
        lengths = lengths_for(rng, 9, n, k)
        starts = rng.integers(-2, n + 2, size=9)
        t = from_numpy(x, device)
        for largest in (True, False):
            want = rr.reference_topk_ragged(x, k, lengths, starts, largest)
            lengths_t = torch.tensor(lengths, dtype=torch.int32, device=device)
            starts_t = torch.tensor(starts, device=device)
            values, indices = metaltopk.topk(t, k, largest=largest, lengths=lengths_t,
                                             starts=starts_t)
            assert values.dtype == dtype and indices.dtype == torch.int64
            assert_exact(values, indices, *want, device)
            values, indices = ragged_op(t, k, lengths_t, starts_t, -1, largest)
            assert_exact(values, indices, *want, device)


@pytest.mark.usefixtures("ragged_path")
@pytest.mark.parametrize("device", DEVICES)
def test_strided_inputs_dim0_and_indices_only(device):
    rng = np.random.default_rng(4)
    base = ref.random_values(rng, (300, 8), np.float32, "specials")
    lengths = np.array([300, 5, 0, 17, 299, -1, 400, 150])
    want_values, want_indices = rr.reference_topk_ragged(base.T, 20, lengths)
    t = from_numpy(base, device)
    values, indices = metaltopk.topk(t.T, 20, lengths=lengths)  # rows strided along the row
    assert_exact(values, indices, want_values, want_indices, device)
    values, indices = metaltopk.topk(t, 20, 0, lengths=lengths)
    assert values.shape == (20, 8) and values.is_contiguous() and indices.is_contiguous()
    assert_exact(values, indices, want_values.T, want_indices.T, device)
    values, indices = ragged_op(t, 20, torch.tensor(lengths, device=device), None, 0)
    assert_exact(values, indices, want_values.T, want_indices.T, device)
    only = metaltopk.topk(t, 20, -2, lengths=lengths, return_values=False)
    assert_exact(None, only, None, want_indices.T, device)
    values, indices = ragged_op(t.T, 20, torch.tensor(lengths, device=device),
                                return_values=False)
    assert values.shape == (0,) and values.dtype == t.dtype
    assert_exact(None, indices, None, want_indices, device)


@pytest.mark.usefixtures("ragged_path")
@pytest.mark.parametrize("device", DEVICES)
def test_transforms_against_the_model(device):
    rng = np.random.default_rng(6)
    for n, k, page_size in ((50, 8, 1), (5000, 2048, 64), (3000, 512, 3)):
        x = ref.random_values(rng, (7, n), ref.BFLOAT16, "specials")
        t = from_numpy(x, device)
        lengths = lengths_for(rng, 7, n, k)
        offsets = rng.integers(0, 2**20, size=7).astype(np.int32)
        got = metaltopk.topk_ragged_transform(t, torch.tensor(offsets, device=device),
                                              torch.tensor(lengths, device=device), k)
        _, want = rr.reference_topk_ragged(x, k, lengths, None, True,
                                           rr.ragged_transform(offsets))
        assert got.dtype == torch.int32 and got.shape == (7, k)
        assert_exact(None, got, None, want, device)
        pages = -(-n // page_size)
        table = rng.permutation(4 * (pages + 2)).reshape(4, pages + 2)
        row_to_batch = np.array([2, 0, 1, 1, -1, 3, 4], np.int32)
        got = metaltopk.topk_page_table_transform(
            t, torch.tensor(table, device=device), torch.tensor(lengths, device=device), k,
            row_to_batch=torch.tensor(row_to_batch, device=device), page_size=page_size)
        _, want = rr.reference_topk_ragged(
            x, k, lengths, None, True, rr.page_table_transform(table, page_size, row_to_batch))
        assert_exact(None, got, None, want, device)
        assert_exact(None, page_table_op(t, torch.tensor(table, device=device),
                                         torch.tensor(lengths, device=device), k,
                                         torch.tensor(row_to_batch, device=device), page_size),
                     None, want, device)


@pytest.mark.usefixtures("ragged_path")
def test_gradient_goes_to_the_winners_positions():
    x = torch.randn(6, 40, dtype=torch.float64)
    lengths, starts = torch.tensor([40, 3, 0, 10, 25, 7]), torch.tensor([0, 5, 2, 35, -4, 1])
    for dim, source in ((-1, x), (0, x.t())):
        leaf = source.clone().requires_grad_()
        values, indices = metaltopk.topk(leaf, 8, dim, lengths=lengths, starts=starts)
        weights = torch.arange(values.numel(), dtype=values.dtype).view(values.shape)
        (values * weights).sum().backward()
        want = torch.zeros(6, 40, dtype=torch.float64)
        rows_indices = indices if dim == -1 else indices.t()
        rows_weights = weights if dim == -1 else weights.t()
        for r in range(6):
            start = min(max(int(starts[r]), 0), 40)
            for j in range(8):
                if rows_indices[r, j] >= 0:
                    want[r, start + rows_indices[r, j]] += rows_weights[r, j]
        assert torch.equal(leaf.grad, want if dim == -1 else want.t())


@CUDA
def test_cuda_graph_replays_with_new_lengths():
    """Lengths and starts are read on the device: a captured call follows their new contents
    on each replay, with no host synchronisation."""
    rng = np.random.default_rng(14)
    x = from_numpy(ref.random_values(rng, (64, 20000), np.float32, "specials"), "cuda")
    lengths = torch.tensor(lengths_for(rng, 64, 20000, 2048), device="cuda")
    starts = torch.zeros(64, dtype=torch.int32, device="cuda")
    table = torch.arange(64 * 313, dtype=torch.int32, device="cuda").view(64, 313)
    metaltopk.topk(x, 2048, lengths=lengths, starts=starts)  # warm-up outside the capture
    metaltopk.topk_page_table_transform(x, table, lengths, 2048, page_size=64)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        values, indices = metaltopk.topk(x, 2048, lengths=lengths, starts=starts)
        slots = metaltopk.topk_page_table_transform(x, table, lengths, 2048, page_size=64)
    for seed in range(3):
        rng = np.random.default_rng(100 + seed)
        lengths.copy_(torch.tensor(lengths_for(rng, 64, 20000, 2048)))
        starts.copy_(torch.tensor(rng.integers(-2, 20000, size=64), dtype=torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        want = metaltopk.topk(x.cpu(), 2048, lengths=lengths.cpu(), starts=starts.cpu())
        assert_same((values.cpu(), indices.cpu()), want)
        assert torch.equal(slots.cpu(), metaltopk.topk_page_table_transform(
            x.cpu(), table.cpu(), lengths.cpu(), 2048, page_size=64))


def test_meta_tensors_have_the_output_shapes():
    x = torch.empty(5, 100, device="meta", dtype=torch.bfloat16)
    lengths = torch.empty(5, dtype=torch.int32, device="meta")
    values, indices = ragged_op(x, 300, lengths)
    assert values.shape == indices.shape == (5, 300)
    assert values.dtype == torch.bfloat16 and indices.dtype == torch.int64
    values, indices = ragged_op(x.t(), 7, lengths, None, 0, return_values=False)
    assert values.shape == (0,) and indices.shape == (7, 5)
    got = ragged_transform_op(x, lengths, lengths, 9)
    assert got.shape == (5, 9) and got.dtype == torch.int32
    table = torch.empty(5, 2, dtype=torch.int64, device="meta")
    got = page_table_op(x, table, lengths, 9, None, 64)
    assert got.shape == (5, 9) and got.dtype == torch.int32


# ---- errors -----------------------------------------------------------------------------------

def error_cases(device):
    x = torch.tensor(SCORES, device=device)
    lengths = torch.tensor([1, 2], device=device)
    table = torch.zeros(2, 5, dtype=torch.int32, device=device)
    elsewhere = "cpu" if device == "meta" else "meta"
    return [
        (TypeError, "lengths", lambda: metaltopk.topk(x, 2, lengths=lengths.float())),
        (TypeError, "lengths", lambda: metaltopk.topk(x, 2, lengths=lengths.bool())),
        (TypeError, "lengths", lambda: ragged_op(x, 2, lengths.to(torch.int16))),
        (ValueError, "lengths",
         lambda: metaltopk.topk(x, 2, lengths=torch.tensor([1, 2, 3], device=device))),
        (ValueError, "lengths", lambda: ragged_op(x, 2, lengths.view(1, 2))),
        (ValueError, "lengths",
         lambda: ragged_op(x, 2, torch.empty_like(lengths, device=elsewhere))),
        (TypeError, "starts", lambda: metaltopk.topk(x, 2, lengths=lengths,
                                                     starts=lengths.double())),
        (ValueError, "starts", lambda: ragged_op(x, 2, lengths, lengths[:1])),
        (ValueError, "k", lambda: ragged_op(x, -1, lengths)),
        (ValueError, "input", lambda: ragged_op(x[0], 2, lengths[:1])),
        (IndexError, "dim", lambda: ragged_op(x, 2, lengths, None, 2)),
        (TypeError, "offsets", lambda: ragged_transform_op(x, lengths.double(), lengths, 2)),
        (ValueError, "offsets", lambda: ragged_transform_op(x, lengths[:1], lengths, 2)),
        (TypeError, "src_page_table", lambda: page_table_op(x, table.float(), lengths, 2)),
        (ValueError, "src_page_table", lambda: page_table_op(x, table[0], lengths, 2)),
        (ValueError, "src_page_table", lambda: page_table_op(x, table[:, :2], lengths, 2)),
        (ValueError, "src_page_table", lambda: page_table_op(x, table[:1], lengths, 2)),
        (ValueError, "page_size", lambda: page_table_op(x, table, lengths, 2, None, 0)),
        (TypeError, "row_to_batch",
         lambda: page_table_op(x, table, lengths, 2, lengths.to(torch.uint8))),
        (ValueError, "row_to_batch", lambda: page_table_op(x, table, lengths, 2, lengths[:1])),
    ]


@pytest.mark.usefixtures("ragged_path")
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_errors_name_the_argument(device):
    """On real tensors the library checks (its message, in this API's names); on meta tensors
    the fake kernels check the same."""
    for exception, name, call in error_cases(device):
        with pytest.raises(exception, match=name):
            call()


# ---- other DLPack producers and array adapters ------------------------------------------------

class ForeignArray:
    """A DLPack producer metaltopk knows nothing about, as JAX's arrays are."""

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
    x = ref.random_values(np.random.default_rng(8), (6, 300), np.float32, "specials")
    lengths = np.array([300, 0, 5, 120, 299, 40], np.int32)
    values, indices = metaltopk.topk(ForeignArray(x), 20, lengths=ForeignArray(lengths),
                                     starts=np.arange(6))
    assert isinstance(values, ForeignArray) and isinstance(indices, ForeignArray)
    want_values, want_indices = rr.reference_topk_ragged(x, 20, lengths, np.arange(6))
    np.testing.assert_array_equal(indices.array, want_indices)
    np.testing.assert_array_equal(ref.bits(values.array), ref.bits(want_values))
    offsets = np.arange(6) * 1000
    got = metaltopk.topk_ragged_transform(ForeignArray(x), ForeignArray(offsets), lengths, 20)
    assert isinstance(got, ForeignArray) and got.array.dtype == np.int32
    _, want = rr.reference_topk_ragged(x, 20, lengths, None, True, rr.ragged_transform(offsets))
    np.testing.assert_array_equal(got.array, want)


class AdapterArray:
    """An array of a library with an array adapter (as CuPy has), on the CPU backend here."""

    def __init__(self, array):
        self.array = np.ascontiguousarray(array)


def adapter_view(obj):
    if not isinstance(obj, AdapterArray):
        return None
    array = obj.array

    def new_empty(shape, dtype_name):
        return adapter_view(AdapterArray(np.empty(shape, dtype=dtype_name)))

    return DeviceTensor(owner=obj, data=array.ctypes.data, dtype=array.dtype.name,
                        shape=array.shape, strides=tuple(s // array.itemsize
                                                         for s in array.strides),
                        backend="cpu", device_index=0, stream=0, new_empty=new_empty)


def test_array_adapter_inputs_run_in_place(monkeypatch):
    """The path CuPy arrays take: described in place, outputs from the adapter."""
    monkeypatch.setattr(_dispatch, "_array_adapters", [adapter_view])
    x = ref.random_values(np.random.default_rng(9), (5, 400), np.float32, "specials")
    lengths = np.array([400, 3, 0, 200, 390])
    values, indices = metaltopk.topk(AdapterArray(x), 30, lengths=AdapterArray(lengths),
                                     starts=AdapterArray(np.arange(5)))
    assert isinstance(values, AdapterArray) and isinstance(indices, AdapterArray)
    want_values, want_indices = rr.reference_topk_ragged(x, 30, lengths, np.arange(5))
    np.testing.assert_array_equal(indices.array, want_indices)
    np.testing.assert_array_equal(ref.bits(values.array), ref.bits(want_values))
    table = np.arange(5 * 400, dtype=np.int32).reshape(5, 400)[::-1].copy()
    got = metaltopk.topk_page_table_transform(AdapterArray(x), AdapterArray(table),
                                              AdapterArray(lengths), 30)
    _, want = rr.reference_topk_ragged(x, 30, lengths, None, True,
                                       rr.page_table_transform(table, 1))
    assert got.array.dtype == np.int32
    np.testing.assert_array_equal(got.array, want)
    with pytest.raises(ValueError, match="lengths must be an array on the input's device"):
        metaltopk.topk(AdapterArray(x), 3, lengths=lengths)
    with pytest.raises(TypeError, match="lengths.dtype"):
        metaltopk.topk(AdapterArray(x), 3, lengths=AdapterArray(lengths.astype(np.float32)))


# ---- the ops under torch's tooling ------------------------------------------------------------

def opcheck_cases():
    x = torch.randn(6, 300)
    lengths = torch.tensor([300, 0, 5, 250, 299, 12], dtype=torch.int32)
    starts = torch.tensor([0, 4, 2, 60, -1, 290])
    table = torch.randperm(40).view(4, 10)
    return {
        ragged_op: [(x, 20, lengths), (x, 20, lengths, starts, -1, False, False),
                    (x.to(torch.bfloat16), 400, lengths, starts), (x.t(), 3, lengths, None, 0),
                    (x, 20, lengths, None, -1, True, True, False),
                    (x.double().requires_grad_(), 20, lengths, starts)],
        ragged_transform_op: [(x, torch.arange(6) * 100, lengths, 16)],
        page_table_op: [(x, table, lengths, 16, torch.tensor([3, 0, 1, 2, -1, 4]), 32),
                        (x.half(), torch.arange(6 * 300).view(6, 300), lengths, 8)],
    }


@pytest.mark.parametrize("op", [ragged_op, ragged_transform_op, page_table_op],
                         ids=lambda op: op.name())
def test_opcheck(op):
    for args in opcheck_cases()[op]:
        torch.library.opcheck(op, args)


def sparse_attention(scores, lengths, starts, offsets, table, row_to_batch):
    """The three selections a sparse-attention indexer makes, with exact ops around them."""
    values, indices = metaltopk.topk(scores * 2, 64, lengths=lengths, starts=starts)
    only = metaltopk.topk(scores, 16, largest=False, lengths=lengths, return_values=False)
    ragged = metaltopk.topk_ragged_transform(scores, offsets, lengths, 32)
    paged = metaltopk.topk_page_table_transform(scores, table, lengths, 32,
                                                row_to_batch=row_to_batch, page_size=16)
    return values, indices, only, ragged + 1, paged


def attention_inputs(rows=6, n=1000, seed=10, device="cpu"):
    rng = np.random.default_rng(seed)
    scores = from_numpy(ref.random_values(rng, (rows, n), np.float32, "specials"), device)
    lengths = torch.tensor(lengths_for(rng, rows, n, 64), device=device)
    starts = torch.tensor(rng.integers(-2, n, size=rows), dtype=torch.int32, device=device)
    offsets = torch.tensor(rng.integers(0, 2**20, size=rows), device=device)
    pages = -(-n // 16)
    table = torch.tensor(rng.permutation(3 * pages).reshape(3, pages), dtype=torch.int32,
                         device=device)
    row_to_batch = torch.tensor(rng.integers(-1, 4, size=rows), device=device)
    return scores, lengths, starts, offsets, table, row_to_batch


def assert_same(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        if a.dtype.is_floating_point:
            a, b = a.view(torch.int32), b.view(torch.int32)
        assert torch.equal(a, b)


def test_compile_fullgraph():
    inputs = attention_inputs()
    want = sparse_attention(*inputs)
    for dynamic in (False, True):
        compiled = torch.compile(sparse_attention, fullgraph=True, dynamic=dynamic)
        assert_same(compiled(*inputs), want)
        fewer = attention_inputs(rows=4, n=1000, seed=11)
        assert_same(compiled(*fewer), sparse_attention(*fewer))


class SparseAttention(torch.nn.Module):
    def forward(self, scores, lengths, starts, offsets, table, row_to_batch):
        return sparse_attention(scores, lengths, starts, offsets, table, row_to_batch)


def test_export():
    inputs = attention_inputs()
    ep = torch.export.export(SparseAttention(), inputs)
    targets = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert {ragged_op, ragged_transform_op, page_table_op} <= targets
    assert_same(ep.module()(*inputs), sparse_attention(*inputs))
    decomposed = ep.run_decompositions()
    assert_same(decomposed.module()(*inputs), sparse_attention(*inputs))
    rows = torch.export.Dim("rows", min=2, max=64)
    dynamic = torch.export.export(SparseAttention(), inputs, dynamic_shapes=(
        {0: rows}, {0: rows}, {0: rows}, {0: rows}, None, {0: rows}))
    fewer = attention_inputs(rows=4, seed=12)
    assert_same(dynamic.module()(*fewer), sparse_attention(*fewer))


# ---- AOTInductor ------------------------------------------------------------------------------

SHIMS = ("mtk_topk_ragged", "mtk_topk_ragged_transform", "mtk_topk_page_table_transform")


@pytest.fixture(scope="module", params=DEVICES)
def aoti_package(request, tmp_path_factory):
    """SparseAttention compiled by AOTInductor for a device, calling the C shim."""
    if not aoti_library_path().is_file():
        pytest.fail(f"{aoti_library_path()} was not built (make builds it when torch is found)")
    device = request.param
    inputs = attention_inputs(device=device)
    ep = torch.export.export(SparseAttention(), inputs)
    folder = tmp_path_factory.mktemp(f"aoti-ragged-{device}")
    package = compile_package(ep, folder, "sparse_attention")
    return package, inputs, device


def test_aoti_package_runs_the_shims_exactly(aoti_package):
    package, inputs, device = aoti_package
    assert_calls_shims(package, device, SHIMS)
    runner = torch._inductor.aoti_load_package(package)
    assert_same(runner(*inputs), sparse_attention(*inputs))
    fresh = attention_inputs(seed=13, device=device)
    assert_same(runner(*fresh), sparse_attention(*fresh))


def test_aoti_package_runs_from_cpp(aoti_package, tmp_path):
    package, inputs, device = aoti_package
    assert_same(run_from_cpp(package, inputs, tmp_path, device), sparse_attention(*inputs))

