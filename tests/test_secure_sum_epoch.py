"""Key epochs: one agreement serves up to R rounds, each round with its own masks; a dropout ends the epoch."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.common.secure_aggregation.secaggplus_utils import (
    share_keys_plaintext_separate,
)

from flower_topics.errors import UserInputError
from flower_topics.secure_sum import crypto, party, shamir
from flower_topics.secure_sum.protocol import SecureSumSettings
from flower_topics.secure_sum.server import SecureRound
from flower_topics.wire.protocol import CONFIG
from tests.test_secure_sum import FakeGrid, ReplayGrid


def _stages(grid, server_round):
    return sorted(str(m.content[CONFIG]["stage"]) for m in grid.sent if int(m.content[CONFIG]["round"]) == server_round)


class Epochs:
    """Rounds of the secure sum over one FakeGrid, each continuing the previous round's key epoch when it may."""

    def __init__(self, nodes, settings):
        self.grid, self.settings, self.epoch = FakeGrid(nodes), settings, None

    def round(self, server_round, values, nodes=None, lost=(), killed=()):
        """One round: ``lost`` parties' masked updates never arrive, ``killed`` ones mask and never answer unmask."""
        secure = SecureRound(self.grid, sorted(nodes or values), self.settings, server_round, timeout=5,
                             epoch=self.epoch)
        records = secure.setup()
        self.epoch = secure.epoch
        masked = {n: party.mask_update(self.grid.states[n], n, r, values[n]) for n, r in records.items()
                  if n not in lost}
        down = set(self.grid.down)
        self.grid.down |= set(killed)
        total = secure.unmask(dict(masked))
        self.grid.down = down
        return total, masked, secure


NODES = [11, 22, 33, 44, 55]


def test_an_epoch_of_r_rounds_sums_exactly_with_keys_and_shares_in_its_first_round_only():
    rng = np.random.default_rng(0)
    run = Epochs(NODES, SecureSumSettings(bits=32, tolerance=1, epoch=4))
    for server_round in range(3, 9):  # rounds 3-6: one epoch; 7-8: the next
        values = {n: rng.integers(-1000, 1000, size=300) for n in NODES}
        total, _, secure = run.round(server_round, values)
        np.testing.assert_array_equal(total, sum(values.values()))
        first = server_round in (3, 7)
        assert secure.agreed == first and secure.epoch.first == (3 if server_round < 7 else 7)
        assert _stages(run.grid, server_round) == (sorted(["keys", "shares", "check", "unmask"] * 5) if first
                                                   else sorted(["check", "unmask"] * 5))


def test_the_same_update_gives_different_masked_vectors_in_each_round_of_an_epoch():
    run = Epochs(NODES, SecureSumSettings(bits=32, tolerance=1, epoch=5))
    values = {n: np.full(200, 7, dtype=np.int64) for n in NODES}
    seen = [run.round(server_round, values)[1] for server_round in (1, 2, 3)]
    for node in NODES:
        vectors = [masked[node] for masked in seen]
        assert all(np.mean(a == b) < 0.01 for i, a in enumerate(vectors) for b in vectors[i + 1:])
    record = run.grid.states[NODES[0]][party.STATE]  # a seed and a mask key pair per round, all distinct
    assert len({bytes(s) for s in record["self-seeds"]}) == 5 and len({bytes(k) for k in record["s-sk"]}) == 5


def test_a_dropout_mid_epoch_is_recovered_exactly_reveals_only_that_rounds_key_and_ends_the_epoch():
    rng = np.random.default_rng(2)
    run = Epochs(NODES, SecureSumSettings(bits=32, tolerance=1, epoch=10))
    values = {n: rng.integers(-500, 500, size=100) for n in NODES}
    run.round(1, values)
    run.round(2, values)
    keys_before = dict(run.epoch.public_keys)
    total, _, secure = run.round(3, values, lost=(33,))  # 33's masked update of round 3 is lost
    np.testing.assert_array_equal(total, sum(v for n, v in values.items() if n != 33))
    assert not run.epoch.clean and not run.epoch.continues(NODES, 4)
    # what the server rebuilt is 33's mask key of round 3 only, not that of rounds 1 and 2 (its seeds of
    # those rounds were revealed while it was alive: with one key for the epoch its updates would be open)
    record = run.grid.states[33][party.STATE]
    shares = [shamir.decode(bytes(k)) for c in run.grid.received if str(c[CONFIG]["stage"]) == "unmask"
              and int(c[CONFIG]["round"]) == 3
              for who, k in zip(c[CONFIG]["nodes"], c[CONFIG]["key-shares"]) if int(who) == 33 and bytes(k)]
    rebuilt = shamir.combine(sorted(set(shares))[:secure.graph.threshold])
    scalars = [crypto.private_scalar(crypto.load_private(bytes(k))) for k in record["s-sk"]]
    assert rebuilt == scalars[2] and rebuilt not in scalars[:2] + scalars[3:]
    total, _, secure = run.round(4, values)  # the next round agrees new keys: a new epoch
    np.testing.assert_array_equal(total, sum(values.values()))
    assert secure.agreed and secure.epoch.first == 4 and sorted(_stages(run.grid, 4)).count("keys") == 5
    assert all(secure.epoch.public_keys[n][0] != keys_before[n][0] for n in NODES)
    assert all(not set(_split(secure.epoch.public_keys[n][1])) & set(_split(keys_before[n][1])) for n in NODES)


def _split(s_pk):
    return [s_pk[i:i + crypto.PUBLIC_KEY_BYTES] for i in range(0, len(s_pk), crypto.PUBLIC_KEY_BYTES)]


def test_a_party_refuses_to_mask_again_with_keys_of_an_epoch_that_had_a_dropout():
    """The server forces round 4 into the epoch anyway: the dropped party (its round-3 key was rebuilt) and the
    parties that saw it dropped all refuse; without the dropout the same request is answered."""
    values = {n: np.ones(8, dtype=np.int64) for n in NODES}
    run = Epochs(NODES, SecureSumSettings(bits=32, tolerance=1, epoch=10))
    run.round(1, values)
    run.round(2, values, lost=(33,))
    forced = {"round": 3, "epoch": 1, "bits": 32, "senders": [], "ciphertexts": []}
    for node in NODES:
        with pytest.raises(UserInputError, match="refused to mask in round 3 with the keys of the epoch of round 1"):
            party.mask_update(run.grid.states[node], node, forced, values[node])
    clean = Epochs(NODES, SecureSumSettings(bits=32, tolerance=1, epoch=10))
    clean.round(1, values)
    clean.round(2, values)
    party.mask_update(clean.grid.states[33], 33, forced, values[33])


def test_a_party_killed_after_masking_mid_epoch_is_in_the_sum_and_the_epoch_ends():
    values = {n: np.full(16, n, dtype=np.int64) for n in NODES}
    run = Epochs(NODES, SecureSumSettings(bits=32, tolerance=1, epoch=10))
    run.round(1, values)
    total, _, _ = run.round(2, values, killed=(44,))  # its masked vector arrived; it never answers unmask
    np.testing.assert_array_equal(total, np.full(16, sum(NODES)))
    assert not run.epoch.continues(NODES, 3)
    with pytest.raises(UserInputError, match="refused to mask in round 3"):  # it never saw round 2 end
        party.mask_update(run.grid.states[44], 44, {"round": 3, "epoch": 1, "senders": [], "ciphertexts": []},
                          values[44])
    total, _, secure = run.round(3, values)
    np.testing.assert_array_equal(total, np.full(16, sum(NODES)))
    assert secure.agreed


def test_another_set_of_parties_or_the_end_of_the_epoch_starts_a_new_one():
    values = {n: np.ones(4, dtype=np.int64) for n in NODES}
    run = Epochs(NODES, SecureSumSettings(bits=32, tolerance=1, epoch=2))
    assert run.round(1, values)[2].agreed
    assert not run.round(2, values)[2].agreed
    assert run.round(3, values)[2].agreed  # past R = 2 rounds
    fewer = {n: values[n] for n in NODES[:4]}
    total, _, secure = run.round(4, fewer)
    assert secure.agreed and secure.epoch.participants == tuple(NODES[:4])
    np.testing.assert_array_equal(total, np.full(4, 4))
    record = run.grid.states[NODES[0]][party.STATE]
    with pytest.raises(UserInputError, match="no keys for it"):  # round 6 is past this party's epoch of 2 rounds
        party.mask_update(run.grid.states[NODES[0]], NODES[0], {"round": 6, "epoch": int(record["epoch"]),
                                                                "senders": [], "ciphertexts": []}, values[NODES[0]])


def test_a_replayed_unmask_of_an_earlier_round_of_the_epoch_is_refused_and_the_round_goes_on(caplog):
    values = {n: np.full(8, n, dtype=np.int64) for n in NODES}
    settings = SecureSumSettings(bits=32, tolerance=1, epoch=10)
    run = Epochs(NODES, settings)
    run.round(1, values)
    run.round(2, values)
    old_request = next(m for m in reversed(run.grid.sent) if str(m.content[CONFIG]["stage"]) == "unmask"
                       and m.metadata.dst_node_id == 22).content[CONFIG]
    old_reply = next(c for c in reversed(run.grid.received) if str(c[CONFIG]["stage"]) == "unmask")
    run.round(3, values)
    with pytest.raises(UserInputError, match=r"refused 'unmask' for round 2: this party is in round 3 \(a replayed"):
        party.answer(run.grid.states[22], 22, old_request)
    # round 4 continues the epoch; the server is handed party 55's unmask reply of round 2 instead of its own
    grid = ReplayGrid(NODES, run.grid.states, {(55, "unmask"): old_reply})
    secure = SecureRound(grid, NODES, settings, 4, timeout=5, epoch=run.epoch)
    records = secure.setup()
    assert not secure.agreed
    masked = {n: party.mask_update(grid.states[n], n, r, values[n]) for n, r in records.items()}
    with caplog.at_level("WARNING", logger="flwr"):
        total = secure.unmask(masked)
    np.testing.assert_array_equal(total, np.full(8, sum(NODES)))
    refused = [r.getMessage() for r in caplog.records if "replayed or reordered" in r.getMessage()]
    assert refused == [("round 4: secure sum 'unmask': node 55: refused a reply for stage 'unmask' of round 2 "
                        "(a replayed or reordered message)")]
    assert not secure.epoch.continues(NODES, 5)  # a party's answer is missing: the next round agrees new keys


def test_an_unmask_request_of_a_later_round_carries_only_that_rounds_shares():
    """Each share in an unmask reply is one field element of the round's seed or key, never another round's."""
    values = {n: np.ones(4, dtype=np.int64) for n in NODES}
    run = Epochs(NODES, SecureSumSettings(bits=32, tolerance=1, epoch=3))
    run.round(1, values)
    run.round(2, values)
    owner = 11
    seeds = [int.from_bytes(bytes(s), "big") for s in run.grid.states[owner][party.STATE]["self-seeds"]]
    for server_round in (1, 2):
        shares = sorted({shamir.decode(bytes(s)) for c in run.grid.received if str(c[CONFIG]["stage"]) == "unmask"
                         and int(c[CONFIG]["round"]) == server_round
                         for who, s in zip(c[CONFIG]["nodes"], c[CONFIG]["seed-shares"]) if int(who) == owner})
        assert shamir.combine(shares[:4]) == seeds[server_round - 1]
    own = share_keys_plaintext_separate(bytes(run.grid.states[owner][party.STATE]["own-share"]))
    assert len(own[2]) == len(own[3]) == 3 * shamir.SHARE_BYTES  # the shares of all 3 rounds stay with the party


def test_in_a_run_a_lost_update_ends_the_epoch_and_the_next_round_agrees_new_keys(tmp_path):
    """``lda``, 4 parties, 5 rounds, key epochs of 10: keys in round 1; party 102's round-2 masked update is lost,
    so round 3 agrees new keys; rounds 4 and 5 continue that epoch. The counts equal a plain run's exactly."""
    from flower_topics.federation.client_app import make_client_app
    from flower_topics.federation.server_app import run_server
    from flower_topics.run.checkpoint import load_checkpoint
    from flower_topics.simulations.inprocess import InProcessGrid
    from flower_topics.wire import lda as wire
    from tests.test_method_contract import TINY

    def lost(server_round, node):
        return server_round == 2 and node == 102

    def run(name, **extra):
        config = {**TINY, "method": "lda", "synthetic-nodes": 4, "synthetic-topics": 6, "federated-eval": False,
                  "num-rounds": 5, "output-dir": str(tmp_path / name), **extra}
        app, seen = make_client_app(config), []

        def recording(msg, context):
            if msg.metadata.message_type == "query.secure_sum":
                seen.append((int(msg.content[CONFIG]["round"]), str(msg.content[CONFIG]["stage"])))
            return app(msg, context)

        run_server(InProcessGrid.partitions(recording, 4, config, lost), config)
        return load_checkpoint(tmp_path / name).global_arrays[wire.COUNTS_KEY], seen

    plain, _ = run("plain")
    secure, seen = run("secure", **{"secure-aggregation": True, "secure-aggregation-epoch": 10})
    np.testing.assert_array_equal(secure, plain)
    assert sorted({r for r, stage in seen if stage == "keys"}) == [1, 3]
    assert {r: sum(1 for s_r, s in seen if s_r == r and s == "unmask") for r in range(1, 6)} == {
        1: 4, 2: 3, 3: 4, 4: 4, 5: 4}
