"""FedLDA strategy: Algorithm 2 on hand-built replies, validation, privacy report."""

from __future__ import annotations

import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, RecordDict

from flower_topics.privacy import rrp_eta
from flower_topics.strategies.fedlda import FedLDA
from flower_topics.wire.fedlda import COUNTS_KEY, PHI_KEY, TUPLES_KEY, FedLDASettings
from tests.flower_harness import FixedNodesGrid, as_server, reply_content, reply_from, vocabulary

K, V = 2, 3


def _reply(rows, n_docs=1, max_l=2, dtype=np.int32) -> RecordDict:
    return reply_content("fedlda", {TUPLES_KEY: np.asarray(rows, dtype=dtype).reshape(-1, 3)},
                         {"num-documents": n_docs, "max-tuples-per-document": max_l})


def _strategy(**settings) -> FedLDA:
    as_server()
    return FedLDA(vocabulary(V), FedLDASettings(n_topics=K, alpha=0.1, **settings), beta=0.5, seed=0)


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
    assert cfg["fedlda.mechanism"] == "krr" and cfg["fedlda.epsilon"] == 2.0 and cfg["fedlda.sampler"] == "mh"
    assert cfg["server-round"] == 3 and cfg["last-applied-round"] == 0 and cfg["seed"] == 1
    assert FedLDASettings.from_record(cfg) == strategy.fedlda


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
    ([[3, 0, 1]], "column 0 has values outside [0, 3)"),
    ([[0, 0, K]], "column 2 has values outside [0, 2)"),
    ([[0, K + 1, 0]], "column 1 has values outside [0, 3)"),
    ([[-1, 0, 1]], "column 0 has values outside"),
])
def test_malformed_replies_are_rejected_and_change_nothing(rows, why, caplog):
    strategy = _strategy()
    start = [[1, 1, 1], [1, 1, 1]]
    (msg,) = strategy.configure_train(1, _counts(start), ConfigRecord(), FixedNodesGrid([5]))
    arrays, metrics = strategy.aggregate_train(1, [reply_from(5, msg, _reply(rows))])
    assert arrays is None and metrics["replies-failed"] == 1 and metrics["replies-applied"] == 0
    assert why in caplog.text
    assert strategy.aggregate_train(1, [reply_from(5, msg, _reply([[0, 0, 1]], dtype=np.float64))])[0] is None


def test_privacy_report_composes_the_realized_delta_over_l_tuples_and_rounds():
    """Counts [[9, 1, 0], [0, 1, 9]], beta 0.5: topic 0 deserts word 2 (0.5 / 11.5 <= 0.1), topic 1 word 0.

    A document of topic 0 holding word 2 outputs it with probability c = 1 - eta + eta / 23 and no
    other input can (q = 0): the realized per-tuple delta is c at any eps, whatever Theorem 1 says.
    """
    strategy = _strategy(mechanism="rrp", epsilon=7.5, delta=0.1, gamma=1.0)
    for r in (1, 2, 3):
        (msg,) = strategy.configure_train(r, _counts([[9, 1, 0], [0, 1, 9]]), ConfigRecord(), FixedNodesGrid([5]))
        strategy.aggregate_train(r, [reply_from(5, msg, _reply([[0, 0, 1]], n_docs=2, max_l=1))])
    report = strategy.privacy_report()
    assert report.unit == "document" and report.rounds == 3
    details = report.details
    eta = rrp_eta(7.5, 0.1, 1.0)
    assert details["eta"] == pytest.approx(eta) == pytest.approx(0.378, abs=1e-3)
    realized = 1 - eta + eta / 23
    assert details["delta_per_tuple"] == pytest.approx(realized)
    assert math.isinf(details["epsilon_per_tuple_at_claimed_delta"])
    assert details["words_meeting_claim"] == pytest.approx(1 / 3)  # only word 1 is kept by both topics
    assert details["tuples_per_document"] == 1
    assert report.epsilon_round == pytest.approx(7.5) and report.delta_round == pytest.approx(realized)
    assert report.epsilon == pytest.approx(3 * 7.5) and report.delta == 1.0  # 3 x 0.64, capped
    # the paper's claim, composed the same way, beside it
    assert details["claimed_delta_per_tuple"] == 0.2 and details["claimed_delta"] == pytest.approx(0.6)
    assert details["claimed_epsilon"] == pytest.approx(22.5)
    assert "zipf_exponent_mean" in details and "Theorem 1 claims" in report.guarantee
    assert report.summary().startswith("eps 22.5, delta 1 per document after 3 round(s)")
    paper = _strategy(mechanism="rrp", epsilon=7.5, delta=0.1, gamma=math.inf).privacy_report()
    assert paper.details["eta"] == pytest.approx(1 / (0.01 * math.exp(7.5) + 1))  # 0.0524, the paper's
    assert paper.to_dict()["gamma"] == "inf"
    for mechanism in ("krr", "hm", "tkrr-uniform-tail"):
        pure = _strategy(mechanism=mechanism, epsilon=2.0)
        pure.configure_train(1, _counts([[9, 1, 0], [0, 1, 9]]), ConfigRecord(), FixedNodesGrid([5]))
        assert pure.privacy_report().details["delta_per_tuple"] == 0.0
    krr = _strategy(mechanism="krr", epsilon=2.0).privacy_report().details
    assert krr["eta"] == pytest.approx((V - 1) / (math.exp(2.0) + V - 1))
    # the paper's t-kRR sends the tail word (word 1 or 2 of the marginal) as it is: delta 1
    tkrr = _strategy(mechanism="tkrr", epsilon=2.0, delta=0.3)
    tkrr.configure_train(1, _counts([[9, 1, 0], [0, 1, 9]]), ConfigRecord(), FixedNodesGrid([5]))
    assert tkrr.privacy_report().details["delta_per_tuple"] == 1.0
    none = _strategy(mechanism="none").privacy_report()
    assert none.epsilon is None and none.unit == "none"


def test_a_round_whose_replies_all_failed_still_counts_in_the_privacy_totals():
    from flwr.app import Error, Message
    from flwr.supercore.task_identity import TaskIdentity

    strategy = _strategy(mechanism="rrp", epsilon=7.5, delta=0.1, gamma=1.0)
    (msg,) = strategy.configure_train(1, _counts([[5, 5, 5], [5, 5, 5]]), ConfigRecord(), FixedNodesGrid([5]))
    strategy.aggregate_train(1, [reply_from(5, msg, _reply([[0, 0, 1]] * 2, max_l=2))])
    (msg,) = strategy.configure_train(2, _counts([[5, 5, 5], [5, 5, 5]]), ConfigRecord(), FixedNodesGrid([5]))
    TaskIdentity.node_id = 5
    failed = Message(Error(code=2, reason="lost on the way"), reply_to=msg)
    as_server()
    assert strategy.aggregate_train(2, [failed])[0] is None
    report = strategy.privacy_report()
    assert report.rounds == 2 and report.epsilon == pytest.approx(2 * 2 * 7.5)
