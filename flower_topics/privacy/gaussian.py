"""Privacy accounting of PC-TD's Gaussian count noise over T rounds (Theorem 1).

PC-TD (Shi et al., IEEE Intelligent Systems 2020, section "Privacy Analysis") adds
``N(0, sigma^2)`` to every unit word count ``N_ijw`` each EM iteration (eq. 4, Algorithm 1
line 6), with sensitivity ``Delta N = 1``: neighbouring datasets differ in one word of one
document. Each iteration is one Gaussian mechanism ``M_t`` on the party's counts
(everything the party releases, ``M_t(w, z_k)`` of eq. 10, is post-processing of them and of
earlier releases); every party releases in every round, nothing is subsampled (sample
rate 1), and a party's data is only in its own releases, so its guarantee is that of T
adaptive Gaussian releases. The paper composes them with the moments accountant of Abadi
et al. 2016 (eqs. 14-17) and states only the asymptotic Theorem 1,
``sigma >= Theta(sqrt(T log(1/delta)) / eps)``.

Three numbers are provided:

- :func:`gaussian_epsilon`: the tight value, Renyi DP of the Gaussian mechanism
  (``T alpha / (2 sigma^2)`` at order alpha) converted to (eps, delta) by Opacus
  (``opacus.accountants.analysis.rdp.compute_rdp`` / ``get_privacy_spent``; the conversion is
  Balle et al. 2020, Theorem 21: ``eps = rdp - (log delta + log alpha) / (alpha - 1) + log((alpha - 1) / alpha)``).
- :func:`moments_accountant_epsilon`: eqs. (16)-(17) literally, with the Gaussian log-moment
  ``alpha(lambda) = T lambda (lambda + 1) / (2 sigma^2)`` (Abadi et al., Lemma 3, q = 1):
  ``eps = min_lambda (alpha(lambda) + log(1/delta)) / lambda`` (looser than the above).
- :func:`theorem1_epsilon`: the explicit constant of the paper's proof of Theorem 1. The
  proof bounds ``alpha(lambda) <= T lambda^2 / sigma^2`` and asks ``T lambda^2 / sigma^2 <=
  lambda eps / 2`` and ``exp(-lambda eps / 2) <= delta``; the best ``lambda =
  sigma sqrt(log(1/delta) / T)`` gives ``eps = 2 sqrt(T log(1/delta)) / sigma``. The bound
  ``lambda (lambda + 1) <= 2 lambda^2`` needs ``lambda >= 1``, i.e. ``sigma >= sqrt(T /
  log(1/delta))``; below that (e.g. the paper's sigma = 0.25) the formula is *not* a valid
  guarantee and underestimates the true epsilon, which is then of order ``T / (2 sigma^2)``
  (hundreds at sigma = 0.25). :func:`theorem1_valid` tells which regime applies.

Caveat on ``Delta N = 1``: it holds when the unit structure does not depend on the changed
word (e.g. a word replaced, or units fixed in advance). With overlapping n-gram windows a
word sits in up to n units (sensitivity sqrt(n)); deleting a word from chunked units shifts
the later chunks of its document. The accountant takes the noise multiplier
``sigma / Delta N``: pass ``sigma / sqrt(n)`` for overlapping windows.
"""

from __future__ import annotations

import math

import numpy as np

from flower_topics.privacy.accountants import DEFAULT_ORDERS, RDPAccountant, get_noise_multiplier
from flower_topics.privacy.composition import PrivacySpent

ACCOUNTANT = f"{RDPAccountant.description}, sample rate 1"


def _check(noise_multiplier: float, rounds: int, delta: float) -> None:
    if not noise_multiplier > 0:
        raise ValueError("noise_multiplier must be > 0")
    if rounds < 0 or int(rounds) != rounds:
        raise ValueError("rounds must be a non-negative integer")
    if not 0 < delta < 1:
        raise ValueError("delta must be in (0, 1)")


def gaussian_epsilon_and_order(noise_multiplier: float, rounds: int, delta: float,
                               orders: tuple[float, ...] = DEFAULT_ORDERS) -> tuple[float, float]:
    """``(eps, optimal RDP order)`` after ``rounds`` Gaussian releases (sensitivity 1, q = 1): the ``"rdp"``
    accountant (Opacus); ``(0.0, nan)`` after none."""
    _check(noise_multiplier, rounds, delta)
    accountant = RDPAccountant(orders)
    accountant.step(noise_multiplier=noise_multiplier, sample_rate=1.0, steps=int(rounds))
    return accountant.get_privacy_spent(delta)


def gaussian_epsilon(noise_multiplier: float, rounds: int, delta: float,
                     orders: tuple[float, ...] = DEFAULT_ORDERS) -> PrivacySpent:
    """(eps, delta) of PC-TD after ``rounds`` iterations with noise ``sigma`` (Theorem 1 setting, tight RDP).

    Parameters
    ----------
    noise_multiplier : float
        ``sigma / Delta N`` (the paper: ``Delta N = 1``, so sigma itself).
    rounds : int
        Number of EM iterations T (each party releases once per iteration).
    delta : float
        Target delta.
    orders : tuple of float
        RDP orders to optimize over.

    Returns
    -------
    PrivacySpent
    """
    eps, _ = gaussian_epsilon_and_order(noise_multiplier, rounds, delta, orders)
    return PrivacySpent(eps, delta, ACCOUNTANT)


def gaussian_epsilon_series(noise_multiplier: float, rounds: int, delta: float,
                            orders: tuple[float, ...] = DEFAULT_ORDERS) -> np.ndarray:
    """``eps`` after each of rounds ``1 .. rounds`` (per-round privacy report), shape ``(rounds,)``."""
    _check(noise_multiplier, rounds, delta)
    from opacus.accountants.analysis.rdp import compute_rdp

    per_round = np.asarray(compute_rdp(q=1.0, noise_multiplier=noise_multiplier, steps=1, orders=list(orders)))
    alphas = np.asarray(orders, dtype=np.float64)
    t = np.arange(1, int(rounds) + 1, dtype=np.float64)[:, None]
    # get_privacy_spent's conversion, vectorized over rounds (same formula, same orders)
    eps = t * per_round[None, :] - (np.log(delta) + np.log(alphas)) / (alphas - 1) + np.log((alphas - 1) / alphas)
    return eps.min(axis=1)


def gaussian_sigma_for_epsilon(target_epsilon: float, rounds: int, delta: float,
                               orders: tuple[float, ...] = DEFAULT_ORDERS, rel_tol: float = 1e-6) -> float:
    """Smallest ``sigma`` whose :func:`gaussian_epsilon` over ``rounds`` is at most ``target_epsilon``
    with the ``"rdp"`` accountant.

    The result ``s`` satisfies ``eps(s) <= target_epsilon`` and ``eps(s / (1 + rel_tol)) > target_epsilon``
    up to the bisection tolerance (:func:`~flower_topics.privacy.accountants.calibration.get_noise_multiplier`).

    Raises
    ------
    UserInputError
        When ``target_epsilon <= 0``, ``rounds < 1`` or no sigma reaches the target.
    """
    _check(1.0, rounds, delta)
    return get_noise_multiplier("rdp", target_epsilon=target_epsilon, target_delta=delta, sample_rate=1.0,
                                steps=rounds, precision=rel_tol, orders=orders)


def moments_accountant_epsilon(noise_multiplier: float, rounds: int, delta: float,
                               lambdas: tuple[float, ...] = tuple(o - 1.0 for o in DEFAULT_ORDERS)) -> float:
    """Eqs. (16)-(17) literally, with the Gaussian log-moment ``alpha(lambda) = T lambda (lambda + 1) / (2 sigma^2)``.

    ``eps = min_lambda (alpha(lambda) + log(1/delta)) / lambda`` over ``lambdas`` (the classic
    conversion; never tighter than :func:`gaussian_epsilon` on the same orders ``lambda + 1``).
    """
    _check(noise_multiplier, rounds, delta)
    lam = np.asarray(lambdas, dtype=np.float64)
    lam = lam[lam > 0]
    moment = rounds * lam * (lam + 1.0) / (2.0 * noise_multiplier**2)
    return float(np.min((moment + math.log(1.0 / delta)) / lam))


def theorem1_epsilon(noise_multiplier: float, rounds: int, delta: float) -> float:
    """The explicit form of the paper's Theorem 1 proof: ``eps = 2 sqrt(T log(1/delta)) / sigma``.

    A valid guarantee only when :func:`theorem1_valid` holds (the proof's ``lambda >= 1``).
    """
    _check(noise_multiplier, rounds, delta)
    return 2.0 * math.sqrt(rounds * math.log(1.0 / delta)) / noise_multiplier


def theorem1_sigma(epsilon: float, rounds: int, delta: float) -> float:
    """Inverse of :func:`theorem1_epsilon`: ``sigma = 2 sqrt(T log(1/delta)) / eps``."""
    if not epsilon > 0:
        raise ValueError("epsilon must be > 0")
    _check(1.0, rounds, delta)
    return 2.0 * math.sqrt(rounds * math.log(1.0 / delta)) / epsilon


def theorem1_valid(noise_multiplier: float, rounds: int, delta: float) -> bool:
    """Whether the proof's optimal ``lambda = sigma sqrt(log(1/delta) / T)`` is >= 1 (its bound's premise)."""
    _check(noise_multiplier, rounds, delta)
    return rounds > 0 and noise_multiplier * math.sqrt(math.log(1.0 / delta) / rounds) >= 1.0
