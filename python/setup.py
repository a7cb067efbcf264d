"""Builds libmetaltopk with the repository's Makefile and ships it inside the package.

The bindings use cffi in ABI mode: the wheel holds the pure-Python package, the shared library
and the header its declarations are read from. Where the building Python has torch, `make` also
builds the AOTInductor shim and the torch fast path, and the wheel carries them too (the fast
path is used only with the torch it was built against).
Run from a repository checkout: `pip install ./python` (or `pip install .` at the root).
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SUFFIX = ".dylib" if sys.platform == "darwin" else ".so"
LIBRARY = f"libmetaltopk{SUFFIX}"
# The AOTInductor C shim, which `make all` builds where the building Python has torch.
AOTI_LIBRARY = f"libmetaltopk_aoti{SUFFIX}"
# The torch fast path (a Python extension) and the torch version it was built for, likewise.
TORCH_EXTENSION = "_metaltopk_torch"


def header_version() -> str:
    header = (REPO / "include" / "metaltopk.h").read_text()
    parts = [re.search(rf"#define MTK_VERSION_{part} (\d+)", header).group(1)
             for part in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


class BuildWithLibrary(build_py):
    """build_py, plus `make` of the shared library, copied with the header into the package."""

    def run(self):
        super().run()
        build_dir = Path(self.get_finalized_command("build").build_temp).resolve() / "metaltopk"
        jobs = str(os.cpu_count() or 1)
        # PYTHON: the torch parts are built against this interpreter's torch, where it has one.
        subprocess.run(["make", "-C", str(REPO), f"BUILD={build_dir}", f"PYTHON={sys.executable}",
                        f"-j{jobs}", "all"], check=True)
        package_dir = Path(self.build_lib) / "metaltopk"
        package_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(build_dir / LIBRARY, package_dir / LIBRARY)
        torch_builds = [build_dir / AOTI_LIBRARY, *build_dir.glob(TORCH_EXTENSION + "*")]
        for built in torch_builds:
            if built.is_file():
                shutil.copy2(built, package_dir / built.name)
        shutil.copy2(REPO / "include" / "metaltopk.h", package_dir / "metaltopk.h")


class PlatformDistribution(Distribution):
    """The wheel carries a native library, so it is tagged for this platform."""

    def has_ext_modules(self):
        return True


setup(
    version=header_version(),
    packages=["metaltopk", "metaltopk.torch"],
    package_dir={"": os.path.relpath(HERE, Path.cwd())},
    cmdclass={"build_py": BuildWithLibrary},
    distclass=PlatformDistribution,
    zip_safe=False,
)
