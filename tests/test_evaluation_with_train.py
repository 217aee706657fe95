"""Federated evaluation carried by the next round's training messages (TopicStrategy.evaluation_with_train).

A scored round other than the last sends no ``evaluate`` message: the next round's training
messages carry its request and the training replies its sums. These tests check that the
recorded evaluation is the one separate ``evaluate`` messages give, bit for bit, with fewer
messages; when the strategy carries it and when it does not; and that a resume after such a
round writes its metrics line once, with its evaluation.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord

from flower_topics.evaluation.federated import EvaluationSettings, evaluation_keys
from flower_topics.federation.client_app import make_client_app
from flower_topics.federation.server_app import run_server
from flower_topics.run.checkpoint import load_checkpoint
from flower_topics.run.outputs import read_metrics
from flower_topics.secure_sum.protocol import SecureSumSettings
from flower_topics.strategies.base import TopicStrategy
from flower_topics.strategies.dplda import DPLDA
from flower_topics.strategies.lda import ADLDA
from flower_topics.wire import lda as lda_wire
from tests.test_checkpoint_resume import Crash, CrashingGrid
from tests.test_method_contract import TINY


class CountingGrid(CrashingGrid):
    """In-process nodes that count the messages sent, by type (and can crash as :class:`CrashingGrid`)."""

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        self.sent.update(msg.metadata.message_type for msg in messages)
        return super().send_and_receive(messages, timeout=timeout)


def _run(out, carried: bool, monkeypatch, crash_round: int = 0, **extra):
    config = {**TINY, "method": "lda", "num-rounds": 4, "eval-every": 1, "output-dir": str(out),
              "checkpoint-interval": 0.0, **extra}
    monkeypatch.setattr(ADLDA, "evaluation_with_train", carried)
    grid = CountingGrid.partitions(make_client_app(config), 2, config)
    grid.sent, grid.crash_round = Counter(), crash_round
    run_server(grid, config)
    return grid.sent, read_metrics(out / "metrics.jsonl")


def _evaluation(row):
    return {key: row[key] for key in evaluation_keys() if key in row}


def test_carried_evaluation_is_the_separate_messages_evaluation_bit_for_bit_with_fewer_messages(
        tmp_path, monkeypatch):
    """lda, 4 rounds scored every round, 2 parties: each round's perplexity, NPMI, UMass, diversity, label scores
    and evaluation bytes are those of separate evaluate messages, exactly; 6 messages fewer (3 rounds x 2)."""
    sent_before, before = _run(tmp_path / "separate", False, monkeypatch)
    sent_after, after = _run(tmp_path / "carried", True, monkeypatch)
    assert sent_before["evaluate"] == 8 and sent_after["evaluate"] == 2  # the last round keeps its message
    assert sent_before["train.lda"] == sent_after["train.lda"] == 8
    assert sum(sent_before.values()) - sum(sent_after.values()) == 6
    assert [r["round"] for r in after] == [r["round"] for r in before] == [1, 2, 3, 4]
    for old, new in zip(before, after):
        assert {"perplexity", "npmi", "umass", "eval_parties"} <= set(_evaluation(new))
        assert _evaluation(new) == _evaluation(old), new["round"]  # exact: the same sums of the same model
        assert new["eval_parties"] == 2
        assert (new["eval_bytes_sent"], new["eval_bytes_received"]) == (old["eval_bytes_sent"],
                                                                         old["eval_bytes_received"])
        assert new["bytes_sent"] == old["bytes_sent"] and new["bytes_received"] == old["bytes_received"]


def test_a_resume_after_a_carried_round_writes_its_line_once_with_its_evaluation(tmp_path, monkeypatch):
    """The server dies while round 3's training messages (carrying round 2's evaluation) are out: round 2 is
    checkpointed but its line is not written. The resumed run asks round 3's messages for round 2's evaluation and
    writes line 2 once, with the evaluation the uninterrupted run recorded (the parties restart without their
    state, so from round 3 on the models differ from the uninterrupted run's)."""
    _, reference = _run(tmp_path / "full", True, monkeypatch)
    with pytest.raises(Crash):
        _run(tmp_path / "run", True, monkeypatch, crash_round=3)
    assert load_checkpoint(tmp_path / "run").round == 2
    assert [r["round"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")] == [1]
    sent, rows = _run(tmp_path / "run", True, monkeypatch, resume=str(tmp_path / "run"))
    assert [r["round"] for r in rows] == [1, 2, 3, 4]
    assert sent["evaluate"] == 2 and sent["train.lda"] == 4  # rounds 2 and 3 by training messages, 4 by its own
    for row, full in zip(rows[:2], reference[:2]):  # the models of rounds 1 and 2 are the uninterrupted run's
        assert _evaluation(row) and _evaluation(row) == _evaluation(full), row["round"]
    assert rows[2]["eval_parties"] == rows[3]["eval_parties"] == 2  # later: fresh parties train differently


def _strategy(cls=ADLDA, **options) -> TopicStrategy:
    settings = lda_wire.LDASettings(n_topics=2, alpha=0.1, beta=0.01, local_sweeps=1)
    return cls(["a", "b", "c"], settings, **{"evaluation": EvaluationSettings(every=2, num_rounds=6), **options})


def test_which_rounds_travel_with_training():
    """Scored rounds other than the last, of a method that opts in, without secure aggregation, every node sampled,
    unless the run config says eval-with-train=false."""
    assert [r for r in range(1, 7) if _strategy().carries_evaluation(r)] == [2, 4]
    assert not any(_strategy(secure=SecureSumSettings()).carries_evaluation(r) for r in range(1, 7))
    assert not any(_strategy(fraction_train=0.5).carries_evaluation(r) for r in range(1, 7))
    assert not any(_strategy(evaluation=None).carries_evaluation(r) for r in range(1, 7))
    off = EvaluationSettings(every=2, num_rounds=6, with_train=False)  # eval-with-train=false
    assert not any(_strategy(evaluation=off).carries_evaluation(r) for r in range(1, 7))
    assert TopicStrategy.evaluation_with_train is False and DPLDA.evaluation_with_train is False


def test_a_carried_round_sends_no_evaluate_message_and_the_next_round_carries_it():
    from tests.flower_harness import FixedNodesGrid, as_server

    as_server()
    strategy, grid = _strategy(), FixedNodesGrid([7, 8])
    arrays = ArrayRecord({lda_wire.COUNTS_KEY: Array(np.ones((2, 3), dtype=np.int32))})
    assert list(strategy.configure_evaluate(2, arrays, ConfigRecord(), grid)) == []
    messages = list(strategy.configure_train(3, arrays, ConfigRecord(), grid))
    assert len(messages) == 2
    for msg in messages:
        assert {"evaluate.arrays", "evaluate.config"} <= set(msg.content.keys())
        assert int(msg.content["evaluate.config"]["seed"]) == 0 and not msg.content["evaluate.config"]["labels"]
    assert strategy.traffic[2].eval_bytes_sent > 0
    assert list(strategy.configure_evaluate(6, arrays, ConfigRecord(), grid))  # the last round: its own message


def test_a_party_with_a_privacy_ledger_refuses_a_carried_evaluation_in_one_line_and_sends_no_sums(tmp_path):
    """Federated evaluation has no document-level accounting: a party that keeps a ledger refuses it, carried as in
    an evaluate message; what it returns for its training reply is the reason, no sums."""
    from flwr.app import Context, Message, RecordDict

    from flower_topics.evaluation import federated as evaluation
    from flower_topics.federation.client_app import carried_evaluation

    settings = EvaluationSettings(every=1, num_rounds=3)
    content = RecordDict({"config": ConfigRecord({"server-round": 2})})
    evaluation.carry_request(content, evaluation.request(np.full((2, 3), 1 / 3), settings, "3:x", 1))
    from tests.flower_harness import as_server

    as_server()
    ledger = {"privacy-ledger": str(tmp_path / "ledger.json"), "lifetime-epsilon": 5.0}
    context = Context(run_id=1, node_id=7, node_config=ledger, state=RecordDict(), run_config={})
    message = Message(content=content, message_type="train.fedlda", dst_node_id=7)
    sums, reason = carried_evaluation(message, context, {})
    assert sums is None and "no document-level accounting: refused" in reason and "\n" not in reason
    assert not (tmp_path / "ledger.json").exists()  # nothing recorded: nothing was released
    plain = Message(content=RecordDict({"config": ConfigRecord({"server-round": 2})}), message_type="train.fedlda",
                    dst_node_id=7)
    assert carried_evaluation(plain, context, {}) is None  # a training message without one: nothing to score


def test_an_ntm_run_that_stops_early_scores_every_round_by_its_own_messages_once_stopped(tmp_path):
    """ntm.max-steps 2: round 2 ends the training, so rounds 3 and 4 send no training message; round 1 is scored
    by round 2's training messages, rounds 2-4 by evaluate messages of their own: no evaluation is lost."""
    config = {**TINY, "method": "ntm", "num-rounds": 4, "eval-every": 1, "ntm.max-steps": 2,
              "output-dir": str(tmp_path / "run")}
    grid = CountingGrid.partitions(make_client_app(config), 2, config)
    grid.sent, grid.crash_round = Counter(), 0
    run_server(grid, config)
    rows = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["round"] for r in rows] == [1, 2, 3, 4]
    assert [r.get("eval_parties") for r in rows] == [2, 2, 2, 2]
    assert grid.sent["train.ntm"] == 4 and grid.sent["evaluate"] == 6


def test_evaluation_keys_name_everything_combine_returns():
    """What a resume reads back of a written line (RoundRecorder.reopen) is every metric of a pooled evaluation."""
    from flower_topics.evaluation import federated as evaluation
    from flower_topics.metrics.pooled_sums import HeldOut

    phi = np.array([[0.5, 0.3, 0.2], [0.1, 0.1, 0.8]])
    top = evaluation.coherence_word_ids(phi, 10)
    pairs = evaluation.topic_pairs(*top)
    part = evaluation.PartyScores(HeldOut(-10.0, 8, 0), 5, np.array([3, 2, 4]), np.ones(len(pairs), np.int64),
                                  np.array([[2, 0], [1, 3]]), ("a", "b"))
    metrics = evaluation.combine([part], phi, top, pairs)
    assert {"perplexity", "npmi", "umass", "nmi", "purity"} <= set(metrics) <= set(evaluation_keys())
