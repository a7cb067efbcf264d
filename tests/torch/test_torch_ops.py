"""The torch ops on the CPU: torch.library.opcheck, torch.compile(fullgraph=True),
torch.export, the exported-program rewrite, and AOTInductor packages that call the C shim.

Every result is compared exactly with eager metaltopk on the same inputs.
"""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="torch is not installed (make test-deps)")
import metaltopk  # noqa: E402
from metaltopk.torch import aoti_config, aoti_library_path, replace_topk  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import reference as ref  # noqa: E402

topk_op = torch.ops.metaltopk.mtk_topk.default
route_op = torch.ops.metaltopk.mtk_moe_route.default


def same(a, b):
    """Exact equality of tensors, NaNs and signed zeros included."""
    if a.dtype.is_floating_point:
        width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return a.dtype == b.dtype and torch.equal(a.view(width), b.view(width))
    return torch.equal(a, b)


def assert_same(got, want):
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert same(a, b), (a, b)


def logits(rows, n, dtype=torch.float32, seed=0):
    x = ref.random_values(np.random.default_rng(seed), (rows, n), np.float32, "specials")
    return torch.from_numpy(x).to(dtype)


OPCHECK_CASES = [
    (torch.randn(8, 64), 5), (torch.randn(8, 64, dtype=torch.bfloat16), 3, 0, False),
    (torch.randn(3, 40, 5, dtype=torch.float64), 7, 1, True, False),
    (torch.randint(-5, 5, (16, 30), dtype=torch.int32), 4), (torch.tensor(2.0), 1),
]


@pytest.mark.parametrize("args", OPCHECK_CASES, ids=lambda a: f"{tuple(a[0].shape)}")
def test_opcheck_topk(args):
    torch.library.opcheck(topk_op, args)
    if args[0].dtype.is_floating_point and args[0].dim():
        grad_args = (args[0].clone().requires_grad_(), *args[1:])
        torch.library.opcheck(topk_op, grad_args)


@pytest.mark.parametrize("args", [
    (torch.randn(16, 64), 8),
    (torch.randn(4, 256, dtype=torch.bfloat16), 8, "sigmoid", torch.randn(256), 8, 4, True, 2.5,
     torch.int64),
    (torch.randn(1, 128, dtype=torch.float16), 6, "none", None, 0, 0, False),
], ids=["softmax", "grouped", "none"])
def test_opcheck_moe_route(args):
    torch.library.opcheck(route_op, args)


def test_compile_fullgraph():
    def sample(x, inverse_temperature):
        values, indices = metaltopk.topk(x * inverse_temperature, 50)
        return values * 2, indices  # exact ops around the op, so results compare bit for bit

    def route(x):
        weights, ids = metaltopk.moe_route(x, 8)
        scores, experts = torch.ops.metaltopk.mtk_topk(x, 4, -1, False)
        return weights, ids, scores, experts

    x, t = logits(6, 3000), torch.tensor(0.8)
    for dynamic in (False, True):
        compiled = torch.compile(sample, fullgraph=True, dynamic=dynamic)
        assert_same(compiled(x, t), sample(x, t))
        assert_same(compiled(x[:3], t), sample(x[:3], t))
    router_logits = logits(16, 128, torch.bfloat16, seed=1)
    assert_same(torch.compile(route, fullgraph=True)(router_logits), route(router_logits))


def test_compile_with_gradients():
    x = torch.randn(8, 100, dtype=torch.float64, requires_grad=True)
    twin = x.detach().clone().requires_grad_()

    def loss(t):
        return (metaltopk.topk(t, 10)[0] ** 2).sum()

    torch.compile(loss, fullgraph=True)(x).backward()
    loss(twin).backward()
    assert torch.equal(x.grad, twin.grad)


class Sampler(torch.nn.Module):
    """Inverse temperature, then top-k candidates, as an LLM sampler starts. A product, not a
    division: a compiled GPU division may round differently from eager's, a product may not."""

    def forward(self, x, inverse_temperature):
        return torch.ops.metaltopk.mtk_topk(x * inverse_temperature, 50)


class Router(torch.nn.Module):
    """DeepSeek-V3-style grouped routing with a selection bias."""

    def forward(self, x, bias):
        return torch.ops.metaltopk.mtk_moe_route(x, 8, "sigmoid", bias, 8, 4, True, 2.5,
                                                 torch.int32)


def test_export():
    x, t = logits(4, 1000), torch.tensor(1.25)
    ep = torch.export.export(Sampler(), (x, t))
    targets = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    assert topk_op in targets
    assert_same(ep.module()(x, t), Sampler()(x, t))
    decomposed = ep.run_decompositions()
    assert topk_op in {n.target for n in decomposed.graph.nodes}
    assert_same(decomposed.module()(x, t), Sampler()(x, t))


class TorchTopk(torch.nn.Module):
    """A model written against torch.topk, that replace_topk adopts without edits."""

    def forward(self, x):
        values, indices = torch.topk(x, 20, dim=0, largest=False)
        best = x.topk(3).values
        return values, indices, best


class TorchRouter(torch.nn.Module):
    def forward(self, x):
        scores = torch.softmax(x.float(), dim=-1)
        weights, ids = torch.topk(scores, 8, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights, ids.int()


class RouterWithSharedScores(torch.nn.Module):
    """The scores feed something else too: the router must not be fused away."""

    def forward(self, x):
        scores = torch.softmax(x, dim=-1)
        weights, ids = torch.topk(scores, 4)
        return weights / weights.sum(-1, keepdim=True), ids, scores.mean()


def call_targets(ep):
    return [n.target for n in ep.graph.nodes if n.op == "call_function"]


def test_replace_topk_adopts_torch_topk():
    x = logits(64, 300, seed=2)
    ep = replace_topk(torch.export.export(TorchTopk(), (x,)))
    targets = call_targets(ep)
    assert torch.ops.aten.topk.default not in targets and targets.count(topk_op) == 2
    values, indices, best = ep.module()(x)
    want_values, want_indices = metaltopk.topk(x, 20, dim=0, largest=False)
    assert_same((values, indices, best), (want_values, want_indices, metaltopk.topk(x, 3)[0]))


def test_replace_topk_fuses_the_router_pattern():
    x = ref.distinct_values(np.random.default_rng(3), 32, 256, np.float32) / 16
    x = torch.from_numpy(x).to(torch.bfloat16)
    model = TorchRouter()
    ep = replace_topk(torch.export.export(model, (x,)))
    targets = call_targets(ep)
    assert route_op in targets and torch.ops.aten.topk.default not in targets
    assert torch.ops.aten.softmax.int not in targets
    weights, ids = ep.module()(x)
    want_weights, want_ids = model(x)
    assert ids.dtype == torch.int32 and torch.equal(ids, want_ids)
    torch.testing.assert_close(weights, want_weights, rtol=1e-6, atol=1e-7)
    assert_same((weights, ids), (metaltopk.moe_route(x, 8)[0], want_ids))
    decomposed = replace_topk(torch.export.export(model, (x,)).run_decompositions())
    assert route_op in call_targets(decomposed)
    assert_same(decomposed.module()(x), (weights, ids))


def test_replace_topk_leaves_routers_whose_parts_are_used():
    x = torch.from_numpy(ref.distinct_values(np.random.default_rng(4), 8, 64, np.float32) / 8)
    ep = replace_topk(torch.export.export(RouterWithSharedScores(), (x,)))
    targets = call_targets(ep)
    assert route_op not in targets and topk_op in targets
    assert_same(ep.module()(x), RouterWithSharedScores()(x))
    plain = replace_topk(torch.export.export(TorchRouter(), (x,)), router=False)
    assert route_op not in call_targets(plain) and topk_op in call_targets(plain)


AOTI_DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(scope="module", params=AOTI_DEVICES)
def aoti_packages(request, tmp_path_factory):
    """The sampler and the router compiled by AOTInductor for a device, calling the C shim."""
    if not aoti_library_path().is_file():
        pytest.fail(f"{aoti_library_path()} was not built (make builds it when torch is found)")
    device = request.param
    folder = tmp_path_factory.mktemp(f"aoti-{device}")
    x, t = logits(4, 1000, seed=5).to(device), torch.tensor(1.25, device=device)
    router_logits = logits(16, 256, torch.bfloat16, seed=6).to(device)
    bias = torch.randn(256, device=device)
    models = {"sampler": (Sampler(), (x, t)), "router": (Router(), (router_logits, bias))}
    packages = {}
    for name, (model, args) in models.items():
        ep = torch.export.export(model, args)
        packages[name] = (torch._inductor.aoti_compile_and_package(
            ep, package_path=str(folder / f"{name}.pt2"), inductor_configs=aoti_config()),
            model, args, device)
    return packages


def generated_code_calls_the_shim(package, function):
    with zipfile.ZipFile(package) as archive:
        sources = [archive.read(n).decode() for n in archive.namelist() if n.endswith(".cpp")]
    return any(f"{function}(" in source and "proxy_executor_call_function" not in source
               for source in sources)


@pytest.mark.parametrize("name", ["sampler", "router"])
def test_aoti_package_runs_the_shim_exactly(aoti_packages, name):
    package, model, args, device = aoti_packages[name]
    function = f"aoti_torch_{device}_mtk_{'topk' if name == 'sampler' else 'moe_route'}"
    assert generated_code_calls_the_shim(package, function)
    runner = torch._inductor.aoti_load_package(package)
    assert_same(runner(*args), model(*args))
    # New data through the same compiled model.
    fresh = tuple(a + 0.25 if a.dim() else a for a in args)
    assert_same(runner(*fresh), model(*fresh))


def test_aoti_package_runs_from_cpp(aoti_packages, tmp_path):
    """The packages again, loaded by a C++ program through AOTIModelPackageLoader, without
    Python: the program links the shim library, which the compiled models call."""
    runner = os.environ.get("METALTOPK_AOTI_RUNNER")
    if not runner:
        pytest.skip("METALTOPK_AOTI_RUNNER is not set (make test builds tests/aoti/aoti_runner)")
    for name, (package, model, args, _) in aoti_packages.items():
        torch.save(list(args), tmp_path / f"{name}-in.pt")
        result = subprocess.run([runner, package, tmp_path / f"{name}-in.pt",
                                 tmp_path / f"{name}-out.pt"], capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        outputs = torch.load(tmp_path / f"{name}-out.pt", map_location=args[0].device)
        assert_same(outputs, model(*args))
