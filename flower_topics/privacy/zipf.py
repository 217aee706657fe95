"""How well topic-word proportions follow Zipf's law, the assumption of FedLDA's Theorem 1.

For each topic, phi_k sorted in descending order is fitted by least squares on the
log-log scale, ``log phi_(r) = c - s log r`` over the ranks ``r`` whose proportion is
positive; the exponent ``s`` and the coefficient of determination ``R^2`` are reported.
A perfect Zipf topic has ``R^2 = 1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ZipfFit:
    """Per-topic Zipf fit.

    Parameters
    ----------
    exponent : np.ndarray
        Fitted exponent ``s`` of each topic.
    r2 : np.ndarray
        Coefficient of determination of each topic's fit.
    """

    exponent: np.ndarray
    r2: np.ndarray


def zipf_fit(phi: np.ndarray, top: int | None = None) -> ZipfFit:
    """Fit ``log phi_(r) = c - s log r`` per topic (optionally over the ``top`` ranks only)."""
    ranked = -np.sort(-np.asarray(phi, dtype=np.float64), axis=1)
    if top is not None:
        ranked = ranked[:, :top]
    exponents, r2 = np.empty(ranked.shape[0]), np.empty(ranked.shape[0])
    for k, row in enumerate(ranked):
        y = np.log(row[row > 0])
        x = np.log(np.arange(1, y.size + 1))
        slope, intercept = np.polyfit(x, y, 1)
        residual = y - (slope * x + intercept)
        total = ((y - y.mean()) ** 2).sum()
        exponents[k] = -slope
        r2[k] = 1.0 - (residual ** 2).sum() / total if total > 0 else 1.0
    return ZipfFit(exponent=exponents, r2=r2)
