"""ADLDA strategy (method lda): exact aggregation arithmetic on hand-built reply messages."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, Error, Message, RecordDict

from flower_topics.strategies.lda import ADLDA
from flower_topics.strategies.lda import counts_record
from flower_topics.wire import counts as wire_counts
from flower_topics.wire.lda import COUNTS_KEY, DELTA_KEY, LDASettings
from flower_topics.wire.protocol import payload_bytes, vocabulary_fingerprint
from tests.flower_harness import FixedNodesGrid, as_server, reply_content, reply_from, vocabulary


def _update(delta, num_tokens=10) -> RecordDict:
    """A reply with ``delta`` in its wire form (dense or sparse, whichever is smaller)."""
    return _arrays_update(wire_counts.encode_arrays(np.asarray(delta, dtype=np.int32), DELTA_KEY), num_tokens)


def _arrays_update(arrays, num_tokens=10) -> RecordDict:
    return reply_content("lda", arrays, {"num-tokens": num_tokens})


def _strategy(**federation) -> ADLDA:
    as_server()
    return ADLDA(vocabulary(3), LDASettings(n_topics=2, alpha=0.1, beta=0.01, local_sweeps=2), **federation)


@pytest.fixture()
def strategy() -> ADLDA:
    return _strategy(seed=0)


def test_configure_train_sends_counts_and_settings_to_every_node(strategy):
    counts = np.array([[1, 2, 3], [4, 5, 6]])
    msgs = list(strategy.configure_train(1, counts_record(counts), ConfigRecord({"user-key": 7}), FixedNodesGrid([5, 9])))
    assert sorted(m.metadata.dst_node_id for m in msgs) == [5, 9]
    for m in msgs:
        assert m.metadata.message_type == "train.lda"
        sent = m.content["arrays"]
        assert set(sent.keys()) == set(wire_counts.keys(COUNTS_KEY))
        np.testing.assert_array_equal(wire_counts.decode_record(sent, COUNTS_KEY, counts.shape), counts)
        cfg = m.content["config"]
        assert (cfg["server-round"], cfg["last-applied-round"], cfg["num-topics"], cfg["lda.local-sweeps"]) == (1, 0, 2, 2)
        assert cfg["alpha"] == 0.1 and cfg["beta"] == 0.01 and cfg["user-key"] == 7
        assert cfg["vocabulary"] == vocabulary_fingerprint(vocabulary(3))
        assert LDASettings.from_record(cfg) == strategy.lda
    assert strategy.traffic[1].bytes_sent == sum(payload_bytes(m.content) for m in msgs)


def test_the_counts_go_out_in_the_smaller_form_and_the_global_model_stays_dense(strategy):
    """Sparse counts travel sparse, dense ones dense in the smallest dtype; both decode to the counts exactly."""
    big = _strategy(seed=0)
    big.vocabulary, big.vocab_size = tuple(f"w{i}" for i in range(5000)), 5000  # K x V = 2 x 5000
    sparse, dense = np.zeros((2, 5000), np.int64), np.arange(10000).reshape(2, 5000) % 300
    sparse[1, 4321] = 70000
    for counts, expected in ((sparse, (1, np.uint16, np.uint32, 1)), (dense, (0, np.uint8, np.uint16, 10000))):
        record = counts_record(counts)
        sent = big.node_arrays(1, 5, record)
        gaps, values = (sent[key].numpy() for key in wire_counts.keys(COUNTS_KEY))
        assert (gaps.size, gaps.dtype, values.dtype, values.size) == expected  # gap 9322, 70000; 0..299
        np.testing.assert_array_equal(wire_counts.decode_record(sent, COUNTS_KEY, counts.shape), counts)
        assert record[COUNTS_KEY].numpy().dtype == np.int32  # what the strategy keeps, checkpoints and scores


def test_aggregate_train_adds_exact_deltas(strategy):
    start = np.array([[3, 0, 1], [0, 2, 2]])
    msgs = list(strategy.configure_train(4, counts_record(start), ConfigRecord(), FixedNodesGrid([5, 9])))
    by_node = {m.metadata.dst_node_id: m for m in msgs}
    d5 = np.array([[-1, 1, 0], [1, -1, 0]])
    d9 = np.array([[0, 0, -1], [0, 0, 1]])
    arrays, metrics = strategy.aggregate_train(
        4, [reply_from(5, by_node[5], _update(d5, 6)), reply_from(9, by_node[9], _update(d9, 4))]
    )
    np.testing.assert_array_equal(arrays[COUNTS_KEY].numpy(), [[2, 1, 0], [1, 1, 3]])
    assert metrics["num-tokens"] == 10 and metrics["replies-applied"] == 2 and metrics["replies-failed"] == 0
    assert strategy.last_applied == {5: 4, 9: 4}


def test_invalid_and_error_replies_are_not_applied(strategy):
    start = np.array([[1, 0, 0], [0, 1, 0]])
    msgs = list(strategy.configure_train(2, counts_record(start), ConfigRecord(), FixedNodesGrid([1, 2, 3, 4])))
    m = {x.metadata.dst_node_id: x for x in msgs}
    replies = [
        reply_from(1, m[1], _update(np.ones((3, 3)))),                    # wrong size
        reply_from(2, m[2], _update([[-2, 0, 0], [0, 0, 0]])),           # would go negative
        reply_from(3, m[3], _update([[0, 1, 0], [0, 0, 0]])),            # valid
    ]
    replies.append(reply_from(4, m[4], RecordDict()))  # no update at all
    arrays, metrics = strategy.aggregate_train(2, replies)
    np.testing.assert_array_equal(arrays[COUNTS_KEY].numpy(), [[1, 1, 0], [0, 1, 0]])
    assert metrics["replies-applied"] == 1 and metrics["replies-failed"] == 3
    assert strategy.last_applied == {3: 2}


def test_malformed_wire_forms_are_rejected_and_valid_ones_applied_exactly(strategy):
    """Hostile encodings (old dense key, repeated cell, index beyond K x V, wrong dtype, dense of the wrong
    size, values beyond int32) are each rejected with a reason; the dense and sparse forms add up exactly."""
    gaps_key, values_key = wire_counts.keys(DELTA_KEY)
    bad = {
        1: {DELTA_KEY: np.zeros((2, 3), np.int32)},                                                  # the old form
        2: {gaps_key: np.array([1, 0], np.uint8), values_key: np.array([1, -1], np.int8)},         # repeated cell
        3: {gaps_key: np.array([7], np.uint8), values_key: np.array([1], np.int8)},                # cell 6 of 6
        4: {gaps_key: np.array([1], np.uint8), values_key: np.array([1.0])},                       # floats
        5: {gaps_key: np.zeros(0, np.uint8), values_key: np.zeros(5, np.int8)},                    # dense, 5 of 6
        6: {gaps_key: np.array([1], np.uint8), values_key: np.array([2 ** 31], np.int64)},         # beyond int32
        7: {gaps_key: np.array([0], np.uint8), values_key: np.zeros(1, np.int8)},                  # gap 0
    }
    start = np.array([[1, 0, 0], [0, 1, 0]])
    nodes = [*bad, 8, 9]
    msgs = {m.metadata.dst_node_id: m for m in strategy.configure_train(3, counts_record(start), ConfigRecord(),
                                                                         FixedNodesGrid(nodes))}
    replies = [reply_from(n, msgs[n], _arrays_update(arrays)) for n, arrays in bad.items()]
    dense = {gaps_key: np.zeros(0, np.uint8), values_key: np.array([-1, 1, 0, 0, 0, 0], np.int8)}  # [[-1, 1, 0], 0]
    sparse = {gaps_key: np.array([4, 2], np.uint8), values_key: np.array([300, 2], np.uint16)}   # cells 3 and 5
    replies += [reply_from(8, msgs[8], _arrays_update(dense)), reply_from(9, msgs[9], _arrays_update(sparse))]
    arrays, metrics = strategy.aggregate_train(3, replies)
    np.testing.assert_array_equal(arrays[COUNTS_KEY].numpy(), [[0, 1, 0], [300, 1, 2]])
    assert metrics["replies-applied"] == 2 and metrics["replies-failed"] == len(bad)
    assert strategy.last_applied == {8: 3, 9: 3}


def test_changes_that_go_negative_only_together_are_not_both_applied(strategy):
    """Each change alone keeps the counts >= 0; the second one, added to the first, would not."""
    start = np.array([[1, 0, 0], [0, 0, 0]])
    msgs = list(strategy.configure_train(1, counts_record(start), ConfigRecord(), FixedNodesGrid([1, 2])))
    m = {x.metadata.dst_node_id: x for x in msgs}
    take = [[-1, 0, 0], [1, 0, 0]]
    arrays, metrics = strategy.aggregate_train(1, [reply_from(1, m[1], _update(take)), reply_from(2, m[2], _update(take))])
    np.testing.assert_array_equal(arrays[COUNTS_KEY].numpy(), [[0, 0, 0], [1, 0, 0]])
    assert metrics["replies-applied"] == 1 and metrics["replies-failed"] == 1


def test_error_reply_is_counted_and_no_model_without_valid_reply(strategy):
    msgs = list(strategy.configure_train(1, strategy.initial_arrays(), ConfigRecord(), FixedNodesGrid([8])))
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.node_id = 8
    err = Message(Error(code=1, reason="client crashed"), reply_to=msgs[0])
    as_server()
    arrays, metrics = strategy.aggregate_train(1, [err])
    assert arrays is None and metrics["replies-failed"] == 1 and metrics["model-held"] == 1


def test_topic_word_is_smoothed_normalized_counts(strategy):
    counts = np.array([[2, 0, 0], [1, 1, 0]])
    phi = strategy.topic_word(counts_record(counts))
    beta, v = 0.01, 3
    expected = np.array([[2 + beta, beta, beta], [1 + beta, 1 + beta, beta]]) / np.array([[2 + v * beta], [2 + v * beta]])
    np.testing.assert_allclose(phi, expected, rtol=1e-12)


def test_node_sampling_is_seeded_and_respects_fraction():
    s = _strategy(fraction_train=0.5, seed=3)
    grid = FixedNodesGrid(range(10, 20))
    first = s.sample_nodes(grid, 1)
    assert len(first) == 5 and first == s.sample_nodes(grid, 1)
    assert any(s.sample_nodes(grid, r) != first for r in range(2, 6))


def test_node_sampling_keeps_64_bit_node_ids_exact():
    ids = [12718000659414824960, 7027156918694888448, 2**64 - 1]
    s = _strategy(fraction_train=1.0)
    assert s.sample_nodes(FixedNodesGrid(ids), 1) == sorted(ids)


@pytest.mark.parametrize("settings", [dict(n_topics=0), dict(alpha=0.0), dict(beta=-1.0), dict(local_sweeps=0)])
def test_bad_settings_raise(settings):
    with pytest.raises(ValueError):
        LDASettings(**{**dict(n_topics=2, alpha=0.1, beta=0.01), **settings})


@pytest.mark.parametrize("federation", [dict(fraction_train=0.0), dict(min_nodes=0), dict(min_replies=1.5),
                                        dict(min_replies=0)])
def test_bad_federation_arguments_raise(federation):
    with pytest.raises(ValueError):
        _strategy(**federation)
