"""A dplda party keeps what its budget guard established between messages (each is a fresh process on the
deployment engine): the same answers as its accountant, a few epsilons per run, and only for the same question."""

from __future__ import annotations

import numpy as np
import pytest

from flower_topics.clients import dplda as client
from flower_topics.privacy import dplda_calibration as calibration
from flower_topics.privacy import guard
from flower_topics.wire.dplda import DPLDASettings
from tests.accounting import pld_epsilon, pld_noise

RATE, DELTA, TARGET = 0.2, 1e-5, 3.0


def _settings(sigma: float) -> DPLDASettings:
    return DPLDASettings(n_topics=2, alpha=0.1, sample_rate=RATE, clip=1.0, noise_multiplier=sigma, epsilon=TARGET,
                         delta=DELTA)


def _message(state: client.DPLDAClientState, sigma: float, n: int) -> bool:
    """Whether the party would make its ``n``-th release, in a process that knows only ``state``."""
    guard._BOUNDS.clear()  # a fresh ClientApp process
    releases = np.tile([client.release_row(_settings(sigma), sigma, RATE)], (n, 1))
    return client.spending_over_cap(releases, _settings(sigma), 0.0, 0.0, TARGET, state) is None


def test_a_party_keeping_its_guard_answers_every_release_as_its_accountant_with_few_epsilons(monkeypatch):
    sigma = pld_noise(TARGET, DELTA, RATE, 40)
    computed: list[list[int]] = []
    real = calibration.rounds_epsilon
    monkeypatch.setattr(calibration, "rounds_epsilon", lambda s, n, d: computed[-1].append(n) or real(s, n, d))
    state = client.DPLDAClientState()
    answers = []
    for n in range(1, 61):
        computed.append([])
        answers.append(_message(state, sigma, n))
    assert answers == [pld_epsilon(sigma, RATE, n, DELTA) <= TARGET * (1 + 1e-9) for n in range(1, 61)]
    assert answers.count(True) == 40  # sigma calibrated for 40 releases
    with_epsilons = [n for n, epsilons in enumerate(computed[:40], start=1) if epsilons]
    assert with_epsilons == [1, 2, 3, 5, 9, 17, 33], with_epsilons  # doubling: not one epsilon per message
    assert state.guard.shape == (1, client.GUARD_COLUMNS) and state.guard[0, 6] == 40 and state.guard[0, 7] == 41


def test_what_a_party_kept_for_another_question_is_not_used():
    sigma = pld_noise(TARGET, DELTA, RATE, 40)
    state = client.DPLDAClientState()
    assert _message(state, 2 * sigma, 1)  # kept for twice the noise: many more releases fit
    state.guard[0, 6] = 10_000  # as if it had established that 10,000 releases of 2 sigma fit
    assert not _message(state, sigma, 41)  # at sigma the 41st is refused all the same
    assert state.guard[0, 1] == sigma and state.guard[0, 6] < 41


def test_the_guard_memo_round_trips_through_the_state_row():
    memo = client.GuardMemo(True, 1.5, RATE, DELTA, 128.0, TARGET, fits=17, over=33.0)
    assert memo.row().shape == (1, client.GUARD_COLUMNS)
    assert client.GuardMemo.read(memo.row()) == memo
    assert client.GuardMemo.read(client.DPLDAClientState().guard) is None  # nothing kept yet
    unknown = client.GuardMemo(False, 1.5, RATE, DELTA, 0.0, TARGET)
    assert client.GuardMemo.read(unknown.row()) == unknown and unknown.over == float("inf")


def test_contradictory_guard_bounds_are_refused():
    guard._BOUNDS.clear()
    with pytest.raises(ValueError, match="0 <= fits < over"):
        guard.remember_bounds(("kind",), 1.0, 5, 5)


def test_under_secure_aggregation_releases_at_another_noise_are_composed_as_they_were_made():
    """A server that lowered the noise earlier in the run: the party composes every release at its own sigma (the
    Skellam accountant), not all of them at today's, and refuses the release the lower noise has used up."""
    from flower_topics.privacy.accountants import create_accountant

    settings = DPLDASettings(n_topics=2, alpha=0.1, sample_rate=RATE, clip=1.0, noise_multiplier=1.0, epsilon=TARGET,
                             delta=DELTA, secure=True, quantum=64.0)
    sigma = calibration.noise_multiplier({"dplda.clip": 1.0, "dplda.quantum": 64.0, "secure-aggregation": True,
                                   "dplda.epsilon": TARGET, "dplda.delta": DELTA, "vocabulary": "file",
                                   "vocabulary-epsilon": 0.0, "vocabulary-delta": 0.0, "dplda.sample-rate": RATE,
                                   "num-rounds": 40})
    settings = DPLDASettings(**{**settings.__dict__, "noise_multiplier": sigma})
    low = np.tile([client.release_row(settings, sigma / 4, RATE)], (20, 1))
    releases = np.vstack([low, [client.release_row(settings, sigma, RATE)]])
    exact = create_accountant("skellam", sensitivity=settings.sensitivity_units)
    exact.step(noise_multiplier=sigma / 4, sample_rate=RATE, steps=20)
    exact.step(noise_multiplier=sigma, sample_rate=RATE)
    assert exact.get_epsilon(DELTA) > TARGET  # the lower noise has spent the budget
    assert calibration.rounds_epsilon(settings, 21, DELTA) <= TARGET  # 21 releases at today's sigma would fit
    guard._BOUNDS.clear()
    assert client.spending_over_cap(releases, settings, 0.0, 0.0, TARGET) == pytest.approx(exact.get_epsilon(DELTA))
