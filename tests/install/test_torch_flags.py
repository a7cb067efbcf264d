"""tools/torch-flags.py: the torch parts are compiled with the C++ standard that the building
torch's own extension tooling uses (torch 2.14's headers need C++20, older ones C++17), and a
change of torch changes the build key, which rebuilds them (adapters/aoti/aoti.mk)."""

import importlib.metadata
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "tools" / "torch-flags.py"
spec = importlib.util.spec_from_file_location("torch_flags", SCRIPT)
torch_flags = importlib.util.module_from_spec(spec)
spec.loader.exec_module(torch_flags)


@pytest.mark.parametrize("source, standard", [
    ("cflags = common_cflags + ['-fPIC', '-std=c++17']", "-std=c++17"),
    ("cpp_flag = '-std=c++17'  # ... later: cflags + ['-std=c++20']", "-std=c++20"),
    ("no standard named", "-std=c++17"),
])
def test_the_standard_is_the_newest_that_torch_passes(source, standard):
    assert torch_flags.cxx_standard(source) == standard


def test_the_key_names_the_torch_version_and_folder():
    key = subprocess.run([sys.executable, str(SCRIPT), "--key"], capture_output=True, text=True,
                         check=True).stdout.split()
    if importlib.util.find_spec("torch") is None:
        assert key == []
        return
    import torch

    assert key[0] == "torch-" + importlib.metadata.version("torch")
    assert Path(key[1]) == Path(torch.__file__).parent


def test_the_fragment_takes_the_standard_from_torchs_extension_tooling():
    pytest.importorskip("torch")
    fragment = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True,
                              check=True).stdout
    variables = {name: value.strip() for name, _, value in
                 (line.partition(" :=") for line in fragment.splitlines()) if value or _}
    source = Path(importlib.util.find_spec("torch.utils.cpp_extension").origin).read_text()
    assert variables["TORCH_FLAGS_ERROR"] == ""
    assert variables["TORCH_CXX_STD"] in source
    assert "-isystem " in variables["TORCH_INCLUDE_FLAGS"]
