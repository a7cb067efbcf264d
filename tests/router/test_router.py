"""metaltopk.moe_route on every available backend against the float64 reference, the top-k
contract and torch's composites; and every argument error."""

import itertools

import numpy as np
import pytest

import metaltopk
import router_checks as rc

torch = pytest.importorskip("torch")
from torch_routers import torch_deepseek_v3, torch_softmax_composite  # noqa: E402

BACKENDS = rc.available_backends()
EXPERTS = [8, 64, 128, 256, 512]
KS = [1, 2, 8, 10]
SCORINGS = ["softmax", "sigmoid", "none"]


def _cases():
    for experts, k in itertools.product(EXPERTS, KS):
        if k > experts:
            continue
        groupings = [None] + rc.GROUPINGS[experts]
        for grouping in groupings:
            if grouping is not None and k > grouping[1] * (experts // grouping[0]):
                continue
            yield experts, k, grouping


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("experts,k,grouping", list(_cases()))
@pytest.mark.parametrize("scoring", SCORINGS)
@pytest.mark.parametrize("with_bias", [False, True])
def test_matches_reference(backend, experts, k, grouping, scoring, with_bias):
    """Every dtype, value kind and layout of one configuration, in one test."""
    rng = np.random.default_rng([experts, k, hash(grouping) % 1000, len(scoring), with_bias])
    n_group, topk_group = grouping if grouping is not None else (None, None)
    for dtype, kind, layout in itertools.product(rc.LOGIT_DTYPES, ["normal", "ties"],
                                                 ["contiguous", "strided"]):
        logits = rc.make_logits(rng, 24, experts, dtype, kind, layout)
        bias = rc.make_bias(rng, experts, kind) if with_bias else None
        renormalize = bool(rng.integers(2))
        scale = 1.0 if renormalize else 2.5
        weights, ids = metaltopk.moe_route(
            logits, k, scoring=scoring, bias=bias, n_group=n_group, topk_group=topk_group,
            renormalize=renormalize, scale=scale, backend=backend)
        rc.check_route(weights, ids, logits, k, scoring=scoring, bias=bias, n_group=n_group,
                       topk_group=topk_group, renormalize=renormalize, scale=scale)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("dtype", rc.LOGIT_DTYPES, ids=str)
@pytest.mark.parametrize("scoring", SCORINGS)
@pytest.mark.parametrize("layout", ["contiguous", "strided", "transposed"])
def test_plain_ids_are_the_topk_contracts(backend, dtype, scoring, layout):
    """Without bias and groups the ids are metaltopk.topk's indices bit for bit, NaN, infinities,
    signed zeros and ties included, whatever the scoring does to those values."""
    rng = np.random.default_rng(7)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 1.0, -1.0, 30.0])
    for experts, k in [(8, 3), (64, 8), (256, 8), (512, 10), (200, 7)]:
        values = rng.choice(specials, size=(16, experts))
        values[::3] = rng.integers(-2, 3, size=values[::3].shape)
        logits = _with_layout(values.astype(dtype), layout)
        weights, ids = metaltopk.moe_route(logits, k, scoring=scoring, backend=backend)
        _, expected = metaltopk.topk(np.ascontiguousarray(logits), k, backend="cpu")
        np.testing.assert_array_equal(ids, expected)
        rc.check_route(weights, ids, logits, k, scoring=scoring)


def _with_layout(values, layout):
    tokens, experts = values.shape
    if layout == "contiguous":
        return values
    if layout == "strided":
        wide = np.zeros((2 * tokens, 2 * experts + 1), dtype=values.dtype)
        wide[::2, 1::2] = values
        return wide[::2, 1::2]
    return np.ascontiguousarray(values.T).T


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("scoring", SCORINGS)
@pytest.mark.parametrize("grouped", [False, True])
def test_special_values_with_bias(backend, scoring, grouped):
    """NaN and infinities on the biased path: NaN scores rank first, softmax turns a whole token
    NaN; the reference decides ids and weights exactly the same way."""
    rng = np.random.default_rng(11)
    logits = (rng.standard_normal((32, 64)) * 2).astype(np.float32)
    flat = logits.reshape(-1)
    spots = rng.choice(flat.size, size=40, replace=False)
    flat[spots[:15]] = np.nan
    flat[spots[15:30]] = np.inf
    flat[spots[30:]] = -np.inf
    bias = rc.make_bias(rng, 64)
    n_group, topk_group = (8, 3) if grouped else (None, None)
    weights, ids = metaltopk.moe_route(logits, 8, scoring=scoring, bias=bias, n_group=n_group,
                                       topk_group=topk_group, backend=backend)
    rc.check_route(weights, ids, logits, 8, scoring=scoring, bias=bias, n_group=n_group,
                   topk_group=topk_group)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_index_dtypes_and_empty(backend, index_dtype):
    rng = np.random.default_rng(3)
    logits = rc.make_logits(rng, 5, 32, np.float32)
    weights, ids = metaltopk.moe_route(logits, 4, index_dtype=index_dtype, backend=backend)
    assert ids.dtype == index_dtype
    rc.check_route(weights, ids, logits, 4)
    weights, ids = metaltopk.moe_route(np.zeros((0, 32), np.float32), 4,
                                       index_dtype=index_dtype, backend=backend)
    assert weights.shape == (0, 4) and ids.shape == (0, 4) and ids.dtype == index_dtype


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("experts", [3, 100, 700, 2000])
def test_unusual_expert_counts(backend, experts):
    """Counts that fill no warp exactly, and counts beyond the register kernel's 512."""
    rng = np.random.default_rng(experts)
    logits = rc.make_logits(rng, 9, experts, rc.BFLOAT16)
    k = min(experts, 6)
    for kwargs in [{}, {"scoring": "sigmoid", "bias": rc.make_bias(rng, experts)}]:
        weights, ids = metaltopk.moe_route(logits, k, backend=backend, **kwargs)
        rc.check_route(weights, ids, logits, k, **kwargs)
    if experts % 4 == 0:
        kwargs = {"n_group": 4, "topk_group": 2, "bias": rc.make_bias(rng, experts)}
        weights, ids = metaltopk.moe_route(logits, k, backend=backend, **kwargs)
        rc.check_route(weights, ids, logits, k, **kwargs)


# ---- against torch ------------------------------------------------------------------------


def _exact_ties_at_top(sorted_scores, k):
    """Whether equal float32 scores meet among ranks 0..k, where torch's tie order (which it
    leaves unspecified) decides."""
    s = sorted_scores[:, :k + 1]
    return (s[:, 1:] == s[:, :-1]).any(axis=1)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("experts,k", [(8, 2), (64, 8), (128, 8), (256, 8), (512, 10)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_matches_torch_softmax_composite(backend, experts, k, dtype):
    gen = torch.Generator().manual_seed(experts * 10 + k)
    logits = torch.randn(64, experts, generator=gen).to(dtype)
    expected_w, expected_ids = torch_softmax_composite(logits, k)
    array = logits.float().numpy().astype(rc.BFLOAT16 if dtype == torch.bfloat16 else np.float32)
    weights, ids = metaltopk.moe_route(array, k, backend=backend)
    np.testing.assert_allclose(weights, expected_w.numpy(), rtol=rc.weight_rtol(k), atol=1e-30)
    all_scores = torch.softmax(logits.float(), dim=-1).sort(dim=-1, descending=True)[0].numpy()
    tied = _exact_ties_at_top(all_scores, min(k, experts - 1))
    np.testing.assert_array_equal(ids[~tied], expected_ids.numpy()[~tied])
    # Where torch faced exact ties, the chosen scores must still be the same multiset.
    scores = torch.softmax(logits.float(), dim=-1).numpy()
    torch_ids = expected_ids.numpy().astype(np.int64)
    np.testing.assert_array_equal(np.take_along_axis(scores, ids.astype(np.int64), 1),
                                  np.take_along_axis(scores, torch_ids, 1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("experts,k,n_group,topk_group", [(256, 8, 8, 4), (64, 6, 8, 3),
                                                          (128, 8, 4, 2), (512, 10, 16, 4)])
def test_matches_torch_deepseek_v3(backend, experts, k, n_group, topk_group):
    gen = torch.Generator().manual_seed(experts + k)
    logits = torch.randn(128, experts, generator=gen)
    bias = torch.randn(experts, generator=gen) * 0.1
    expected_w, expected_ids = torch_deepseek_v3(logits, k, bias, n_group, topk_group, 2.5)
    array, bias_array = logits.numpy(), bias.numpy()
    weights, ids = metaltopk.moe_route(array, k, scoring="sigmoid", bias=bias_array,
                                       n_group=n_group, topk_group=topk_group, scale=2.5,
                                       backend=backend)
    routes = rc.ref.route(array.astype(np.float64), k, "sigmoid", bias_array, n_group,
                          topk_group, True, 2.5)
    clear = np.array([not r.near_tie for r in routes])
    assert clear.mean() > 0.9  # the comparison below must cover most tokens
    np.testing.assert_array_equal(ids[clear], expected_ids.numpy()[clear])
    np.testing.assert_allclose(weights[clear], expected_w.numpy()[clear], rtol=rc.weight_rtol(k))


# ---- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_argument_errors(backend):
    logits = np.zeros((4, 16), np.float32)
    bias = np.zeros(16, np.float32)

    def route(**kwargs):
        args = {"k": 2, "backend": backend, **kwargs}
        return metaltopk.moe_route(args.pop("logits", logits), args.pop("k"), **args)

    for k in (0, -1, 17):
        with pytest.raises(ValueError, match="k"):
            route(k=k)
    with pytest.raises(ValueError, match="n_group"):
        route(n_group=3, topk_group=1)
    with pytest.raises(ValueError, match="topk_group"):
        route(n_group=4, topk_group=5)
    with pytest.raises(ValueError, match="topk_group"):
        route(n_group=4, topk_group=0)
    with pytest.raises(ValueError, match="kept groups"):
        route(k=9, n_group=4, topk_group=2)
    with pytest.raises(ValueError, match="bias"):
        route(bias=np.zeros(15, np.float32))
    with pytest.raises(ValueError, match="bias"):
        route(bias=np.zeros((1, 16), np.float32))
    with pytest.raises(TypeError, match="bias"):
        route(bias=bias.astype(np.float64))
    with pytest.raises(TypeError):
        route(logits=logits.astype(np.int32))
    with pytest.raises(TypeError, match="logits"):
        route(logits=logits.astype(np.float64))
    with pytest.raises(ValueError, match="ndim"):
        route(logits=np.zeros(16, np.float32))
    with pytest.raises(ValueError, match="scoring"):
        route(scoring="relu")
    for index_dtype in (np.int16, np.float32):
        with pytest.raises(ValueError, match="ids"):
            route(index_dtype=index_dtype)


def _tensor(ffi, data, dtype, shape, strides=None):
    t = ffi.new("mtk_tensor*")
    t.data = ffi.cast("void*", data)
    t.dtype = dtype
    t.ndim = len(shape)
    if strides is None:
        strides = [int(np.prod(shape[d + 1:])) for d in range(len(shape))]
    for d, (size, stride) in enumerate(zip(shape, strides)):
        t.sizes[d], t.strides[d] = size, stride
    return t


def test_output_errors_at_the_c_abi():
    """Outputs are the caller's at the C level: wrong shapes, dtypes and overlaps are rejected
    with nothing written."""
    from metaltopk._abi import context
    from metaltopk._ffi import ffi, lib

    ctx = context("cpu")
    logits = np.random.default_rng(0).standard_normal((4, 16)).astype(np.float32)
    weights = np.full((4, 2), -7.0, np.float32)
    ids = np.full((4, 2), -7, np.int32)
    params = ffi.new("mtk_router_params*", {"struct_size": ffi.sizeof("mtk_router_params"),
                                            "k": 2, "scoring": lib.MTK_SCORING_SOFTMAX,
                                            "renormalize": 1, "scale": 1.0})
    lt = _tensor(ffi, logits.ctypes.data, lib.MTK_FLOAT32, (4, 16))
    good_w = _tensor(ffi, weights.ctypes.data, lib.MTK_FLOAT32, (4, 2))
    good_i = _tensor(ffi, ids.ctypes.data, lib.MTK_INT32, (4, 2))

    def status(w, i):
        return lib.mtk_moe_route(ctx.handle, lt, params, w, i, ffi.NULL)

    bad_cases = [
        (_tensor(ffi, weights.ctypes.data, lib.MTK_FLOAT32, (4, 3)), good_i),  # shape
        (_tensor(ffi, weights.ctypes.data, lib.MTK_FLOAT32, (3, 2)), good_i),
        (_tensor(ffi, weights.ctypes.data, lib.MTK_FLOAT16, (4, 2)), good_i),  # weights dtype
        (good_w, _tensor(ffi, ids.ctypes.data, lib.MTK_INT32, (4, 1))),
        (good_w, _tensor(ffi, ids.ctypes.data, lib.MTK_FLOAT32, (4, 2))),      # ids dtype
        (good_w, _tensor(ffi, weights.ctypes.data, lib.MTK_INT32, (4, 2))),    # overlap
        (_tensor(ffi, logits.ctypes.data, lib.MTK_FLOAT32, (4, 2)), good_i),   # over the input
    ]
    for w, i in bad_cases:
        assert status(w, i) == lib.MTK_ERROR_INVALID_ARGUMENT, ffi.string(
            lib.mtk_last_error_message())
        assert (weights == -7.0).all() and (ids == -7).all()
    assert status(good_w, good_i) == lib.MTK_SUCCESS
    assert (ids >= 0).all() and (weights > 0).all()
