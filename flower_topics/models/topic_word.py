"""The one row normalizer every method's topic-word matrix goes through."""

from __future__ import annotations

import numpy as np


def normalize_rows(matrix: np.ndarray, prior: float = 0.0, *, clamp: bool = False) -> np.ndarray:
    """Rows of ``matrix + prior`` divided by their sums, as float64.

    Parameters
    ----------
    matrix : np.ndarray
        ``(K, V)`` counts, noisy statistics or unnormalized weights (finite).
    prior : float (default: 0.0)
        Added to every entry first (a Dirichlet prior or a pseudo-count).
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
