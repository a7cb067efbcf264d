#!/usr/bin/env python3
"""Downloads the wheels tests/executorch/run_e2e.sh installs on the GPU machine, which reaches no
package index, into tests/executorch/wheels/ (git ignores it).

    python3 tests/executorch/fetch.py [--python-version 3.12] [--dest DIR]

- executorch 1.2.0, the release that pairs with the GPU machine's torch 2.11 (a CPU build: the
  Python side of its CUDA backend is in it; its CUDA runtime is built from source there);
- the packages its lowering imports beyond what torch brings (torch, numpy, sympy, jinja2,
  typing_extensions are on that machine): EXTRA below;
- CMake below 4 and at least 3.29, which ExecuTorch's CUDA delegate needs.
All without their dependencies (`--no-deps`), for the given Python on manylinux x86_64.
"""
import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
EXECUTORCH = "executorch==1.2.0"
CMAKE = "cmake>=3.29,<4"
# What `executorch_export.py export` imports from executorch's requirements, found with
# `python -X importtime` in a virtual environment holding exactly executorch 1.2.0 and torch 2.11.
# Pinned to the versions that lowering was checked with here.
EXTRA = ("flatbuffers==25.12.19", "ruamel.yaml==0.19.1", "tabulate==0.10.0", "torchao==0.18.0")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64", "manylinux1_x86_64")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python-version", default="3.12",
                        help="the GPU machine's Python (3.12 there as of 2026-11)")
    parser.add_argument("--dest", type=Path, default=HERE / "wheels")
    parser.add_argument("--without-cmake", action="store_true",
                        help="where the GPU machine's own CMake is 3.29 or newer")
    args = parser.parse_args()
    args.dest.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--python-version", args.python_version, "--implementation", "cp",
               *(f"--platform={platform}" for platform in PLATFORMS), "-d", str(args.dest),
               EXECUTORCH, *EXTRA, *(() if args.without_cmake else (CMAKE,))]
    print("+", " ".join(command), flush=True)
    subprocess.run(command, check=True)
    wheels = sorted(args.dest.glob("*.whl"))
    total = sum(w.stat().st_size for w in wheels)
    print(f"{len(wheels)} wheels, {total / 2**20:.1f} MiB in {args.dest}:")
    for wheel in wheels:
        print(f"  {wheel.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
