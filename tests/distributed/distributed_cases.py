"""The cases of test_distributed.py: each runs on every rank of one process group (gloo, CPU).

A case builds the same global input on every rank (seeded), gives each rank its shard, calls
metaltopk.distributed.topk, and checks the result on that rank against metaltopk.topk on the
concatenated input (values as bits, indices exactly) and against the numpy model in
tests/reference.py. Error cases check that this rank raised the expected exception, then that
the group still works (a correct call right after returns the right answer).
"""

import zlib

import numpy as np
import torch

import metaltopk
import metaltopk.torch.distributed as mtd  # the module that holds _select
import reference as ref

TORCH_DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16,
                "float64": torch.float64, "int8": torch.int8, "uint8": torch.uint8,
                "int16": torch.int16, "int32": torch.int32, "int64": torch.int64}
BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
FLOATS = ["float32", "float16", "bfloat16", "float64"]


class Context:
    def __init__(self, rank, world, group):
        self.rank, self.world, self.group = rank, world, group
        self.calls = 0


# ---- conversions ----------------------------------------------------------------------------


def numpy_dtype(name):
    return ref.BFLOAT16 if name == "bfloat16" else np.dtype(name)


def to_torch(array):
    """numpy (ml_dtypes bf16 included) -> torch, moved as bits."""
    name = array.dtype.name
    raw = np.ascontiguousarray(array).view({1: "u1", 2: "i2", 4: "i4", 8: "i8"}[array.itemsize])
    return torch.from_numpy(raw.copy()).view(TORCH_DTYPES[name])


def to_numpy(tensor):
    raw = tensor.contiguous().view(BITS[tensor.element_size()]).numpy()
    return raw.view(numpy_dtype(str(tensor.dtype).replace("torch.", "")))


def tbits(tensor):
    return tensor.contiguous().view(BITS[tensor.element_size()])


def single_device_topk(x, k, dim, largest, sorted):
    """metaltopk.topk on one device, torch in and out."""
    values, indices = metaltopk.topk(x, k, dim, largest, sorted)
    assert isinstance(values, torch.Tensor) and values.device == x.device
    return values, indices


# ---- the exact check ------------------------------------------------------------------------


def check(ctx, blocks, k, dim=-1, largest=True, sorted=True, order=None, offsets=None,
          layout=None, repeat=False, where=""):
    """blocks: the global input's pieces in global order (one per rank), concatenated along dim.
    order[r]: the block rank r holds (default: block r). offsets[b]: block b's explicit global
    offset (default: None, the function's default offsets). layout(tensor) -> a tensor with the
    same values in another memory layout (strides) for the shard."""
    world = ctx.world
    order = list(range(world)) if order is None else order
    block = blocks[order[ctx.rank]]
    shard = layout(block) if layout is not None else block
    assert torch.equal(tbits(shard), tbits(block))
    offset = None if offsets is None else offsets[order[ctx.rank]]
    where = (f"{where} rank={ctx.rank}/{world} dtype={block.dtype} sizes="
             f"{[b.shape[dim] for b in blocks]} k={k} dim={dim} largest={largest} "
             f"sorted={sorted} order={order} offsets={offsets}")
    values, indices = mtd.topk(shard, k, dim=dim, largest=largest, sorted=sorted,
                               group=ctx.group, offset=offset)
    ctx.calls += 1
    whole = torch.cat([tbits(b) for b in blocks], dim=dim).view(block.dtype)
    want_values, want_positions = single_device_topk(whole, k, dim, largest, True)
    # Positions in the concatenation -> global indices (they differ where offsets leave gaps).
    starts = np.cumsum([0] + [b.shape[dim] for b in blocks])
    to_global = np.concatenate([np.arange(b.shape[dim]) + (starts[i] if offsets is None
                                                           else offsets[i])
                                for i, b in enumerate(blocks)]).astype(np.int64)
    want_indices = torch.from_numpy(to_global[want_positions.numpy()])

    assert values.dtype == block.dtype and indices.dtype == torch.int64, where
    assert values.device == shard.device and indices.device == shard.device, where
    assert tuple(values.shape) == tuple(want_values.shape) == tuple(indices.shape), where
    if sorted:
        assert torch.equal(indices, want_indices), (where, indices, want_indices)
        assert torch.equal(tbits(values), tbits(want_values)), (where, values, want_values)
        # The independent numpy model agrees on the concatenation too.
        model_values, model_positions = ref.reference_topk(to_numpy(whole), k, dim, largest)
        assert np.array_equal(model_positions, want_positions.numpy()), where
        assert np.array_equal(ref.bits(model_values), ref.bits(to_numpy(want_values))), where
    else:
        assert torch.equal(indices.sort(dim).values, want_indices.sort(dim).values), where
        # The values are the input's bits at those indices.
        positions = np.searchsorted(to_global, indices.numpy())
        gathered = torch.gather(tbits(whole), dim, torch.from_numpy(positions))
        assert torch.equal(tbits(values), gathered), where
        if repeat:  # the unsorted order is deterministic
            again = mtd.topk(shard, k, dim=dim, largest=largest, sorted=False, group=ctx.group,
                             offset=offset)
            ctx.calls += 1
            assert torch.equal(again[1], indices), where
            assert torch.equal(tbits(again[0]), tbits(values)), where


def check_all(ctx, blocks, ks, dim=-1, **kwargs):
    """check() for each k (capped at the total), both directions, sorted and not."""
    total = sum(b.shape[dim] for b in blocks)
    for k in sorted({k for k in ks if 0 <= k <= total}):
        for largest in (True, False):
            for sorted_ in (True, False):
                check(ctx, blocks, k, dim, largest, sorted_, **kwargs)


# ---- inputs ---------------------------------------------------------------------------------


def rng_for(name, world):
    return np.random.default_rng(zlib.crc32(f"{name}/{world}".encode()))


def make_blocks(rng, sizes, dtype, kind, rows=3, dim=-1, shape=None):
    """Blocks of `kind` data (reference.random_values) with sizes[r] along dim."""
    base = list(shape) if shape is not None else [rows, 0]
    blocks = []
    for size in sizes:
        block_shape = list(base)
        block_shape[dim] = size
        blocks.append(to_torch(ref.random_values(rng, tuple(block_shape), numpy_dtype(dtype),
                                                 kind)))
    return blocks


def split(sizes, world):
    """The first `world` sizes."""
    return list(sizes)[:world]


def float_bits(dtype, patterns):
    """A 1-row tensor of dtype from raw bit patterns."""
    dtype = numpy_dtype(dtype)
    return to_torch(np.array(patterns, dtype=f"u{dtype.itemsize}").view(dtype))[None]


# ---- cases ----------------------------------------------------------------------------------

CASES = {}


def case(function):
    CASES[function.__name__] = function
    return function


@case
def uneven_shards_float32(ctx):
    rng = rng_for("uneven", ctx.world)
    for kind in ("spread", "ties"):
        blocks = make_blocks(rng, split([7, 1, 13, 4], ctx.world), "float32", kind)
        check_all(ctx, blocks, [1, 2, 5, 8, 14, 20, 25])


@case
def shard_with_zero_elements_and_k_above_a_shard(ctx):
    rng = rng_for("zero", ctx.world)
    sizes = split([5, 0, 6, 3], ctx.world)
    for dtype in ("float32", "bfloat16", "int32"):
        blocks = make_blocks(rng, sizes, dtype, "ties")
        check_all(ctx, blocks, [0, 1, 4, 5, 6, 9, sum(sizes)])
    # Every rank but the last empty.
    sizes = [0] * (ctx.world - 1) + [4]
    check_all(ctx, make_blocks(rng, sizes, "float16", "specials"), [1, 3, 4])


@case
def ties_across_shard_boundaries(ctx):
    """All-equal shards: the top-k must be the k lowest global indices, whichever rank holds
    them, for every k; then few distinct values."""
    sizes = split([3, 4, 2, 5], ctx.world)
    for dtype in ("float32", "bfloat16", "int8", "uint8", "float64"):
        blocks = [torch.ones((2, n), dtype=TORCH_DTYPES[dtype]) for n in sizes]
        every_k = dtype in ("float32", "bfloat16")
        total = sum(sizes)
        ks = range(total + 1) if every_k else sorted({1, 3, 4, 7, total} & set(range(total + 1)))
        for k in ks:
            for largest in (True, False):
                check(ctx, blocks, k, -1, largest, True)
                check(ctx, blocks, k, -1, largest, False, repeat=k == 4)
    rng = rng_for("ties", ctx.world)
    for dtype in ("float32", "int16", "bfloat16"):
        blocks = make_blocks(rng, split([9, 6, 11, 8], ctx.world), dtype, "ties", rows=4)
        check_all(ctx, blocks, [1, 3, 6, 7, 10, 16])


@case
def merge_never_relies_on_an_unsorted_order(ctx):
    """sorted=False leaves the order open. With every unsorted selection made to come back
    reversed (still a valid unsorted result), the results stay exact: ties across ranks must not
    depend on how an unsorted local selection happens to order its output."""
    original = mtd._select

    def reversing(x, k, dim, largest, sorted):
        values, indices = original(x, k, dim, largest, sorted)
        if not sorted:
            values = tbits(values).flip(dim).view(values.dtype)
            indices = indices.flip(dim)
        return values, indices

    mtd._select = reversing
    try:
        rng = rng_for("reversed", ctx.world)
        for dtype in ("float32", "bfloat16"):
            blocks = make_blocks(rng, split([9, 6, 11, 8], ctx.world), dtype, "ties", rows=4)
            check_all(ctx, blocks, [2, 5, 9, 14])
            blocks = [torch.zeros((2, n), dtype=TORCH_DTYPES[dtype]) for n in
                      split([3, 4, 2, 5], ctx.world)]
            check_all(ctx, blocks, [2, 4, 6])
    finally:
        mtd._select = original


@case
def signed_zeros_and_nans_of_both_signs(ctx):
    """-0.0 / +0.0 and NaNs (both signs, several payloads) placed on both sides of every shard
    boundary: the lower global index wins each tie, and the payloads come back bit-exact."""
    for dtype in FLOATS:
        specials = ref.float_specials(numpy_dtype(dtype))
        raw = ref.bits(specials)
        qnan, snan, ones, odd, inf, zero = raw[0], raw[1], raw[2], raw[3], raw[4], raw[5]
        sign = raw[8] ^ raw[0]
        pieces = [[ones, zero, qnan | sign],          # NaN, 0.0 and -NaN ...
                  [zero | sign, snan, inf],          # ... then -0.0 and NaN across the boundary
                  [odd | sign, zero, inf | sign],
                  [zero | sign, qnan, zero]]
        blocks = [float_bits(dtype, p) for p in pieces[:ctx.world]]
        check_all(ctx, blocks, range(13) if dtype in ("float32", "bfloat16") else (1, 2, 4, 7))


@case
def specials_every_dtype(ctx):
    rng = rng_for("specials", ctx.world)
    for dtype in TORCH_DTYPES:
        for kind, ks in (("specials", [1, 5, 13, 26]), ("spread", [9])):
            blocks = make_blocks(rng, split([12, 5, 0, 9], ctx.world), dtype, kind, rows=4)
            check_all(ctx, blocks, ks)


@case
def other_dims(ctx):
    rng = rng_for("dims", ctx.world)
    sizes = split([4, 7, 2, 5], ctx.world)
    for dtype in ("bfloat16", "float32", "int64"):
        # dim 0 of [n, 3, 2], and the middle dim of [3, n, 2] as 1 and -2.
        blocks = make_blocks(rng, sizes, dtype, "specials", dim=0, shape=(0, 3, 2))
        check_all(ctx, blocks, [1, 4, 9], dim=0)
        blocks = make_blocks(rng, sizes, dtype, "ties", dim=1, shape=(3, 0, 2))
        check_all(ctx, blocks, [2, 5, 11], dim=1)
        check_all(ctx, blocks, [3], dim=-2)


@case
def non_contiguous_shards(ctx):
    rng = rng_for("strided", ctx.world)
    sizes = split([6, 3, 8, 5], ctx.world)

    def transposed(x):  # same values, column-major
        return x.t().contiguous().t()

    def every_other(x):  # a view with element stride 2 along dim and a padded row stride
        wide = torch.zeros((x.shape[0] + 1, 2 * x.shape[1] + 3), dtype=x.dtype)
        view = wide[1:, 1:1 + 2 * x.shape[1]:2]
        view.view(BITS[x.element_size()]).copy_(tbits(x))
        return view

    def broadcast_row(x):  # zero stride along the batch dim
        return x[:1].expand(x.shape)

    for dtype in ("float32", "bfloat16", "int8", "float64"):
        blocks = make_blocks(rng, sizes, dtype, "specials", rows=3)
        for layout in (transposed, every_other):
            check_all(ctx, blocks, [1, 4, 7, 22], layout=layout)
        tiled = [b[:1].expand(b.shape).contiguous() for b in blocks]
        check_all(ctx, tiled, [2, 6], layout=broadcast_row)
    # A transposed [n, rows] shard selected along dim 0.
    blocks = make_blocks(rng, sizes, "float16", "ties", dim=0, shape=(0, 5))
    check_all(ctx, blocks, [1, 6, 10], dim=0, layout=transposed)


@case
def k_zero_and_empty_batches(ctx):
    rng = rng_for("empty", ctx.world)
    blocks = make_blocks(rng, split([3, 0, 2, 1], ctx.world), "float32", "spread")
    check_all(ctx, blocks, [0])
    check_all(ctx, [torch.zeros((0, n), dtype=torch.bfloat16) for n in
                    split([3, 1, 0, 2], ctx.world)], [0, 1, 3])
    check_all(ctx, [torch.zeros((2, 0), dtype=torch.int16) for _ in range(ctx.world)], [0])


@case
def explicit_offsets(ctx):
    rng = rng_for("offsets", ctx.world)
    sizes = split([5, 3, 6, 4], ctx.world)
    starts = list(np.cumsum([0] + sizes[:-1]).tolist())
    reversed_order = list(reversed(range(ctx.world)))
    rotated = [(r + 1) % ctx.world for r in range(ctx.world)]
    for dtype in ("float32", "bfloat16", "uint8"):
        blocks = make_blocks(rng, sizes, dtype, "ties", rows=3)
        # Rank r holds a block at another position: the ranks' order is not the index order.
        check_all(ctx, blocks, [1, 4, 7, 11], order=reversed_order, offsets=starts)
        # Gaps between the blocks.
        gapped = [s + 10 * i + 3 for i, s in enumerate(starts)]
        check_all(ctx, blocks, [1, 5, 9], order=rotated, offsets=gapped)
        # Global indices past int32: the candidates travel with int64 indices.
        far = [s + (i + 1) * 2**32 for i, s in enumerate(starts)]
        check_all(ctx, blocks, [2, 8], order=rotated, offsets=far)
    # Explicit offsets equal to the defaults give the default answer.
    blocks = make_blocks(rng, sizes, "float32", "specials")
    check_all(ctx, blocks, [3, 9], offsets=starts)


@case
def long_rows(ctx):
    rng = rng_for("long", ctx.world)
    sizes = split([3000, 2500, 1, 4096], ctx.world)
    for dtype, kind in (("float32", "spread"), ("bfloat16", "ties"), ("float16", "specials")):
        blocks = make_blocks(rng, sizes, dtype, kind, rows=2)
        for k in (50, 1000, 2600):
            check(ctx, blocks, k, -1, True, True)
            check(ctx, blocks, k, -1, False, False)


# ---- errors: the expected exception on every rank, then a working call ------------------------


def expect_error(ctx, cls, call, fragment=None):
    try:
        call()
    except cls as error:
        message = str(error)
        assert message.startswith("metaltopk.distributed.topk: "), message
        if fragment is not None:
            assert fragment in message, message
    except Exception as error:  # noqa: BLE001
        raise AssertionError(f"rank {ctx.rank}: expected {cls.__name__}, got "
                             f"{type(error).__name__}: {error}") from error
    else:
        raise AssertionError(f"rank {ctx.rank}: expected {cls.__name__}, nothing was raised")
    # The group is still in step: a correct call works right after.
    blocks = [torch.arange(n * 2, dtype=torch.float32).view(2, n) % 3 for n in
              split([2, 3, 1, 2], ctx.world)]
    check(ctx, blocks, 3)


def shard(ctx, sizes=(3, 4, 2, 5), rows=2, dtype=torch.float32):
    return torch.ones((rows, sizes[ctx.rank]), dtype=dtype)


def call(ctx, local, k, **kwargs):
    return lambda: mtd.topk(local, k, group=ctx.group, **kwargs)


@case
def error_k_above_total(ctx):
    total = sum([3, 4, 2, 5][:ctx.world])
    expect_error(ctx, ValueError, call(ctx, shard(ctx), total + 1), f"k = {total + 1}")


@case
def error_k_negative(ctx):
    expect_error(ctx, ValueError, call(ctx, shard(ctx), -1), "k = -1")


@case
def error_k_negative_on_one_rank(ctx):
    expect_error(ctx, ValueError, call(ctx, shard(ctx), -2 if ctx.rank == 1 else 2), "rank 1")


@case
def error_k_differs(ctx):
    expect_error(ctx, ValueError, call(ctx, shard(ctx), 2 + (ctx.rank == ctx.world - 1)),
                 "k differs")


@case
def error_k_not_an_integer(ctx):
    expect_error(ctx, TypeError, call(ctx, shard(ctx), 1.5 if ctx.rank == 0 else 1), "k")


@case
def error_batch_shapes_differ(ctx):
    rows = 3 if ctx.rank == ctx.world - 1 else 2
    expect_error(ctx, ValueError, call(ctx, shard(ctx, rows=rows), 1), "same size")


@case
def error_ndim_differs(ctx):
    local = shard(ctx)[0] if ctx.rank == 0 else shard(ctx)
    expect_error(ctx, ValueError, call(ctx, local, 1), "number of dims")


@case
def error_dtypes_differ(ctx):
    dtype = torch.bfloat16 if ctx.rank == 1 else torch.float32
    expect_error(ctx, TypeError, call(ctx, shard(ctx, dtype=dtype), 1), "dtype")


@case
def error_unsupported_dtype(ctx):
    dtype = torch.complex64 if ctx.rank == ctx.world - 1 else torch.float32
    expect_error(ctx, TypeError, call(ctx, shard(ctx, dtype=dtype), 1), "not supported")
    expect_error(ctx, TypeError, call(ctx, shard(ctx, dtype=torch.bool), 1), "rank 0")


@case
def error_not_a_tensor(ctx):
    local = np.ones((2, 3), dtype=np.float32) if ctx.rank == 1 else shard(ctx)
    expect_error(ctx, TypeError, call(ctx, local, 1), "torch.Tensor")


@case
def error_dim_out_of_range(ctx):
    expect_error(ctx, IndexError, call(ctx, shard(ctx), 1, dim=2), "dim = 2")
    expect_error(ctx, IndexError, call(ctx, shard(ctx), 1, dim=-3), "dim = -3")
    # Only one rank's dim is out of range.
    dim = 5 if ctx.rank == ctx.world - 1 else -1
    expect_error(ctx, IndexError, call(ctx, shard(ctx), 1, dim=dim), "dim = 5")


@case
def error_dim_differs(ctx):
    expect_error(ctx, ValueError, call(ctx, torch.ones(3, 3), 1, dim=ctx.rank % 2), "dim differs")


@case
def error_zero_dim_shard(ctx):
    expect_error(ctx, ValueError, call(ctx, torch.tensor(1.0), 1), "0-d")


@case
def error_largest_differs(ctx):
    expect_error(ctx, ValueError, call(ctx, shard(ctx), 1, largest=ctx.rank != 0), "largest")


@case
def error_offsets(ctx):
    overlapping = [0, 2, 10, 20][ctx.rank]  # rank 0 covers [0, 3), rank 1 [2, 6)
    expect_error(ctx, ValueError, call(ctx, shard(ctx), 1, offset=overlapping), "overlap")
    some = None if ctx.rank == 0 else 100 * ctx.rank
    expect_error(ctx, ValueError, call(ctx, shard(ctx), 1, offset=some), "offset")
    expect_error(ctx, ValueError, call(ctx, shard(ctx), 1, offset=-5 if ctx.rank else 0),
                 "offset = -5")


@case
def error_local_selection_fails_on_one_rank(ctx):
    """A rank whose own selection fails (here: made to raise MemoryError) takes part in the
    exchange anyway, so every rank raises, the failing rank with its error as the cause."""
    def failing(x, k, dim, largest, sorted):
        raise MemoryError("injected: no memory for the local selection")

    def run():
        original = mtd._select
        if ctx.rank == ctx.world - 1:
            mtd._select = failing
        try:
            mtd.topk(shard(ctx), 2, group=ctx.group)
        finally:
            mtd._select = original

    expect_error(ctx, MemoryError, run, f"rank {ctx.world - 1}: injected")
