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
