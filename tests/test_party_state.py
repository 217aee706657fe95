"""A SuperNode that crashes and starts again (issue 21 item 2), and replies that come after their round.

In process: a node's restart is its ``context.state`` replaced by an empty one, which is
what a restarted SuperNode brings (Flower keeps the state in the SuperNode's memory). With
``state-dir`` the party reads its state back (:mod:`flower_topics.federation.party_state`) and the run
is the same, array for array, as one without the crash (``lda`` is reproducible from the
run seed); without it the party is refused and its earlier tokens stay in the model once.
The deployment-engine version (a SuperNode process SIGKILLed and started again) is in
tests/test_deployment_faults.py.
"""

from __future__ import annotations

import logging
import os
import stat

import numpy as np
import pytest
from flwr.app import Context, RecordDict

from flower_topics.federation import party_state
from flower_topics.federation.vocabulary_agreement import agree_vocabulary
from flower_topics.federation.client_app import VOCABULARY_STATE, make_client_app
from flower_topics.run.config import parse_run_config
from flower_topics.data.prepare import load_run_data
from flower_topics.errors import UserInputError
from flower_topics.federation.server_app import build_strategy
from flower_topics.simulations.inprocess import FIRST_NODE_ID, InProcessGrid

CONFIG = {
    "dataset": "synthetic",
    "synthetic-nodes": 3,
    "synthetic-topics": 6,
    "synthetic-shared-topics": 3,
    "synthetic-vocab-size": 80,
    "synthetic-docs-per-node": 40,
    "synthetic-doc-min-length": 30,
    "synthetic-doc-max-length": 40,
    "num-topics": 6,
    "lda.local-sweeps": 2,
    "min-nodes": 2,
    "eval-every": 0,
}
RESTARTED = FIRST_NODE_ID + 1


def restarting(app, node_id: int, before_round: int):
    """``app``, with node ``node_id``'s SuperNode crashed and started again just before its training
    message of ``before_round``: its ``context.state`` is empty from there, as a new process's is."""
    done = []

    def client(msg, context):
        if (not done and context.node_id == node_id and msg.metadata.message_type.startswith("train.")
                and int(msg.content["config"]["server-round"]) == before_round):
            context.state = RecordDict()
            done.append(before_round)
        return app(msg, context)

    client.restarted = done
    return client


def run_lda(tmp_path, name: str, *, rounds: int, state_dir: bool, restart_before: int | None = None,
            drop=None, late=None):
    """A 3-party ``lda`` run in process; ``(strategy, final counts, client)``."""
    config = {**CONFIG, "num-rounds": rounds, "output-dir": str(tmp_path / name / "run")}
    app = make_client_app(config)
    client = restarting(app, RESTARTED, restart_before) if restart_before else app
    nodes = [{"partition-id": i, "num-partitions": 3,
              **({"state-dir": str(tmp_path / name / f"party{i}")} if state_dir else {})} for i in range(3)]
    grid = InProcessGrid(client, nodes, config, drop=drop, late=late)
    cfg = parse_run_config(config)
    strategy = build_strategy(cfg, agree_vocabulary(grid, cfg).vocabulary)
    result = strategy.start(grid, strategy.initial_arrays(), num_rounds=rounds)
    return strategy, result.arrays["topic-word-counts"].numpy(), client


def word_counts(rounds: int = 6) -> np.ndarray:
    """Every party's training tokens per word, each once: what the global counts' column sums must be."""
    data = load_run_data(parse_run_config({**CONFIG, "num-rounds": rounds}))
    return np.bincount(data.train.tokens, minlength=data.corpus.n_words)


def test_a_restarted_party_with_a_state_dir_continues_the_run_exactly(tmp_path):
    _, uninterrupted, _ = run_lda(tmp_path, "plain", rounds=6, state_dir=True)
    strategy, counts, client = run_lda(tmp_path, "crash", rounds=6, state_dir=True, restart_before=4)
    assert client.restarted == [4]
    np.testing.assert_array_equal(counts, uninterrupted)
    np.testing.assert_array_equal(counts.sum(axis=0), word_counts())
    assert strategy.last_applied[RESTARTED] == 6 and RESTARTED not in strategy.excluded
    path = tmp_path / "crash" / "party1" / f"run-1-node-{RESTARTED}.npz"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # the party's token assignments: its owner only


def test_a_party_that_died_mid_round_rolls_back_to_what_the_server_applied(tmp_path):
    """It saved its round-4 assignments, but its reply never arrived: after the restart it learns from
    last-applied-round that the server holds its round-3 counts, and goes on from those."""
    lost = lambda server_round, node_id: node_id == RESTARTED and server_round == 4  # noqa: E731
    _, uninterrupted, _ = run_lda(tmp_path, "plain", rounds=6, state_dir=True, drop=lost)
    strategy, counts, _ = run_lda(tmp_path, "crash", rounds=6, state_dir=True, drop=lost, restart_before=5)
    np.testing.assert_array_equal(counts, uninterrupted)
    np.testing.assert_array_equal(counts.sum(axis=0), word_counts())
    assert strategy.last_applied[RESTARTED] == 6


def test_a_restarted_party_without_its_state_is_refused_and_its_tokens_stay_counted_once(tmp_path):
    strategy, counts, _ = run_lda(tmp_path, "crash", rounds=5, state_dir=False, restart_before=3)
    assert "no agreed vocabulary" in strategy.excluded[RESTARTED]
    assert "state-dir" in strategy.excluded[RESTARTED]
    assert strategy.last_applied[RESTARTED] == 2
    np.testing.assert_array_equal(counts.sum(axis=0), word_counts(5))


def test_the_server_rejects_whole_counts_sent_again_by_a_party_it_holds_counts_of(tmp_path):
    """A party that lost its assignments but kept the vocabulary (a hostile or broken one) would count its
    tokens twice: the strategy refuses the reply, whatever the party says."""
    def forget_assignments(app):
        def client(msg, context):
            if context.node_id == RESTARTED and msg.metadata.message_type.startswith("train.") \
                    and int(msg.content["config"]["server-round"]) == 3:
                for name in [n for n in context.state if n.startswith("lda-state")]:
                    del context.state[name]
            return app(msg, context)
        return client

    config = {**CONFIG, "num-rounds": 4, "output-dir": str(tmp_path / "run")}
    grid = InProcessGrid.partitions(forget_assignments(make_client_app(config)), 3, config)
    cfg = parse_run_config(config)
    strategy = build_strategy(cfg, agree_vocabulary(grid, cfg).vocabulary)
    counts = strategy.start(grid, strategy.initial_arrays(), num_rounds=4).arrays["topic-word-counts"].numpy()
    assert strategy.traffic[3].replies_failed == 1 and strategy.last_applied[RESTARTED] == 2
    np.testing.assert_array_equal(counts.sum(axis=0), word_counts(4))


def test_a_state_saved_under_another_node_id_is_not_restored(tmp_path):
    """Without SuperNode authentication a restarted SuperNode gets a new node id: restoring its state
    there would make the server take its tokens for a new party's."""
    run_lda(tmp_path, "run", rounds=2, state_dir=True)
    directory = tmp_path / "run" / "party1"
    context = Context(run_id=1, node_id=999, node_config={"state-dir": str(directory)}, state=RecordDict(),
                      run_config={})
    with pytest.raises(UserInputError, match="another node id"):
        party_state.restore(context)
    same = Context(run_id=1, node_id=RESTARTED, node_config={"state-dir": str(directory)}, state=RecordDict(),
                   run_config={})
    assert party_state.restore(same) and VOCABULARY_STATE in same.state.config_records
    assert "lda-state" in same.state.array_records


def test_a_failed_write_leaves_the_previous_state_whole_and_a_corrupt_file_is_one_line(tmp_path, monkeypatch):
    directory = tmp_path / "state"
    context = Context(run_id=7, node_id=5, node_config={"state-dir": str(directory)}, state=RecordDict(),
                      run_config={})
    from flwr.app import Array, ArrayRecord, ConfigRecord

    context.state["a"] = ConfigRecord({"round": 1, "words": "x y"})
    context.state["b"] = ArrayRecord({"z": Array(np.arange(5, dtype=np.int32))})
    path = party_state.persist(context)
    context.state["a"] = ConfigRecord({"round": 2, "words": "x y"})

    def crash(*args, **kwargs):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", crash)
    with pytest.raises(UserInputError, match="cannot write"):
        party_state.persist(context)
    monkeypatch.undo()
    restored = Context(run_id=7, node_id=5, node_config=context.node_config, state=RecordDict(), run_config={})
    assert party_state.restore(restored)
    assert restored.state["a"]["round"] == 1
    np.testing.assert_array_equal(restored.state["b"]["z"].numpy(), np.arange(5))
    path.write_bytes(b"not a state file")
    with pytest.raises(UserInputError, match="cannot read"):
        party_state.restore(Context(run_id=7, node_id=5, node_config=context.node_config, state=RecordDict(),
                                    run_config={}))


def test_a_reply_after_its_round_is_logged_and_ignored(tmp_path):
    """Node 102's round-2 reply misses the round: it is pulled at round 3, logged with its node and round,
    not applied, and the party's next change is against what the server did apply."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("flwr").addHandler(handler)
    try:
        strategy, counts, _ = run_lda(tmp_path, "late", rounds=4, state_dir=False,
                                      late=lambda server_round, node_id: server_round == 2 and node_id == RESTARTED)
    finally:
        logging.getLogger("flwr").removeHandler(handler)
    assert strategy.outstanding.late == [(2, RESTARTED, "train")]
    lines = [r.getMessage() for r in records]
    assert any(f"node {RESTARTED}'s train reply to round 2 arrived after that round ended" in line for line in lines)
    assert strategy.traffic[2].replies_applied == 2 and strategy.last_applied[RESTARTED] == 4
    np.testing.assert_array_equal(counts.sum(axis=0), word_counts(4))
