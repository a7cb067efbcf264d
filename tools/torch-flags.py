"""What the torch parts (adapters/torch, adapters/aoti) are compiled with, taken from the torch
of the Python that runs this script, for the Makefile (adapters/aoti/aoti.mk includes its output).

    python tools/torch-flags.py --key   one line: torch's version and folder, and the Python's
                                        extension suffix, without importing torch (fast; the
                                        build is redone when it changes); empty without torch
    python tools/torch-flags.py         a make fragment: the C++ standard, include and library
                                        folders and ABI define that torch's own extension tooling
                                        (torch.utils.cpp_extension) uses for that torch

Each torch release decides the C++ standard its headers need (torch 2.14's use C++20's
operator<=>), so it is read from torch.utils.cpp_extension rather than fixed here. The fragment
always comes out: where torch cannot be imported, it sets TORCH_FLAGS_ERROR to the reason, and
the torch parts' rules report it.
"""

import importlib.metadata
import importlib.util
import os
import re
import sys
import sysconfig


def torch_folder():
    spec = importlib.util.find_spec("torch")
    return spec.submodule_search_locations[0] if spec and spec.submodule_search_locations else None


def build_key():
    folder = torch_folder()
    if folder is None:
        return ""
    return f"torch-{importlib.metadata.version('torch')} {folder} {sysconfig.get_config_var('EXT_SUFFIX')}"


def cxx_standard(cpp_extension_source):
    """The newest -std=c++NN that torch passes to the extensions it builds itself (Unix
    spelling); C++17 where it names none, as torch did before it named one."""
    standards = [int(n) for n in re.findall(r"-std=c\+\+(\d+)", cpp_extension_source)]
    return f"-std=c++{max(standards, default=17)}"


def make_fragment():
    import torch

    try:
        # Needs setuptools, which a plain virtual environment may lack; its folders are torch's
        # own layout, which the fallback below spells out.
        from torch.utils import cpp_extension
        include_paths = cpp_extension.include_paths()
        library_paths = cpp_extension.library_paths()
    except ImportError:
        root = os.path.dirname(torch.__file__)
        include_paths = [os.path.join(root, "include"),
                         os.path.join(root, "include", "torch", "csrc", "api", "include")]
        library_paths = [os.path.join(root, "lib")]
    source_path = importlib.util.find_spec("torch.utils.cpp_extension").origin
    with open(source_path, encoding="utf-8") as source:
        standard = cxx_standard(source.read())
    cxx11_abi = int(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True))
    return "\n".join([
        f"# {os.path.basename(__file__)}: torch {torch.__version__} in {os.path.dirname(torch.__file__)}",
        f"TORCH_VERSION := {torch.__version__}",
        f"TORCH_CXX_STD := {standard}",
        f"TORCH_ABI_FLAG := -D_GLIBCXX_USE_CXX11_ABI={cxx11_abi}",
        "TORCH_INCLUDE_FLAGS := " + " ".join(f"-isystem {path}" for path in include_paths),
        f"TORCH_LIBRARY_DIR := {library_paths[0]}",
        "TORCH_FLAGS_ERROR :=",
    ])


def main():
    if sys.argv[1:] == ["--key"]:
        print(build_key())
        return
    try:
        print(make_fragment())
    except Exception as error:  # any failure to import torch: the torch parts are skipped
        reason = f"{type(error).__name__}: {error}".replace("\n", " ").replace("$", "$$")
        print(f"TORCH_FLAGS_ERROR := torch in {sys.executable} cannot be imported ({reason})")


if __name__ == "__main__":
    main()
