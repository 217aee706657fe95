"""FedLDA strategy: Algorithm 2 on hand-built replies, validation, privacy report."""

from __future__ import annotations

import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from flower_topics.clients.fedlda import FedLDASettings
from flower_topics.privacy import rrp_eta
from flower_topics.strategies import FedLDA
from flower_topics.strategies.fedlda import COUNTS_KEY, PHI_KEY, TUPLES_KEY
from tests.flower_harness import as_server, reply_from
from tests.test_strategy_lda import FixedNodesGrid

K, V = 2, 3


def _reply(rows, n_docs=1, max_l=2) -> RecordDict:
    return RecordDict({
        "update": ArrayRecord({TUPLES_KEY: Array(np.asarray(rows, dtype=np.int32).reshape(-1, 3))}),
        "metrics": MetricRecord({"num-documents": n_docs, "max-tuples-per-document": max_l}),
    })


def _strategy(**settings) -> FedLDA:
    as_server()
    return FedLDA(vocab_size=V, settings=FedLDASettings(n_topics=K, alpha=0.1, **settings), beta=0.5, seed=0)


def _counts(values) -> ArrayRecord:
    return ArrayRecord({COUNTS_KEY: Array(np.asarray(values, dtype=np.int64))})


def test_clients_get_phi_of_the_clamped_counts_and_the_settings_but_never_the_counts():
    strategy = _strategy(mechanism="krr", epsilon=2.0, sampler="mh")
    counts = [[3, -1, 0], [0, 2, 2]]
    msgs = list(strategy.configure_train(3, _counts(counts), ConfigRecord({"seed": 1}), FixedNodesGrid([7])))
    (msg,) = msgs
    assert list(msg.content["arrays"].keys()) == [PHI_KEY]
    phi = msg.content["arrays"][PHI_KEY].numpy()
    assert phi.dtype == np.float32
    # (max(n, 0) + beta) / row sum, beta = 0.5: row 0 = (3.5, 0.5, 0.5) / 4.5, row 1 = (0.5, 2.5, 2.5) / 5.5
    np.testing.assert_allclose(phi, [[3.5 / 4.5, 0.5 / 4.5, 0.5 / 4.5], [0.5 / 5.5, 2.5 / 5.5, 2.5 / 5.5]], rtol=1e-6)
    cfg = msg.content["config"]
    assert cfg["mechanism"] == "krr" and cfg["epsilon"] == 2.0 and cfg["sampler"] == "mh"
    assert cfg["server-round"] == 3 and cfg["last-applied-round"] == 0 and cfg["seed"] == 1
    assert FedLDASettings.from_record(cfg) == strategy.settings


def test_aggregate_applies_algorithm_2_exactly():
    strategy = _strategy()
    msgs = list(strategy.configure_train(1, _counts([[1, 0, 0], [0, 0, 1]]), ConfigRecord(), FixedNodesGrid([5, 9])))
    by_node = {m.metadata.dst_node_id: m for m in msgs}
    node5 = [[0, 0, 1], [2, 1, 1], [1, K, 0]]  # move w0 0->1; no-op on w2; w1 enters topic 0
    node9 = [[2, 1, 0], [2, K, 1], [1, 0, 1]]  # move w2 1->0; w2 enters topic 1; move w1 0->1
    arrays, metrics = strategy.aggregate_train(1, [reply_from(5, by_node[5], _reply(node5, 2, 3)),
                                                   reply_from(9, by_node[9], _reply(node9, 1, 3))])
    # start [[1,0,0],[0,0,1]]; node5: [[0,1,0],[1,0,1]]; node9: [[0,0,1],[1,1,1]]
    np.testing.assert_array_equal(arrays[COUNTS_KEY].numpy(), [[0, 0, 1], [1, 1, 1]])
    assert metrics["num-tuples"] == 6 and metrics["num-documents"] == 3 and metrics["replies-applied"] == 2
    assert strategy.last_applied == {5: 1, 9: 1}
    np.testing.assert_allclose(strategy.topic_word(arrays), [[0.5 / 2.5, 0.5 / 2.5, 1.5 / 2.5], [1 / 3, 1 / 3, 1 / 3]])


@pytest.mark.parametrize("rows, why", [
    ([[3, 0, 1]], "outside the vocabulary"),
    ([[0, 0, K]], "outside"),
    ([[0, K + 1, 0]], "outside"),
    ([[-1, 0, 1]], "outside"),
])
def test_malformed_replies_are_rejected_and_change_nothing(rows, why, caplog):
    strategy = _strategy()
    start = [[1, 1, 1], [1, 1, 1]]
    (msg,) = strategy.configure_train(1, _counts(start), ConfigRecord(), FixedNodesGrid([5]))
    arrays, metrics = strategy.aggregate_train(1, [reply_from(5, msg, _reply(rows))])
    assert arrays is None and metrics["replies-failed"] == 1 and metrics["replies-applied"] == 0
    assert why in caplog.text
    float_reply = RecordDict({"update": ArrayRecord({TUPLES_KEY: Array(np.zeros((1, 3)))}),
                              "metrics": MetricRecord({"num-documents": 1, "max-tuples-per-document": 1})})
    assert strategy.aggregate_train(1, [reply_from(5, msg, float_reply)])[0] is None


def test_privacy_report_composes_l_tuples_per_round_and_rounds():
    strategy = _strategy(mechanism="rrp", epsilon=7.5, delta=0.1, gamma=1.0)
    for r in (1, 2, 3):
        (msg,) = strategy.configure_train(r, _counts([[5, 5, 5], [5, 5, 5]]), ConfigRecord(), FixedNodesGrid([5]))
        strategy.aggregate_train(r, [reply_from(5, msg, _reply([[0, 0, 1]] * 4, n_docs=2, max_l=4))])
    report = strategy.privacy_spent()
    assert report["eta"] == pytest.approx(rrp_eta(7.5, 0.1, 1.0)) == pytest.approx(0.378, abs=1e-3)
    assert report["tuples_per_document"] == 4 and report["rounds"] == 3
    assert report["epsilon_per_document_round"] == pytest.approx(4 * 7.5)
    assert report["delta_per_document_round"] == pytest.approx(4 * 0.2)
    assert report["epsilon"] == pytest.approx(3 * 4 * 7.5) and report["delta"] == pytest.approx(3 * 4 * 0.2)
    assert "zipf_exponent_mean" in report and report["guarantee"].startswith("Theorem 1")
    paper = _strategy(mechanism="rrp", epsilon=7.5, delta=0.1, gamma=math.inf)
    assert paper.privacy_spent()["eta"] == pytest.approx(1 / (0.01 * math.exp(7.5) + 1))  # 0.0524, the paper's
    assert paper.privacy_spent()["gamma"] == "inf"
    krr = _strategy(mechanism="krr", epsilon=2.0).privacy_spent()
    assert krr["delta_per_tuple"] == 0.0 and krr["eta"] == pytest.approx((V - 1) / (math.exp(2.0) + V - 1))
    assert _strategy(mechanism="none").privacy_spent()["epsilon"] is None
