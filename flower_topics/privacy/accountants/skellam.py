"""RDP accountant of Poisson-subsampled distributed Skellam releases (secure aggregation).

The Skellam mechanism's RDP is Agarwal, Kairouz and Liu 2021, Theorem 3.5
(:func:`flower_topics.privacy.skellam_mechanism.skellam_rdp`), at integer orders, where the theorem holds.
Poisson subsampling at rate ``q < 1`` is Zhu and Wang 2019 ("Poisson Subsampled Renyi Differential
Privacy", ICML), Theorem 6: the general upper bound, which holds for any mechanism with an RDP bound. At an
integer order ``alpha >= 2``, with ``eps(l)`` the Skellam RDP at order ``l``,

.. math::
    \\varepsilon_q(\\alpha) \\le \\frac{1}{\\alpha - 1} \\log\\Big((1-q)^{\\alpha-1}(\\alpha q - q + 1)
      + \\binom{\\alpha}{2} q^2 (1-q)^{\\alpha-2} e^{\\varepsilon(2)}
      + 3 \\sum_{l=3}^{\\alpha} \\binom{\\alpha}{l} q^l (1-q)^{\\alpha-l} e^{(l-1)\\varepsilon(l)}\\Big),

and never more than ``eps(alpha)`` (subsampling cannot raise a divergence: joint convexity). The tighter
formula without the factor 3 (autodp's ``improved_bound_flag=True``) is proved only for mechanisms that meet
the paper's Theorem 8 condition (the Gaussian, the Laplace); it is not used. Releases compose by adding their
curves; the conversion to ``(eps, delta)`` is Balle et al. 2020, Theorem 21 (as Opacus's ``get_privacy_spent``),
minimized over :data:`ORDERS`.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from flower_topics.privacy.accountants.base import Accountant
from flower_topics.privacy.accountants.registry import register_accountant
from flower_topics.privacy.skellam_mechanism import skellam_rdp

#: The integer RDP orders epsilon is minimized over (Theorem 3.5 and Theorem 6 hold at integer orders).
ORDERS: tuple[int, ...] = tuple(range(2, 129)) + (160, 192, 256, 384, 512, 768, 1024)

#: Which subsampling bound the accountant uses, in words (its description, printed in the report, says it).
SUBSAMPLING_BOUND = "Zhu-Wang 2019 Theorem 6, the general bound for any RDP mechanism"


@register_accountant
class SkellamAccountant(Accountant):
    """RDP of Poisson-subsampled Skellam releases with L2 sensitivity ``sensitivity`` integer units.

    A release of noise multiplier ``sigma`` adds Skellam noise of variance ``(sigma sensitivity)^2`` per cell
    to an integer sum whose one document changes it by at most ``sensitivity`` in L2 (and so at most
    ``sensitivity^2`` in L1).

    Parameters
    ----------
    sensitivity : float
        L2 sensitivity in integer units (the clip norm times the quantum), >= 1.
    """

    description = (f"RDP of the Skellam mechanism (Agarwal et al. 2021 Theorem 3.5), Poisson subsampling by "
                   f"{SUBSAMPLING_BOUND}, add/remove one document")
    noise_ceiling = 1000.0
    noise_floor = 1e-3

    def __init__(self, sensitivity: float) -> None:
        super().__init__()
        if not sensitivity >= 1:
            raise ValueError("the Skellam sensitivity must be >= 1 integer unit")
        self.sensitivity = float(sensitivity)

    @classmethod
    def mechanism(cls) -> str:
        return "skellam"

    def steps_epsilon(self, delta: float) -> float:
        """Epsilon at ``delta`` of the recorded releases, each ``(sigma, q)`` composed ``count`` times."""
        releases = self.grouped_releases(delta)
        if not releases:
            return 0.0
        return _composed_epsilon(releases, float(delta), self.sensitivity)


def subsampled_skellam_rdp(noise_multiplier: float, sample_rate: float, sensitivity: float) -> np.ndarray:
    """The RDP bound at each of :data:`ORDERS` of one Skellam release of variance ``(sigma sensitivity)^2``
    Poisson-subsampled at ``q`` (Theorem 6 of Zhu and Wang; the Skellam RDP itself when ``q = 1``).

    Parameters
    ----------
    noise_multiplier : float
        ``sigma``, > 0.
    sample_rate : float
        ``q`` in (0, 1].
    sensitivity : float
        L2 sensitivity in integer units (L1 at most its square).
    """
    return _curve(float(noise_multiplier), float(sample_rate), float(sensitivity)).copy()


@functools.lru_cache(maxsize=1024)
def _composed_epsilon(events: tuple[tuple[float, float, int], ...], delta: float, l2: float) -> float:
    """Balle et al. 2020, Theorem 21, minimized over :data:`ORDERS`:
    ``eps = rdp - (log delta + log alpha) / (alpha - 1) + log((alpha - 1) / alpha)``."""
    rdp = sum(count * _curve(sigma, q, l2) for sigma, q, count in events)
    orders = np.asarray(ORDERS, dtype=np.float64)
    return float(np.min(rdp - (math.log(delta) + np.log(orders)) / (orders - 1) + np.log((orders - 1) / orders)))


@functools.lru_cache(maxsize=256)
def _curve(noise_multiplier: float, sample_rate: float, l2: float) -> np.ndarray:
    """:func:`subsampled_skellam_rdp`, cached (a read-only array)."""
    mu, l1 = (noise_multiplier * l2) ** 2, l2 ** 2
    top = max(ORDERS)
    base = np.array([skellam_rdp(alpha, l1, l2, mu) for alpha in range(2, top + 1)])  # eps(l), l = 2..top
    orders = np.asarray(ORDERS)
    unsampled = base[orders - 2]
    if sample_rate >= 1.0:
        unsampled.setflags(write=False)
        return unsampled
    log_q, log_1q = math.log(sample_rate), math.log1p(-sample_rate)
    log_factorial = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, top + 1)))))
    curve = np.empty(len(orders))
    for i, alpha in enumerate(ORDERS):
        ls = np.arange(2, alpha + 1)
        log_terms = (log_factorial[alpha] - log_factorial[ls] - log_factorial[alpha - ls] + ls * log_q
                     + (alpha - ls) * log_1q + (ls - 1) * base[ls - 2])
        log_terms[1:] += math.log(3.0)  # l >= 3
        log_terms = np.append(log_terms, (alpha - 1) * log_1q + math.log1p((alpha - 1) * sample_rate))
        top_term = log_terms.max()
        curve[i] = (top_term + math.log(np.exp(log_terms - top_term).sum())) / (alpha - 1)
    curve = np.minimum(curve, unsampled)
    curve.setflags(write=False)
    return curve
