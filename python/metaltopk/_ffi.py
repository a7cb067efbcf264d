"""Loads libmetaltopk through cffi in ABI mode (no compiler at install time).

The declarations are generated from the installed C header itself, so the Python view of the ABI
cannot drift from the library's: only preprocessor lines, the C++ guard and the export macro are
removed, and integer macros (MTK_MAX_NDIM, the version numbers) are substituted.
"""

import os
import re
import sys
from pathlib import Path

import cffi

PACKAGE_DIR = Path(__file__).resolve().parent
# In a source checkout the package lives at <repo>/python/metaltopk.
REPO_ROOT = PACKAGE_DIR.parents[1]

LIBRARY_NAME = "libmetaltopk.dylib" if sys.platform == "darwin" else "libmetaltopk.so"
HEADER_NAME = "metaltopk.h"


def header_path() -> Path:
    """The header shipped inside the package, else the checkout's include/metaltopk.h."""
    for candidate in (PACKAGE_DIR / HEADER_NAME, REPO_ROOT / "include" / HEADER_NAME):
        if candidate.is_file():
            return candidate
    raise ImportError(f"metaltopk: {HEADER_NAME} is neither in {PACKAGE_DIR} nor in "
                      f"{REPO_ROOT / 'include'}")


def library_candidates() -> list:
    """Where the shared library is looked for, in order. An explicit METALTOPK_LIBRARY is the
    only candidate: silently falling back to another build would hide a misconfiguration."""
    explicit = os.environ.get("METALTOPK_LIBRARY")
    if explicit:
        return [Path(explicit)]
    return [PACKAGE_DIR / LIBRARY_NAME, REPO_ROOT / "build" / LIBRARY_NAME]


_INTEGER_MACRO = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)[ \t]+(\d+)[ \t]*$", re.M)
_CPLUSPLUS_GUARD = re.compile(r"^[ \t]*#[ \t]*ifdef[ \t]+__cplusplus\b.*?^[ \t]*#[ \t]*endif.*?$",
                              re.M | re.S)
_PREPROCESSOR_LINE = re.compile(r"^[ \t]*#.*$", re.M)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def cdef_from_header(text: str) -> str:
    """Turns metaltopk.h into declarations cffi's cdef accepts."""
    text = _COMMENT.sub(" ", text)
    constants = dict(_INTEGER_MACRO.findall(text))
    text = _CPLUSPLUS_GUARD.sub("", text)
    text = _PREPROCESSOR_LINE.sub("", text)
    text = re.sub(r"\bMTK_API\b", "", text)
    for name, value in constants.items():
        text = re.sub(rf"\b{name}\b", value, text)
    defines = "".join(f"#define {name} {value}\n" for name, value in constants.items())
    return defines + text


def exported_functions(text: str) -> list:
    """Names of every MTK_API function the header declares."""
    return re.findall(r"\bMTK_API\b[^;(]*?\b(mtk_\w+)\s*\(", _COMMENT.sub(" ", text))


def _load():
    header = header_path().read_text()
    ffi = cffi.FFI()
    ffi.cdef(cdef_from_header(header))
    tried = []
    for candidate in library_candidates():
        if candidate.is_file():
            return ffi, ffi.dlopen(str(candidate)), candidate, header
        tried.append(str(candidate))
    raise ImportError("metaltopk: the shared library was not found (looked at "
                      + ", ".join(tried) + "); build it with `make` or set METALTOPK_LIBRARY")


ffi, lib, library_path, header_text = _load()
