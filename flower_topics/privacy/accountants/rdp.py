"""Opacus's Renyi-DP accountant of (Poisson-subsampled) Gaussian releases.

The RDP of each release at every order (Mironov, Talwar and Zhang 2019 for the subsampled
Gaussian; ``alpha / (2 sigma^2)`` without sampling) is Opacus's ``compute_rdp``; the releases'
curves add up, and the conversion to ``(eps, delta)`` is Opacus's ``get_privacy_spent`` (Balle et
al. 2020, Theorem 21: ``eps = rdp - (log delta + log alpha) / (alpha - 1) + log((alpha - 1) / alpha)``),
minimized over the orders.
"""

from __future__ import annotations

import functools
import warnings
from typing import Sequence

import numpy as np

from flower_topics.privacy.accountants.base import Accountant
from flower_topics.privacy.accountants.registry import register_accountant

#: RDP orders: Opacus's RDPAccountant.DEFAULT_ALPHAS, refined near 1 and extended upwards.
DEFAULT_ORDERS: tuple[float, ...] = tuple(
    [1.0 + x / 100.0 for x in range(1, 10)]
    + [1.0 + x / 10.0 for x in range(1, 100)]
    + list(range(12, 64))
    + [64, 80, 96, 128, 192, 256, 384, 512, 768, 1024, 2048, 4096]
)


@register_accountant
class RDPAccountant(Accountant):
    """RDP (Opacus) of Gaussian releases, each Poisson-subsampled at its ``q`` (``q = 1``: none).

    The curves of the :meth:`step` calls are added in the order of the calls.

    Parameters
    ----------
    orders : sequence of float, default :data:`DEFAULT_ORDERS`
        The RDP orders epsilon is minimized over.
    """

    description = "RDP (opacus), Gaussian mechanism"
    noise_ceiling = 1e8
    noise_floor = 1e-12

    def __init__(self, orders: Sequence[float] = DEFAULT_ORDERS) -> None:
        super().__init__()
        self.orders = tuple(orders)

    @classmethod
    def mechanism(cls) -> str:
        return "rdp"

    def get_privacy_spent(self, delta: float) -> tuple[float, float]:
        """``(epsilon, optimal order)`` at ``delta`` of the :meth:`step` releases; ``(0.0, nan)`` without one.

        Parameters
        ----------
        delta : float
            In (0, 1).
        """
        if not 0 < delta < 1:
            raise ValueError("delta must be in (0, 1)")
        history = [(s, q, n) for s, q, n in self.history if n]
        if not history:
            return 0.0, float("nan")
        from opacus.accountants.analysis.rdp import get_privacy_spent

        rdp = sum(_curve(q, s, n, self.orders) for s, q, n in history)  # 0 + the first curve: that curve
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "optimal order is the smallest/largest alpha"
            eps, order = get_privacy_spent(orders=list(self.orders), rdp=rdp, delta=delta)
        return float(eps), float(order)

    def steps_epsilon(self, delta: float) -> float:
        """Epsilon at ``delta`` of the recorded releases (:meth:`get_privacy_spent`)."""
        return self.get_privacy_spent(delta)[0]


@functools.lru_cache(maxsize=256)
def _curve(sample_rate: float, noise_multiplier: float, steps: int, orders: tuple[float, ...]) -> np.ndarray:
    """Opacus's ``compute_rdp`` of ``steps`` releases (a cached array: never written to)."""
    from opacus.accountants.analysis.rdp import compute_rdp

    curve = np.asarray(compute_rdp(q=sample_rate, noise_multiplier=noise_multiplier, steps=steps,
                                   orders=list(orders)), dtype=np.float64)
    curve.setflags(write=False)
    return curve
