"""The least noise that reaches a privacy target: one search for every accountant.

As Opacus's ``get_noise_multiplier`` does for its accountants: epsilon falls as the noise
multiplier grows, so the smallest multiplier whose epsilon is within the target is found by
bracketing it between powers of two and bisecting (geometrically) to a relative precision.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flower_topics.errors import UserInputError
from flower_topics.privacy.accountants.registry import create_accountant


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


def get_noise_multiplier(mechanism: str, *, target_epsilon: float, target_delta: float, sample_rate: float,
                         steps: int, precision: float = 1e-3, also: tuple[tuple[float, float, int], ...] = (),
                         **options: Any) -> float:
    """The smallest ``sigma`` (to ``precision``, relative) whose ``steps`` releases at sample rate ``q`` spend at
    most ``target_epsilon`` at ``target_delta`` in the accountant registered as ``mechanism``.

    The search (:func:`smallest_noise`) tries the back-end's range (its ``noise_ceiling`` and
    ``noise_floor``); the result ``s`` has ``eps(s) <= target_epsilon < eps(s / (1 + precision))``.

    Parameters
    ----------
    mechanism : str
        A registered accountant (:func:`~flower_topics.privacy.accountants.registry.create_accountant`).
    target_epsilon : float
        > 0.
    target_delta : float
        In (0, 1).
    sample_rate : float
        ``q`` in (0, 1].
    steps : int
        Releases, >= 1.
    precision : float, default 1e-3
        Relative width of the final bracket.
    also : tuple of (sigma, q, steps), default none
        Other releases of the same documents at a noise already fixed, composed in by the same
        accountant: the multiplier found is the smallest whose releases *and* these spend at most
        the target.
    **options
        The back-end's own settings.

    Raises
    ------
    UserInputError
        When the settings are out of range or no noise in the back-end's range reaches the target (one line).
    """
    if not target_epsilon > 0 or not 0 < target_delta < 1 or steps < 1 or not 0 < sample_rate <= 1:
        raise UserInputError(f"cannot calibrate noise for eps {target_epsilon}, delta {target_delta}, "
                             f"q {sample_rate}, {steps} rounds: need eps > 0, 0 < delta < 1, q in (0, 1], rounds >= 1")
    backend = type(create_accountant(mechanism, **options))

    def epsilon_of(sigma: float) -> float:
        accountant = create_accountant(mechanism, **options)
        accountant.step(noise_multiplier=sigma, sample_rate=sample_rate, steps=steps)
        for fixed_sigma, fixed_rate, fixed_steps in also:
            accountant.step(noise_multiplier=fixed_sigma, sample_rate=fixed_rate, steps=fixed_steps)
        return accountant.get_epsilon(target_delta)

    sigma = smallest_noise(epsilon_of, target_epsilon, ceiling=backend.noise_ceiling, floor=backend.noise_floor,
                           precision=precision)
    if sigma is None:
        raise UserInputError(f"no noise level reaches eps {target_epsilon:g} at delta {target_delta:g} with q "
                             f"{sample_rate:g} over {steps} rounds{' and the other releases' if also else ''} "
                             f"({backend.description})")
    return sigma
