"""Basic (sequential) composition of local randomizers (Dwork 2006).

FedLDA perturbs ``l`` tuples of each document per round, each ``(eps, delta)``-LDP;
by basic composition a document spends ``(l eps, l delta)`` per round and
``(T l eps, T l delta)`` over ``T`` rounds (the paper's Section 5: "given the total
privacy budget eps', the privacy budget for one tuple should satisfy eps = eps' / l").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PrivacySpent:
    """An (epsilon, delta) guarantee and how it was accounted.

    Parameters
    ----------
    epsilon : float
        Privacy loss bound.
    delta : float
        Failure probability.
    accountant : str
        The composition rule used.
    """

    epsilon: float
    delta: float
    accountant: str = "basic composition"


def compose(epsilon: float, delta: float, count: int) -> PrivacySpent:
    """``count`` releases, each ``(epsilon, delta)``, by basic composition: ``(count eps, count delta)``."""
    if epsilon < 0 or delta < 0 or count < 0:
        raise ValueError("epsilon, delta and count must be >= 0")
    return PrivacySpent(epsilon * count, delta * count)


def per_tuple_budget(total_epsilon: float, tuples: int) -> float:
    """The per-tuple epsilon that spends ``total_epsilon`` over ``tuples`` tuples (eps = eps' / l)."""
    if total_epsilon <= 0 or tuples < 1:
        raise ValueError("total_epsilon must be > 0 and tuples >= 1")
    return total_epsilon / tuples
