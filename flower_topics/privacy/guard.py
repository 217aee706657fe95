"""A party's guard: whether ``n`` releases of one kind stay within its budget, with few epsilon computations.

A party refuses a release that would take its document-level epsilon over its budget,
whatever the server's arithmetic says. Every round asks about one more release of the same
kind, and one epsilon of a composition is a costly computation (PLD or RDP); composing one more
release never lowers epsilon, so what one question establishes answers many later ones.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable

#: Per question kind (and budget): the largest count known to fit and the smallest known not to.
_BOUNDS: dict[Hashable, tuple[int, float]] = {}
_LOCK = threading.Lock()


def within_budget(epsilon_of: Callable[[int], float], count: int, budget: float, *, kind: Hashable) -> bool:
    """Whether ``epsilon_of(count) <= budget``, for an ``epsilon_of`` non-decreasing in the count.

    A count at or below one known to fit fits, and one at or above a count known not to fit does
    not. An unknown count is decided by computing epsilon at ``max(count, 2 x the largest known
    fit)`` and, when that is over, by bisecting between the two bounds: a run of ``R`` rounds
    computes about ``2 log2 R`` epsilons instead of one every round.

    Parameters
    ----------
    epsilon_of : callable
        The epsilon of a number of releases of this kind (at the question's delta).
    count : int
        Releases composed, >= 0.
    budget : float
        The epsilon they may spend.
    kind : hashable
        What ``epsilon_of`` depends on besides the count (the mechanism, its parameters and delta):
        questions of one kind share what is known.
    """
    if count <= 0:
        return True
    key = (kind, float(budget))
    with _LOCK:
        fits, over = _BOUNDS.get(key, (0, float("inf")))
        while fits < count < over:
            probe = max(count, 2 * fits) if over == float("inf") else int(fits + over) // 2
            if epsilon_of(probe) <= budget:
                fits = probe
            else:
                over = probe
        _BOUNDS[key] = (fits, over)
        return count <= fits


def known_bounds(kind: Hashable, budget: float) -> tuple[int, float]:
    """What this process knows of ``kind`` at ``budget``: the largest count known to fit (0 when none) and the
    smallest known not to (inf when none)."""
    with _LOCK:
        return _BOUNDS.get((kind, float(budget)), (0, float("inf")))


def remember_bounds(kind: Hashable, budget: float, fits: int, over: float) -> None:
    """Add what an earlier :func:`within_budget` of this party established (:func:`known_bounds`, kept on the
    party's own side) to what this process knows of ``kind`` at ``budget``.

    Only for bounds this party's own accountant computed for exactly this ``kind`` and ``budget``: a process of
    the deployment engine answers one message, so a party that keeps them between messages computes a few
    epsilons per run instead of one per message.

    Raises
    ------
    ValueError
        When ``fits`` is not below ``over`` (bounds that contradict each other).
    """
    if not 0 <= int(fits) < float(over):
        raise ValueError(f"guard bounds must satisfy 0 <= fits < over, got {fits} and {over}")
    key = (kind, float(budget))
    with _LOCK:
        known_fits, known_over = _BOUNDS.get(key, (0, float("inf")))
        fits, over = max(known_fits, int(fits)), min(known_over, float(over))
        if fits >= over:
            raise ValueError(f"guard bounds {fits} and {over} contradict what this process computed")
        _BOUNDS[key] = (fits, over)
