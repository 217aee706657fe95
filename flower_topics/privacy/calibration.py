"""The least noise that reaches a privacy target: one search for every accountant that calibrates noise.

As Opacus's ``get_noise_multiplier`` does for its accountants: epsilon falls as the noise
multiplier grows, so the smallest multiplier whose epsilon is within the target is found by
bracketing it between powers of two and bisecting (geometrically) to a relative precision.
"""

from __future__ import annotations

from collections.abc import Callable


def smallest_noise(epsilon_of: Callable[[float], float], target: float, *, ceiling: float, floor: float,
                   precision: float = 1e-3) -> float | None:
    """The smallest noise multiplier ``sigma`` (within ``precision``, relative, rounded up) with
    ``epsilon_of(sigma) <= target``, or None when not even ``ceiling`` reaches it.

    Parameters
    ----------
    epsilon_of : callable
        Epsilon of the calibrated releases at a noise multiplier (non-increasing in it).
    target : float
        The epsilon they may spend.
    ceiling : float
        The largest multiplier tried (doubling from 1).
    floor : float
        Below it the search stops halving (a multiplier this small is returned as it is when it reaches the
        target: some accountants need a slow, wide grid at a tiny sigma).
    precision : float, default 1e-3
        The bisection stops when ``high / low <= 1 + precision``; ``high`` is returned.
    """
    high = 1.0
    while epsilon_of(high) > target:
        high *= 2.0
        if high > ceiling:
            return None
    low = high / 2.0  # bracket from above
    while low > floor and epsilon_of(low) <= target:
        high, low = low, low / 2.0
    while high / low > 1.0 + precision:
        mid = (low * high) ** 0.5
        if epsilon_of(mid) > target:
            low = mid
        else:
            high = mid
    return high
