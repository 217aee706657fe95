"""autodp's RDP accountant of Poisson-subsampled distributed Skellam releases (secure aggregation).

The Skellam mechanism's RDP is Agarwal, Kairouz and Liu 2021, Theorem 3.5
(:func:`flower_topics.privacy.skellam_mechanism.skellam_rdp`); Poisson subsampling with rate ``q`` (Zhu and
Wang 2019, the general bound for any RDP mechanism), composition over rounds and the conversion
to ``(eps, delta)`` are autodp's (Yu-Xiang Wang's library).
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

from flower_topics.privacy.accountants.base import Accountant
from flower_topics.privacy.accountants.registry import register_accountant
from flower_topics.privacy.skellam_mechanism import skellam_rdp


@register_accountant
class SkellamAccountant(Accountant):
    """RDP (autodp) of Poisson-subsampled Skellam releases with L2 sensitivity ``sensitivity`` integer units.

    A release of noise multiplier ``sigma`` adds Skellam noise of variance ``(sigma sensitivity)^2`` per cell
    to an integer sum whose one document changes it by at most ``sensitivity`` in L2 (and so at most
    ``sensitivity^2`` in L1).

    Parameters
    ----------
    sensitivity : float
        L2 sensitivity in integer units (the clip norm times the quantum), >= 1.
    """

    description = ("RDP (autodp: Zhu-Wang Poisson subsampling of the Skellam mechanism's RDP, Agarwal et al. 2021 "
                   "Theorem 3.5), add/remove one document")
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
        """Epsilon at ``delta`` of the recorded releases, each ``(sigma, q)`` composed ``count`` times (autodp)."""
        releases = self.grouped_releases(delta)
        if not releases:
            return 0.0
        return _composed_epsilon(releases, float(delta),
                                 self.sensitivity)


@functools.lru_cache(maxsize=1024)
def _composed_epsilon(events: tuple[tuple[float, float, int], ...], delta: float, l2: float) -> float:
    from autodp.transformer_zoo import Composition

    with warnings.catch_warnings():  # autodp's scalar search divides 0 by 0 on flat stretches and recovers
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(Composition()([_release(s, q, l2) for s, q, _ in events],
                                   [c for _, _, c in events]).get_approxDP(delta))


@functools.lru_cache(maxsize=64)
def _release(noise_multiplier: float, sample_rate: float, l2: float) -> Any:
    """One round's mechanism in autodp: Skellam noise of variance ``(sigma l2)^2`` (Theorem 3.5's RDP), Poisson
    subsampled at ``q``. Kept per ``(sigma, q, l2)``: a run composes the same release every round, and composing
    a kept mechanism for a new count is cheaper than building it again."""
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
