"""The secure sum: exact sums, dropouts, refusals, and what the server sees."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, Error, Message, RecordDict

from flower_topics.errors import UserInputError
from flower_topics.secure_sum import party
from flower_topics.secure_sum.protocol import SecureSumSettings, check_quorum
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
    total, masked, _ = run_round(nodes, values, SecureSumSettings(bits=32, tolerance=1))
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


def test_two_survivor_sets_that_reach_the_quorum_share_more_signers_than_may_collude():
    """Every n <= 60 and T < n / 2: q signers of n leave at most n - T live parties needed, and two sets of q share
    2q - n signers, more than T when n > 3T and n - 2T otherwise (by hand: 200 parties, T = 1: 101; 3, T = 1: 2)."""
    assert (check_quorum(200, 1), check_quorum(5, 1), check_quorum(3, 1), check_quorum(1000, 20)) == (101, 4, 2, 511)
    for n in range(2, 61):
        for tolerance in range(0, (n + 1) // 2):
            if 2 * tolerance >= n:
                continue
            q = check_quorum(n, tolerance)
            assert q <= n - tolerance
            overlap = 2 * q - n
            assert overlap > tolerance if n > 3 * tolerance else overlap == n - 2 * tolerance >= 1
            assert q == n - tolerance or 2 * (q - 1) - n <= tolerance  # and the smallest such q


def test_a_party_reveals_shares_only_for_the_set_it_signed_with_the_quorum_of_valid_signatures():
    """7 parties, T = 1 (q = 5): the 'unmask' request a party answers names the alive set it signed in 'check' and
    carries q valid signatures of it by distinct alive parties; anything else is refused in one line."""
    nodes = [1, 2, 3, 4, 5, 6, 7]
    grid = FakeGrid(nodes)
    secure = SecureRound(grid, nodes, SecureSumSettings(bits=32, tolerance=1), server_round=3, timeout=5)
    records = secure.setup()
    for node, record in records.items():
        party.mask_update(grid.states[node], node, record, np.ones(4, dtype=np.int64))
    lists = {"stage": "check", "round": 3, "alive": [str(n) for n in nodes], "dropped": []}
    signed = {n: bytes(party.answer(grid.states[n], n, lists)["signature"]) for n in nodes}
    with pytest.raises(UserInputError, match="already answered 'check' in round 3"):
        party.answer(grid.states[1], 1, lists)

    def unmask(signers, alive=nodes, signatures=None):
        return {**lists, "stage": "unmask", "alive": [str(n) for n in alive], "signers": [str(n) for n in signers],
                "signatures": signatures if signatures is not None else [signed[n] for n in signers]}

    refusals = {
        "4 signatures of the survivor set, this party needs 5": unmask([1, 2, 3, 4]),
        "5 signatures .* needs 5 by distinct alive parties": unmask([1, 2, 3, 4, 4]),
        "node 5's signature of the survivor set does not verify":
            unmask([1, 2, 3, 4, 5], signatures=[signed[n] for n in (1, 2, 3, 4)] + [signed[4]]),
        "its alive list is not the one this party signed": unmask([1, 2, 3, 4, 5], alive=nodes[:6]),
    }
    for reason, request in refusals.items():
        with pytest.raises(UserInputError, match=reason):
            party.answer(grid.states[1], 1, request)
    answer = party.answer(grid.states[1], 1, unmask([1, 2, 3, 4, 5]))
    assert sorted(map(int, answer["nodes"])) == secure.graph.holders(1) and not any(answer["key-shares"])


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


def test_a_party_killed_after_masking_is_in_the_sum():
    """Its masked vector arrived; it never answers 'unmask': its self mask comes from the others' shares."""
    nodes = [5, 6, 7, 8, 9]
    values = {n: np.full(16, n, dtype=np.int64) for n in nodes}
    total, _, _ = run_round(nodes, values, SecureSumSettings(bits=32, tolerance=1), drop_before_unmask=(8,))
    np.testing.assert_array_equal(total, np.full(16, sum(nodes)))


# ----------------------------------------------------------------------------- replayed or reordered messages


class ReplayGrid(FakeGrid):
    """A FakeGrid that, for ``(node, stage)`` in ``replay``, hands the server that node's reply from an earlier round."""

    def __init__(self, nodes, states, replay):
        super().__init__(nodes)
        self.states = states
        self.replay = replay

    def send_and_receive(self, messages, timeout=None):
        out = []
        for msg in messages:
            for reply in super().send_and_receive([msg], timeout):
                key = (msg.metadata.dst_node_id, str(msg.content[CONFIG]["stage"]))
                out.append(reply_from(key[0], msg, self.replay[key]) if key in self.replay else reply)
        return out


def _stage_reply(grid, node, stage):
    """The content ``node`` answered to ``stage`` on ``grid`` (every party answered every stage)."""
    for msg, content in zip(grid.sent, grid.received, strict=True):
        if msg.metadata.dst_node_id == node and str(msg.content[CONFIG]["stage"]) == stage:
            return content
    raise AssertionError((node, stage))


def test_a_reply_replayed_from_an_earlier_round_is_refused_with_one_line_and_the_round_goes_on(caplog):
    nodes = [1, 2, 3, 4, 5]
    values = {n: np.full(8, 10 * n, dtype=np.int64) for n in nodes}
    settings = SecureSumSettings(bits=32, tolerance=1)
    _, _, first = run_round(nodes, values, settings)  # round 3
    old = _stage_reply(first, 2, "shares")
    grid = ReplayGrid(nodes, first.states, {(2, "shares"): old})
    secure = SecureRound(grid, nodes, settings, server_round=4, timeout=5)
    with caplog.at_level("WARNING", logger="flwr"):
        records = secure.setup()
    assert sorted(records) == [1, 3, 4, 5]  # party 2's stale reply is not taken: it counts as dropped
    refused = [r.getMessage() for r in caplog.records if "replayed or reordered" in r.getMessage()]
    assert refused == [("round 4: secure sum 'shares': node 2: refused a reply for stage 'shares' of round 3 "
                        "(a replayed or reordered message)")]
    masked = {n: party.mask_update(grid.states[n], n, record, values[n]) for n, record in records.items()}
    np.testing.assert_array_equal(secure.unmask(masked), np.full(8, 10 * (1 + 3 + 4 + 5)))


def test_a_party_refuses_requests_of_an_earlier_round_and_stages_out_of_order():
    nodes = [1, 2, 3]
    values = {n: np.ones(4, dtype=np.int64) for n in nodes}
    settings = SecureSumSettings(bits=32, tolerance=1)
    _, _, grid = run_round(nodes, values, settings)  # round 3, every stage answered
    keys = next(m for m in grid.sent if str(m.content[CONFIG]["stage"]) == "keys").content[CONFIG]
    shares = next(m for m in grid.sent if str(m.content[CONFIG]["stage"]) == "shares").content[CONFIG]
    with pytest.raises(UserInputError, match="already sent keys for round 3"):
        party.answer(grid.states[1], 1, keys)  # the same round's 'keys' again
    party.answer(grid.states[1], 1, {**dict(keys), "round": 4})  # round 4 starts
    with pytest.raises(UserInputError, match=r"refused 'shares' for round 3: this party is in round 4 \(a replayed"):
        party.answer(grid.states[1], 1, shares)
    with pytest.raises(UserInputError, match="refused 'keys' for round 3"):
        party.answer(grid.states[1], 1, keys)
    with pytest.raises(UserInputError, match="last stage was 'keys'"):  # unmask before shares and mask
        party.answer(grid.states[1], 1, {"stage": "unmask", "round": 4, "alive": ["1", "2"], "dropped": []})


def test_a_party_masks_once_a_round():
    nodes = [1, 2, 3]
    grid = FakeGrid(nodes)
    secure = SecureRound(grid, nodes, SecureSumSettings(bits=32, tolerance=1), server_round=3, timeout=5)
    records = secure.setup()
    party.mask_update(grid.states[1], 1, records[1], np.ones(4, dtype=np.int64))
    with pytest.raises(UserInputError, match="already answered 'mask' in round 3"):
        party.mask_update(grid.states[1], 1, records[1], np.full(4, 2, dtype=np.int64))


def test_a_party_that_missed_the_keys_stage_says_so():
    nodes = [1, 2, 3]
    _, _, grid = run_round(nodes, {n: np.ones(4, dtype=np.int64) for n in nodes}, SecureSumSettings(bits=32))
    with pytest.raises(UserInputError, match="'shares' for round 5, but this party has no keys for it"):
        party.answer(grid.states[1], 1, {"stage": "shares", "round": 5, "nodes": [], "c-pk": [], "s-pk": []})
    with pytest.raises(UserInputError, match="'unmask' for round 1, but this party has no keys"):
        party.answer(RecordDict(), 1, {"stage": "unmask", "round": 1, "alive": [], "dropped": []})


def test_a_tampered_share_stops_the_round_with_one_line_not_a_crash():
    """A holder's seed share replaced by another field element: the rebuilt value is not a 32-byte seed."""
    from flower_topics.secure_sum import shamir

    class Tamper(FakeGrid):
        def send_and_receive(self, messages, timeout=None):
            replies = super().send_and_receive(messages, timeout)
            for reply in replies:
                record = reply.content["config"] if reply.has_content() else None
                if record is not None and record.get("stage") == "unmask" and reply.metadata.src_node_id == 2:
                    x, _ = shamir.decode(bytes(record["seed-shares"][0]))
                    record["seed-shares"] = [shamir.encode((x, shamir.PRIME - 1 - i))
                                             for i in range(len(record["seed-shares"]))]
            return replies

    nodes = [1, 2, 3]
    grid = Tamper(nodes)
    secure = SecureRound(grid, nodes, SecureSumSettings(bits=32, tolerance=0), server_round=3, timeout=5)
    records = secure.setup()
    masked = {n: party.mask_update(grid.states[n], n, r, np.ones(4, dtype=np.int64)) for n, r in records.items()}
    with pytest.raises(SecureRoundFailed, match="do not rebuild a 32-byte secret"):
        secure.unmask(masked)
