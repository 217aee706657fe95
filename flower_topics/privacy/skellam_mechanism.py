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


#: Standard deviations of noise a sum's entry is given room for (:func:`largest_entry`).
HEADROOM_SDS = 40
#: Integer units of room beyond them, for noise of small variance (:func:`largest_entry`).
HEADROOM_SLACK = 100.0


def largest_entry(most: float, noise_sd: float, *, slack: float = HEADROOM_SLACK) -> float:
    """The most a party's noisy entry of a secure sum can reach, but with negligible probability: ``most`` (the
    largest the party's own data can put in the entry) ``+ 40`` noise standard deviations ``+ slack`` (100).

    Why 40 and 100: Skellam noise of variance ``v`` is a difference of two Poisson variables, whose tails
    Bernstein's inequality bounds: ``P(|X| >= t) <= 2 exp(-t^2 / (2 (v + t / 3)))``. At ``t = 40 sqrt(v) + 100`` the
    exponent is at least 150 for every ``v`` (about 800 when ``v`` is large, where the 40 standard deviations
    decide; 150 as ``v`` goes to 0, where the Poisson parts' discreteness does and the 100 units cover it), so an
    entry passes the room with probability below ``2 exp(-150) < 2^-60``. For Gaussian noise (``slack=0``) 40
    standard deviations alone leave a tail below ``exp(-800)``.

    Parameters
    ----------
    most : float
        The largest value the party's data can put in one entry (before noise).
    noise_sd : float
        The standard deviation of the noise the party adds to the entry.
    slack : float (default: 100.0)
        Units of room beyond the standard deviations (0 for continuous noise).
    """
    return most + HEADROOM_SDS * noise_sd + slack


def skellam_noise(shape: tuple[int, ...], variance: float, rng: np.random.Generator) -> np.ndarray:
    """``Sk(variance)`` per cell: ``Poisson(variance / 2) - Poisson(variance / 2)``, int64."""
    if not variance > 0:
        raise ValueError("the Skellam variance must be > 0")
    return rng.poisson(variance / 2.0, size=shape).astype(np.int64) - rng.poisson(variance / 2.0, size=shape)
