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
subsampling with rate ``q`` (Zhu and Wang 2019, the general bound for any RDP mechanism),
composition over rounds and the conversion to ``(eps, delta)`` are autodp's (Yu-Xiang
Wang's library); no RDP bound is derived here beyond the paper's theorem.
"""

from __future__ import annotations

import functools
import warnings

import numpy as np

from flower_topics.errors import UserInputError
from flower_topics.privacy.calibration import smallest_noise

ACCOUNTANT = ("RDP (autodp: Zhu-Wang Poisson subsampling of the Skellam mechanism's RDP, Agarwal et al. 2021 "
              "Theorem 3.5), add/remove one document")


def skellam_rdp(alpha: float, l1: float, l2: float, mu: float) -> float:
    """Agarwal et al. 2021, Theorem 3.5: the RDP of order ``alpha`` of Skellam noise of variance ``mu``.

    Parameters
    ----------
    alpha : float
        Order, > 1 (the theorem is stated for integer orders; autodp evaluates integer orders).
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


@functools.lru_cache(maxsize=1024)
def rounds_epsilon(noise_multiplier: float, sample_rate: float, rounds: int, delta: float, l2: float) -> float:
    """Epsilon at ``delta`` of ``rounds`` Poisson-subsampled Skellam releases (autodp).

    Parameters
    ----------
    noise_multiplier : float
        ``sigma``: the central noise has variance ``(sigma l2)^2`` per cell.
    sample_rate : float
        ``q`` in (0, 1].
    rounds : int
        Releases composed, >= 0.
    delta : float
        In (0, 1).
    l2 : float
        L2 sensitivity in integer units (the clip norm times the quantum), >= 1.
    """
    if rounds < 0 or not 0 < delta < 1 or not noise_multiplier > 0 or not 0 < sample_rate <= 1 or not l2 >= 1:
        raise ValueError("need rounds >= 0, 0 < delta < 1, sigma > 0, 0 < q <= 1 and l2 >= 1")
    if rounds == 0:
        return 0.0
    from autodp.transformer_zoo import Composition

    with warnings.catch_warnings():  # autodp's scalar search divides 0 by 0 on flat stretches and recovers
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(Composition()([_release(noise_multiplier, sample_rate, l2)], [int(rounds)]).get_approxDP(delta))


@functools.lru_cache(maxsize=64)
def _release(noise_multiplier: float, sample_rate: float, l2: float):  # -> autodp Mechanism
    """One round's mechanism in autodp: Skellam noise of variance ``(sigma l2)^2`` (Theorem 3.5's RDP), Poisson
    subsampled at ``q``. Kept per ``(sigma, q, l2)``: a run composes the same release every round, and composing
    a kept mechanism for a new count takes about half the time of building it again (15 against 30 ms)."""
    from autodp.autodp_core import Mechanism
    from autodp.transformer_zoo import AmplificationBySampling

    mu, l1 = (noise_multiplier * l2) ** 2, l2 ** 2

    class _Skellam(Mechanism):
        def __init__(self) -> None:
            Mechanism.__init__(self)
            self.name = "skellam"
            self.params = {"mu": mu, "l1": l1, "l2": l2}
            self.propagate_updates(lambda alpha: skellam_rdp(alpha, l1, l2, mu), "RDP")

    release = _Skellam()
    if sample_rate < 1:
        release = AmplificationBySampling(PoissonSampling=True)(release, sample_rate, improved_bound_flag=True)
    return release


@functools.lru_cache(maxsize=256)
def noise_multiplier(target_epsilon: float, target_delta: float, sample_rate: float, rounds: int, l2: float) -> float:
    """The smallest ``sigma`` (to 0.1%) whose ``rounds`` subsampled Skellam releases spend at most the target.

    Raises
    ------
    UserInputError
        When no ``sigma`` up to 1000 reaches the target (one line).
    """
    sigma = smallest_noise(lambda s: rounds_epsilon(s, sample_rate, rounds, target_delta, l2), target_epsilon,
                           ceiling=1000, floor=1e-3)
    if sigma is None:
        raise UserInputError(f"secure aggregation: no Skellam noise reaches eps {target_epsilon:g} at delta "
                             f"{target_delta:g} over {rounds} rounds with q {sample_rate:g}")
    return sigma
