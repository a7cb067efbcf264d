"""Builds libmetaltopk with the repository's Makefile and ships it inside the package.

The bindings use cffi in ABI mode: the wheel holds the pure-Python package, the shared library
and the header its declarations are read from. Where the building Python has torch, `make` also
builds the AOTInductor shim and the torch fast path, and the wheel carries them too (the fast
path is used only with the torch it was built against). When they cannot be built for that
torch (no compiler, no Python headers, compile errors), the install still succeeds with a warning
that says why, and the package works through cffi.
Run from a repository checkout: `pip install ./python` (or `pip install .` at the root).

Each build goes to its own folder, named after what it is built against (Python, torch version or
"notorch", CUDA or CPU only), and the wheel gets only what that build produced: one checkout can
be installed into environments with different torches without one's build reaching another.
METALTOPK_CUDA=0 leaves the CUDA backend out (make's CUDA=0). pip hides a build's output unless
run with -v; the progress lines go to the terminal where there is one.
"""

import importlib.metadata
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SUFFIX = ".dylib" if sys.platform == "darwin" else ".so"
LIBRARY = f"libmetaltopk{SUFFIX}"
# The AOTInductor C shim, which `make` builds where the building Python has torch.
AOTI_LIBRARY = f"libmetaltopk_aoti{SUFFIX}"
# The torch fast path (a Python extension) and the torch version it was built for, likewise.
TORCH_EXTENSION = "_metaltopk_torch"
# Written into the package when the torch parts were skipped: the reason, which the package
# repeats when it is imported with torch.
TORCH_SKIPPED = TORCH_EXTENSION + ".skipped"
NATIVE_FILES = (LIBRARY, AOTI_LIBRARY, "metaltopk.h", TORCH_EXTENSION + "*")


def header_version() -> str:
    header = (REPO / "include" / "metaltopk.h").read_text()
    parts = [re.search(rf"#define MTK_VERSION_{part} (\d+)", header).group(1)
             for part in ("MAJOR", "MINOR", "PATCH")]
    return ".".join(parts)


def torch_version():
    """The version of the torch this interpreter (and so the build) sees, or None."""
    if importlib.util.find_spec("torch") is None:
        return None
    return importlib.metadata.version("torch")


def cuda_wanted() -> bool:
    """METALTOPK_CUDA=0 asks for a CPU-only library; otherwise make compiles the CUDA backend
    where nvcc exists (lib/cuda/cuda.mk looks in the same places)."""
    if os.environ.get("METALTOPK_CUDA", "1") == "0":
        return False
    nvcc = os.environ.get("NVCC") or os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"),
                                                  "bin", "nvcc")
    return os.path.isfile(nvcc)


def parallel_jobs() -> int:
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity else (os.cpu_count() or 1)


class Progress:
    """Short progress lines for the person waiting: pip captures the build's output and shows it
    only with -v or when the build fails, so they go to the terminal (/dev/tty) where the build
    has one, and to the captured output as well."""

    def __init__(self):
        self.start = time.monotonic()
        try:
            self.terminal = open("/dev/tty", "w")
        except OSError:
            self.terminal = None

    def say(self, message: str):
        line = f"metaltopk: [{time.monotonic() - self.start:5.0f} s] {message}"
        print(line, file=sys.stderr, flush=True)
        if self.terminal is not None:
            try:
                print(line, file=self.terminal, flush=True)
            except OSError:
                self.terminal = None


# A command that make echoes: not a continuation line, and writes a file with -o.
OUTPUT_FILE = re.compile(r"^\S.*\s-o\s+(\S+)")


def run_make(progress: Progress, arguments, what: str):
    """Runs make, its output into the build's log line by line (pip -v shows it), one progress
    line per file it builds. Returns (exit status, the output's last lines)."""
    planned = subprocess.run(["make", "-n", *arguments], cwd=REPO, capture_output=True, text=True)
    total = sum(1 for line in planned.stdout.splitlines() if OUTPUT_FILE.match(line))
    done = 0
    tail = []
    with subprocess.Popen(["make", *arguments], cwd=REPO, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, bufsize=1) as make:
        for line in make.stdout:
            sys.stdout.write(line)
            tail = (tail + [line.rstrip()])[-30:]
            built = OUTPUT_FILE.match(line)
            if built:
                done += 1
                progress.say(f"{what}: [{done}/{max(total, done)}] building {Path(built.group(1)).name}")
    return make.returncode, tail


def failure_reason(tail) -> str:
    """The first compiler error or make message of a failed build's last lines."""
    for line in tail:
        if "error" in line.lower() or "needs" in line or "skipped" in line:
            return line.strip()
    return tail[-1].strip() if tail else "make failed"


class BuildWithLibrary(build_py):
    """build_py, plus `make` of the shared library (and of the torch parts where the building
    Python has torch), copied with the header into the package."""

    def run(self):
        super().run()
        progress = Progress()
        torch = torch_version()
        cuda = cuda_wanted()
        key = (f"py{sys.version_info.major}{sys.version_info.minor}-"
               f"{'torch' + torch if torch else 'notorch'}-{'cuda' if cuda else 'cpu'}")
        build_dir = Path(self.get_finalized_command("build").build_temp).resolve() / f"metaltopk-{key}"
        jobs = parallel_jobs()
        # PYTHON: the torch parts are built against this interpreter's torch, where it has one.
        make_arguments = [f"BUILD={build_dir}", f"PYTHON={sys.executable}", f"-j{jobs}",
                          f"CUDA={1 if cuda else 0}"]
        progress.say(f"building libmetaltopk ({'CUDA and CPU' if cuda else 'CPU only'}, {jobs} "
                     f"jobs) in {build_dir}; `pip install -v` shows every command")
        status, tail = run_make(progress, [*make_arguments, str(build_dir / LIBRARY)], "library")
        if status != 0:
            raise SystemExit("metaltopk: the library did not build:\n" + "\n".join(tail))

        package_dir = Path(self.build_lib) / "metaltopk"
        package_dir.mkdir(parents=True, exist_ok=True)
        # build_lib is shared by every build from this checkout: only this build's files go in.
        for pattern in (*NATIVE_FILES, TORCH_SKIPPED):
            for stale in package_dir.glob(pattern):
                stale.unlink()
        shutil.copy2(build_dir / LIBRARY, package_dir / LIBRARY)
        shutil.copy2(REPO / "include" / "metaltopk.h", package_dir / "metaltopk.h")
        if torch:
            self.build_torch_parts(progress, make_arguments, build_dir, package_dir, torch)
        progress.say("done")

    def build_torch_parts(self, progress, make_arguments, build_dir, package_dir, torch):
        skipped = []
        for name, target, outputs in (
                ("the AOTInductor shim", "aoti", lambda: [build_dir / AOTI_LIBRARY]),
                ("the torch fast path", "torch-extension",
                 lambda: list(build_dir.glob(TORCH_EXTENSION + "*")))):
            progress.say(f"building {name} for torch {torch}")
            # ADAPTER_WERROR=: a newer torch's deprecation warnings must not cost the fast path.
            status, tail = run_make(progress, [*make_arguments, "ADAPTER_WERROR=", target], name)
            if status == 0:
                for built in outputs():
                    shutil.copy2(built, package_dir / built.name)
                continue
            reason = f"{name} was not built for torch {torch}: {failure_reason(tail)}"
            progress.say(f"WARNING: {reason}")
            skipped.append(reason)
        if skipped:
            progress.say("WARNING: the package works without them: calls on torch tensors go "
                         "through cffi (`pip install -v` shows the whole build)")
            (package_dir / TORCH_SKIPPED).write_text("; ".join(skipped) + "\n")


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
