"""One-line epsilons and sigmas through the accountant interface, for tests that ask for many."""

from __future__ import annotations

import numpy as np

from flower_topics.privacy.accountants import create_accountant, get_noise_multiplier


def epsilon(mechanism: str, sigma: float, q: float, steps: int, delta: float, **options) -> float:
    """Epsilon at ``delta`` of ``steps`` releases of ``(sigma, q)`` in the accountant ``mechanism``."""
    accountant = create_accountant(mechanism, **options)
    accountant.step(noise_multiplier=sigma, sample_rate=q, steps=steps)
    return accountant.get_epsilon(delta)


def pld_epsilon(sigma: float, q: float, rounds: int, delta: float) -> float:
    """``rounds`` subsampled Gaussian releases, PLD."""
    return epsilon("pld", sigma, q, rounds, delta)


def pld_releases_epsilon(releases: np.ndarray, delta: float) -> float:
    """One PLD step per ``(sigma, q)`` row, in order."""
    accountant = create_accountant("pld")
    for sigma, q in np.asarray(releases, dtype=np.float64).reshape(-1, 2):
        accountant.step(noise_multiplier=sigma, sample_rate=q)
    return accountant.get_epsilon(delta)


def pld_noise(target_epsilon: float, delta: float, q: float, rounds: int) -> float:
    """The PLD calibration."""
    return get_noise_multiplier("pld", target_epsilon=target_epsilon, target_delta=delta, sample_rate=q, steps=rounds)


def skellam_epsilon(sigma: float, q: float, rounds: int, delta: float, units: float) -> float:
    """``rounds`` subsampled Skellam releases of sensitivity ``units``."""
    return epsilon("skellam", sigma, q, rounds, delta, sensitivity=units)


def skellam_noise_multiplier(target_epsilon: float, delta: float, q: float, rounds: int, units: float) -> float:
    """The Skellam calibration."""
    return get_noise_multiplier("skellam", target_epsilon=target_epsilon, target_delta=delta, sample_rate=q,
                                steps=rounds, sensitivity=units)


def round_event(sigma: float, q: float):
    """dp-accounting's event of one release: a Gaussian, Poisson-sampled when ``q < 1``."""
    import dp_accounting

    gaussian = dp_accounting.GaussianDpEvent(sigma)
    return gaussian if q >= 1.0 else dp_accounting.PoissonSampledDpEvent(q, gaussian)
