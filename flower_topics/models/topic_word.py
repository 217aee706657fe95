"""The one row normalizer every method's topic-word matrix goes through, and its compiled form for integer counts."""

from __future__ import annotations

import numpy as np
from numba import njit


def normalize_rows(matrix: np.ndarray, prior: float | np.ndarray = 0.0, *, clamp: bool = False) -> np.ndarray:
    """Rows of ``matrix + prior`` divided by their sums, as float64.

    Parameters
    ----------
    matrix : np.ndarray
        ``(K, V)`` counts, noisy statistics or unnormalized weights (finite).
    prior : float or np.ndarray (default: 0.0)
        Added to every entry first (a Dirichlet prior or a pseudo-count; a (K, V) array: one per entry).
    clamp : bool (default: False)
        Clamp negative entries at 0 before adding ``prior`` (noisy counts).

    Returns
    -------
    np.ndarray
        ``(K, V)`` rows summing to 1; a row with no mass becomes uniform.
    """
    m = np.array(matrix, dtype=np.float64)  # one copy, then every step in place
    if m.ndim != 2 or (m.size and not (np.isfinite(m.min()) and np.isfinite(m.max()))):  # a NaN shows in both
        raise ValueError("matrix must be a finite (K, V) array")
    if clamp:
        np.maximum(m, 0.0, out=m)
    m += prior
    totals = m.sum(axis=1, keepdims=True)
    np.divide(m, totals, out=m, where=totals > 0)
    m[totals[:, 0] <= 0] = 1.0 / m.shape[1]
    return m


def _checked_counts(counts: np.ndarray, prior: float) -> np.ndarray:
    """``counts`` C-contiguous, after checking that they are ``(K, V)`` and ``prior`` is positive."""
    counts = np.ascontiguousarray(counts)
    if counts.ndim != 2 or not prior > 0:
        raise ValueError("need (K, V) counts and a positive prior")
    return counts


def counts_model(counts: np.ndarray, prior: float) -> np.ndarray:
    """The topic-word matrix of non-negative integer ``counts`` and a positive ``prior``, as the evaluation
    scores it, in one compiled pass per topic: ``phi = p / p.sum(1)`` with ``p = (n_kw + prior) / (n_k + V
    prior)``, the same bits as ``normalize_rows(counts, prior)`` divided again by its row sums (numpy's pairwise
    summation of each row, reproduced).

    Parameters
    ----------
    counts : np.ndarray
        ``(K, V)`` integers ``>= 0`` (checked by the caller).
    prior : float
        ``> 0``.

    Returns
    -------
    np.ndarray
        ``phi``, ``K x V`` float64.
    """
    counts = _checked_counts(counts, prior)
    phi = np.empty(counts.shape)
    _counts_model_kernel(counts, float(prior), phi)
    return phi


def counts_model_columns_t(counts: np.ndarray, prior: float, columns: np.ndarray) -> np.ndarray:
    """The rows of ``counts_model(counts, prior).T`` for the words ``columns``, the same bits, without the
    ``K x V`` matrix: each topic's two normalizing sums are taken over its whole row (numpy's pairwise order, in
    a buffer of ``V`` values reused for every topic), then only the chosen cells are divided by them.

    Parameters
    ----------
    counts : np.ndarray
        ``(K, V)`` integers ``>= 0`` (checked by the caller).
    prior : float
        ``> 0``.
    columns : np.ndarray
        Word ids in ``[0, V)``.

    Returns
    -------
    np.ndarray
        ``(len(columns), K)`` C-contiguous float64: row ``j`` is ``phi[:, columns[j]]``.
    """
    counts = _checked_counts(counts, prior)
    columns = np.asarray(columns, dtype=np.int64)
    if columns.size and (columns.min() < 0 or columns.max() >= counts.shape[1]):
        raise ValueError(f"columns must lie in [0, {counts.shape[1]})")
    out = np.empty((columns.size, counts.shape[0]))
    _counts_columns_kernel(counts, float(prior), columns, out)
    return out


@njit(cache=True, nogil=True)  # no fastmath: the sums must be numpy's, in numpy's order
def _counts_columns_kernel(counts, prior, columns, out):  # pragma: no cover - compiled
    """:func:`counts_model_columns_t`: per topic, :func:`_normalized_row`'s two sums of its row (in a reused
    buffer), then the chosen cells ``((n + prior) / total) / total2``, the operations every cell of
    :func:`_counts_model_kernel` gets."""
    row = np.empty(counts.shape[1])
    for k in range(counts.shape[0]):
        total, total2 = _normalized_row(counts[k], prior, row)
        for j in range(columns.size):
            out[j, k] = ((float(counts[k, columns[j]]) + prior) / total) / total2


@njit(cache=True, nogil=True)  # no fastmath: the sums must be numpy's, in numpy's order
def _block_sum(a: np.ndarray, lo: int, n: int) -> float:  # pragma: no cover - compiled
    """numpy's pairwise summation of a block of at most 128 values: plain below 8, else 8 accumulators."""
    if n < 8:
        res = 0.0
        for i in range(lo, lo + n):
            res += a[i]
        return res
    r0, r1, r2, r3 = a[lo], a[lo + 1], a[lo + 2], a[lo + 3]
    r4, r5, r6, r7 = a[lo + 4], a[lo + 5], a[lo + 6], a[lo + 7]
    i = 8
    end = n - n % 8
    while i < end:
        r0 += a[lo + i]
        r1 += a[lo + i + 1]
        r2 += a[lo + i + 2]
        r3 += a[lo + i + 3]
        r4 += a[lo + i + 4]
        r5 += a[lo + i + 5]
        r6 += a[lo + i + 6]
        r7 += a[lo + i + 7]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += a[lo + i]
        i += 1
    return res


@njit(cache=True, nogil=True)
def _pairwise_sum(a: np.ndarray) -> float:  # pragma: no cover - compiled
    """numpy's pairwise summation of ``a`` (``pairwise_sum`` of its ``loops_utils``; the same bits as
    ``a.sum()``): blocks of at most 128 by :func:`_block_sum`, above that the two halves (split at a multiple
    of 8) summed and added. Written with an explicit stack (numba's cache cannot hold a recursive function)."""
    starts = np.empty(64, np.int64)
    sizes = np.empty(64, np.int64)
    stages = np.empty(64, np.int64)
    partial = np.empty(64)
    depth, done = 1, 0
    starts[0], sizes[0], stages[0] = 0, a.size, 0
    while depth:
        top = depth - 1
        lo, n = starts[top], sizes[top]
        if n <= 128:
            partial[done] = _block_sum(a, lo, n)
            done += 1
            depth -= 1
            continue
        half = n // 2
        half -= half % 8
        if stages[top] == 0:  # the left half first
            stages[top] = 1
            starts[depth], sizes[depth], stages[depth] = lo, half, 0
            depth += 1
        elif stages[top] == 1:  # then the right
            stages[top] = 2
            starts[depth], sizes[depth], stages[depth] = lo + half, n - half, 0
            depth += 1
        else:  # both summed: left + right
            done -= 1
            partial[done - 1] = partial[done - 1] + partial[done]
            depth -= 1
    return partial[0]


@njit(cache=True, nogil=True)  # no fastmath: the sums must be numpy's, in numpy's order
def _normalized_row(counts_row, prior, row):  # pragma: no cover - compiled
    """Write ``(n + prior) / total`` into ``row`` for the counts ``n`` of one topic, ``total`` their sum in numpy's
    pairwise order; return ``total`` and the sum of the written row (``total2``, the same order), by which each
    cell of the model is divided once more."""
    for w in range(counts_row.size):
        row[w] = float(counts_row[w]) + prior
    total = _pairwise_sum(row)
    for w in range(counts_row.size):
        row[w] = row[w] / total
    return total, _pairwise_sum(row)


@njit(cache=True, nogil=True)
def _counts_model_kernel(counts, prior, phi):  # pragma: no cover - compiled
    """:func:`counts_model`: each row :func:`_normalized_row`, then divided by its second sum."""
    for k in range(counts.shape[0]):
        row = phi[k]
        _, total2 = _normalized_row(counts[k], prior, row)
        for w in range(row.size):
            row[w] = row[w] / total2
