"""The torch CUDA path of python/metaltopk/_gpu_arrays.py, run on the CPU.

Its Python only runs on a GPU otherwise, so here CPU tensors stand in for CUDA ones: a CPU
tensor's get_device() is -1, and device -1 is given the CPU as its torch.device, 0 as its current
stream and the CPU backend's context. The view, the output allocation and the packed call are
then the ones a CUDA tensor gets. Results are checked against the numpy model bit for bit.
"""

import dataclasses

import ml_dtypes
import numpy as np
import pytest

from metaltopk import _core, _gpu_arrays
import reference as ref

torch = pytest.importorskip("torch", reason="torch is not installed (make test-deps)")

CASES = [((1, 256), 8, -1), ((128, 256), 8, -1), ((37, 100), 33, 0), ((2, 3, 30), 5, 2), ((2, 30, 3), 5, 1),
         ((4, 6), 0, -1), ((0, 5), 2, -1), ((), 1, 0)]
DTYPES = [torch.bfloat16, torch.float32, torch.int64]


@pytest.fixture
def describe(monkeypatch):
    """x -> the adapter's DeviceTensor of the CPU tensor x, as if x were on CUDA device -1."""
    _gpu_arrays._torch_setup(torch)
    monkeypatch.setattr(_gpu_arrays, "_torch_current_stream", lambda index: 0)
    monkeypatch.setattr(_gpu_arrays, "_torch_devices", {})
    cpu = torch.device("cpu")
    with monkeypatch.context() as patch:
        patch.setattr(torch, "device", lambda kind, index: cpu)
        _gpu_arrays._torch_device(torch, -1)
    monkeypatch.setitem(_core._contexts, ("cuda", -1), _core.context("cpu"))
    return lambda x: _gpu_arrays._torch_view(x, torch)


def to_numpy(t):
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def sample(shape, dtype, seed):
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 4
    return x.round().to(dtype)  # ties, so the tie order is checked too


def check_outputs(x, values, indices, k, dim, largest):
    want_values, want_indices = ref.reference_topk(to_numpy(x), k, dim, largest)
    np.testing.assert_array_equal(indices.numpy(), want_indices)
    np.testing.assert_array_equal(ref.bits(to_numpy(values)), ref.bits(want_values))
    # What torch.empty would have returned: contiguous, own storage, on the input's device.
    for out, dtype in ((values, x.dtype), (indices, torch.int64)):
        assert out.dtype == dtype and out.device == x.device
        assert out.stride() == torch.empty(out.shape).stride()
    storages = {t.untyped_storage().data_ptr() for t in (x, values, indices) if t.numel()}
    assert len(storages) == sum(1 for t in (x, values, indices) if t.numel())


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape,k,dim", CASES)
@pytest.mark.parametrize("largest", [True, False])
def test_matches_reference(describe, dtype, shape, k, dim, largest):
    x = sample(shape, dtype, seed=len(shape) + k)
    values, indices = _core._topk_device_tensor(describe(x), k, dim, largest, 1, None)
    check_outputs(x, values, indices, k, dim, largest)


def test_strided_views(describe):
    base = sample((64, 300), torch.bfloat16, seed=3)
    for view in (base[:, ::3], base.t(), base[1::2, 100:200]):
        for dim in (0, 1):
            k = min(17, view.shape[dim])
            values, indices = _core._topk_device_tensor(describe(view), k, dim, 1, 1, None)
            check_outputs(view, values, indices, k, dim, True)


def test_adapters_without_allocate_get_the_same_results(describe):
    """CuPy and other adapters give only new_empty: topk then describes outputs from it."""
    x = sample((9, 40), torch.float32, seed=5)
    view = dataclasses.replace(describe(x), allocate=None)
    values, indices = _core._topk_device_tensor(view, 6, -1, 1, 1, None)
    check_outputs(x, values, indices, 6, -1, True)


def test_new_empty_describes_its_output(describe):
    """The router allocates its outputs through new_empty and packs what it returns."""
    view = describe(sample((3, 8), torch.float16, seed=1))
    out = view.new_empty((3, 4), "int32")
    assert out.owner.dtype == torch.int32 and out.owner.shape == (3, 4)
    assert (out.data, out.dtype, out.shape, out.strides) == (out.owner.data_ptr(), "int32",
                                                              (3, 4), (4, 1))
    assert (out.backend, out.device_index, out.stream) == ("cuda", view.device_index, 0)


def test_out_of_range_arguments_are_the_library_errors(describe):
    view = describe(sample((2, 5), torch.float32, seed=2))
    with pytest.raises(ValueError, match="k"):
        _core._topk_device_tensor(view, 6, -1, 1, 1, None)
    with pytest.raises(IndexError, match="dim"):
        _core._topk_device_tensor(view, 1, 2, 1, 1, None)


def test_unsupported_dtype_is_type_error(describe):
    with pytest.raises(TypeError, match="bool"):
        describe(torch.zeros(4, dtype=torch.bool))
