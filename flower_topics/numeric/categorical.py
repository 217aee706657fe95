"""Vectorized draws from many categorical distributions at once."""

from __future__ import annotations

import numpy as np


def draw_categorical(cumulative: np.ndarray, rows: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw from each requested row of a row-stochastic matrix, in O(log columns).

    ``cumulative`` is ``np.cumsum(p, axis=1)`` of a matrix whose rows sum to 1; row
    ``r`` offset by ``r`` makes the flattened array increasing, so one ``searchsorted``
    serves every row.
    """
    n_rows, n_cols = cumulative.shape
    flat = (cumulative / cumulative[:, -1:] + np.arange(n_rows)[:, None]).ravel()
    u = rows + rng.random(rows.size) * (1.0 - 1e-12)
    return np.minimum(np.searchsorted(flat, u, side="right") - rows * n_cols, n_cols - 1)
