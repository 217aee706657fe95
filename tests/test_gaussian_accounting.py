"""Accounting of PC-TD's T Gaussian releases (Theorem 1): Opacus RDP, eqs. (16)-(17), the paper's bound."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flower_topics.privacy.gaussian import (
    DEFAULT_ORDERS,
    gaussian_epsilon,
    gaussian_epsilon_and_order,
    gaussian_epsilon_series,
    gaussian_sigma_for_epsilon,
    moments_accountant_epsilon,
    theorem1_epsilon,
    theorem1_sigma,
    theorem1_valid,
)

DELTA = 1e-5


def _by_hand(sigma: float, rounds: int, delta: float) -> float:
    """RDP of the Gaussian mechanism a / (2 sigma^2) per release, converted as Balle et al. 2020 Thm 21."""
    best = math.inf
    for a in DEFAULT_ORDERS:
        rdp = rounds * a / (2 * sigma**2)
        best = min(best, rdp - (math.log(delta) + math.log(a)) / (a - 1) + math.log((a - 1) / a))
    return best


@pytest.mark.parametrize("sigma, rounds", [(0.25, 35), (1.0, 10), (4.0, 100), (30.0, 200)])
def test_epsilon_matches_the_closed_form_rdp_of_the_gaussian_mechanism(sigma, rounds):
    spent = gaussian_epsilon(sigma, rounds, DELTA)
    assert spent.epsilon == pytest.approx(_by_hand(sigma, rounds, DELTA), rel=1e-12)
    assert spent.delta == DELTA and "RDP" in spent.accountant


def test_epsilon_decreases_in_sigma_and_increases_in_rounds():
    eps_sigma = [gaussian_epsilon(s, 50, DELTA).epsilon for s in (0.25, 0.5, 1, 2, 5, 10, 50)]
    assert np.all(np.diff(eps_sigma) < 0)
    series = gaussian_epsilon_series(2.0, 60, DELTA)
    assert series.shape == (60,) and np.all(np.diff(series) > 0)
    for t in (1, 7, 60):
        assert series[t - 1] == pytest.approx(gaussian_epsilon(2.0, t, DELTA).epsilon, rel=1e-12)


@pytest.mark.parametrize("target, rounds", [(1.0, 100), (8.0, 35), (0.3, 10)])
def test_sigma_for_epsilon_round_trips(target, rounds):
    sigma = gaussian_sigma_for_epsilon(target, rounds, DELTA)
    assert gaussian_epsilon(sigma, rounds, DELTA).epsilon <= target
    assert gaussian_epsilon(sigma * (1 - 1e-4), rounds, DELTA).epsilon > target
    assert gaussian_epsilon(sigma, rounds, DELTA).epsilon == pytest.approx(target, rel=1e-4)


def test_the_papers_sigma_gives_a_huge_epsilon_and_its_theorem1_formula_is_invalid_there():
    eps, order = gaussian_epsilon_and_order(0.25, 35, DELTA)
    assert eps > 300  # ~391: essentially no privacy, at least T / (2 sigma^2) = 280
    assert eps > 35 / (2 * 0.25**2)
    assert not theorem1_valid(0.25, 35, DELTA)
    assert theorem1_epsilon(0.25, 35, DELTA) < eps  # the formula understates it outside its premise
    # eqs. (16)-(17) with the exact log-moment: the classic conversion, never tighter than Opacus's
    assert moments_accountant_epsilon(0.25, 35, DELTA) >= eps


def test_theorem1_formula_is_a_valid_but_loose_upper_bound_where_its_premise_holds():
    sigma, rounds = 50.0, 100
    assert theorem1_valid(sigma, rounds, DELTA)
    tight = gaussian_epsilon(sigma, rounds, DELTA).epsilon
    classic = moments_accountant_epsilon(sigma, rounds, DELTA)
    paper = theorem1_epsilon(sigma, rounds, DELTA)
    assert tight <= classic <= paper
    assert paper == pytest.approx(2 * math.sqrt(rounds * math.log(1 / DELTA)) / sigma)
    assert theorem1_sigma(paper, rounds, DELTA) == pytest.approx(sigma)
