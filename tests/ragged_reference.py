"""An independent numpy model of ragged top-k (docs/CONTRACT.md, "Ragged rows").

Each row's window is cut out with plain slicing after clipping its start and length the way the
contract says, and ranked by reference.py's model (integer ranks and a stable sort), so the
window rules, the padding and the index transforms are the only things this file adds. Index
transforms are done in int64 numpy arithmetic, which wraps as the contract's 64-bit two's
complement does.
"""

import numpy as np

import reference as ref


def windows(n: int, lengths, starts=None):
    """Per-row (start, length) after clipping: a start below 0 counts as 0 and past n as n; a
    length below 0 counts as 0 and past the row's end as the rest of the row."""
    lengths = np.asarray(lengths).astype(np.int64)
    starts = np.zeros_like(lengths) if starts is None else np.asarray(starts).astype(np.int64)
    start = np.clip(starts, 0, n)
    return start, np.clip(lengths, 0, n - start)


def page_table_transform(page_table, page_size: int, row_to_batch=None):
    """The transform of MTK_INDEX_TRANSFORM_PAGE_TABLE as a function (row, window indices) ->
    indices, or None where the row has no page table (row_to_batch outside [0, batch))."""
    table = np.asarray(page_table).astype(np.int64)

    def apply(row, index):
        batch = row if row_to_batch is None else int(row_to_batch[row])
        if not 0 <= batch < table.shape[0]:
            return None
        with np.errstate(over="ignore"):
            return table[batch, index // page_size] * np.int64(page_size) + index % page_size
    return apply


def ragged_transform(offsets):
    """The transform of MTK_INDEX_TRANSFORM_RAGGED: offsets[row] + index."""
    offsets = np.asarray(offsets).astype(np.int64)

    def apply(row, index):
        with np.errstate(over="ignore"):
            return offsets[row] + index
    return apply


def reference_topk_ragged(x, k: int, lengths, starts=None, largest: bool = True,
                          transform=None):
    """The contract's sorted (values, indices), both [rows, k], indices int64: each row's winners
    first, then index -1 with all-zero value bits. `transform` is None or one of the functions
    above."""
    x = np.asarray(x)
    rows, n = x.shape
    start, length = windows(n, lengths, starts)
    value_bits = np.zeros((rows, k), dtype=f"u{x.dtype.itemsize}")
    indices = np.full((rows, k), -1, dtype=np.int64)
    for row in range(rows):
        count = min(k, int(length[row]))
        if count == 0:
            continue
        window = x[row, start[row]:start[row] + length[row]]
        values, index = ref.reference_topk(window, count, -1, largest)
        if transform is not None:
            index = transform(row, index)
            if index is None:  # no page table: no candidates
                continue
        value_bits[row, :count] = ref.bits(values)
        indices[row, :count] = index
    return value_bits.view(x.dtype), indices
