"""The compiled loops of :mod:`flower_topics.wire.counts` (numba), in a module of their own so that importing
the wire format does not import numba."""

from __future__ import annotations

from numba import njit


@njit(cache=True, nogil=True)
def range_and_nonzeros(flat):  # pragma: no cover - compiled
    """The smallest and largest entry of a non-empty 1-D integer array and its number of nonzero entries, in one
    pass (no temporary: numpy's min, max and flatnonzero took three passes and a boolean array)."""
    low, high, count = flat[0], flat[0], 0
    for i in range(flat.size):
        x = flat[i]
        low, high = min(low, x), max(high, x)
        count += x != 0
    return low, high, count


@njit(cache=True, nogil=True)
def nonzero_cells(flat, index, values):  # pragma: no cover - compiled
    """Write the flat indices and values of ``flat``'s nonzero entries, in order, into ``index`` and ``values``
    (each one entry longer than the number of them). Without a branch: every entry is written at the next free
    slot, which moves on only past a nonzero one (no branch to mispredict, unlike numpy's flatnonzero and gather)."""
    j = 0
    for i in range(flat.size):
        x = flat[i]
        index[j] = i
        values[j] = x
        j += x != 0


@njit(cache=True, nogil=True)
def scatter_transposed(index, values, n_rows, n_cols, out):  # pragma: no cover - compiled
    """Write ``values[i]`` at the cell of flat row-major index ``index[i]`` of an ``n_rows x n_cols`` matrix into
    ``out``, the flat C-order transpose (``n_cols x n_rows``)."""
    for i in range(index.shape[0]):
        row = index[i] // n_cols
        out[(index[i] - row * n_cols) * n_rows + row] = values[i]
