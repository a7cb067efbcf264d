"""metaltopk.sampling against tests/sampling_reference.py (docs/CONTRACT.md, "Sampling
filters"): every filter and both samplers bit for bit, boundary cases, disabled filters, per-row
arguments, NaN and infinities, batch invariance, torch inputs and the argument errors."""

import numpy as np
import pytest

import metaltopk
from metaltopk import sampling

import sampling_reference as ref

try:
    from ml_dtypes import bfloat16
except ImportError:  # pragma: no cover
    bfloat16 = None

LOGIT_DTYPES = [np.float32, np.float16] + ([bfloat16] if bfloat16 is not None else [])


def bits(a):
    a = np.ascontiguousarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def random_probs(rng, rows, n, *, ties=False):
    if ties:
        p = rng.integers(0, 4, size=(rows, n)).astype(np.float32)
    else:
        p = rng.random((rows, n), dtype=np.float32) ** 3
    p /= np.maximum(p.sum(axis=1, keepdims=True), 1e-30)
    return p.astype(np.float32)


def random_logits(rng, rows, n, dtype=np.float32, *, ties=False):
    if ties:
        x = rng.integers(-3, 3, size=(rows, n)).astype(np.float32)
    else:
        x = (rng.standard_normal((rows, n)) * 4).astype(np.float32)
    return x.astype(dtype)


# ---- the filters -------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", LOGIT_DTYPES)
@pytest.mark.parametrize("ties", [False, True])
def test_top_k_mask_logits_matches_reference(dtype, ties):
    rng = np.random.default_rng(1)
    logits = random_logits(rng, 12, 37, dtype, ties=ties)
    logits[0, [3, 9]] = np.nan
    logits[1, 5] = np.inf
    logits[2, :] = -np.inf
    logits[3, 7] = -0.0
    top_k = rng.integers(-2, 40, size=12)
    got = sampling.top_k_mask_logits(logits, top_k.astype(np.int64))
    assert got.dtype == logits.dtype
    for r in range(12):
        want = ref.mask_logits(logits[r], int(top_k[r]))
        np.testing.assert_array_equal(bits(got[r]), bits(want), err_msg=f"row {r}")


def test_top_k_mask_logits_examples():
    x = np.array([[1, np.nan, 2, 3, 3], [0, 0, 0, 0, 1]], np.float32)
    got = sampling.top_k_mask_logits(x, 2)
    np.testing.assert_array_equal(got, [[-np.inf, np.nan, -np.inf, 3, -np.inf],
                                        [0, -np.inf, -np.inf, -np.inf, 1]])


@pytest.mark.parametrize("ties", [False, True])
def test_renorm_probs_match_reference(ties):
    rng = np.random.default_rng(2)
    probs = random_probs(rng, 10, 41, ties=ties)
    probs[0, 4] = np.nan
    probs[1, :3] = -1
    top_k = rng.integers(-1, 45, size=10)
    top_p = rng.choice([0.0, 0.1, 0.5, 0.9, 0.99, 1.0, -0.5], size=10).astype(np.float32)
    min_p = rng.choice([0.0, 0.05, 0.3, 1.0, 2.0], size=10).astype(np.float32)
    for function, values, option in ((sampling.top_k_renorm_probs, top_k, "top_k"),
                                     (sampling.top_p_renorm_probs, top_p, "top_p"),
                                     (sampling.min_p_renorm_probs, min_p, "min_p")):
        got = function(probs, values)
        assert got.dtype == np.float32
        for r in range(10):
            value = values[r].item()
            want = ref.renorm_probs(probs[r], **{option: value})
            np.testing.assert_array_equal(bits(got[r]), bits(want),
                                          err_msg=f"{option} = {value}, row {r}")


def test_renorm_boundaries():
    p = np.array([[0.5, 0.25, 0.25, 0.0]], np.float32)
    # 0.5 + 0.25 reaches 0.75 exactly: two tokens, the tie at 0.25 to the lower index.
    np.testing.assert_array_equal(sampling.top_p_renorm_probs(p, 0.75),
                                  np.float32([[2 / 3, 1 / 3, 0, 0]]))
    np.testing.assert_array_equal(sampling.top_p_renorm_probs(p, 0.5), [[1, 0, 0, 0]])
    np.testing.assert_array_equal(sampling.top_p_renorm_probs(p, 0.0), [[1, 0, 0, 0]])
    np.testing.assert_array_equal(sampling.top_k_renorm_probs(p, 2),
                                  np.float32([[2 / 3, 1 / 3, 0, 0]]))
    # min_p: p >= 0.5 * 0.5 keeps both 0.25 (equality keeps).
    np.testing.assert_array_equal(sampling.min_p_renorm_probs(p, 0.5), [[0.5, 0.25, 0.25, 0]])
    # Unnormalised rows are renormalised.
    np.testing.assert_array_equal(sampling.top_k_renorm_probs(np.float32([[3, 1, 0]]), 1),
                                  [[1, 0, 0]])


# ---- the samplers ------------------------------------------------------------------------------


def random_options(rng, rows, n):
    return dict(top_k=rng.integers(-1, n + 2, size=rows),
                top_p=rng.choice([0.2, 0.6, 0.9, 1.0, np.nan], size=rows).astype(np.float32),
                min_p=rng.choice([0.0, 0.01, 0.2, 0.7], size=rows).astype(np.float32))


@pytest.mark.parametrize("ties", [False, True])
def test_sample_matches_reference(ties):
    rng = np.random.default_rng(3)
    rows, n = 40, 29
    probs = random_probs(rng, rows, n, ties=ties)
    probs[0] = np.nan
    probs[1, 3] = np.inf
    uniforms = rng.random(rows, dtype=np.float32)
    uniforms[:4] = [0.0, 1.0, np.nan, -1.0]
    options = random_options(rng, rows, n)
    got = sampling.sample(probs, uniforms, **options)
    assert got.dtype == np.int32
    for r in range(rows):
        row_options = {name: value[r].item() for name, value in options.items()}
        want = ref.sample(probs[r], uniforms[r], **row_options)
        assert got[r] == want, (r, row_options, uniforms[r])


@pytest.mark.parametrize("dtype", LOGIT_DTYPES)
def test_sample_from_logits_matches_reference(dtype):
    rng = np.random.default_rng(4)
    rows, n = 40, 33
    logits = random_logits(rng, rows, n, dtype, ties=dtype != np.float32)
    logits[0, 2] = np.nan
    logits[1, [4, 8]] = np.inf
    logits[2] = -np.inf
    # Subnormal logits count as zeros, also where a tiny temperature would make them large.
    logits[3:6, :4] = np.float32([1e-40, -1e-40, 5e-39, 0]).astype(dtype)
    uniforms = rng.random(rows, dtype=np.float32)
    options = random_options(rng, rows, n)
    temperature = rng.choice([1.0, 0.5, 2.0, 0.0, -1.0, 1e-3, 30.0, 1e-30, 3e38],
                             size=rows).astype(np.float32)
    temperature[3:6] = [1e-30, 3e38, 1e-38]
    got = sampling.sample_from_logits(logits, uniforms, temperature=temperature, **options)
    for r in range(rows):
        row_options = {name: value[r].item() for name, value in options.items()}
        want = ref.sample_from_logits(logits[r], uniforms[r], temperature[r].item(),
                                      **row_options)
        assert got[r] == want, (r, row_options, temperature[r], uniforms[r])


def test_sample_uniform_boundaries():
    p = np.array([[0.5, 0.5]] * 3, np.float32)
    # The first token whose cumulative mass exceeds u * total: u = 0.5 is not exceeded by 0.5.
    u = np.float32([0.5, np.nextafter(np.float32(0.5), np.float32(0)), 0.0])
    np.testing.assert_array_equal(sampling.sample(p, u), [1, 0, 0])
    # Zero masses are never drawn, even at u = 0 or u >= 1.
    q = np.array([[0, 0.3, 0, 0.7, 0]] * 2, np.float32)
    np.testing.assert_array_equal(sampling.sample(q, np.float32([0, 1])), [1, 3])


def test_degenerate_rows():
    probs = np.array([[np.nan] * 4, [0.0] * 4, [-1, -np.inf, 0, np.nan]], np.float32)
    np.testing.assert_array_equal(sampling.sample(probs, np.float32([0.3] * 3)), [0, 0, 0])
    np.testing.assert_array_equal(sampling.top_p_renorm_probs(probs, 0.5), np.zeros((3, 4)))
    logits = np.array([[np.nan] * 4, [-np.inf] * 4, [1, np.nan, 2, 3], [1, np.inf, 2, np.inf]],
                      np.float32)
    tokens = sampling.sample_from_logits(logits, np.float32([0.9] * 4), top_k=[0, 0, 1, 0])
    # All NaN: the first NaN; all -inf: index 0; top-1 a NaN: that NaN; two +inf share the mass.
    np.testing.assert_array_equal(tokens, [0, 0, 1, 3])
    greedy = sampling.sample_from_logits(logits, np.float32([0.9] * 4), temperature=0.0)
    np.testing.assert_array_equal(greedy, [0, 0, 1, 1])


def test_subnormal_logits_count_as_zero():
    """Even where a tiny temperature would scale them to ordinary numbers."""
    u = np.linspace(0, 1, 41, dtype=np.float32)
    rows = len(u)
    subnormal = np.tile(np.float32([1e-39, 0, -3e-39, 0]), (rows, 1))
    zeros = np.zeros((rows, 4), np.float32)
    for temperature in (1.0, 1e-37):
        got = sampling.sample_from_logits(subnormal, u, temperature=temperature)
        np.testing.assert_array_equal(got, sampling.sample_from_logits(zeros, u))
    # Four equal masses: the token is floor(4u) (0.25 is not exceeded by the first quarter).
    np.testing.assert_array_equal(sampling.sample_from_logits(zeros, u),
                                  np.minimum(np.floor(u * 4), 3).astype(np.int32))


def test_disabled_filters_keep_the_row():
    rng = np.random.default_rng(5)
    probs = random_probs(rng, 6, 17)
    logits = random_logits(rng, 6, 17)
    u = rng.random(6, dtype=np.float32)
    plain = sampling.sample(probs, u)
    plain_logits = sampling.sample_from_logits(logits, u)
    for options in (dict(top_k=0), dict(top_k=-3), dict(top_k=17), dict(top_k=100),
                    dict(top_p=1.0), dict(top_p=1.5), dict(top_p=float("nan")),
                    dict(min_p=0.0), dict(min_p=-1.0), dict(min_p=float("nan")),
                    dict(top_k=0, top_p=1.0, min_p=0.0)):
        np.testing.assert_array_equal(sampling.sample(probs, u, **options), plain, str(options))
        np.testing.assert_array_equal(sampling.sample_from_logits(logits, u, **options),
                                      plain_logits, str(options))
    np.testing.assert_array_equal(sampling.top_k_mask_logits(logits, 0), logits)
    np.testing.assert_array_equal(sampling.top_p_renorm_probs(probs, 1.0),
                                  sampling.top_k_renorm_probs(probs, 0))


def test_per_row_arguments_equal_scalars():
    rng = np.random.default_rng(6)
    rows, n = 8, 50
    logits = random_logits(rng, rows, n)
    u = rng.random(rows, dtype=np.float32)
    top_k = rng.integers(1, 20, size=rows).astype(np.int32)
    top_p = rng.random(rows, dtype=np.float32)
    min_p = (rng.random(rows, dtype=np.float32) * 0.3).astype(np.float32)
    temperature = (rng.random(rows, dtype=np.float32) + 0.2).astype(np.float32)
    batch = sampling.sample_from_logits(logits, u, temperature=temperature, top_k=top_k,
                                        top_p=top_p, min_p=min_p)
    for r in range(rows):
        alone = sampling.sample_from_logits(
            logits[r:r + 1], u[r:r + 1], temperature=float(temperature[r]), top_k=int(top_k[r]),
            top_p=float(top_p[r]), min_p=float(min_p[r]))
        assert alone[0] == batch[r]


@pytest.mark.parametrize("operation", ["mask", "top_p", "sample", "sample_from_logits"])
def test_batch_invariance(operation):
    """A row alone gives the bits it gives at any position of any batch."""
    rng = np.random.default_rng(7)
    n = 3001
    row_logits = random_logits(rng, 1, n)
    row_probs = random_probs(rng, 1, n)

    def run(batch_logits, batch_probs, u):
        if operation == "mask":
            return sampling.top_k_mask_logits(batch_logits, 100)
        if operation == "top_p":
            return sampling.top_p_renorm_probs(batch_probs, 0.9)
        if operation == "sample":
            return sampling.sample(batch_probs, u, top_k=500, top_p=0.95, min_p=0.001)
        return sampling.sample_from_logits(batch_logits, u, temperature=0.8, top_k=700,
                                           top_p=0.9)

    u = np.float32([0.637])
    alone = run(row_logits, row_probs, u)
    for rows, position in ((2, 0), (5, 4), (33, 17), (64, 63)):
        batch_logits = random_logits(rng, rows, n)
        batch_probs = random_probs(rng, rows, n)
        batch_logits[position] = row_logits[0]
        batch_probs[position] = row_probs[0]
        batch_u = rng.random(rows, dtype=np.float32)
        batch_u[position] = u[0]
        got = run(batch_logits, batch_probs, batch_u)
        np.testing.assert_array_equal(bits(got[position]), bits(alone[0]),
                                      err_msg=f"{rows} rows, position {position}")


def test_strided_inputs():
    rng = np.random.default_rng(8)
    logits = random_logits(rng, 9, 40)
    view = logits[::2, ::-3]
    np.testing.assert_array_equal(sampling.top_k_mask_logits(view, 4),
                                  sampling.top_k_mask_logits(np.ascontiguousarray(view), 4))
    u = rng.random(5, dtype=np.float32)
    np.testing.assert_array_equal(
        sampling.sample_from_logits(view, u, top_p=0.7),
        sampling.sample_from_logits(np.ascontiguousarray(view), u, top_p=0.7))


def test_generators_draw_the_uniforms():
    rng = np.random.default_rng(9)
    probs = random_probs(rng, 16, 30)
    a = sampling.sample(probs, generator=np.random.default_rng(123))
    b = sampling.sample(probs, np.random.default_rng(123))
    c = sampling.sample(probs, np.random.default_rng(123).random(16, dtype=np.float32))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)


# ---- torch ------------------------------------------------------------------------------------


def test_torch_cpu_matches_numpy():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(10)
    logits = random_logits(rng, 6, 25)
    probs = random_probs(rng, 6, 25)
    u = rng.random(6, dtype=np.float32)
    top_k = rng.integers(1, 25, size=6)
    masked = sampling.top_k_mask_logits(torch.from_numpy(logits), torch.from_numpy(top_k))
    assert isinstance(masked, torch.Tensor)
    np.testing.assert_array_equal(masked.numpy(), sampling.top_k_mask_logits(logits, top_k))
    renorm = sampling.top_p_renorm_probs(torch.from_numpy(probs), 0.8)
    np.testing.assert_array_equal(renorm.numpy(), sampling.top_p_renorm_probs(probs, 0.8))
    tokens = sampling.sample(torch.from_numpy(probs), torch.from_numpy(u), top_k=5,
                             index_dtype=torch.int64)
    assert tokens.dtype == torch.int64
    np.testing.assert_array_equal(tokens.numpy(), sampling.sample(probs, u, top_k=5))
    bf16 = torch.from_numpy(logits).to(torch.bfloat16)
    got = sampling.sample_from_logits(bf16, torch.from_numpy(u), temperature=0.7)
    want = sampling.sample_from_logits(logits.astype(bfloat16), u, temperature=0.7)
    np.testing.assert_array_equal(got.numpy(), want)


def test_torch_generator():
    torch = pytest.importorskip("torch")
    probs = torch.from_numpy(random_probs(np.random.default_rng(11), 7, 20))
    a = sampling.sample(probs, torch.Generator().manual_seed(5))
    b = sampling.sample(probs, torch.rand(7, generator=torch.Generator().manual_seed(5)))
    assert torch.equal(a, b)


def test_torch_arguments_on_another_kind_are_rejected():
    torch = pytest.importorskip("torch")
    probs = torch.from_numpy(random_probs(np.random.default_rng(12), 3, 8))
    with pytest.raises(ValueError, match="top_p must be a tensor on the input's device"):
        sampling.sample(probs, torch.rand(3), top_p=np.float32([0.5] * 3))


# ---- errors ------------------------------------------------------------------------------------

PROBS = np.full((2, 4), 0.25, np.float32)
U = np.float32([0.5, 0.5])


@pytest.mark.parametrize("call, error, message", [
    (lambda: sampling.sample(PROBS, U, top_p=np.float32([0.5] * 3)), ValueError,
     "top_p.sizes[0] = 3 does not match the 2 rows"),
    (lambda: sampling.sample(PROBS, U, top_k=2.0), TypeError, "top_k must be an integer"),
    (lambda: sampling.sample(PROBS, U, top_k=np.float32([1, 2])), TypeError,
     "top_k.dtype = float32 must be int32 or int64"),
    (lambda: sampling.sample(PROBS, U.astype(np.float64)), TypeError,
     "uniforms.dtype = float64 must be float32"),
    (lambda: sampling.sample(PROBS, np.float32([0.5])), ValueError,
     "uniforms.sizes[0] = 1 does not match the 2 rows"),
    (lambda: sampling.sample(PROBS), ValueError, "uniforms is required"),
    (lambda: sampling.sample(PROBS.astype(np.float16), U), TypeError,
     "probs.dtype = float16 must be float32"),
    (lambda: sampling.top_k_mask_logits(PROBS.astype(np.int32), 1), TypeError,
     "logits.dtype = int32 is not float32, float16 or bfloat16"),
    (lambda: sampling.top_k_mask_logits(PROBS[0], 1), ValueError, "logits.ndim = 1 must be 2"),
    (lambda: sampling.sample(PROBS, U, min_p="0.1"), TypeError, "min_p must be a real number"),
    (lambda: sampling.sample_from_logits(PROBS, U, temperature=np.float32([1])), ValueError,
     "temperature.sizes[0] = 1"),
    (lambda: sampling.sample(PROBS, U, index_dtype=np.int16), TypeError,
     "index_dtype = <class 'numpy.int16'> must be int32 or int64"),
    (lambda: sampling.sample(PROBS, U, backend="cuda"), RuntimeError,
     "numpy inputs run on the cpu backend"),
])
def test_bad_arguments(call, error, message):
    with pytest.raises(error) as info:
        call()
    assert message in str(info.value)


def test_module_is_exported():
    assert metaltopk.sampling is sampling
    assert set(sampling.__all__) == {"top_k_mask_logits", "top_k_renorm_probs",
                                     "top_p_renorm_probs", "min_p_renorm_probs", "sample",
                                     "sample_from_logits"}
