"""PC-TD strategy: eq. (11) and eq. (13) on hand-built replies, validation, privacy report."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from flower_topics.privacy.gaussian import gaussian_epsilon, theorem1_epsilon
from flower_topics.strategies.pctd import PCTD
from flower_topics.wire.pctd import PHI_KEY, STATISTIC_KEY, PCTDSettings
from tests.flower_harness import FixedNodesGrid, as_server, reply_content, reply_from, vocabulary

K, V = 2, 3


def _reply(statistic, dtype=np.float32) -> RecordDict:
    return reply_content("pctd", {STATISTIC_KEY: np.asarray(statistic, dtype=dtype)})


def _strategy(sigma=0.5, **kwargs) -> PCTD:
    as_server()
    return PCTD(vocabulary(V), PCTDSettings(n_topics=K, sigma=sigma, unit="ngram", ngram=2), seed=0, **kwargs)


def _round(strategy, server_round, nodes, statistics):
    arrays = strategy.initial_arrays()
    msgs = list(strategy.configure_train(server_round, arrays, ConfigRecord({"seed": 4}), FixedNodesGrid(nodes)))
    by_node = {m.metadata.dst_node_id: m for m in msgs}
    return msgs, strategy.aggregate_train(
        server_round, [reply_from(n, by_node[n], _reply(s)) for n, s in zip(nodes, statistics)])


def test_parties_get_phi_and_the_settings_only():
    strategy = _strategy()
    msgs, _ = _round(strategy, 3, [7, 8], [np.ones((K, V))] * 2)
    for msg in msgs:
        assert list(msg.content["arrays"].keys()) == [PHI_KEY]
        phi = msg.content["arrays"][PHI_KEY].numpy()
        assert phi.dtype == np.float32 and phi.shape == (K, V) and np.all(phi > 0)
        np.testing.assert_allclose(phi.sum(axis=1), 1.0, rtol=1e-6)
        cfg = msg.content["config"]
        assert PCTDSettings.from_record(cfg) == strategy.pctd
        assert cfg["server-round"] == 3 and cfg["seed"] == 4 and msg.metadata.message_type == "train.pctd"
    # the initial p(w|z) is the same for every party and comes from the seed
    np.testing.assert_array_equal(msgs[0].content["arrays"][PHI_KEY].numpy(), msgs[1].content["arrays"][PHI_KEY].numpy())
    np.testing.assert_array_equal(_strategy().initial_arrays()[PHI_KEY].numpy(), msgs[0].content["arrays"][PHI_KEY].numpy())


def test_eq11_sums_the_parties_clamps_negative_mass_and_adds_the_pseudo_count():
    strategy = _strategy(pseudo_count=0.5)
    m1 = [[3.0, -2.0, 1.0], [0.0, 1.5, 0.25]]
    m2 = [[1.0, 1.0, -0.5], [-1.0, 0.5, 0.75]]
    _, (arrays, metrics) = _round(strategy, 1, [5, 9], [m1, m2])
    # S = [[4, -1, 0.5], [-1, 2, 1]] -> clamp -> [[4, 0, 0.5], [0, 2, 1]] -> + 0.5 -> rows / sum
    expected = np.array([[4.5, 0.5, 1.0], [0.5, 2.5, 1.5]])
    expected /= expected.sum(axis=1, keepdims=True)
    np.testing.assert_allclose(arrays[PHI_KEY].numpy(), expected, rtol=1e-6)
    np.testing.assert_allclose(strategy.topic_word(arrays), expected, rtol=1e-6)
    assert metrics["clamped-mass"] == pytest.approx(2.0)
    assert metrics["statistic-mass"] == pytest.approx(5.5)
    assert metrics["replies-applied"] == 2 and metrics["replies-failed"] == 0


def test_semantic_consistency_is_applied_after_eq11():
    r = sp.csr_matrix(np.array([[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    strategy = _strategy(pseudo_count=1.0, tau=0.5, similarity=r)
    _, (arrays, _) = _round(strategy, 1, [5], [[[1.0, 3.0, 0.0], [2.0, 0.0, 2.0]]])
    p = np.array([[2.0, 4.0, 1.0], [3.0, 1.0, 3.0]]) / 7.0  # eq. 11 with beta = 1
    # eq. 13 by hand: q_w = p_w (R^T p)_w / p^T R p, R swaps words 0 and 1
    expected = []
    for row in p:
        swapped = np.array([row[1], row[0], 0.0])
        q = row * swapped / (row @ swapped)
        adjusted = row + 0.5 * q
        expected.append(adjusted / adjusted.sum())
    np.testing.assert_allclose(arrays[PHI_KEY].numpy(), np.array(expected), rtol=1e-6)


def test_invalid_replies_are_rejected_and_the_rest_aggregated():
    strategy = _strategy(pseudo_count=1.0)
    arrays = strategy.initial_arrays()
    nodes = [1, 2, 3, 4, 5]
    msgs = {m.metadata.dst_node_id: m for m in strategy.configure_train(1, arrays, ConfigRecord(), FixedNodesGrid(nodes))}
    good = np.ones((K, V))
    replies = [
        reply_from(1, msgs[1], _reply(good)),
        reply_from(2, msgs[2], _reply(np.ones((K, V + 1)))),  # wrong shape
        reply_from(3, msgs[3], _reply(np.ones((K, V)), dtype=np.int64)),  # counts, not a float statistic
        reply_from(4, msgs[4], _reply([[np.nan, 1, 1], [1, 1, 1]])),  # not finite
        reply_from(5, msgs[5], RecordDict({"metrics": MetricRecord({"x": 1})})),  # no statistic
    ]
    new, metrics = strategy.aggregate_train(1, replies)
    assert metrics["replies-applied"] == 1 and metrics["replies-failed"] == 4
    np.testing.assert_allclose(new[PHI_KEY].numpy(), np.full((K, V), 1 / 3), rtol=1e-6)
    nothing, metrics = strategy.aggregate_train(1, replies[1:])
    assert nothing is None


def test_privacy_report_is_the_rdp_epsilon_of_the_rounds_sent():
    strategy = _strategy(sigma=2.0, delta=1e-5)
    assert strategy.privacy_report().epsilon == 0.0
    for server_round in (1, 2, 3):
        _round(strategy, server_round, [5], [np.ones((K, V))])
    report = strategy.privacy_report()
    assert report.rounds == 3 and report.mechanism == "gaussian" and report.delta == 1e-5 and report.unit == "token"
    assert report.epsilon == pytest.approx(gaussian_epsilon(2.0, 3, 1e-5).epsilon)
    assert report.epsilon_round == pytest.approx(gaussian_epsilon(2.0, 1, 1e-5).epsilon)
    # RDP of 3 Gaussian releases at order a is 3 a / (2 sigma^2); eps from the Balle et al. conversion
    a = report.details["rdp_order"]
    by_hand = 3 * a / 8 - (math.log(1e-5) + math.log(a)) / (a - 1) + math.log((a - 1) / a)
    assert report.epsilon == pytest.approx(by_hand, rel=1e-9)
    assert report.details["theorem1_epsilon"] == pytest.approx(theorem1_epsilon(2.0, 3, 1e-5))


def test_rounds_are_those_of_the_party_asked_most_often():
    strategy = _strategy(sigma=2.0)
    for server_round, nodes in ((1, [5, 6]), (2, [5]), (3, [6]), (4, [6])):
        _round(strategy, server_round, nodes, [np.ones((K, V))] * len(nodes))
    report = strategy.privacy_report()
    assert strategy.releases.counts == {5: 2, 6: 3} and report.rounds == 3
    assert report.epsilon == pytest.approx(gaussian_epsilon(2.0, 3, 1e-5).epsilon)


def test_the_papers_sigma_is_reported_as_a_very_large_epsilon():
    strategy = _strategy(sigma=0.25)
    for server_round in range(1, 36):
        _round(strategy, server_round, [5], [np.ones((K, V))])
    report = strategy.privacy_report()
    assert report.epsilon > 300 and report.details["theorem1_valid"] is False


def test_no_noise_reports_no_guarantee():
    strategy = _strategy(sigma=0.0)
    _round(strategy, 1, [5], [np.ones((K, V))])
    report = strategy.privacy_report()
    assert report.epsilon is None and report.mechanism == "none"


def test_bad_arguments_are_refused():
    settings = PCTDSettings(n_topics=K)
    with pytest.raises(ValueError, match="similarity"):
        PCTD(vocabulary(V), settings, tau=0.3)
    with pytest.raises(ValueError, match="expected"):
        PCTD(vocabulary(V), settings, tau=0.3, similarity=sp.eye(V + 1))
    with pytest.raises(ValueError, match="pseudo_count"):
        PCTD(vocabulary(V), settings, pseudo_count=0.0)
    with pytest.raises(ValueError, match="delta"):
        PCTD(vocabulary(V), settings, delta=0.0)
    with pytest.raises(ValueError, match="unit"):
        PCTDSettings(n_topics=K, unit="paragraph")
