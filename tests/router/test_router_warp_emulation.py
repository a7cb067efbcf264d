"""The CUDA router's per-token routine, run on the host by warp_emulation.cpp (32 fibers as the
lanes of a warp, on the CUDA kernels' fiber emulation, tests/cuda/emulation/fiber_cuda.hpp),
against the float64 reference: the kernel's selection logic is checked on machines without a
GPU. On a GPU, test_router.py runs the real kernel through the library."""

import itertools
import os
import shutil
import subprocess
from pathlib import Path

import cffi
import numpy as np
import pytest

import router_checks as rc
from metaltopk import _ffi as package_ffi

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


@pytest.fixture(scope="module")
def emulator(tmp_path_factory):
    compiler = os.environ.get("CXX") or shutil.which("clang++") or shutil.which("g++")
    if compiler is None:
        pytest.skip("no C++ compiler to build the warp emulation")
    library = tmp_path_factory.mktemp("warp") / "libwarp_emulation.so"
    subprocess.run([compiler, "-std=c++17", "-O2", "-shared", "-fPIC", "-Wall", "-Wextra",
                    "-Werror", f"-I{REPO / 'include'}", f"-I{REPO / 'lib'}",
                    f"-I{REPO / 'tests' / 'cuda' / 'emulation'}",
                    str(HERE / "warp_emulation.cpp"),
                    *(str(REPO / "lib" / "core" / name)
                      for name in ("validate.cpp", "dtype.cpp", "error.cpp")),
                    "-o", str(library)], check=True)
    ffi = cffi.FFI()
    ffi.cdef(package_ffi.cdef_from_header(package_ffi.header_text))
    ffi.cdef("int emulate_moe_route(const mtk_tensor*, const mtk_router_params*, "
             "const mtk_tensor*, const mtk_tensor*, int);")
    ffi.cdef("int64_t count_float_key_mismatches(void);")
    return ffi, ffi.dlopen(str(library))


DTYPE_CODES = {"float32": 0, "float16": 1, "bfloat16": 2, "int32": 7, "int64": 8}
SCORING_CODES = {"softmax": 0, "sigmoid": 1, "none": 2}


def _tensor(ffi, array):
    t = ffi.new("mtk_tensor*")
    t.data = ffi.cast("void*", array.ctypes.data)
    t.dtype = DTYPE_CODES[array.dtype.name]
    t.ndim = array.ndim
    for d in range(array.ndim):
        t.sizes[d] = array.shape[d]
        t.strides[d] = array.strides[d] // array.itemsize
    return t


def emulate(emulator, logits, k, *, scoring="softmax", bias=None, n_group=None,
            topk_group=None, renormalize=True, scale=1.0, index_dtype=np.int32,
            numerators_in_rounds=True):
    """numerators_in_rounds picks the biased or grouped path's way to the weights (the GPU's
    plan picks it by launch size)."""
    ffi, lib = emulator
    tokens = logits.shape[0]
    weights = np.full((tokens, k), np.float32(-7.0))
    ids = np.full((tokens, k), -7, dtype=index_dtype)
    bias_t = _tensor(ffi, bias) if bias is not None else ffi.NULL
    params = ffi.new("mtk_router_params*", {
        "struct_size": ffi.sizeof("mtk_router_params"),
        "k": k, "scoring": SCORING_CODES[scoring], "bias": bias_t,
        "n_group": n_group or 0, "topk_group": topk_group or 0,
        "renormalize": int(renormalize), "scale": scale})
    assert lib.emulate_moe_route(_tensor(ffi, logits), params, _tensor(ffi, weights),
                                 _tensor(ffi, ids), int(numerators_in_rounds)) == 0
    return weights, ids


# Register routine sizes (1..16 experts per lane), a partial last lane, and streaming sizes.
EXPERTS = [8, 64, 128, 256, 512, 100, 700]
GROUPINGS = {**rc.GROUPINGS, 100: [(4, 2), (50, 7)], 700: [(7, 3), (70, 12)]}


def _cases():
    # k = 2 runs the same code as k = 8 here; every case costs seconds of fiber switching.
    for experts, k in itertools.product(EXPERTS, [1, 8, 10]):
        if k > experts:
            continue
        for grouping in [None] + GROUPINGS[experts]:
            if grouping is not None and k > grouping[1] * (experts // grouping[0]):
                continue
            yield experts, k, grouping


# (dtype, value kind, layout) combinations; each case runs two of them, in rotation.
INPUTS = [(np.float32, "normal", "contiguous"), (rc.BFLOAT16, "ties", "contiguous"),
          (np.float16, "normal", "strided"), (rc.BFLOAT16, "normal", "transposed")]


@pytest.mark.parametrize("experts,k,grouping", list(_cases()))
@pytest.mark.parametrize("scoring", ["softmax", "sigmoid", "none"])
@pytest.mark.parametrize("with_bias", [False, True])
def test_emulated_kernel_matches_reference(emulator, experts, k, grouping, scoring, with_bias):
    rng = np.random.default_rng([experts, k, len(scoring), with_bias])
    n_group, topk_group = grouping if grouping is not None else (None, None)
    first = (experts + k + len(scoring) + with_bias) % len(INPUTS)
    # The two inputs take the two ways to the weights of the biased or grouped path.
    for (dtype, kind, layout), in_rounds in zip(
            (INPUTS[first], INPUTS[(first + 1) % len(INPUTS)]), (True, False)):
        logits = rc.make_logits(rng, 3, experts, np.dtype(dtype), kind, layout)
        bias = rc.make_bias(rng, experts, kind) if with_bias else None
        renormalize = bool(rng.integers(2))
        scale = 1.0 if renormalize else 2.5
        weights, ids = emulate(emulator, logits, k, scoring=scoring, bias=bias,
                               n_group=n_group, topk_group=topk_group,
                               renormalize=renormalize, scale=scale,
                               numerators_in_rounds=in_rounds)
        rc.check_route(weights, ids, logits, k, scoring=scoring, bias=bias, n_group=n_group,
                       topk_group=topk_group, renormalize=renormalize, scale=scale)


@pytest.mark.parametrize("experts,k", [(8, 8), (64, 40), (96, 96), (600, 45)])
@pytest.mark.parametrize("index_dtype", [np.int32, np.int64])
def test_emulated_kernel_large_k(emulator, experts, k, index_dtype):
    """k beyond one warp's lanes: selections fill several register slots per lane."""
    rng = np.random.default_rng(experts + k)
    logits = rc.make_logits(rng, 3, experts, np.dtype(np.float32), "ties")
    for kwargs in [{}, {"scoring": "sigmoid", "bias": rc.make_bias(rng, experts, "ties")},
                   {"renormalize": False}]:
        weights, ids = emulate(emulator, logits, k, index_dtype=index_dtype, **kwargs)
        assert ids.dtype == index_dtype
        rc.check_route(weights, ids, logits, k, **kwargs)


@pytest.mark.parametrize("in_rounds", [True, False])
def test_emulated_kernel_negative_scores_in_small_groups(emulator, in_rounds):
    """Every selection score below zero, in groups of 4, 8 and 16 experts: a group's top two
    must start from below every real score (a zero there would outrank them all)."""
    rng = np.random.default_rng(7)
    logits = (-np.abs(rng.standard_normal((4, 64))) - 1.0).astype(np.float32)
    for n_group, topk_group in [(8, 3), (4, 2), (16, 5)]:
        weights, ids = emulate(emulator, logits, 8, scoring="none", n_group=n_group,
                               topk_group=topk_group, renormalize=False,
                               numerators_in_rounds=in_rounds)
        rc.check_route(weights, ids, logits, 8, scoring="none", n_group=n_group,
                       topk_group=topk_group, renormalize=False)


def test_emulated_kernel_special_values(emulator):
    """NaN (both signs), infinities and signed zeros: plain-path ids are the top-k contract's."""
    import metaltopk

    rng = np.random.default_rng(5)
    specials = np.array([np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0, 3.0])
    for experts in (8, 64, 256, 512, 700):
        logits = rng.choice(specials, size=(4, experts)).astype(np.float32)
        for scoring in ("softmax", "sigmoid", "none"):
            weights, ids = emulate(emulator, logits, 8, scoring=scoring)
            _, expected = metaltopk.topk(logits, 8, backend="cpu")
            np.testing.assert_array_equal(ids, expected)
            rc.check_route(weights, ids, logits, 8, scoring=scoring)
        bias = rc.make_bias(rng, experts)
        k = min(8, experts // 2)  # what the two kept groups of four hold
        weights, ids = emulate(emulator, logits, k, scoring="sigmoid", bias=bias, n_group=4,
                               topk_group=2)
        rc.check_route(weights, ids, logits, k, scoring="sigmoid", bias=bias, n_group=4,
                       topk_group=2)


def test_branch_free_float_keys_match_the_contracts(emulator):
    """The kernels rank by their own branch-free float keys; they must be ordered_key.hpp's."""
    _, lib = emulator
    assert lib.count_float_key_mismatches() == 0
