"""The accountant interface (flower_topics.privacy.accountants): each back-end against values computed here
independently, the interface's composition rules, the registry, and the one calibration search."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.optimize import brentq
from scipy.special import comb, logsumexp, ndtr

from flower_topics.errors import UserInputError
from flower_topics.privacy.accountants import (DEFAULT_ORDERS, Accountant, PLDAccountant, RDPAccountant,
                                               SkellamAccountant, accountant_names, create_accountant,
                                               get_noise_multiplier, register_accountant)
from flower_topics.privacy.accountants import registry
from flower_topics.privacy.accountants.skellam import ORDERS as SKELLAM_ORDERS, subsampled_skellam_rdp
from flower_topics.privacy.skellam_mechanism import skellam_rdp


def _gaussian_delta(sigma: float, eps: float) -> float:
    """Balle and Wang 2018, Theorem 8: the exact delta(eps) of one Gaussian release of sensitivity 1."""
    a, b = 1.0 / (2.0 * sigma), eps * sigma
    return float(ndtr(a - b) - math.exp(eps) * ndtr(-a - b))


def _gaussian_epsilon(sigma: float, delta: float) -> float:
    """The exact epsilon of one Gaussian release (the root of :func:`_gaussian_delta`, decreasing in eps)."""
    return brentq(lambda eps: _gaussian_delta(sigma, eps) - delta, 0.0, 100.0, xtol=1e-14, rtol=1e-14)


def _rdp_to_epsilon(rdp: np.ndarray, orders: np.ndarray, delta: float) -> float:
    """Balle et al. 2020, Theorem 21, minimized over the orders."""
    return float(np.min(rdp - (math.log(delta) + np.log(orders)) / (orders - 1) + np.log((orders - 1) / orders)))


def _steps(name: str, sigma: float, q: float, steps: int, delta: float, **options) -> float:
    accountant = create_accountant(name, **options)
    accountant.step(noise_multiplier=sigma, sample_rate=q, steps=steps)
    return accountant.get_epsilon(delta)


@pytest.mark.parametrize("sigma", [0.8, 1.0, 2.0, 5.0])
@pytest.mark.parametrize("delta", [1e-5, 1e-3])
def test_pld_of_one_gaussian_release_is_the_analytic_gaussian_rounded_up(sigma, delta):
    """PLD's pessimistic discretization can only raise epsilon, and its grid is fine: within 1e-5 relative."""
    exact = _gaussian_epsilon(sigma, delta)
    pld = _steps("pld", sigma, 1.0, 1, delta)
    assert exact <= pld <= exact * (1 + 1e-5)


def test_pld_of_unsampled_releases_is_one_gaussian_of_the_combined_sigma():
    """T Gaussian releases of sigma_i are one Gaussian of (sum 1 / sigma_i^2)^-1/2 (Dong, Roth and Su 2022)."""
    accountant = PLDAccountant()
    accountant.step(noise_multiplier=2.0, sample_rate=1.0, steps=3)
    accountant.step(noise_multiplier=4.0, sample_rate=1.0)
    combined = (3 / 2.0 ** 2 + 1 / 4.0 ** 2) ** -0.5
    exact = _gaussian_epsilon(combined, 1e-5)
    assert exact <= accountant.get_epsilon(1e-5) <= exact * (1 + 1e-5)
    assert len(accountant) == 4


@pytest.mark.parametrize("sigma, steps", [(0.7, 1), (2.0, 30), (10.0, 500)])
def test_rdp_without_sampling_is_the_gaussians_closed_form(sigma, steps):
    """RDP of T Gaussian releases: T alpha / (2 sigma^2) at order alpha (Mironov 2017), converted by hand."""
    orders = np.asarray(DEFAULT_ORDERS)
    hand = _rdp_to_epsilon(steps * orders / (2 * sigma ** 2), orders, 1e-5)
    assert _steps("rdp", sigma, 1.0, steps, 1e-5) == pytest.approx(hand, rel=1e-12)


def test_rdp_of_the_subsampled_gaussian_at_integer_orders_is_mironovs_binomial_sum():
    """Mironov, Talwar and Zhang 2019 (integer alpha): A = sum_k C(alpha, k) (1-q)^(alpha-k) q^k e^((k^2-k)/(2 s^2))."""
    sigma, q, steps = 1.5, 0.1, 20
    orders = np.arange(2, 65)
    rdp = np.array([logsumexp([math.log(comb(a, k)) + (a - k) * math.log(1 - q) + k * math.log(q)
                               + (k * k - k) / (2 * sigma ** 2) for k in range(a + 1)]) / (a - 1) for a in orders])
    hand = _rdp_to_epsilon(steps * rdp, orders.astype(float), 1e-5)
    assert _steps("rdp", sigma, q, steps, 1e-5, orders=tuple(float(a) for a in orders)) == pytest.approx(hand, rel=1e-9)


@pytest.mark.parametrize("sigma", [0.8, 2.0, 5.0])
def test_skellam_of_one_release_lies_between_the_exact_gaussian_and_its_rdp_bound_converted_by_hand(sigma):
    """Theorem 3.5's RDP is the Gaussian's plus a term, so no valid conversion goes below the exact Gaussian;
    the accountant's conversion is at least as tight as the classical eps = rdp(alpha) + log(1/delta) / (alpha - 1)."""
    units, delta = 256.0, 1e-5
    classical = min(skellam_rdp(a, units ** 2, units, (sigma * units) ** 2) + math.log(1 / delta) / (a - 1)
                    for a in range(2, 200))
    skellam = _steps("skellam", sigma, 1.0, 1, delta, sensitivity=units)
    assert _gaussian_epsilon(sigma, delta) < skellam <= classical
    # at fine units the discretization term vanishes: the Gaussian's RDP figure at the same (integer) orders, to 0.1%
    gaussian = RDPAccountant(orders=tuple(float(a) for a in SKELLAM_ORDERS))
    gaussian.step(noise_multiplier=sigma, sample_rate=1.0)
    assert skellam == pytest.approx(gaussian.get_epsilon(delta), rel=1e-3)


def _log_sum(logs: list[float]) -> float:
    top = max(logs)
    return top + math.log(sum(math.exp(x - top) for x in logs))


def _zhu_wang_general_bound(sigma: float, q: float, units: float, alpha: int) -> float:
    """Zhu and Wang 2019, Theorem 6, written out term by term at an integer order alpha >= 2, for the Skellam
    mechanism's RDP eps(l) (Theorem 3.5, L1 = units^2): (1/(alpha-1)) log[(1-q)^(alpha-1) (alpha q - q + 1)
    + C(alpha,2) q^2 (1-q)^(alpha-2) e^eps(2) + 3 sum_{l=3..alpha} C(alpha,l) q^l (1-q)^(alpha-l) e^((l-1) eps(l))],
    and never above eps(alpha) (subsampling cannot raise a divergence)."""
    def eps(order: int) -> float:
        return skellam_rdp(order, units ** 2, units, (sigma * units) ** 2)

    def log_comb(n: int, k: int) -> float:
        return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)

    logs = [(alpha - 1) * math.log(1 - q) + math.log(alpha * q - q + 1),
            log_comb(alpha, 2) + 2 * math.log(q) + (alpha - 2) * math.log(1 - q) + eps(2)]
    logs += [math.log(3) + log_comb(alpha, l) + l * math.log(q) + (alpha - l) * math.log(1 - q) + (l - 1) * eps(l)
             for l in range(3, alpha + 1)]
    return min(_log_sum(logs) / (alpha - 1), eps(alpha))


def _general_bound_epsilon(sigma: float, q: float, rounds: int, delta: float, units: float) -> float:
    """``rounds`` releases under :func:`_zhu_wang_general_bound`, converted by Balle et al. 2020 (Theorem 21)."""
    orders = np.asarray(SKELLAM_ORDERS, dtype=float)
    rdp = np.array([rounds * _zhu_wang_general_bound(sigma, q, units, a) for a in SKELLAM_ORDERS])
    return _rdp_to_epsilon(rdp, orders, delta)


@pytest.mark.parametrize("sigma, q, units", [(2.22, 0.2, 512.0), (5.0, 0.05, 4.0), (1.0, 0.5, 1.0)])
def test_subsampled_skellam_is_zhu_wangs_general_bound(sigma, q, units):
    """The accountant's curve at a few orders and its epsilon over 40 releases against Theorem 6 of Zhu and Wang
    written out here (the general bound: the tighter formula is proved only for mechanisms meeting their Theorem 8)."""
    curve = dict(zip(SKELLAM_ORDERS, subsampled_skellam_rdp(sigma, q, units)))
    for alpha in (2, 3, 5, 10, 40, 128):
        assert curve[alpha] == pytest.approx(_zhu_wang_general_bound(sigma, q, units, alpha), rel=1e-9)
    assert (_steps("skellam", sigma, q, 40, 1e-5, sensitivity=units)
            == pytest.approx(_general_bound_epsilon(sigma, q, 40, 1e-5, units), rel=1e-9))


def test_calibrated_skellam_noise_meets_its_target_under_the_general_bound():
    """The least sigma for eps 3 (40 releases at q 0.2, quantum 256, C 2): within the target under Theorem 6
    written out here, and 0.1% less noise is over it. (The tighter formula's sigma, 2.22, is eps 5.1 under it.)"""
    sigma = get_noise_multiplier("skellam", target_epsilon=3.0, target_delta=1e-5, sample_rate=0.2, steps=40,
                                 sensitivity=512.0)
    assert _general_bound_epsilon(sigma, 0.2, 40, 1e-5, 512.0) <= 3.0
    assert _general_bound_epsilon(sigma / 1.001, 0.2, 40, 1e-5, 512.0) > 3.0
    assert _general_bound_epsilon(2.22, 0.2, 40, 1e-5, 512.0) > 5.0


@pytest.mark.parametrize("mu, shift, q", [(4.0, 1, 0.2), (20.0, 2, 0.5), (50.0, 3, 0.05)])
def test_the_general_bound_holds_for_the_exact_subsampled_skellam(mu, shift, q):
    """The exact Renyi divergences of a Poisson-subsampled one-cell Skellam release, both ways (a document added,
    a document removed), from scipy's pmf, are within the accountant's curve at every order checked."""
    from scipy.stats import skellam

    support = np.arange(-int(20 * math.sqrt(mu) + 60), int(20 * math.sqrt(mu) + 60))
    base = skellam.logpmf(support, mu / 2, mu / 2)
    mixed = np.logaddexp(math.log(1 - q) + base, math.log(q) + skellam.logpmf(support - shift, mu / 2, mu / 2))
    curve = dict(zip(SKELLAM_ORDERS, subsampled_skellam_rdp(math.sqrt(mu) / shift, q, float(shift))))
    for alpha in (2, 3, 4, 8, 16, 32):
        exact = max(logsumexp(alpha * mixed + (1 - alpha) * base), logsumexp(alpha * base + (1 - alpha) * mixed))
        assert exact / (alpha - 1) <= curve[alpha] + 1e-12


@pytest.mark.parametrize("name, options", [("pld", {}), ("rdp", {}), ("skellam", {"sensitivity": 512.0})])
def test_every_back_end_composes_steps_and_earlier_releases_alike(name, options):
    """The interface's rules, for each back-end: no step spends nothing; split steps compose as one
    call; more steps never spend less; an earlier (eps, delta) release adds by basic composition."""
    assert create_accountant(name, **options).get_epsilon(1e-5) == 0.0
    one = _steps(name, 1.2, 0.2, 5, 1e-5, **options)
    split = create_accountant(name, **options)
    split.step(noise_multiplier=1.2, sample_rate=0.2, steps=3)
    split.step(noise_multiplier=1.2, sample_rate=0.2, steps=2)
    assert split.get_epsilon(1e-5) == pytest.approx(one, rel=1e-9) and len(split) == 5
    assert _steps(name, 1.2, 0.2, 6, 1e-5, **options) > one
    before = create_accountant(name, **options)
    before.spend(0.5, 2e-6)
    before.spend(0.25, 1e-6)
    assert before.get_epsilon(1e-5) == 0.75  # nothing else: the spends' sum
    before.step(noise_multiplier=1.2, sample_rate=0.2, steps=5)
    assert before.get_epsilon(1e-5) == 0.75 + _steps(name, 1.2, 0.2, 5, 1e-5 - 3e-6, **options)
    with pytest.raises(ValueError, match="leaves nothing"):
        before.get_epsilon(3e-6)


def test_pld_composes_releases_of_several_kinds_in_any_order():
    forward, backward = PLDAccountant(), PLDAccountant()
    kinds = [(1.3, 0.2, 7), (0.8, 0.05, 30), (4.0, 1.0, 2)]
    for sigma, q, n in kinds:
        forward.step(noise_multiplier=sigma, sample_rate=q, steps=n)
    for sigma, q, n in reversed(kinds):
        backward.step(noise_multiplier=sigma, sample_rate=q, steps=n)
    assert forward.get_epsilon(1e-5) == backward.get_epsilon(1e-5)
    assert forward.get_epsilon(1e-5) > _steps("pld", 0.8, 0.05, 30, 1e-5)


def test_the_registry_names_every_back_end_and_refuses_an_unknown_one_in_one_line():
    assert accountant_names() == ("pld", "rdp", "skellam")
    assert isinstance(create_accountant("pld"), PLDAccountant)
    assert isinstance(create_accountant("rdp"), RDPAccountant)
    skellam = create_accountant("skellam", sensitivity=4.0)
    assert isinstance(skellam, SkellamAccountant) and skellam.sensitivity == 4.0
    with pytest.raises(ValueError) as error:
        create_accountant("prv")
    assert str(error.value) == "no accountant 'prv': the registered ones are pld, rdp, skellam"
    with pytest.raises(ValueError, match="already registered as 'pld'"):
        @register_accountant
        class Another(PLDAccountant):
            pass
    assert create_accountant("pld").__class__ is PLDAccountant
    with pytest.raises(TypeError):
        Accountant()  # abstract


class _Inverse(Accountant):
    """A back-end with a closed form: epsilon = steps / sigma, whatever delta and q."""

    noise_ceiling, noise_floor = 1e4, 1e-4

    @classmethod
    def mechanism(cls) -> str:
        return "test-inverse"

    def steps_epsilon(self, delta: float) -> float:
        return sum(n / s for s, _, n in self.history)


@pytest.mark.parametrize("target, steps", [(3.0, 40), (0.5, 1), (100.0, 7)])
def test_calibration_finds_the_smallest_noise_of_a_closed_form_back_end(target, steps, monkeypatch):
    """eps = steps / sigma: the least sigma is steps / target; the search returns it rounded up, to its precision."""
    monkeypatch.setitem(registry._ACCOUNTANTS, "test-inverse", _Inverse)
    sigma = get_noise_multiplier("test-inverse", target_epsilon=target, target_delta=1e-5, sample_rate=1.0,
                                 steps=steps, precision=1e-6)
    assert steps / target <= sigma <= steps / target * (1 + 1e-6)


@pytest.mark.parametrize("name, options, q, steps", [("pld", {}, 0.2, 40), ("rdp", {}, 1.0, 30),
                                                     ("skellam", {"sensitivity": 512.0}, 0.2, 10)])
def test_calibration_returns_the_smallest_noise_meeting_the_target(name, options, q, steps):
    """eps(sigma) <= target < eps(sigma / (1 + precision)): nothing noticeably smaller meets it."""
    target, precision = 2.0, 1e-3
    sigma = get_noise_multiplier(name, target_epsilon=target, target_delta=1e-5, sample_rate=q, steps=steps,
                                 precision=precision, **options)
    assert _steps(name, sigma, q, steps, 1e-5, **options) <= target
    assert _steps(name, sigma / (1 + precision), q, steps, 1e-5, **options) > target


def test_calibration_says_in_one_line_when_no_noise_reaches_the_target():
    with pytest.raises(UserInputError) as error:
        get_noise_multiplier("pld", target_epsilon=1e-7, target_delta=1e-12, sample_rate=1.0, steps=10_000)
    assert str(error.value).startswith("no noise level reaches eps 1e-07 at delta 1e-12") and "\n" not in str(error.value)
    with pytest.raises(UserInputError, match="cannot calibrate noise"):
        get_noise_multiplier("rdp", target_epsilon=1.0, target_delta=1e-5, sample_rate=1.0, steps=0)
