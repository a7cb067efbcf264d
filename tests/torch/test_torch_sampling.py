"""The sampling filters and sampler (docs/CONTRACT.md, "Sampling filters") on torch tensors:
metaltopk.sampling and the four torch ops eagerly on every device torch has here (CUDA cases run
where torch sees a GPU and the CUDA backend has the sampling kernels, and must equal the CPU's
results bit for bit), per-row tensors and scalars, the torch.Generator overload, the argument
errors on real and meta tensors, torch.library.opcheck, torch.compile with fullgraph,
torch.export and AOTInductor packages that call the C shim.

The CPU results themselves are checked against the independent model in
tests/test_sampling.py; here every torch result is compared exactly with the numpy path's and,
for a few rows, with the model.
"""

import os
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make test-deps)")
import metaltopk  # noqa: E402
from metaltopk import sampling  # noqa: E402
from metaltopk.torch import _sampling as torch_sampling  # noqa: E402
from metaltopk.torch import aoti_library_path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import sampling_reference as model  # noqa: E402
from aoti_packages import assert_calls_shims, compile_package, run_from_cpp  # noqa: E402

mask_op = torch.ops.metaltopk.mtk_top_k_mask_logits.default
renorm_op = torch.ops.metaltopk.mtk_renorm_probs.default
sample_op = torch.ops.metaltopk.mtk_sample.default
sample_from_logits_op = torch.ops.metaltopk.mtk_sample_from_logits.default


def cuda_runs_sampling():
    """Whether there is a CUDA device whose backend has the sampling kernels (a backend without
    them refuses by name: tests/sampling/test_sampling_refusal.cpp checks that)."""
    if not torch.cuda.is_available() or not metaltopk.backends()["cuda"]["available"]:
        return False
    try:
        sampling.sample(torch.ones(1, 4, device="cuda"), torch.zeros(1, device="cuda"))
    except RuntimeError as error:
        if "not implemented" in str(error):
            return False
        raise
    return True


CUDA = pytest.mark.skipif(not cuda_runs_sampling(),
                          reason="needs a CUDA device and the CUDA backend's sampling kernels")
DEVICES = ["cpu", pytest.param("cuda", marks=CUDA)]
LOGIT_DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.fixture(params=["compiled", "python"])
def sampling_path(request, monkeypatch):
    """Runs a test on the compiled torch fast path (adapters/torch/), then on the Python path."""
    if request.param == "python":
        monkeypatch.setattr(torch_sampling, "_fast_sampling", None)
    elif torch_sampling._fast_sampling is None:
        pytest.skip("the torch fast path was not built beside the library")
    return request.param


def test_make_test_runs_sampling_on_the_fast_path():
    if not os.environ.get("METALTOPK_EXPECT_TORCH_FAST_PATH"):
        pytest.skip("not run by `make test` with torch")
    assert torch_sampling._fast_sampling is not None


def same(a, b):
    """Exact equality, NaNs and signed zeros included, on the host."""
    a, b = a.cpu(), b.cpu()
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point:
        width = {2: torch.int16, 4: torch.int32}[a.element_size()]
        a, b = a.view(width), b.view(width)
    return torch.equal(a, b)


def assert_same(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert same(a, b), (a, b)


def to_numpy(t):
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        from ml_dtypes import bfloat16
        return t.view(torch.int16).numpy().view(bfloat16)
    return t.numpy()


def from_numpy(a):
    if a.dtype.name == "bfloat16":
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def random_logits(rows, n, dtype=torch.float32, seed=0, device="cpu"):
    """Logits with ties, NaN, infinities and a row of -inf."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, n, generator=generator) * 4
    x[::3] = x[::3].round()  # ties
    x[0, 1] = float("nan")
    if rows > 1:
        x[1, [2, 5]] = float("inf")
    if rows > 2:
        x[2] = float("-inf")
    return x.to(dtype).to(device)


def random_probs(rows, n, seed=0, device="cpu"):
    generator = torch.Generator().manual_seed(seed)
    p = torch.rand(rows, n, generator=generator) ** 3
    p[::4] = (p[::4] * 4).floor()  # ties
    p = p / p.sum(-1, keepdim=True).clamp_min(1e-30)
    p[0, 3] = float("nan")
    return p.to(device)


def per_row_arguments(rows, n, seed=0, device="cpu"):
    generator = torch.Generator().manual_seed(seed)
    choice = lambda values: torch.tensor(values)[torch.randint(len(values), (rows,),  # noqa: E731
                                                               generator=generator)]
    return dict(top_k=torch.randint(-1, n + 2, (rows,), generator=generator).to(device),
                top_p=choice([0.2, 0.6, 0.9, 1.0, float("nan")]).to(device),
                min_p=choice([0.0, 0.01, 0.2, 0.7]).to(device),
                temperature=choice([1.0, 0.5, 2.0, 0.0, 1e-3]).to(device))


# ---- eager ------------------------------------------------------------------------------------


@pytest.mark.usefixtures("sampling_path")
@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", LOGIT_DTYPES, ids=lambda d: str(d).split(".")[1])
def test_every_function_equals_the_cpu_path(dtype, device):
    """Each function on the device, with per-row tensors and with scalars, equals the numpy
    path (the CPU backend) bit for bit."""
    rows, n = 37, 300
    logits = random_logits(rows, n, dtype, seed=1)
    probs = random_probs(rows, n, seed=2)
    uniforms = torch.rand(rows, generator=torch.Generator().manual_seed(3))
    per_row = per_row_arguments(rows, n, seed=4)
    on = lambda t: t.to(device)  # noqa: E731
    cases = [
        (sampling.top_k_mask_logits, (logits,), dict(top_k=per_row["top_k"])),
        (sampling.top_k_mask_logits, (logits,), dict(top_k=50)),
        (sampling.top_k_renorm_probs, (probs,), dict(top_k=per_row["top_k"])),
        (sampling.top_p_renorm_probs, (probs,), dict(top_p=per_row["top_p"])),
        (sampling.top_p_renorm_probs, (probs,), dict(top_p=0.8)),
        (sampling.min_p_renorm_probs, (probs,), dict(min_p=per_row["min_p"])),
        (sampling.sample, (probs, uniforms),
         {name: per_row[name] for name in ("top_k", "top_p", "min_p")}),
        (sampling.sample, (probs, uniforms), dict(top_k=20, top_p=0.9, min_p=0.05)),
        (sampling.sample_from_logits, (logits, uniforms), per_row),
        (sampling.sample_from_logits, (logits, uniforms),
         dict(temperature=0.7, top_k=per_row["top_k"], top_p=0.95, index_dtype=torch.int64)),
    ]
    for function, args, options in cases:
        if function in (sampling.top_k_renorm_probs, sampling.top_p_renorm_probs,
                        sampling.min_p_renorm_probs, sampling.sample) and dtype != torch.float32:
            continue  # probabilities are float32 only
        got = function(*map(on, args), **{k: on(v) if isinstance(v, torch.Tensor) else v
                                          for k, v in options.items()})
        assert isinstance(got, torch.Tensor) and got.device.type == device
        want = function(*map(to_numpy, args), **{k: to_numpy(v) if isinstance(v, torch.Tensor)
                                                 else v for k, v in options.items()})
        if isinstance(options.get("index_dtype"), torch.dtype):
            want = want.astype(np.int64)
        assert same(got, from_numpy(want)), (function.__name__, options)
        if device == "cuda":  # CUDA == CPU bit for bit, the same call on the CPU's tensors
            cpu = function(*args, **options)
            assert same(got, cpu), (function.__name__, options)


@pytest.mark.usefixtures("sampling_path")
@pytest.mark.parametrize("device", DEVICES)
def test_results_match_the_model(device):
    rows, n = 6, 40
    logits = random_logits(rows, n, seed=5)
    uniforms = torch.rand(rows, generator=torch.Generator().manual_seed(6))
    tokens = sampling.sample_from_logits(logits.to(device), uniforms.to(device), top_k=7,
                                         top_p=0.9, temperature=0.8)
    masked = sampling.top_k_mask_logits(logits.to(device), 3)
    for r in range(rows):
        row = logits[r].numpy()
        assert tokens[r].item() == model.sample_from_logits(row, uniforms[r].numpy(), 0.8,
                                                            top_k=7, top_p=0.9)
        np.testing.assert_array_equal(masked[r].cpu().numpy().view(np.uint32),
                                      model.mask_logits(row, 3).view(np.uint32))


@pytest.mark.usefixtures("sampling_path")
@pytest.mark.parametrize("device", DEVICES)
def test_the_ops_take_tensors_or_scalars(device):
    """Each per-row argument is a tensor or the scalar every row takes: both give the same."""
    rows, n = 9, 64
    logits = random_logits(rows, n, seed=7, device=device)
    probs = random_probs(rows, n, seed=8, device=device)
    uniforms = torch.rand(rows, device=device)
    full = lambda value, dtype=torch.float32: torch.full((rows,), value, dtype=dtype,  # noqa
                                                         device=device)
    assert same(mask_op(logits, None, 5), mask_op(logits, full(5, torch.int32)))
    assert same(renorm_op(probs, None, 8, None, 0.7, None, 0.02),
                renorm_op(probs, full(8, torch.int64), 0, full(0.7), 1.0, full(0.02), 0.0))
    assert same(sample_op(probs, uniforms, None, 8, None, 0.7),
                sample_op(probs, uniforms, full(8, torch.int64), 0, full(0.7)))
    tokens = sample_from_logits_op(logits, uniforms, None, 8, None, 0.7, None, 0.0, None, 0.6,
                                   torch.int64)
    assert tokens.dtype == torch.int64 and tokens.shape == (rows,)
    assert same(tokens, sample_from_logits_op(logits, uniforms, full(8, torch.int32), 0,
                                              full(0.7), 1.0, None, 0.0, full(0.6), 1.0,
                                              torch.int64))
    assert same(tokens, sampling.sample_from_logits(logits, uniforms, top_k=[8] * rows,
                                                    top_p=[0.7] * rows, temperature=0.6,
                                                    index_dtype="int64"))
    assert same(sample_op(probs, uniforms), sampling.sample(probs, uniforms))


@pytest.mark.usefixtures("sampling_path")
@pytest.mark.parametrize("device", DEVICES)
def test_generator_draws_the_uniforms_on_the_input_device(device):
    probs = random_probs(12, 50, seed=9, device=device)
    logits = random_logits(12, 50, seed=10, device=device)
    drawn = torch.rand(12, generator=torch.Generator(device).manual_seed(11), device=device)
    got = sampling.sample(probs, generator=torch.Generator(device).manual_seed(11), top_p=0.9)
    assert same(got, sampling.sample(probs, drawn, top_p=0.9))
    got = sampling.sample_from_logits(logits, torch.Generator(device).manual_seed(11), top_k=5)
    assert same(got, sampling.sample_from_logits(logits, drawn, top_k=5))


@pytest.mark.usefixtures("sampling_path")
def test_batch_invariance_through_the_ops():
    """A row alone and the same row inside a batch give the same bits, through the ops."""
    row_logits = random_logits(1, 2000, seed=12)
    row_u = torch.tensor([0.37])
    alone = sample_from_logits_op(row_logits, row_u, None, 300, None, 0.9, None, 0.0, None, 0.8)
    alone_mask = mask_op(row_logits, None, 100)
    for rows, position in ((4, 3), (33, 17)):
        batch = random_logits(rows, 2000, seed=rows)
        batch[position] = row_logits[0]
        u = torch.rand(rows)
        u[position] = row_u[0]
        got = sample_from_logits_op(batch, u, None, 300, None, 0.9, None, 0.0, None, 0.8)
        assert got[position] == alone[0]
        assert same(mask_op(batch, None, 100)[position], alone_mask[0])


@CUDA
def test_cuda_graph_replays_with_new_per_row_arguments():
    """Per-row tensors and uniforms are read on the device: a captured call follows their new
    contents on each replay."""
    rows, n = 64, 32000
    logits = random_logits(rows, n, seed=13, device="cuda")
    per_row = per_row_arguments(rows, n, seed=14, device="cuda")
    uniforms = torch.rand(rows, device="cuda")
    sampling.sample_from_logits(logits, uniforms, **per_row)  # warm-up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        tokens = sampling.sample_from_logits(logits, uniforms, **per_row)
    for seed in range(3):
        fresh = per_row_arguments(rows, n, seed=100 + seed)
        for name, tensor in per_row.items():
            tensor.copy_(fresh[name])
        uniforms.copy_(torch.rand(rows, generator=torch.Generator().manual_seed(seed)))
        graph.replay()
        torch.cuda.synchronize()
        want = sampling.sample_from_logits(logits.cpu(), uniforms.cpu(),
                                           **{k: v.cpu() for k, v in per_row.items()})
        assert same(tokens, want)


def test_meta_tensors_have_the_output_shapes():
    logits = torch.empty(5, 100, device="meta", dtype=torch.bfloat16)
    probs = torch.empty(5, 100, device="meta")
    uniforms = torch.empty(5, device="meta")
    top_k = torch.empty(5, dtype=torch.int32, device="meta")
    got = mask_op(logits, top_k)
    assert got.shape == (5, 100) and got.dtype == torch.bfloat16 and got.device.type == "meta"
    got = renorm_op(probs, None, 0, torch.empty(5, device="meta"))
    assert got.shape == (5, 100) and got.dtype == torch.float32
    assert sample_op(probs, uniforms).dtype == torch.int32
    got = sample_from_logits_op(logits, uniforms, top_k, index_dtype=torch.int64)
    assert got.shape == (5,) and got.dtype == torch.int64
    got = sampling.sample_from_logits(logits, uniforms, top_k=top_k, temperature=0.5)
    assert got.shape == (5,) and got.device.type == "meta"


# ---- errors -----------------------------------------------------------------------------------


def error_cases(device):
    probs = torch.full((2, 4), 0.25, device=device)
    logits = probs.clone()
    u = torch.full((2,), 0.5, device=device)
    elsewhere = "cpu" if device == "meta" else "meta"
    return [
        (ValueError, "top_p.sizes[0] = 3 does not match the 2 rows",
         lambda: sampling.sample(probs, u, top_p=torch.full((3,), 0.5, device=device))),
        (ValueError, "top_p.sizes[0] = 3",
         lambda: renorm_op(probs, None, 0, torch.full((3,), 0.5, device=device))),
        (TypeError, "top_k.dtype = float32 must be int32 or int64",
         lambda: sampling.sample(probs, u, top_k=torch.ones(2, device=device))),
        (TypeError, "top_k.dtype = float32",
         lambda: mask_op(logits, torch.ones(2, device=device))),
        (TypeError, "top_k must be an integer", lambda: sampling.sample(probs, u, top_k=2.0)),
        (TypeError, "min_p must be a real number",
         lambda: sampling.min_p_renorm_probs(probs, "0.1")),
        (TypeError, "uniforms.dtype = float64 must be float32",
         lambda: sampling.sample(probs, u.double())),
        (TypeError, "uniforms.dtype = float64", lambda: sample_op(probs, u.double())),
        (ValueError, "uniforms must be a tensor on the input's device",
         lambda: sampling.sample(probs, torch.empty(2, device=elsewhere))),
        (ValueError, "uniforms must be a tensor on the input's device",
         lambda: sample_from_logits_op(logits, torch.empty(2, device=elsewhere))),
        (ValueError, "top_k must be a tensor on the input's device",
         lambda: sampling.top_k_mask_logits(logits, torch.ones(2, dtype=torch.int32,
                                                               device=elsewhere))),
        (ValueError, "top_p must be a tensor on the input's device",
         lambda: sampling.sample(probs, u, top_p=np.float32([0.5, 0.5]))),
        (ValueError, "uniforms must be a tensor on the input's device",
         lambda: sampling.sample(probs, np.random.default_rng(1))),
        (ValueError, "uniforms.sizes[0] = 1 does not match the 2 rows",
         lambda: sampling.sample(probs, u[:1])),
        (ValueError, "temperature.ndim = 2 must be 1",
         lambda: sampling.sample_from_logits(logits, u, temperature=u.view(1, 2))),
        (ValueError, "uniforms is required", lambda: sampling.sample(probs)),
        (TypeError, "probs.dtype = float16 must be float32",
         lambda: sampling.sample(probs.half(), u)),
        (TypeError, "logits.dtype = int32 is not float32, float16 or bfloat16",
         lambda: mask_op(logits.int(), None, 1)),
        (ValueError, "logits.ndim = 1 must be 2", lambda: sampling.top_k_mask_logits(u, 1)),
        (TypeError, "index_dtype = torch.int16 must be int32 or int64",
         lambda: sampling.sample(probs, u, index_dtype=torch.int16)),
        (TypeError, "index_dtype = torch.float32 must be int32 or int64",
         lambda: sample_op(probs, u, index_dtype=torch.float32)),
        (ValueError, "backend = 'cuda' was asked for",
         lambda: sampling.sample(probs, u, backend="cuda")),
    ]


@pytest.mark.usefixtures("sampling_path")
@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_errors_name_the_argument(device):
    """On real tensors the kernels and the library check (the library's message, in this API's
    names); on meta tensors the fake kernels check the same, with the same types."""
    for exception, message, call in error_cases(device):
        if device == "meta" and "backend" in message:
            continue  # a meta tensor has no backend to match
        with pytest.raises(exception) as info:
            call()
        assert message in str(info.value), (message, str(info.value))


# ---- the ops under torch's tooling ------------------------------------------------------------


def opcheck_cases():
    # opcheck compares outputs with NaN unequal to itself: the masked logits carry none here.
    logits = random_logits(6, 300, seed=20).nan_to_num(0.0, float("inf"), float("-inf"))
    probs = random_probs(6, 300, seed=21)
    u = torch.rand(6)
    per_row = per_row_arguments(6, 300, seed=22)
    top_k, top_p, min_p, temperature = (per_row[name] for name in
                                        ("top_k", "top_p", "min_p", "temperature"))
    return {
        mask_op: [(logits, top_k), (logits.bfloat16(), None, 40), (logits.t().contiguous().t(),
                                                                  top_k.int())],
        renorm_op: [(probs, top_k), (probs, None, 0, top_p, 1.0, min_p),
                    (probs, None, 50, None, 0.9, None, 0.01)],
        sample_op: [(probs, u), (probs, u, top_k, 0, top_p, 1.0, min_p, 0.0, torch.int64),
                    (probs, u, None, 10, None, 0.5)],
        sample_from_logits_op: [(logits, u, top_k, 0, top_p, 1.0, min_p, 0.0, temperature),
                                (logits.half(), u, None, 30, None, 0.9, None, 0.0, None, 0.7,
                                 torch.int64)],
    }


@pytest.mark.parametrize("op", [mask_op, renorm_op, sample_op, sample_from_logits_op],
                         ids=lambda op: op.name())
def test_opcheck(op):
    for args in opcheck_cases()[op]:
        torch.library.opcheck(op, args)


def decode_step(logits, uniforms, top_k, top_p, inverse_temperature):
    """A sampler's step with exact ops around the sampling calls, so that results compare bit
    for bit with eager."""
    scaled = logits * inverse_temperature
    masked = sampling.top_k_mask_logits(scaled, top_k)
    tokens = sampling.sample_from_logits(scaled, uniforms, top_k=top_k, top_p=top_p,
                                         temperature=0.7)
    probs = sampling.top_k_renorm_probs(logits.abs(), 20)
    nucleus = sampling.top_p_renorm_probs(probs, top_p)
    drawn = sampling.sample(probs, uniforms, top_k=10, min_p=0.05, index_dtype=torch.int64)
    return masked, tokens, nucleus, drawn + 1


def decode_inputs(rows=8, n=3000, seed=30, device="cpu"):
    per_row = per_row_arguments(rows, n, seed=seed, device=device)
    return (random_logits(rows, n, seed=seed, device=device).nan_to_num(0.0, 50.0, -50.0),
            torch.rand(rows, generator=torch.Generator().manual_seed(seed)).to(device),
            per_row["top_k"], per_row["top_p"], torch.tensor(1.25, device=device))


def test_compile_fullgraph():
    inputs = decode_inputs()
    want = decode_step(*inputs)
    for dynamic in (False, True):
        compiled = torch.compile(decode_step, fullgraph=True, dynamic=dynamic)
        assert_same(compiled(*inputs), want)
        fewer = decode_inputs(rows=5, seed=31)
        assert_same(compiled(*fewer), decode_step(*fewer))


class DecodeStep(torch.nn.Module):
    def forward(self, logits, uniforms, top_k, top_p, inverse_temperature):
        return decode_step(logits, uniforms, top_k, top_p, inverse_temperature)


OPS = {mask_op, renorm_op, sample_op, sample_from_logits_op}


def test_export():
    inputs = decode_inputs()
    ep = torch.export.export(DecodeStep(), inputs)
    assert OPS <= {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert_same(ep.module()(*inputs), decode_step(*inputs))
    decomposed = ep.run_decompositions()
    assert OPS <= {n.target for n in decomposed.graph.nodes if n.op == "call_function"}
    assert_same(decomposed.module()(*inputs), decode_step(*inputs))
    rows = torch.export.Dim("rows", min=2, max=256)
    dynamic = torch.export.export(DecodeStep(), inputs,
                                  dynamic_shapes=({0: rows}, {0: rows}, {0: rows}, {0: rows}, None))
    fewer = decode_inputs(rows=3, seed=32)
    assert_same(dynamic.module()(*fewer), decode_step(*fewer))


# ---- AOTInductor ------------------------------------------------------------------------------

SHIMS = ("mtk_top_k_mask_logits", "mtk_renorm_probs", "mtk_sample", "mtk_sample_from_logits")


@pytest.fixture(scope="module", params=DEVICES)
def aoti_package(request, tmp_path_factory):
    """DecodeStep compiled by AOTInductor for a device, calling the C shims."""
    if not aoti_library_path().is_file():
        pytest.fail(f"{aoti_library_path()} was not built (make builds it when torch is found)")
    device = request.param
    inputs = decode_inputs(device=device)
    ep = torch.export.export(DecodeStep(), inputs)
    folder = tmp_path_factory.mktemp(f"aoti-sampling-{device}")
    package = compile_package(ep, folder, "decode_step")
    return package, inputs, device


def test_aoti_package_runs_the_shims_exactly(aoti_package):
    package, inputs, device = aoti_package
    assert_calls_shims(package, device, SHIMS)
    runner = torch._inductor.aoti_load_package(package)
    assert_same(runner(*inputs), decode_step(*inputs))
    fresh = decode_inputs(seed=33, device=device)
    assert_same(runner(*fresh), decode_step(*fresh))


def test_aoti_package_runs_from_cpp(aoti_package, tmp_path):
    package, inputs, device = aoti_package
    assert_same(run_from_cpp(package, inputs, tmp_path, device), decode_step(*inputs))

