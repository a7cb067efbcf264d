"""Makes the checkout's package importable when metaltopk is not installed, and reports which
library the run tests (set METALTOPK_LIBRARY to choose one)."""

import importlib.util
import sys
from pathlib import Path

if importlib.util.find_spec("metaltopk") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "python"))


def pytest_report_header(config):
    import metaltopk

    available = [name for name, state in metaltopk.backends().items() if state["available"]]
    return [f"metaltopk {metaltopk.__version__} from {metaltopk.library_path}",
            f"metaltopk backends available: {', '.join(available)}"]
