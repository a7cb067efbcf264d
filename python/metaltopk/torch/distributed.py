"""Top-k across ranks over torch.distributed (tensor-parallel logits split along the vocabulary).

    values, indices = metaltopk.distributed.topk(local, k, dim=-1, largest=True, sorted=True,
                                                 group=None, offset=None)

Every rank passes its shard; every rank gets the top-k of the concatenation of the shards along
`dim`, with global int64 indices, under the single-device contract (NaN above +inf, -0.0 ==
+0.0, ties to the lower global index, bit-exact values).

How (three steps, two collectives on the success path):

1. Each rank checks its own arguments and selects its local candidates: metaltopk.topk(local,
   min(k, n_local), dim, largest, sorted=True). Whatever fails here is recorded, not raised.
2. One all_gather of a fixed-size int64 metadata row per rank (shape, dtype, dim, k, flags,
   offset, and the class and message of a local failure). Every rank validates the same table
   in the same order, so every rank raises the same exception, or none does.
3. Each rank packs its candidates (global indices, as int32 when every global index fits, and
   value bits) into one byte buffer padded to the largest candidate count; one all_gather; the
   padding is cut off using the counts every rank knows from step 2, so it is never selectable.
   The candidate blocks are concatenated in order of their offsets and metaltopk selects again.

Why ties come out right: the merge's only tie rule is "lower position in the concatenation
wins". Within a rank's block, equal values come in ascending index order (the local select is
sorted, ties to the lower index), and the blocks are ordered by offset over non-overlapping
index ranges, so among equal values position order is global index order. The local select
keeps every element that can be in the global top-k (an element preceded by k or more of its
own shard's elements is preceded by k or more globally). The merge compares values only through
metaltopk, so NaN, signed zeros and bf16 follow the contract; values move as raw bits.
"""

import builtins
import operator

import numpy as np
import torch
import torch.distributed as dist

from .. import _dispatch
from .._arguments import boolean
from .._ffi import lib

__all__ = ["topk"]

_NAME = "metaltopk.distributed.topk"

# Contract dtypes in a fixed order: a shard's dtype travels as its position + 1 (0: none).
_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8,
           torch.int16, torch.int32, torch.int64)
_DTYPE_CODES = {dtype: code for code, dtype in enumerate(_DTYPES, 1)}
# Same-width integer dtypes: values are copied, concatenated and laid out as bits, never as floats.
_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_DEVICE_TYPES = ("cpu", "cuda", "mps", "xpu", "hip")  # code = position + 1; 99: another type

# Exception classes a rank can report; the code is the position (0: no error).
_ERRORS = (None, TypeError, ValueError, IndexError, MemoryError, RuntimeError)

# ---- the metadata row: one int64 vector per rank -----------------------------------------------
_FORMAT = 0x6D746B01  # "mtk" + format version: a rank running another layout is detected
_MAX_NDIM = lib.MTK_MAX_NDIM
(_FORMAT_SLOT, _ERROR, _NDIM, _DTYPE, _DIM, _K, _LARGEST, _SORTED, _HAS_OFFSET, _OFFSET,
 _DEVICE, _SHAPE) = range(12)
_MESSAGE = _SHAPE + _MAX_NDIM
_MESSAGE_BYTES = 256
_SLOTS = _MESSAGE + _MESSAGE_BYTES // 8
_INT64_MAX = 2**63 - 1
_INT32_MAX = 2**31 - 1

_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def _select(x, k, dim, largest, sorted):
    """metaltopk.topk on a torch tensor: torch tensors on x's device come back. A module-level
    name, so that tests can make one rank's local selection fail."""
    return _dispatch.topk(x, k, dim, largest, sorted)


# ---- errors ---------------------------------------------------------------------------------


def _integer(value, name):
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {type(value).__name__}") from None


def _encode_message(text):
    data = text.encode("utf-8")[:_MESSAGE_BYTES].ljust(_MESSAGE_BYTES, b"\0")
    return np.frombuffer(data, dtype="<i8").tolist()


def _decode_message(slots):
    data = np.array(slots, dtype="<i8").tobytes().rstrip(b"\0")
    return data.decode("utf-8", "replace")


def _error_code(exc):
    for code, cls in enumerate(_ERRORS):
        if cls is not None and isinstance(exc, cls):
            return code
    return _ERRORS.index(RuntimeError)


# ---- step 1: this rank alone ----------------------------------------------------------------


def _describe_local(local, k, dim, offset, largest, sorted, row):
    """Fills this rank's metadata row; raises (to be recorded) for arguments that are wrong on
    this rank alone. Returns the normalised (k, dim, offset, local size along dim)."""
    if not isinstance(local, torch.Tensor):
        raise TypeError(f"local must be a torch.Tensor, got {type(local).__name__}")
    k = _integer(k, "k")
    dim = _integer(dim, "dim")
    if offset is not None:
        offset = _integer(offset, "offset")
    code = _DTYPE_CODES.get(local.dtype)
    if code is None:
        raise TypeError(f"dtype {local.dtype} is not supported (supported: "
                        + ", ".join(str(d).replace("torch.", "") for d in _DTYPES) + ")")
    ndim = local.dim()
    if ndim == 0:
        raise ValueError("a 0-d shard cannot be concatenated along a dim; give 1-d shards")
    if ndim > _MAX_NDIM:
        raise ValueError(f"local.ndim = {ndim} exceeds MTK_MAX_NDIM = {_MAX_NDIM}")
    if not -ndim <= dim < ndim:
        raise IndexError(f"dim = {dim} is out of range for a {ndim}-d shard "
                         f"(expected [{-ndim}, {ndim - 1}])")
    dim %= ndim
    if not 0 <= k <= _INT64_MAX:
        raise ValueError(f"k = {k} must be >= 0")
    if offset is not None and not 0 <= offset <= _INT64_MAX:
        raise ValueError(f"offset = {offset} must be >= 0")
    device = local.device.type
    row[_NDIM] = ndim
    row[_DTYPE] = code
    row[_DIM] = dim
    row[_K] = k
    row[_LARGEST] = int(boolean(largest, "largest", "distributed.topk"))
    row[_SORTED] = int(boolean(sorted, "sorted", "distributed.topk"))
    row[_HAS_OFFSET] = int(offset is not None)
    row[_OFFSET] = offset or 0
    row[_DEVICE] = _DEVICE_TYPES.index(device) + 1 if device in _DEVICE_TYPES else 99
    row[_SHAPE:_SHAPE + ndim] = list(local.shape)
    return k, dim, offset, local.shape[dim]


# ---- communication devices ------------------------------------------------------------------


def _backend_map(group):
    """{device type: backend name} of the group, e.g. {"cpu": "gloo", "cuda": "nccl"}."""
    try:
        config = str(dist.get_backend_config(group))
    except (AttributeError, RuntimeError, ValueError):
        config = str(dist.get_backend(group))
    mapping = {}
    for part in config.split(","):
        device, _, backend = part.strip().rpartition(":")
        if device:
            mapping[device] = backend
        else:
            mapping.setdefault("cpu", backend)
            mapping.setdefault("cuda", backend)
    return mapping


def _cuda_device(local):
    if isinstance(local, torch.Tensor) and local.is_cuda:
        return local.device
    return torch.device("cuda", torch.cuda.current_device())


def _metadata_device(mapping, local):
    """Chosen from the group alone, never from the (unvalidated) input, so every rank talks
    through the same backend: the CPU where the group has a CPU backend, else CUDA."""
    if "cpu" in mapping:
        return torch.device("cpu")
    if "cuda" in mapping:
        return _cuda_device(local)
    return local.device if isinstance(local, torch.Tensor) else torch.device("cpu")


def _candidate_device(mapping, local):
    """Where the candidates travel; the same device type on every rank (validated). gloo moves
    host memory, so its candidates go through the CPU whatever the shards' device."""
    backend = mapping.get(local.device.type)
    if backend is not None and backend != "gloo":
        return local.device
    return torch.device("cpu") if "cpu" in mapping else _cuda_device(None)


# ---- step 2: the same validation on every rank ----------------------------------------------


def _fail(cls, message, cause=None):
    raise cls(f"{_NAME}: {message}") from cause


def _validate(table, rank, local_failure):
    """Raises identically on every rank, or returns (dim, k, largest, sorted, sizes, offsets)."""
    world = len(table)
    formats = [row[_FORMAT_SLOT] for row in table]
    if len(set(formats)) != 1:
        _fail(RuntimeError, f"ranks run different versions of this function (formats {formats})")
    for r, row in enumerate(table):
        if row[_ERROR]:
            cause = local_failure if r == rank else None
            _fail(_ERRORS[row[_ERROR]], f"rank {r}: {_decode_message(row[_MESSAGE:])}", cause)

    def agree(slot, what, cls=ValueError, show=lambda v: v):
        values = [row[slot] for row in table]
        if len(set(values)) != 1:
            _fail(cls, f"{what} differs across ranks: "
                  + ", ".join(f"rank {r}: {show(v)}" for r, v in enumerate(values)))
        return values[0]

    ndim = agree(_NDIM, "the shards' number of dims")
    agree(_DTYPE, "the shards' dtype", TypeError,
          show=lambda code: str(_DTYPES[code - 1]).replace("torch.", ""))
    agree(_DEVICE, "the shards' device type",
          show=lambda code: _DEVICE_TYPES[code - 1] if code <= len(_DEVICE_TYPES) else "other")
    dim = agree(_DIM, "dim")
    k = agree(_K, "k")
    largest = agree(_LARGEST, "largest")
    sorted_ = agree(_SORTED, "sorted")
    explicit = agree(_HAS_OFFSET, "whether offset is given (it must be on all ranks or none)",
                     show=bool)
    shapes = [tuple(row[_SHAPE:_SHAPE + ndim]) for row in table]
    others = {shape[:dim] + shape[dim + 1:] for shape in shapes}
    if len(others) != 1:
        _fail(ValueError, f"the shards must have the same size in every dim but dim {dim}, got "
              + ", ".join(f"rank {r}: {list(s)}" for r, s in enumerate(shapes)))
    sizes = [shape[dim] for shape in shapes]
    if explicit:
        offsets = [row[_OFFSET] for row in table]
        spans = sorted((offsets[r], offsets[r] + sizes[r], r) for r in range(world) if sizes[r])
        for (start, end, r), (next_start, next_end, q) in zip(spans, spans[1:]):
            if next_start < end:
                _fail(ValueError, f"offsets overlap: rank {r} covers [{start}, {end}) and rank "
                      f"{q} covers [{next_start}, {next_end}) of dim {dim}")
        if spans and spans[-1][1] - 1 > _INT64_MAX:
            _fail(ValueError, f"rank {spans[-1][2]}'s offset + size exceeds the int64 range")
    else:
        offsets = [sum(sizes[:r]) for r in range(world)]
    total = sum(sizes)
    if k > total:
        _fail(ValueError, f"k = {k} is out of range [0, {total}] (the total size of dim {dim} "
              f"over {world} ranks)")
    return dim, k, bool(largest), bool(sorted_), sizes, offsets


# ---- the entry point ------------------------------------------------------------------------


def topk(local, k, *, dim=-1, largest=True, sorted=True, group=None, offset=None):
    """The global top-k of the shards that the ranks of `group` pass, on every rank.

    local: this rank's shard (a torch tensor, any device metaltopk supports, any strides, any of
    the nine dtypes). Shards must agree in every dim but `dim`, where sizes may differ (0 too).
    offset: this shard's first global index along dim; default: the sum of the sizes of the
    lower ranks' shards. Explicit offsets may leave gaps but must not overlap.
    Returns (values, indices) on local's device: values of local's dtype, global int64 indices,
    shaped like local with dim of size k; the same on every rank. Wrong arguments on any rank
    raise the contract's exception (ValueError, IndexError, TypeError) on every rank.
    Collective: every rank of the group must call it.
    """
    world = dist.get_world_size(group)
    rank = dist.get_rank(group)
    if rank < 0:  # only this rank can know; the group's members do not wait for it
        raise ValueError(f"{_NAME}: this process is not a member of group")
    mapping = _backend_map(group)

    # Step 1: local checks and the local selection; failures are recorded, not raised.
    row = [0] * _SLOTS
    row[_FORMAT_SLOT] = _FORMAT
    local_failure = candidates = None
    try:
        k_, dim_, _, n = _describe_local(local, k, dim, offset, largest, sorted, row)
        local = local.detach()
        candidates = _select(local, min(k_, n), dim_, largest, True)
    except Exception as exc:  # noqa: BLE001 -- reported to every rank below
        local_failure = exc
        row[_ERROR] = _error_code(exc)
        row[_MESSAGE:] = _encode_message(str(exc) or type(exc).__name__)

    # Step 2: one all_gather of the metadata rows, the same validation everywhere.
    meta_device = _metadata_device(mapping, local)
    if meta_device.type == "cuda":  # pinned: the copy does not wait for the stream's work
        mine = torch.tensor(row, dtype=torch.int64, pin_memory=True)
        mine = mine.to(meta_device, non_blocking=True)
    else:
        mine = torch.tensor(row, dtype=torch.int64, device=meta_device)
    every = torch.empty(world * _SLOTS, dtype=torch.int64, device=meta_device)
    _all_gather_single(every, mine, group=group)
    table = every.view(world, _SLOTS).tolist()
    dim, k, largest, sorted, sizes, offsets = _validate(table, rank, local_failure)

    shape = list(local.shape)
    out_shape = shape[:dim] + [k] + shape[dim + 1:]
    rows = 1
    for d, size in enumerate(shape):
        rows *= 1 if d == dim else size
    if k == 0 or rows == 0:  # nothing to select: the same decision on every rank
        return (torch.empty(out_shape, dtype=local.dtype, device=local.device),
                torch.empty(out_shape, dtype=torch.int64, device=local.device))

    # Step 3: candidates of every rank, padded to a common count, in one byte buffer.
    counts = [min(k, size) for size in sizes]
    width = max(counts)
    narrow = max(o + s for o, s in zip(offsets, sizes)) - 1 <= _INT32_MAX
    index_dtype = torch.int32 if narrow else torch.int64
    index_size = 4 if narrow else 8
    bits = _BITS[local.element_size()]
    index_bytes = rows * width * index_size
    value_bytes = rows * width * local.element_size()
    value_start = -(-index_bytes // 8) * 8  # each part starts 8-byte aligned
    stride = value_start + (-(-value_bytes // 8) * 8)

    device = _candidate_device(mapping, local)
    moved = shape[:dim] + shape[dim + 1:]  # the batch dims; dim goes last
    buffer = torch.empty(stride, dtype=torch.uint8, device=device)
    count = counts[rank]
    if count:
        values, indices = candidates
        index_part = buffer[:index_bytes].view(index_dtype).view(rows, width)[:, :count]
        index_part = index_part.view(moved + [count])
        index_part.copy_(indices.movedim(dim, -1))
        if offsets[rank]:
            index_part.add_(offsets[rank])
        value_part = buffer[value_start:value_start + value_bytes].view(bits).view(rows, width)
        value_part[:, :count].view(moved + [count]).copy_(values.view(bits).movedim(dim, -1))
    gathered = torch.empty(world * stride, dtype=torch.uint8, device=device)
    _all_gather_single(gathered, buffer, group=group)
    gathered = gathered.view(world, stride)
    if device != local.device:
        gathered = gathered.to(local.device)

    all_indices = gathered[:, :index_bytes].view(index_dtype).view(world, rows, width)
    all_values = gathered[:, value_start:value_start + value_bytes].view(bits)
    all_values = all_values.view(world, rows, width)
    order = [r for _, r in builtins.sorted((offsets[r], r) for r in range(world)) if counts[r]]
    merged_values = torch.cat([all_values[r, :, :counts[r]] for r in order], dim=1)
    merged_indices = torch.cat([all_indices[r, :, :counts[r]] for r in order], dim=1)

    # The merge: positions in offset order, so metaltopk's "lower position wins" is the contract.
    values, positions = _select(merged_values.view(local.dtype), k, 1, largest, sorted)
    indices = torch.gather(merged_indices, 1, positions).to(torch.int64)
    values = values.view(bits).view(moved + [k]).movedim(-1, dim).contiguous().view(local.dtype)
    indices = indices.view(moved + [k]).movedim(-1, dim).contiguous()
    return values, indices
