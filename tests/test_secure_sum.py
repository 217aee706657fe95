"""The secure sum: exact sums, dropouts, refusals, and what the server sees."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, Error, Message, RecordDict

from flower_topics.errors import UserInputError
from flower_topics.secure_sum import party
from flower_topics.secure_sum.protocol import SecureSumSettings
from flower_topics.secure_sum.server import SecureRound, SecureRoundFailed
from flower_topics.wire.protocol import CONFIG
from tests.flower_harness import as_server, reply_from


class FakeGrid:
    """Routes secure-sum query messages to in-memory parties; ``down`` parties never answer."""

    def __init__(self, nodes):
        as_server()
        self.states = {n: RecordDict() for n in nodes}
        self.down: set[int] = set()
        self.sent: list[Message] = []  # every message the server sent
        self.received: list[RecordDict] = []  # every reply content the server got

    def send_and_receive(self, messages, timeout=None):
        replies = []
        for msg in messages:
            self.sent.append(msg)
            node = msg.metadata.dst_node_id
            if node in self.down:
                continue
            try:
                answer = party.answer(self.states[node], node, msg.content[CONFIG])
                reply = reply_from(node, msg, RecordDict({CONFIG: ConfigRecord(answer)}))
            except UserInputError as exc:
                reply = Message(error=Error(code=4000, reason=str(exc)), reply_to=msg)
            replies.append(reply)
            if reply.has_content():
                self.received.append(reply.content)
        return replies


def run_round(nodes, values, settings, drop_after_shares=(), drop_before_unmask=()):
    grid = FakeGrid(nodes)
    secure = SecureRound(grid, list(nodes), settings, server_round=3, timeout=5)
    records = secure.setup()
    masked = {}
    for node, record in records.items():
        if node in drop_after_shares:
            continue
        masked[node] = party.mask_update(grid.states[node], node, record, values[node])
    grid.down |= set(drop_before_unmask)
    return secure.unmask(masked), masked, grid


def test_sum_is_exact_and_masked_vectors_look_nothing_like_the_values():
    rng = np.random.default_rng(1)
    nodes = [11, 22, 33, 44, 55]
    values = {n: rng.integers(-1000, 1000, size=500) for n in nodes}
    total, masked, grid = run_round(nodes, values, SecureSumSettings(bits=32, tolerance=1))
    np.testing.assert_array_equal(total, sum(values.values()))
    for node in nodes:  # what the server received is not the value, nor the value plus a constant
        assert masked[node].dtype == np.uint32
        assert np.mean(SecureSumSettings(bits=32).centered(masked[node]) == values[node]) < 0.01
        assert np.abs(np.corrcoef(masked[node].astype(float), values[node])[0, 1]) < 0.2


def test_a_party_that_drops_after_masking_keys_the_sum_of_the_rest():
    nodes = [5, 6, 7, 8, 9]
    values = {n: np.full(64, n, dtype=np.int64) for n in nodes}
    total, _, _ = run_round(nodes, values, SecureSumSettings(bits=64, tolerance=2), drop_after_shares=(7, 9))
    np.testing.assert_array_equal(total, np.full(64, 5 + 6 + 8))


def test_fewer_survivors_than_the_threshold_stop_the_round():
    nodes = [1, 2, 3, 4, 5]
    values = {n: np.ones(8, dtype=np.int64) for n in nodes}
    with pytest.raises(SecureRoundFailed, match="threshold is 4"):
        run_round(nodes, values, SecureSumSettings(bits=32, tolerance=1), drop_after_shares=(1, 2))


def test_a_party_answers_unmask_once():
    nodes = [1, 2, 3]
    values = {n: np.ones(8, dtype=np.int64) for n in nodes}
    _, _, grid = run_round(nodes, values, SecureSumSettings(bits=32, tolerance=1))
    with pytest.raises(UserInputError, match="already answered"):
        party.answer(grid.states[1], 1, {"stage": "unmask", "round": 3, "alive": ["1", "2"], "dropped": ["3"]})


def test_an_entry_that_could_wrap_is_refused():
    nodes = [1, 2, 3]
    settings = SecureSumSettings(bits=16, tolerance=1)
    values = {n: np.array([settings.limit(3) + 1]) for n in nodes}
    with pytest.raises(UserInputError, match="without wrapping"):
        run_round(nodes, values, settings)
