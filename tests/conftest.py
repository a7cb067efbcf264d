"""Makes the checkout's package importable when metaltopk is not installed, reports which
library the run tests (set METALTOPK_LIBRARY to choose one), and gives torch tests both of the
paths a torch tensor's call can take."""

import importlib.util
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("metaltopk") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))


def pytest_report_header(config):
    import metaltopk

    available = [name for name, state in metaltopk.backends().items() if state["available"]]
    return [f"metaltopk {metaltopk.__version__} from {metaltopk.library_path}",
            f"metaltopk backends available: {', '.join(available)}"]


@pytest.fixture(params=["compiled", "python"])
def torch_path(request, monkeypatch):
    """Runs a test on the compiled torch fast path (adapters/torch/), then on the Python path."""
    from metaltopk.torch import _tensors

    if request.param == "python":
        monkeypatch.setattr(_tensors, "_fast_topk", None)
        monkeypatch.setattr(_tensors, "_fast_moe_route", None)
    elif _tensors._fast_topk is None:
        pytest.skip("the torch fast path was not built beside the library")
    return request.param
