"""The top-k contract (docs/CONTRACT.md), checked on every backend this machine can run.

Results are compared with the independent numpy model in reference.py: values as raw bits,
indices exactly. torch.topk (CPU) is a second, looser oracle (it leaves tie order open).
"""

import re
import threading

import ml_dtypes
import numpy as np
import pytest

import metaltopk
from metaltopk import _abi, _ffi, _topk
import reference as ref

BACKENDS = ["cpu", "cuda", "metal", "mpsgraph"]
_DISPLAY = {"cpu": ("CPU", "CPU"), "cuda": ("CUDA", "CUDA GPU"),
            "metal": ("Metal", "Apple GPU"), "mpsgraph": ("MPSGraph", "Apple GPU")}


def unavailable_reason(name):
    state = metaltopk.backends()[name]
    label, device = _DISPLAY[name]
    if not state["compiled"]:
        return f"{label} backend: not compiled into this library"
    if not state["available"]:
        return f"{label} backend: no {device} on this machine"
    return None


@pytest.fixture(params=BACKENDS)
def backend(request):
    reason = unavailable_reason(request.param)
    if reason:
        pytest.skip(reason)
    return request.param


def require_dtype(backend, dtype):
    if backend in ("metal", "mpsgraph") and np.dtype(dtype) == np.float64:
        pytest.skip("float64 is not a Metal dtype (test_metal_rejects_float64 checks the error)")


DTYPE_IDS = [d.name for d in ref.ALL_DTYPES]


# ---- assertions -----------------------------------------------------------------------------


def describe(x, k, dim, largest):
    return (f"dtype={x.dtype} shape={x.shape} strides={x.strides} k={k} dim={dim} "
            f"largest={largest}")


def assert_topk(x, k, dim, largest, backend, order=None):
    """Sorted output equals the model exactly; unsorted output selects the same indices, holds
    the matching values, and repeats itself exactly."""
    where = describe(x, k, dim, largest)
    values, indices = metaltopk.topk(x, k, dim, largest, True, backend=backend)
    if not x.dtype.isnative:  # results come back in native byte order
        x = ref.bits(x).byteswap().view(x.dtype.newbyteorder("=")).reshape(x.shape)
    want_values, want_indices = ref.reference_topk(x, k, dim, largest, order)
    assert values.dtype == x.dtype and indices.dtype == np.int64, where
    assert values.shape == want_values.shape and indices.shape == want_indices.shape, where
    np.testing.assert_array_equal(indices, want_indices, err_msg=where)
    np.testing.assert_array_equal(ref.bits(values), ref.bits(want_values), err_msg=where)

    loose_values, loose_indices = metaltopk.topk(x, k, dim, largest, False, backend=backend)
    again_values, again_indices = metaltopk.topk(x, k, dim, largest, False, backend=backend)
    where += " sorted=False"
    assert loose_values.shape == want_values.shape and loose_indices.dtype == np.int64, where
    np.testing.assert_array_equal(again_indices, loose_indices, err_msg=where + " (repeat)")
    np.testing.assert_array_equal(ref.bits(again_values), ref.bits(loose_values),
                                  err_msg=where + " (repeat)")
    if x.ndim == 0:
        np.testing.assert_array_equal(loose_indices, want_indices, err_msg=where)
        np.testing.assert_array_equal(ref.bits(loose_values), ref.bits(want_values), err_msg=where)
        return
    np.testing.assert_array_equal(np.sort(loose_indices, axis=dim),
                                  np.sort(want_indices, axis=dim), err_msg=where)
    np.testing.assert_array_equal(ref.bits(loose_values),
                                  ref.bits(ref.gather(x, loose_indices, dim)), err_msg=where)


def k_choices(n):
    """k at 0, 1, n and around the powers of two where selection algorithms switch."""
    ks = {0, 1, 2, n // 2, n - 1, n}
    for p in (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096):
        ks.update((p - 1, p, p + 1))
    ks.add(50)
    return sorted(k for k in ks if 0 <= k <= n)


# ---- the examples table ---------------------------------------------------------------------

NAN, INF = float("nan"), float("inf")
EXAMPLE_SPECIALS = [NAN, INF, 1e4, 0.0, -1e4, -INF]


def as_dtype(values, dtype):
    return np.array(values, dtype=np.float64).astype(dtype)


def test_example_arange(backend):
    for dtype in ref.ALL_DTYPES:
        if dtype == np.float64 and backend in ("metal", "mpsgraph"):
            continue
        values, indices = metaltopk.topk(np.arange(5.0).astype(dtype), 2, backend=backend)
        assert values.dtype == dtype
        assert values.tolist() == [4, 3] and indices.tolist() == [4, 3], dtype


@pytest.mark.parametrize("dtype", ref.FLOAT_DTYPES, ids=lambda d: d.name)
def test_example_nan_inf(backend, dtype):
    require_dtype(backend, dtype)
    x = as_dtype(EXAMPLE_SPECIALS, dtype)
    values, indices = metaltopk.topk(x, 4, backend=backend)
    np.testing.assert_array_equal(ref.bits(values), ref.bits(x[[0, 1, 2, 3]]))
    assert indices.tolist() == [0, 1, 2, 3]
    values, indices = metaltopk.topk(x, 4, largest=False, backend=backend)
    np.testing.assert_array_equal(ref.bits(values), ref.bits(x[[5, 4, 3, 2]]))
    assert indices.tolist() == [5, 4, 3, 2]


@pytest.mark.parametrize("dtype", ref.FLOAT_DTYPES, ids=lambda d: d.name)
def test_example_nan_ranks_above_everything(backend, dtype):
    require_dtype(backend, dtype)
    values, indices = metaltopk.topk(as_dtype([NAN, 1, 2], dtype), 3, largest=False,
                                     backend=backend)
    assert values[:2].tolist() == [1, 2] and np.isnan(values[2])
    assert indices.tolist() == [1, 2, 0]
    values, indices = metaltopk.topk(as_dtype([1, NAN, 2, NAN, 3], dtype), 2, backend=backend)
    assert np.isnan(values.astype(np.float64)).all() and indices.tolist() == [1, 3]


@pytest.mark.parametrize("dtype", ref.ALL_DTYPES, ids=DTYPE_IDS)
def test_example_ties(backend, dtype):
    require_dtype(backend, dtype)
    values, indices = metaltopk.topk(np.array([3, 2, 3, 2, 1, 1]).astype(dtype), 2,
                                     backend=backend)
    assert values.tolist() == [3, 3] and indices.tolist() == [0, 2]
    for sorted_ in (True, False):
        values, indices = metaltopk.topk(np.ones(10, dtype=dtype), 3, sorted=sorted_,
                                         backend=backend)
        assert values.tolist() == [1, 1, 1] and indices.tolist() == [0, 1, 2], sorted_
    values, indices = metaltopk.topk(np.array([5, 1, 1, 1, 0]).astype(dtype), 3, largest=False,
                                     backend=backend)
    assert values.tolist() == [0, 1, 1] and indices.tolist() == [4, 1, 2]


@pytest.mark.parametrize("dtype", ref.FLOAT_DTYPES, ids=lambda d: d.name)
def test_example_signed_zeros(backend, dtype):
    require_dtype(backend, dtype)
    x = as_dtype([-0.0, 0.0], dtype)
    for largest in (True, False):
        values, indices = metaltopk.topk(x, 1, largest=largest, backend=backend)
        assert ref.bits(values).tolist() == ref.bits(x[:1]).tolist(), largest  # -0.0, bit-exact
        assert indices.tolist() == [0]


def test_example_int8(backend):
    values, indices = metaltopk.topk(np.array([-128, 127, 0, -1], dtype=np.int8), 4,
                                     backend=backend)
    assert values.dtype == np.int8
    assert values.tolist() == [127, 0, -1, -128] and indices.tolist() == [1, 2, 3, 0]


@pytest.mark.parametrize("dtype", ref.FLOAT_DTYPES, ids=lambda d: d.name)
def test_example_zero_dim(backend, dtype):
    require_dtype(backend, dtype)
    x = np.array(3.5, dtype=dtype)
    for k in (0, 1):
        for dim in (0, -1):
            values, indices = metaltopk.topk(x, k, dim=dim, backend=backend)
            assert values.shape == () and indices.shape == () and indices.dtype == np.int64
            assert float(values) == 3.5 and int(indices) == 0


# ---- rules 1-8, swept -----------------------------------------------------------------------

SWEEP_SIZES = (list(range(1, 41)) + [63, 64, 65, 127, 128, 129, 255, 256, 257, 511, 512, 513,
                                     1023, 1024, 1025, 2047, 2048, 2049, 4095, 4096, 4097,
                                     8191, 8192, 8193])


@pytest.mark.parametrize("kind", ["spread", "ties", "specials"])
@pytest.mark.parametrize("dtype", ref.ALL_DTYPES, ids=DTYPE_IDS)
def test_size_sweep(backend, dtype, kind):
    """Sizes and k straddling every algorithm switch point, 3 rows each."""
    require_dtype(backend, dtype)
    rng = np.random.default_rng([ref.ALL_DTYPES.index(dtype), len(kind)])
    for n in SWEEP_SIZES:
        x = ref.random_values(rng, (3, n), dtype, kind)
        for largest in (True, False):
            order = ref.stable_order(x, -1, largest)
            for k in k_choices(n):
                assert_topk(x, k, -1, largest, backend, order)


LARGE_CASES = [
    # (n, rows, dtypes, kinds, ks)
    (2**17 + 3, 2, ref.ALL_DTYPES, ("spread", "specials"), (1, 8, 100, 1024, 4097, 2**17 + 3)),
    (2**17 + 3, 1, [np.dtype(np.float32), np.dtype(np.int64)], ("ties",), (1, 17, 1024, 40000)),
    (2**21, 1, [np.dtype(np.float32), ref.BFLOAT16, np.dtype(np.int8)], ("spread", "specials"),
     (1, 50, 2048, 70000)),
]


@pytest.mark.parametrize("n,rows,dtypes,kinds,ks", LARGE_CASES,
                         ids=["2^17+3", "2^17+3-one-row", "2^21"])
def test_large_rows(backend, n, rows, dtypes, kinds, ks):
    rng = np.random.default_rng(n)
    for dtype in dtypes:
        if backend in ("metal", "mpsgraph") and dtype == np.float64:
            continue
        for kind in kinds:
            x = ref.random_values(rng, (rows, n), dtype, kind)
            for largest in (True, False):
                order = ref.stable_order(x, -1, largest)
                for k in ks:
                    assert_topk(x, k, -1, largest, backend, order)


WORKLOAD_SHAPES = [((4096, 256), 8, ref.BFLOAT16, -1), ((256, 4096), 8, ref.BFLOAT16, 0),
                   ((64, 151936), 50, np.dtype(np.float32), -1),
                   ((8, 151936), 1024, np.dtype(np.float32), -1)]


@pytest.mark.parametrize("shape,k,dtype,dim", WORKLOAD_SHAPES,
                         ids=["moe", "moe-dim0", "sampling", "sampling-k1024"])
def test_workload_shapes(backend, shape, k, dtype, dim):
    x = ref.random_values(np.random.default_rng(7), shape, dtype, "spread")
    assert_topk(x, k, dim, True, backend)


SHAPES = [(), (7,), (0,), (3, 0), (0, 3), (5, 6), (1, 9), (3, 4, 5, 6), (2, 1, 3, 1, 4),
          (2, 1, 2, 1, 2, 1, 2, 3)]


@pytest.mark.parametrize("dtype", ref.ALL_DTYPES, ids=DTYPE_IDS)
def test_shapes_and_every_dim(backend, dtype):
    """0-d to 8-d, empty dims, size-1 dims; every dim, negative ones too."""
    require_dtype(backend, dtype)
    rng = np.random.default_rng(11)
    for shape in SHAPES:
        x = ref.random_values(rng, shape, dtype, "specials")
        for dim in range(-max(x.ndim, 1), max(x.ndim, 1)):
            n = x.shape[dim] if x.ndim else 1
            for largest in (True, False):
                for k in sorted({0, 1, n // 2, n} & set(range(n + 1))):
                    assert_topk(x, k, dim, largest, backend)


def strided_views(rng, dtype):
    """(name, view) pairs covering every stride kind rule 6 names."""
    base2 = ref.random_values(rng, (24, 37), dtype, "specials")
    base4 = ref.random_values(rng, (4, 6, 5, 9), dtype, "specials")
    row = ref.random_values(rng, (37,), dtype, "specials")
    col = ref.random_values(rng, (24, 1), dtype, "specials")
    return [
        ("transpose", base2.T),
        ("transpose-4d", base4.transpose(2, 0, 3, 1)),
        ("negative", base2[::-1]),
        ("negative-both", base2[::-1, ::-2]),
        ("negative-4d", base4[::-1, :, ::-1, ::2]),
        ("step", base2[::3]),
        ("step-offset", base2[1::2, 2::3]),
        ("broadcast-rows", np.broadcast_to(row, (5, 37))),
        ("broadcast-along-dim", np.broadcast_to(col, (24, 7))),
        ("broadcast-4d", np.broadcast_to(base4[:, :1], (4, 6, 5, 9))),
        ("column", base2[:, 5]),
    ]


def awkward_byte_views(dtype):
    """Views numpy allows but the library cannot take directly: unaligned data, byte strides
    that are not whole elements, non-native byte order."""
    dtype = np.dtype(dtype)
    item = dtype.itemsize
    if item == 1:  # every byte address is aligned and every byte order is native
        return []
    values = ref.random_values(np.random.default_rng(3), (40,), dtype, "specials")
    value_bytes = ref.bits(values).view(np.uint8)
    raw = np.zeros(item * 40 + 1, dtype=np.uint8)
    raw[1:] = value_bytes
    wide = np.zeros(40 * (item + 1), dtype=np.uint8)
    np.lib.stride_tricks.as_strided(wide, shape=(40, item), strides=(item + 1, 1))[...] = \
        value_bytes.reshape(40, item)
    views = [("unaligned", raw[1:].view(dtype)),
             ("odd-byte-stride", np.lib.stride_tricks.as_strided(
                 wide[:item].view(dtype), shape=(40,), strides=(item + 1,)))]
    if dtype != ref.BFLOAT16:  # ml_dtypes has no byte-swapped bfloat16
        views.append(("byteswapped", values.astype(dtype.newbyteorder("S"))))
    return views


@pytest.mark.parametrize("dtype", ref.ALL_DTYPES, ids=DTYPE_IDS)
def test_strided_views_match_contiguous_copies(backend, dtype):
    require_dtype(backend, dtype)
    rng = np.random.default_rng(5)
    views = strided_views(rng, dtype) + awkward_byte_views(dtype)
    for name, view in views:
        copy = np.ascontiguousarray(view).astype(view.dtype.newbyteorder("="))
        for dim in range(-view.ndim, view.ndim):
            n = view.shape[dim]
            for largest in (True, False):
                for k in sorted({0, 1, 3, n // 2, n} & set(range(n + 1))):
                    assert_topk(view, k, dim, largest, backend)
                    got = metaltopk.topk(view, k, dim, largest, backend=backend)
                    want = metaltopk.topk(copy, k, dim, largest, backend=backend)
                    np.testing.assert_array_equal(ref.bits(got[0]), ref.bits(want[0]), name)
                    np.testing.assert_array_equal(got[1], want[1], name)


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), ref.BFLOAT16, np.dtype(np.int8),
                                   np.dtype(np.float64)], ids=lambda d: d.name)
def test_strided_rows_of_every_length(backend, dtype):
    """Rows read across other rows (dim 0 of a matrix) and rows with a step, at lengths around
    the points where strided rows are read in pieces or tiles of several rows."""
    require_dtype(backend, dtype)
    rng = np.random.default_rng(13)
    for n in (31, 32, 33, 2047, 2048, 2049, 4097, 40000):
        columns = ref.random_values(rng, (n, 6), dtype, "specials")
        stepped = ref.random_values(rng, (3, 2 * n), dtype, "specials")[:, ::2]
        for x, dim in ((columns, 0), (columns[:, ::-2], 0), (stepped, 1)):
            for largest in (True, False):
                order = ref.stable_order(x, dim, largest)
                for k in sorted({1, 16, 17, 100, 1024, n} & set(range(n + 1))):
                    assert_topk(x, k, dim, largest, backend, order)


def test_device_transfer_path_on_cpu_context():
    """The GPU path of the package (input span uploaded with its strides, outputs downloaded)
    is checked here against a CPU context, whose device memory is host memory."""
    ctx = _abi.context("cpu")
    rng = np.random.default_rng(9)
    for dtype in (np.dtype(np.float32), ref.BFLOAT16, np.dtype(np.int64)):
        for name, view in strided_views(rng, dtype):
            for dim in range(view.ndim):
                n = view.shape[dim]
                for k in sorted({0, 1, n} & set(range(n + 1))):
                    got_values, got_indices = _topk.topk_via_device(
                        ctx, view, metaltopk.dtype_name(dtype), k, dim, 1, 1)
                    want_values, want_indices = ref.reference_topk(view, k, dim, True)
                    np.testing.assert_array_equal(got_indices, want_indices, name)
                    np.testing.assert_array_equal(ref.bits(got_values), ref.bits(want_values),
                                                  name)
    for k, dim in ((1, 0), (0, -1)):
        values, indices = _topk.topk_via_device(ctx, np.array(2.5), "float64", k, dim, 0, 1)
        assert values.shape == () and float(values) == 2.5 and int(indices) == 0
    values, indices = _topk.topk_via_device(ctx, np.zeros((3, 0)), "float64", 2, 0, 1, 1)
    assert values.shape == (2, 0) and indices.shape == (2, 0)


def test_empty_inputs(backend):
    values, indices = metaltopk.topk(np.empty(0, dtype=np.float32), 0, backend=backend)
    assert values.shape == (0,) and indices.shape == (0,) and indices.dtype == np.int64
    values, indices = metaltopk.topk(np.empty((3, 0), dtype=np.float32), 2, dim=0,
                                     backend=backend)
    assert values.shape == (2, 0) and indices.shape == (2, 0)
    values, indices = metaltopk.topk(np.empty((0, 5), dtype=np.int8), 3, dim=1, backend=backend)
    assert values.shape == (0, 3) and indices.shape == (0, 3)


def test_array_likes_and_scalars(backend):
    values, indices = metaltopk.topk([3, 1, 4, 1, 5], 3, backend=backend)
    assert values.tolist() == [5, 4, 3] and indices.tolist() == [4, 2, 0]
    values, indices = metaltopk.topk(np.float16(-0.0), 1, backend=backend)
    assert values.shape == () and ref.bits(values) == 0x8000 and int(indices) == 0


def test_default_backend_is_an_available_backend():
    default = metaltopk.default_backend()
    assert metaltopk.backends()[default]["available"]
    x = ref.random_values(np.random.default_rng(1), (6, 300), np.float32, "specials")
    got = metaltopk.topk(x, 17)
    want = metaltopk.topk(x, 17, backend=default)
    np.testing.assert_array_equal(ref.bits(got[0]), ref.bits(want[0]))
    np.testing.assert_array_equal(got[1], want[1])
    got = metaltopk.topk(x, 17, backend="default")
    np.testing.assert_array_equal(got[1], want[1])


def test_concurrent_calls(backend):
    """One context serves many threads; each thread's results stay its own."""
    rng = np.random.default_rng(21)
    inputs = [ref.random_values(rng, (16, 2000 + 37 * i), np.float32, "specials")
              for i in range(8)]
    expected = [ref.reference_topk(x, 40, -1, True) for x in inputs]
    failures = []

    def work(i):
        for _ in range(10):
            values, indices = metaltopk.topk(inputs[i], 40, backend=backend)
            if not (np.array_equal(indices, expected[i][1])
                    and np.array_equal(ref.bits(values), ref.bits(expected[i][0]))):
                failures.append(i)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


# ---- against torch.topk ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch", reason="torch is not installed (make test-deps)")


def to_torch(torch, x):
    x = np.ascontiguousarray(x)
    if x.dtype == ref.BFLOAT16:
        return torch.from_numpy(x.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(x)


def from_torch(torch, t, dtype):
    if dtype == ref.BFLOAT16:
        return t.view(torch.int16).numpy().view(ref.BFLOAT16)
    return t.numpy()


@pytest.mark.parametrize("dtype", ref.ALL_DTYPES, ids=DTYPE_IDS)
def test_reference_matches_torch_on_tie_free_data(torch, dtype):
    """The model itself: without ties or NaN torch's answer is unique, so it must agree."""
    rng = np.random.default_rng(4)
    n = 200
    rows = ref.distinct_values(rng, 5, n, dtype)
    for x, dim in ((rows, 1), (np.ascontiguousarray(rows.T), 0)):  # tie-free along dim
        for largest in (True, False):
            for k in (0, 1, 3, 77, n):
                want_values, want_indices = torch.topk(to_torch(torch, x), k, dim, largest, True)
                values, indices = ref.reference_topk(x, k, dim, largest)
                np.testing.assert_array_equal(indices, want_indices.numpy())
                np.testing.assert_array_equal(ref.bits(values),
                                              ref.bits(from_torch(torch, want_values, dtype)))


def nan_aware_equal(a, b, sort_dim=None):
    """Equal values with every NaN equal to every NaN; with sort_dim, as multisets along it."""
    with np.errstate(invalid="ignore"):  # signalling NaNs quieten
        a, b = a.astype(np.float64), b.astype(np.float64)
    if sort_dim is not None:
        a, b = np.sort(a, axis=sort_dim), np.sort(b, axis=sort_dim)
    return np.array_equal(a, b, equal_nan=True)


@pytest.mark.parametrize("kind", ["spread", "ties", "specials"])
@pytest.mark.parametrize("dtype", ref.ALL_DTYPES, ids=DTYPE_IDS)
def test_agrees_with_torch(torch, backend, dtype, kind):
    """A valid torch.topk result: the values of torch's CPU top-k position by position (NaN
    equal to NaN), values that are the input at the indices (bit-exact), indices unique along
    dim. On a CUDA machine also the values torch's CUDA top-k selects, as a multiset: its
    sorted output can place NaNs after numbers, so only its selection is comparable."""
    require_dtype(backend, dtype)
    on_cuda = backend == "cuda" and torch.cuda.is_available()
    rng = np.random.default_rng(len(kind))
    for shape in [(4, 300), (3, 5, 70), (2049,)]:
        x = ref.random_values(rng, shape, dtype, kind)
        for dim in range(x.ndim):
            n = x.shape[dim]
            for largest in (True, False):
                for k in sorted({0, 1, 8, n // 3, n} & set(range(n + 1))):
                    where = describe(x, k, dim, largest)
                    values, indices = metaltopk.topk(x, k, dim, largest, backend=backend)
                    want, _ = torch.topk(to_torch(torch, x), k, dim, largest, True)
                    want = from_torch(torch, want, dtype)
                    assert nan_aware_equal(values, want), where
                    if on_cuda:
                        want_cuda, _ = torch.topk(to_torch(torch, x).cuda(), k, dim, largest)
                        want_cuda = from_torch(torch, want_cuda.cpu(), dtype)
                        assert nan_aware_equal(values, want_cuda, sort_dim=dim), where + " cuda"
                    np.testing.assert_array_equal(ref.bits(ref.gather(x, indices, dim)),
                                                  ref.bits(values), err_msg=where)
                    ordered = np.sort(np.moveaxis(indices, dim, -1), axis=-1)
                    assert (np.diff(ordered, axis=-1) > 0).all(), where


# ---- errors ---------------------------------------------------------------------------------


def names_value(message, argument, value):
    return re.search(rf"\b{argument}\b", message) and str(value) in message


@pytest.mark.parametrize("shape,k,dim", [((5,), 6, -1), ((5,), -1, -1), ((0,), 1, 0),
                                         ((), 2, 0), ((3, 0), 1, 1), ((4, 3), 5, 0)])
def test_k_out_of_range_is_value_error(backend, shape, k, dim):
    with pytest.raises(ValueError) as error:
        metaltopk.topk(np.zeros(shape, dtype=np.float32), k, dim, backend=backend)
    assert names_value(str(error.value), "k", k), str(error.value)


@pytest.mark.parametrize("shape,dim", [((5,), 1), ((5,), -2), ((), 1), ((), -2),
                                       ((2, 3, 4, 5), 4), ((2, 3, 4, 5), -5), ((0,), 3)])
def test_dim_out_of_range_is_index_error(backend, shape, dim):
    with pytest.raises(IndexError) as error:
        metaltopk.topk(np.zeros(shape, dtype=np.float32), 0, dim, backend=backend)
    assert names_value(str(error.value), "dim", dim), str(error.value)


UNSUPPORTED_DTYPES = [np.bool_, np.complex64, np.complex128, np.uint16, np.uint32, np.uint64,
                      ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, np.longdouble, object,
                      "U3", "datetime64[s]", [("a", np.float32)]]


@pytest.mark.parametrize("dtype", UNSUPPORTED_DTYPES, ids=lambda d: str(np.dtype(d)))
def test_unsupported_dtype_is_type_error(backend, dtype):
    if np.dtype(dtype) == np.float64:  # longdouble is float64 on some platforms
        pytest.skip("longdouble is float64 here")
    with pytest.raises(TypeError):
        metaltopk.topk(np.zeros(4, dtype=dtype), 1, backend=backend)


def test_metal_rejects_float64():
    for name in ("metal", "mpsgraph"):
        if unavailable_reason(name):
            continue
        with pytest.raises(TypeError, match="float64"):
            metaltopk.topk(np.arange(4.0), 1, backend=name)
    if unavailable_reason("metal") and unavailable_reason("mpsgraph"):
        pytest.skip(unavailable_reason("metal"))


def test_too_many_dims_is_value_error(backend):
    with pytest.raises(ValueError, match="ndim"):
        metaltopk.topk(np.zeros((1,) * 9, dtype=np.float32), 1, backend=backend)


def test_k_and_dim_must_be_integers():
    with pytest.raises(TypeError):
        metaltopk.topk(np.arange(5.0), 1.0)
    with pytest.raises(TypeError):
        metaltopk.topk(np.arange(5.0), 1, dim=0.0)


def test_unavailable_backends_raise_runtime_error_naming_them():
    missing = [name for name in BACKENDS if unavailable_reason(name)]
    if not missing:
        pytest.skip("every backend is available on this machine")
    for name in missing:
        with pytest.raises(RuntimeError, match=name):
            metaltopk.topk(np.arange(5.0), 1, backend=name)


def test_unknown_backend_name_is_value_error():
    with pytest.raises(ValueError, match="tpu"):
        metaltopk.topk(np.arange(5.0), 1, backend="tpu")


def test_library_statuses_map_to_the_contract_exceptions():
    """Statuses numpy inputs cannot provoke, raised by real library calls."""
    lib, ffi = _ffi.lib, _ffi.ffi
    out = ffi.new("void**")
    with pytest.raises(MemoryError):
        _abi.check(lib.mtk_malloc(_abi.context("cpu").handle, 1 << 62, out))
    assert out[0] == ffi.NULL
    backend = ffi.new("mtk_backend*")
    with pytest.raises(ValueError, match="ctx"):
        _abi.check(lib.mtk_context_backend(ffi.NULL, backend))
    with pytest.raises(ValueError, match="overlap"):
        x = np.arange(10.0)
        tensor = _abi.describe(x.ctypes.data, "float64", (10,), (1,))
        values = _abi.describe(x.ctypes.data, "float64", (2,), (1,))
        indices = _abi.describe(np.zeros(2, np.int64).ctypes.data, "int64", (2,), (1,))
        _abi.check(lib.mtk_topk(_abi.context("cpu").handle, tensor, 2, 0, 1, 1, values,
                                 indices, ffi.NULL))


# ---- the module itself ----------------------------------------------------------------------


def test_every_header_function_is_exported_by_the_library():
    names = _ffi.exported_functions(_ffi.header_path().read_text())
    assert len(names) >= 20 and "mtk_topk" in names and "mtk_moe_route" in names
    missing = [name for name in names if not hasattr(_ffi.lib, name)]
    assert not missing


def test_version_matches_header():
    header = _ffi.header_path().read_text()
    parts = [re.search(rf"#define MTK_VERSION_{p} (\d+)", header).group(1)
             for p in ("MAJOR", "MINOR", "PATCH")]
    assert metaltopk.__version__ == ".".join(parts)


def test_backends_and_cache_stats():
    states = metaltopk.backends()
    assert set(states) == set(BACKENDS)
    assert states["cpu"] == {"compiled": True, "available": True}
    assert all(set(s) == {"compiled", "available"} for s in states.values())
    x = np.random.default_rng(0).standard_normal((32, 4096)).astype(np.float32)
    before = metaltopk.cache_stats("cpu")
    metaltopk.topk(x, 10, backend="cpu")
    metaltopk.topk(x, 10, backend="cpu")
    after = metaltopk.cache_stats("cpu")
    assert set(after) == {"hits", "misses", "entries", "scratch_bytes"}
    assert all(isinstance(v, int) and v >= 0 for v in after.values())
    assert after["hits"] + after["misses"] >= before["hits"] + before["misses"]
