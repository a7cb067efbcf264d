"""Ragged top-k (docs/CONTRACT.md, "Ragged rows") through the Python API, against the independent
numpy model in ragged_reference.py: values as raw bits, indices exactly.

Backends without ragged kernels must refuse by name, never answer.
"""

import numpy as np
import pytest

import metaltopk
import reference as ref
import ragged_reference as rr

DTYPE_IDS = [d.name for d in ref.ALL_DTYPES]


def cpu_or_skip(dtype=None):
    if not metaltopk.backends()["cpu"]["available"]:
        pytest.skip("no CPU backend")


def gpu_backends():
    return [name for name, state in metaltopk.backends().items()
            if name not in ("cpu", "default") and state["available"]]


def assert_ragged(x, k, lengths, starts=None, largest=True, dim=-1):
    """Sorted output equals the model exactly; unsorted output holds the same set with its
    winners first; indices only equal the indices of the full call."""
    where = (f"dtype={x.dtype} shape={x.shape} k={k} lengths={list(lengths)} "
             f"starts={None if starts is None else list(starts)} largest={largest}")
    rows_first = x if dim in (-1, 1) else x.T
    want_values, want_indices = rr.reference_topk_ragged(rows_first, k, lengths, starts, largest)
    if dim not in (-1, 1):
        want_values, want_indices = want_values.T, want_indices.T
    values, indices = metaltopk.topk(x, k, dim, largest, True, lengths=lengths, starts=starts,
                                     backend="cpu")
    assert values.dtype == x.dtype and indices.dtype == np.int64, where
    np.testing.assert_array_equal(indices, want_indices, err_msg=where)
    np.testing.assert_array_equal(ref.bits(values), ref.bits(want_values), err_msg=where)

    loose_values, loose_indices = metaltopk.topk(x, k, dim, largest, False, lengths=lengths,
                                                 starts=starts, backend="cpu")
    axis = 1 if dim in (-1, 1) else 0
    np.testing.assert_array_equal(np.sort(loose_indices, axis=axis),
                                  np.sort(want_indices, axis=axis), err_msg=where)
    valid = want_indices >= 0
    np.testing.assert_array_equal(loose_indices >= 0, valid, err_msg=where + " (winners first)")
    got = {(int(i), ref.bits(v).item()) for i, v in zip(loose_indices[valid], loose_values[valid])}
    want = {(int(i), ref.bits(v).item()) for i, v in zip(want_indices[valid], want_values[valid])}
    assert got == want, where

    only = metaltopk.topk(x, k, dim, largest, lengths=lengths, starts=starts,
                          return_values=False, backend="cpu")
    np.testing.assert_array_equal(only, want_indices, err_msg=where + " (indices only)")


# ---- the contract's examples ------------------------------------------------------------------

SCORES = np.array([[3, 1, 4, 1, 5], [9, 2, 6, 5, 3]], np.float32)


def test_contract_examples():
    cpu_or_skip()
    values, indices = metaltopk.topk(SCORES, 2, lengths=[3, 0], backend="cpu")
    assert values.tolist() == [[4, 3], [0, 0]] and indices.tolist() == [[2, 0], [-1, -1]]
    values, indices = metaltopk.topk(SCORES, 2, lengths=[9, 2], starts=[1, 3], backend="cpu")
    assert indices.tolist() == [[3, 1], [0, 1]] and values.tolist() == [[5, 4], [5, 3]]
    got = metaltopk.topk_ragged_transform(SCORES, [100, 200], [5, 1], 2)
    assert got.dtype == np.int32 and got.tolist() == [[104, 102], [200, -1]]
    got = metaltopk.topk_page_table_transform(SCORES, [[7, 3, 5]], [5, 5], 2,
                                              row_to_batch=[0, 0], page_size=2)
    assert got.dtype == np.int32 and got.tolist() == [[10, 6], [14, 6]]


def test_padding_values_are_zero_bits():
    cpu_or_skip()
    for dtype in ref.ALL_DTYPES:
        x = np.full((2, 3), -1, dtype=dtype) if dtype.kind != "u" else np.ones((2, 3), dtype)
        for largest in (True, False):
            values, indices = metaltopk.topk(x, 5, largest=largest, lengths=[2, 0],
                                             backend="cpu")
            assert indices.tolist() == [[0, 1, -1, -1, -1], [-1] * 5], dtype
            assert (ref.bits(values)[:, 2:] == 0).all() and (ref.bits(values)[1] == 0).all()


@pytest.mark.parametrize("dtype", ref.FLOAT_DTYPES, ids=lambda d: d.name)
def test_nan_and_ties_inside_windows(dtype):
    cpu_or_skip()
    nan = float("nan")
    x = np.array([[1, nan, 2, nan, 3, 3], [0.0, -0.0, 1, 1, nan, 1]]).astype(dtype)
    values, indices = metaltopk.topk(x, 3, lengths=[6, 4], starts=[1, 1], backend="cpu")
    assert indices.tolist() == [[0, 2, 3], [3, 1, 2]]
    values, indices = metaltopk.topk(x, 3, largest=False, lengths=[6, 4], starts=[1, 1],
                                     backend="cpu")
    assert indices.tolist() == [[1, 3, 4], [0, 1, 2]]
    assert ref.bits(values)[1, 0] == ref.bits(x[1, 1:2])[0]  # -0.0 kept bit for bit


# ---- the sweep --------------------------------------------------------------------------------

SWEEP_N = (1, 2, 7, 33, 300, 4097, 20000)


def sweep_lengths(rng, rows, n, k):
    """0, 1, k-1, k, n, past the end and negative, then random ones."""
    special = [0, 1, k - 1, k, n, n + 5, -3, k + 1]
    picked = special + list(rng.integers(-2, n + 3, size=max(0, rows - len(special))))
    return np.array(picked[:rows])


@pytest.mark.parametrize("kind", ["spread", "ties", "specials"])
@pytest.mark.parametrize("dtype", ref.ALL_DTYPES, ids=DTYPE_IDS)
def test_sweep(dtype, kind):
    cpu_or_skip()
    rng = np.random.default_rng([ref.ALL_DTYPES.index(dtype), len(kind)])
    for n in SWEEP_N:
        x = ref.random_values(rng, (9, n), dtype, kind)
        for k in sorted({0, 1, 2, 17, n // 2, n, n + 3}):
            lengths = sweep_lengths(rng, 9, n, k).astype(np.int32 if k % 2 else np.int64)
            starts = None if n % 2 else rng.integers(-2, n + 2, size=9)
            for largest in (True, False):
                assert_ragged(x, k, lengths, starts, largest)


def test_strided_inputs_and_dim0():
    cpu_or_skip()
    rng = np.random.default_rng(4)
    base = ref.random_values(rng, (300, 8), np.float32, "specials")
    lengths = np.array([300, 5, 0, 17, 299, -1, 400, 150])
    assert_ragged(base.T, 20, lengths)           # rows strided along the row
    assert_ragged(base, 20, lengths, dim=0)      # the same, asked along dim 0
    assert_ragged(base[::-2].T, 20, lengths // 2, starts=np.arange(8) * 3)
    values, indices = metaltopk.topk(base, 20, 0, lengths=lengths, backend="cpu")
    want_values, want_indices = metaltopk.topk(np.ascontiguousarray(base.T), 20,
                                               lengths=lengths, backend="cpu")
    np.testing.assert_array_equal(indices, want_indices.T)
    np.testing.assert_array_equal(ref.bits(values), ref.bits(want_values.T))


def test_dense_indices_only():
    cpu_or_skip()
    x = ref.random_values(np.random.default_rng(2), (5, 700), ref.BFLOAT16, "specials")
    for backend in ["cpu"] + gpu_backends():
        if backend in ("metal", "mpsgraph") and x.dtype == np.float64:
            continue
        indices = metaltopk.topk(x, 40, return_values=False, backend=backend)
        np.testing.assert_array_equal(indices, ref.reference_topk(x, 40)[1])


# ---- index transforms -------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.dtype(np.float32), ref.BFLOAT16, np.dtype(np.int8),
                                   np.dtype(np.float64)], ids=lambda d: d.name)
def test_ragged_transform(dtype):
    cpu_or_skip()
    rng = np.random.default_rng(6)
    for n, k in ((1, 1), (50, 8), (5000, 2048), (3000, 512)):
        x = ref.random_values(rng, (7, n), dtype, "specials")
        lengths = sweep_lengths(rng, 7, n, k)
        for offsets_dtype in (np.int32, np.int64):
            offsets = rng.integers(0, 2**20, size=7).astype(offsets_dtype)
            got = metaltopk.topk_ragged_transform(x, offsets, lengths, k)
            _, want = rr.reference_topk_ragged(x, k, lengths, None, True,
                                               rr.ragged_transform(offsets))
            assert got.dtype == np.int32 and got.shape == (7, k)
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("page_size", [1, 3, 64])
def test_page_table_transform(page_size):
    cpu_or_skip()
    rng = np.random.default_rng(page_size)
    for n, k in ((10, 4), (700, 64), (5000, 512)):
        x = ref.random_values(rng, (6, n), np.float32, "spread")
        lengths = sweep_lengths(rng, 6, n, k)
        pages = -(-n // page_size)
        for batch, row_to_batch in ((6, None), (3, np.array([2, 0, 1, 1, -1, 3], np.int32))):
            table = rng.permutation(batch * (pages + 2)).reshape(batch, pages + 2)
            for table_dtype in (np.int32, np.int64):
                got = metaltopk.topk_page_table_transform(
                    x, table.astype(table_dtype), lengths, k, row_to_batch=row_to_batch,
                    page_size=page_size)
                _, want = rr.reference_topk_ragged(
                    x, k, lengths, None, True,
                    rr.page_table_transform(table, page_size, row_to_batch))
                assert got.dtype == np.int32 and got.shape == (6, k)
                np.testing.assert_array_equal(got, want)


# ---- errors -----------------------------------------------------------------------------------

def test_errors_name_the_argument():
    cpu_or_skip()
    x = SCORES
    cases = [
        (TypeError, "lengths", lambda: metaltopk.topk(x, 2, lengths=np.ones(2, np.float32))),
        (ValueError, "lengths", lambda: metaltopk.topk(x, 2, lengths=[1, 2, 3])),
        (ValueError, "lengths", lambda: metaltopk.topk(x, 2, lengths=[[1, 2]])),
        (TypeError, "starts", lambda: metaltopk.topk(x, 2, lengths=[1, 2], starts=[0.5, 1])),
        (ValueError, "starts", lambda: metaltopk.topk(x, 2, lengths=[1, 2], starts=[0])),
        (ValueError, "starts", lambda: metaltopk.topk(x, 2, starts=[0, 1])),
        (ValueError, "k", lambda: metaltopk.topk(x, -1, lengths=[1, 2])),
        (ValueError, "input", lambda: metaltopk.topk(x[0], 2, lengths=[1])),
        (TypeError, "offsets",
         lambda: metaltopk.topk_ragged_transform(x, np.zeros(2, np.float64), [1, 2], 2)),
        (ValueError, "offsets", lambda: metaltopk.topk_ragged_transform(x, [0], [1, 2], 2)),
        (ValueError, "page_table",
         lambda: metaltopk.topk_page_table_transform(x, [0, 1, 2], [1, 2], 2)),
        (ValueError, "page_table",
         lambda: metaltopk.topk_page_table_transform(x, [[0, 1]], [1, 2], 2,
                                                     row_to_batch=[0, 0])),
        (ValueError, "page_size",
         lambda: metaltopk.topk_page_table_transform(x, [[0] * 5] * 2, [1, 2], 2, page_size=0)),
        (TypeError, "row_to_batch",
         lambda: metaltopk.topk_page_table_transform(x, [[0] * 5], [1, 2], 2,
                                                     row_to_batch=[0.0, 0.0])),
        (ValueError, "row_to_batch",
         lambda: metaltopk.topk_page_table_transform(x, [[0] * 5], [1, 2], 2,
                                                     row_to_batch=[0])),
    ]
    for exception, name, call in cases:
        with pytest.raises(exception, match=name):
            call()


# Backends with ragged kernels of their own; the others refuse ragged calls by name.
RAGGED_BACKENDS = ("cpu", "cuda", "metal")


def test_ragged_rows_on_every_gpu_backend():
    """A GPU backend either runs ragged rows exactly as the CPU backend does or refuses them with
    an error naming itself: never a different answer."""
    backends = gpu_backends()
    if not backends:
        pytest.skip("no GPU backend on this machine (tests/ragged/test_ragged_refusal.cpp "
                    "checks the refusal with stand-in backends)")
    want = metaltopk.topk(SCORES, 2, lengths=[3, 4], backend="cpu")
    for backend in backends:
        if backend in RAGGED_BACKENDS:
            values, indices = metaltopk.topk(SCORES, 2, lengths=[3, 4], backend=backend)
            np.testing.assert_array_equal(indices, want[1])
            np.testing.assert_array_equal(values, want[0])
        else:
            with pytest.raises(RuntimeError, match=backend):
                metaltopk.topk(SCORES, 2, lengths=[3, 4], backend=backend)


def test_torch_inputs_give_torch_outputs():
    """The torch integration in brief (tests/torch/test_torch_ragged.py has the rest)."""
    torch = pytest.importorskip("torch")
    x = torch.tensor(SCORES)
    values, indices = metaltopk.topk(x, 2, lengths=torch.tensor([9, 2]), starts=[1, 3])
    assert isinstance(indices, torch.Tensor) and indices.tolist() == [[3, 1], [0, 1]]
    assert values.tolist() == [[5, 4], [5, 3]]
    indices = metaltopk.topk(x, 2, return_values=False, backend="cpu")
    assert isinstance(indices, torch.Tensor) and indices.tolist() == [[4, 2], [0, 2]]
    got = metaltopk.topk_ragged_transform(x, torch.tensor([100, 200]), torch.tensor([5, 1]), 2)
    assert got.dtype == torch.int32 and got.tolist() == [[104, 102], [200, -1]]
