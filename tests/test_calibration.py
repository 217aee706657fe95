"""The one noise calibration every accountant uses (privacy/accountants/calibration.py)."""

import pytest

from flower_topics.privacy.accountants.calibration import smallest_noise


@pytest.mark.parametrize("target", [0.01, 0.7, 1.5, 40.0])
def test_the_least_noise_within_the_target_to_its_precision(target):
    calls = []

    def epsilon_of(sigma):  # a Gaussian-like curve: eps falls as 1 / sigma
        calls.append(sigma)
        return 3.0 / sigma

    sigma = smallest_noise(epsilon_of, target, ceiling=1e5, floor=1e-3, precision=1e-4)
    assert epsilon_of(sigma) <= target < epsilon_of(sigma / (1 + 1e-4))
    assert sigma == pytest.approx(3.0 / target, rel=1e-4)
    assert len(calls) < 60


def test_an_unreachable_target_and_a_target_met_by_almost_no_noise():
    assert smallest_noise(lambda s: 10.0, 1.0, ceiling=1000, floor=1e-3) is None
    tiny = smallest_noise(lambda s: 0.0, 1.0, ceiling=1000, floor=1e-3)
    assert tiny <= 2e-3  # halving stops at the floor
