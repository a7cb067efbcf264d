"""Checks of the Python arguments, made as torch.topk makes them, each error naming the argument.

Every entry point calls these before it dispatches, so numpy, torch, CuPy and DLPack inputs
reject the same misuse with the same message. Each check is a type test first: a call with
plain bools and ints (the hot path) pays one comparison per argument.
"""

import operator

import numpy as np

INT64_MIN, INT64_MAX = -2**63, 2**63 - 1

# The types of traced sizes (torch.SymInt, registered by metaltopk.torch), which pass unchecked:
# the op's fake kernel checks their range. A registry rather than a look-up of torch in
# sys.modules, which Dynamo cannot trace (it iterates that dict while imports change it).
_symbolic_int_types = ()


def register_symbolic_int_type(symbolic_int_type: type) -> None:
    global _symbolic_int_types
    _symbolic_int_types += (symbolic_int_type,)

# Names the backend argument accepts; None means "default".
BACKEND_NAMES = ("default", "cpu", "cuda", "metal", "mpsgraph")


def boolean(value, name: str, function: str) -> bool:
    """value as a bool: Python and numpy bools only. torch.topk rejects even 0 and 1; so do we,
    so that largest=None or sorted="no" can never pass for a choice."""
    if value.__class__ is bool:
        return value
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise TypeError(f"metaltopk.{function}: {name} must be a bool, not "
                    f"{type(value).__name__}")


def integer(value, name: str, function: str, out_of_range=ValueError) -> int:
    """value as an int64 (operator.index semantics: numpy integers and 0-d integer tensors pass;
    bools, floats and strings do not, as in torch.topk). An int outside int64 raises
    `out_of_range` (ValueError for sizes such as k, IndexError for dim), as the library's own
    range check would."""
    if value.__class__ is not int:
        if isinstance(value, _symbolic_int_types):
            return value
        if isinstance(value, (bool, np.bool_)):
            raise TypeError(f"metaltopk.{function}: {name} must be an integer, not bool")
        try:
            value = operator.index(value)
        except TypeError:
            raise TypeError(f"metaltopk.{function}: {name} must be an integer, not "
                            f"{type(value).__name__}") from None
    if not INT64_MIN <= value <= INT64_MAX:
        raise out_of_range(f"metaltopk.{function}: {name} = {value} is out of range (it does "
                           "not fit in int64)")
    return value


def optional_integer(value, name: str, function: str):
    return None if value is None else integer(value, name, function)


def real(value, name: str, function: str) -> float:
    """value as a float: ints, floats and anything with __float__ (numpy scalars), not bools or
    strings."""
    if value.__class__ is float:
        return value
    if isinstance(value, (bool, np.bool_, str, bytes)):
        raise TypeError(f"metaltopk.{function}: {name} must be a real number, not "
                        f"{type(value).__name__}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"metaltopk.{function}: {name} must be a real number, not "
                        f"{type(value).__name__}") from None


def backend_name(backend, function: str) -> str:
    """The backend argument checked against the backend names: "default" for None."""
    if backend is None:
        return "default"
    if backend.__class__ is str and backend in BACKEND_NAMES:
        return backend
    raise ValueError(f"metaltopk.{function}: backend = {backend!r} is not one of "
                     + ", ".join(repr(b) for b in BACKEND_NAMES) + " (or None)")


def topk_arguments(k, dim, largest, sorted):
    """(k, dim, largest, sorted) checked, for every kind of input."""
    if k.__class__ is not int or not INT64_MIN <= k <= INT64_MAX:
        k = integer(k, "k", "topk")
    if dim.__class__ is not int or not INT64_MIN <= dim <= INT64_MAX:
        dim = integer(dim, "dim", "topk", IndexError)
    if largest.__class__ is not bool:
        largest = boolean(largest, "largest", "topk")
    if sorted.__class__ is not bool:
        sorted = boolean(sorted, "sorted", "topk")
    return k, dim, largest, sorted


def check_static_k_and_dim(shape, k, dim, function: str = "topk") -> None:
    """The library's k and dim checks, made in Python where every size is a plain int. Under
    torch.compile an op's fake kernel raising ValueError reaches the caller wrapped in Dynamo's
    TorchRuntimeError; raised here, in the traced Python, it keeps its type."""
    if dim.__class__ is not int or k.__class__ is not int or any(
            size.__class__ is not int for size in shape):
        return  # a traced (symbolic) size: the fake kernel checks it
    rank = max(len(shape), 1)
    if not -rank <= dim < rank:
        raise IndexError(f"metaltopk.{function}: dim = {dim} is out of range for a "
                         f"{len(shape)}-d input (expected {-rank} <= dim <= {rank - 1})")
    size = shape[dim] if shape else 1
    if not 0 <= k <= size:
        raise ValueError(f"metaltopk.{function}: k = {k} is out of range for a dimension of size "
                         f"{size} (expected 0 <= k <= {size})")


def check_backend_matches(backend, device_backend: str, device: str, function: str) -> None:
    """A device tensor runs on its own device's backend: `backend` may only name that one."""
    if backend is not None and backend != device_backend:
        if backend_name(backend, function) not in ("default", device_backend):
            raise ValueError(f"metaltopk.{function}: the input lives on {device} but backend = "
                             f"{backend!r} was asked for (None or {device_backend!r} run it "
                             "there)")
