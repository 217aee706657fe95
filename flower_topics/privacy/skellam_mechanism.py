"""The distributed Skellam mechanism: integer noise that sums cleanly under secure aggregation.

Agarwal, Kairouz and Liu, "The Skellam Mechanism for Differentially Private Federated
Learning" (NeurIPS 2021, arXiv 2110.04995). ``Sk(mu)`` is the difference of two independent
``Poisson(mu / 2)`` variables: an integer with mean 0 and variance ``mu``. A sum of
independent Skellam variables is Skellam with the summed variance, so ``n`` parties that each
add ``Sk(mu / m)`` to every cell of an integer vector, summed by secure aggregation, release
the sum with exactly ``Sk(mu x survivors / m)`` noise per cell: the central mechanism, with no
one party's noise enough to protect its own vector (``m`` parties' shares must reach the sum;
see :mod:`flower_topics.secure_sum`).

Accounting. Agarwal et al. (Theorem 3.5 and Corollary 3.6): for an integer query with L1
sensitivity ``Delta_1`` and L2 sensitivity ``Delta_2``, the multi-dimensional Skellam
mechanism of variance ``mu`` per coordinate satisfies, at every integer order ``alpha > 1``,

.. math::
    \\varepsilon(\\alpha) \\le \\frac{\\alpha \\Delta_2^2}{2\\mu}
      + \\min\\left(\\frac{(2\\alpha - 1)\\Delta_2^2 + 6\\Delta_1}{4\\mu^2},
                    \\frac{3\\Delta_1}{2\\mu}\\right)-\\text{RDP},

the Gaussian mechanism's RDP plus a discretization term. A document's contribution here is
an integer vector of non-negative entries with L2 norm at most ``Delta_2`` (the clip norm in
integer units), so ``Delta_1 <= Delta_2^2`` (an integer ``x`` has ``|x| <= x^2``). Poisson
subsampling with rate ``q`` (Zhu and Wang 2019, Theorem 6: the general bound for any RDP
mechanism), composition over rounds and the conversion to ``(eps, delta)`` are the ``"skellam"``
accountant's (:class:`~flower_topics.privacy.accountants.skellam.SkellamAccountant`); no RDP bound
is derived here beyond the papers' theorems.
"""

from __future__ import annotations

import numpy as np


def skellam_rdp(alpha: float, l1: float, l2: float, mu: float) -> float:
    """Agarwal et al. 2021, Theorem 3.5: the RDP of order ``alpha`` of Skellam noise of variance ``mu``.

    Parameters
    ----------
    alpha : float
        Order, > 1 (the theorem is stated for integer orders; the accountant evaluates integer orders only).
    l1, l2 : float
        L1 and L2 sensitivities of the integer query.
    mu : float
        Variance of the Skellam noise per coordinate, > 0.
    """
    if not alpha > 1 or not mu > 0:
        raise ValueError("need alpha > 1 and mu > 0")
    return alpha * l2 ** 2 / (2 * mu) + min(((2 * alpha - 1) * l2 ** 2 + 6 * l1) / (4 * mu ** 2), 3 * l1 / (2 * mu))


def skellam_noise(shape: tuple[int, ...], variance: float, rng: np.random.Generator) -> np.ndarray:
    """``Sk(variance)`` per cell: ``Poisson(variance / 2) - Poisson(variance / 2)``, int64."""
    if not variance > 0:
        raise ValueError("the Skellam variance must be > 0")
    return rng.poisson(variance / 2.0, size=shape).astype(np.int64) - rng.poisson(variance / 2.0, size=shape)
