"""AOTInductor packages of models that call metaltopk's ops, for the torch tests: compile one with
the C shims, check which shims its generated code calls, and run it from C++ through
tests/aoti/aoti_runner (METALTOPK_AOTI_RUNNER, which make test builds)."""
import os
import subprocess
import zipfile

import pytest
import torch

from metaltopk.torch import aoti_config


def compile_package(exported_program, folder, name):
    return torch._inductor.aoti_compile_and_package(
        exported_program, package_path=str(folder / f"{name}.pt2"), inductor_configs=aoti_config())


def assert_calls_shims(package, device, shims):
    """The package's generated code calls every shim directly, none through the proxy executor
    (which would mean the op went back to Python)."""
    with zipfile.ZipFile(package) as archive:
        sources = "".join(archive.read(n).decode() for n in archive.namelist()
                          if n.endswith(".cpp"))
    assert "proxy_executor_call_function" not in sources
    for shim in shims:
        assert f"aoti_torch_{device}_{shim}(" in sources


def run_from_cpp(package, inputs, folder, device):
    """The package's outputs for `inputs`, run by the C++ runner (skips where none is built)."""
    runner = os.environ.get("METALTOPK_AOTI_RUNNER")
    if not runner:
        pytest.skip("METALTOPK_AOTI_RUNNER is not set (make test builds tests/aoti/aoti_runner)")
    torch.save(list(inputs), folder / "in.pt")
    result = subprocess.run([runner, package, folder / "in.pt", folder / "out.pt"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return torch.load(folder / "out.pt", map_location=device)
