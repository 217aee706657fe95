"""A server that shows different parties different dropouts (SecAgg+'s graph, no colluding party).

The attack: keep the victim ``v`` alive in every list, so that all its holders reveal shares
of its self-mask seed, and tell the holders of each neighbour ``j`` of ``v`` that ``j`` dropped
out, so that ``t`` of them reveal shares of ``j``'s mask key: the server then removes ``v``'s
self mask and every pairwise mask of ``v`` and reads ``v``'s update. Each list drops at most
``T`` parties (a party refuses fewer than ``n - T`` alive), so the server spreads the
neighbours over many lists: a maximum flow from the holders (``T`` drops each) to the
neighbours (``t`` each) finds the lists. At 400 parties and ``T = 20`` (``k = 42``,
``t = 30``) it exists; before the consistency check the server read the update exactly.
With it, each party signs the list it was shown and reveals shares only for a list that
``floor((n + T) / 2) + 1`` parties signed: every party refuses ``unmask``.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import ConfigRecord, Message, RecordDict
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow

from flower_topics.federation.client_app import make_client_app
from flower_topics.federation.server_app import run_server
from flower_topics.run.checkpoint import load_checkpoint
from flower_topics.secure_sum import crypto, shamir
from flower_topics.secure_sum import party as secure_party
from flower_topics.secure_sum.graph import RoundGraph
from flower_topics.secure_sum.protocol import MESSAGE_TYPE, SecureSumSettings, mask_context, pair_sign, self_context
from flower_topics.secure_sum.server import SecureRound, SecureRoundFailed
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.wire import lda as wire
from flower_topics.wire.protocol import CONFIG
from tests.test_method_contract import TINY
from tests.test_secure_sum import FakeGrid

ROUND = 9


def split_lists(graph: RoundGraph, victim: int, tolerance: int) -> dict[int, set[int]] | None:
    """For each holder, the victim's neighbours to call dropped (at most ``tolerance``), so that each neighbour is
    called dropped by ``t`` of its own holders; None when no such lists exist."""
    targets = sorted(graph.neighbours[victim])
    holders = sorted(set().union(*(graph.neighbours[j] for j in targets)))
    sink = 1 + len(holders) + len(targets)
    rows, cols, caps = [], [], []
    for i, h in enumerate(holders):
        rows.append(0), cols.append(1 + i), caps.append(tolerance)
        for a, j in enumerate(targets):
            if h != j and h in graph.neighbours[j]:
                rows.append(1 + i), cols.append(1 + len(holders) + a), caps.append(1)
    for a in range(len(targets)):
        rows.append(1 + len(holders) + a), cols.append(sink), caps.append(graph.threshold)
    flow = maximum_flow(csr_matrix((caps, (rows, cols)), shape=(sink + 1, sink + 1), dtype=np.int32), 0, sink)
    if flow.flow_value < graph.threshold * len(targets):
        return None
    used = flow.flow.tocoo()
    lists: dict[int, set[int]] = {h: set() for h in holders}
    for r, c, f in zip(used.row, used.col, used.data):
        if f > 0 and 1 <= r <= len(holders) and c > len(holders):
            lists[holders[r - 1]].add(targets[c - 1 - len(holders)])
    return lists


def split_round(grid: FakeGrid, secure: SecureRound, lists: dict[int, set[int]]) -> list[str]:
    """Play the server's 'check' and 'unmask' with each party's own list; every party whose update arrived gets its
    list, and in 'unmask' every signature the server holds of that very list. Returns the parties' refusals."""
    everyone = sorted(secure.outbox)

    def request(stage: str, node: int, **extra) -> Message:
        dropped = lists.get(node, set())
        config = {"stage": stage, "round": ROUND, "alive": [str(n) for n in everyone if n not in dropped],
                  "dropped": [str(n) for n in sorted(dropped)], **extra}
        return Message(content=RecordDict({CONFIG: ConfigRecord(config)}), message_type=MESSAGE_TYPE,
                       dst_node_id=node)

    signatures = {}
    for reply in grid.send_and_receive([request("check", n) for n in everyone]):
        if reply.has_content():
            signatures[reply.metadata.src_node_id] = bytes(reply.content[CONFIG]["signature"])
    view = {n: frozenset(lists.get(n, set())) for n in everyone}
    unmask = []
    for node in everyone:
        same = sorted(s for s in signatures if view[s] == view[node])
        unmask.append(request("unmask", node, signers=[str(s) for s in same],
                              signatures=[signatures[s] for s in same]))
    return [reply.error.reason for reply in grid.send_and_receive(unmask) if reply.has_error()]


def read_update(grid: FakeGrid, secure: SecureRound, victim: int, masked: np.ndarray,
                settings: SecureSumSettings) -> np.ndarray | None:
    """The victim's update, from the shares the parties revealed in 'unmask' (None if they do not suffice)."""
    graph, t = secure.graph, secure.graph.threshold
    seeds: dict[int, set] = {}
    keys: dict[int, set] = {}
    for content in grid.received:
        config = content[CONFIG]
        if str(config.get("stage", "")) != "unmask":
            continue
        for owner, seed_share, key_share in zip(config["nodes"], config["seed-shares"], config["key-shares"]):
            if bytes(seed_share):
                seeds.setdefault(int(owner), set()).add(shamir.decode(bytes(seed_share)))
            if bytes(key_share):
                keys.setdefault(int(owner), set()).add(shamir.decode(bytes(key_share)))
    neighbours = sorted(graph.neighbours[victim])
    if len(seeds.get(victim, ())) < t or any(len(keys.get(j, ())) < t for j in neighbours):
        return None
    size = masked.size
    total = np.asarray(masked).astype(np.uint64)
    seed = shamir.combine(sorted(seeds[victim])[:t]).to_bytes(32, "big")
    total -= crypto.mask(seed, self_context(ROUND, victim), size, settings.bits)
    for j in neighbours:
        key = crypto.from_scalar(shamir.combine(sorted(keys[j])[:t]))
        pair = crypto.mask(crypto.shared_key(key, secure.epoch.mask_key(victim, ROUND)),
                           mask_context(ROUND, victim, j), size, settings.bits)
        total = total - pair if pair_sign(victim, j) > 0 else total + pair
    return settings.centered(total)


def test_a_server_that_splits_the_dropout_lists_gets_no_share_and_cannot_read_a_party():
    nodes = list(range(1, 401))
    settings = SecureSumSettings(bits=32, tolerance=20)
    grid = FakeGrid(nodes)
    secure = SecureRound(grid, nodes, settings, server_round=ROUND, timeout=5)
    records = secure.setup()
    graph = secure.graph
    assert not graph.design.complete and (graph.design.degree, graph.threshold) == (42, 30)
    victim = nodes[0]
    lists = split_lists(graph, victim, settings.tolerance)
    assert lists is not None  # the server can find lists that would expose the victim
    rng = np.random.default_rng(3)
    values = {n: rng.integers(-1000, 1000, size=16) for n in nodes}
    masked = {n: secure_party.mask_update(grid.states[n], n, r, values[n]) for n, r in records.items()}
    refusals = split_round(grid, secure, lists)
    # before the check the parties answered and this read the update exactly (np.testing.assert_array_equal)
    assert read_update(grid, secure, victim, masked[victim], settings) is None
    split = {h for h, dropped in lists.items() if dropped}
    assert len(split) > 30 and len(refusals) == len(split)
    assert all(reason.startswith("secure sum: refused 'unmask' in round 9: it carries ") and "\n" not in reason
               for reason in refusals)
    revealed_keys = {int(owner) for content in grid.received if str(content[CONFIG]["stage"]) == "unmask"
                     for owner, key in zip(content[CONFIG]["nodes"], content[CONFIG]["key-shares"]) if bytes(key)}
    assert not revealed_keys  # the parties shown the common list (no dropout) answer it; nobody's mask key leaves


def test_a_party_shown_another_list_in_transit_is_left_out_and_the_sum_stays_exact():
    """A list rewritten on its way to one party: its signature does not verify on the server's list, so the
    server leaves it out of 'unmask' (one logged line); the others' shares rebuild its seed, the sum is exact."""
    nodes = list(range(1, 31))
    settings = SecureSumSettings(bits=32, tolerance=2)
    grid = FakeGrid(nodes)
    secure = SecureRound(grid, nodes, settings, server_round=ROUND, timeout=5)
    records = secure.setup()
    target = nodes[5]
    dropped = sorted(secure.graph.neighbours[target])[0]
    values = {n: np.full(4, n, dtype=np.int64) for n in nodes}
    masked = {n: secure_party.mask_update(grid.states[n], n, r, values[n]) for n, r in records.items()}
    send = grid.send_and_receive

    def rewrite(messages, timeout=None):
        for msg in messages:
            config = msg.content[CONFIG]
            if str(config["stage"]) in ("check", "unmask") and msg.metadata.dst_node_id == target:
                config["alive"] = [a for a in config["alive"] if int(a) != dropped]
                config["dropped"] = [str(dropped)]
        return send(messages, timeout)

    grid.send_and_receive = rewrite
    np.testing.assert_array_equal(secure.unmask(masked), np.full(4, sum(nodes)))
    unmasked = [msg.metadata.dst_node_id for msg in grid.sent if str(msg.content[CONFIG]["stage"]) == "unmask"]
    assert sorted(unmasked) == [n for n in nodes if n != target]


class SplitListGrid(InProcessGrid):
    """The in-process federation behind a server that shows party ``TARGET`` another dropout list in round 1
    (``DROPPED`` dropped out, though its update arrived) and, when the server leaves ``TARGET`` out of 'unmask',
    sends it an 'unmask' of its own list with the one signature it holds (``TARGET``'s); the reply is kept."""

    TARGET, DROPPED = 103, 105

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.signature: bytes | None = None
        self.injected: Message | None = None

    def _split(self, config) -> None:
        config["alive"] = [a for a in config["alive"] if int(a) != self.DROPPED]
        config["dropped"] = sorted(set(config["dropped"]) | {str(self.DROPPED)})

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        stages = {str(m.content[CONFIG].get("stage", "")) for m in messages if m.metadata.message_type == MESSAGE_TYPE
                  and int(m.content[CONFIG]["round"]) == 1}
        for msg in messages:
            if stages & {"check", "unmask"} and msg.metadata.dst_node_id == self.TARGET:
                self._split(msg.content[CONFIG])
        replies = self._deliver(messages)
        if "check" in stages:
            self.signature = next(bytes(r.content[CONFIG]["signature"]) for r in replies
                                  if r.metadata.src_node_id == self.TARGET and r.has_content())
        if "unmask" in stages and all(m.metadata.dst_node_id != self.TARGET for m in messages):
            config = dict(next(iter(messages)).content[CONFIG])
            self._split(config)
            config |= {"signers": [str(self.TARGET)], "signatures": [self.signature]}
            (self.injected,) = self._deliver([Message(content=RecordDict({CONFIG: ConfigRecord(config)}),
                                                      message_type=MESSAGE_TYPE, dst_node_id=self.TARGET)])
        return replies


def test_through_the_client_app_a_party_shown_another_dropout_list_refuses_and_the_sum_stays_exact(tmp_path):
    """lda, 5 parties, T = 1, through the real ClientApp: the party shown another list signs it, the server's check
    leaves it out, the attacker's 'unmask' of that list is refused in one line; the model is the plain run's."""
    def run(name, grid_class, **extra):
        config = {**TINY, "method": "lda", "synthetic-nodes": 5, "synthetic-topics": 7, "federated-eval": False,
                  "num-rounds": 2, "output-dir": str(tmp_path / name), **extra}
        grid = grid_class.partitions(make_client_app(config), 5, config)
        run_server(grid, config)
        return load_checkpoint(tmp_path / name).global_arrays[wire.COUNTS_KEY], grid

    plain, _ = run("plain", InProcessGrid)
    secure, grid = run("secure", SplitListGrid, **{"secure-aggregation": True, "secure-aggregation-tolerance": 1})
    assert grid.injected is not None and grid.injected.has_error()
    reason = grid.injected.error.reason
    assert "refused 'unmask' in round 1: it carries 1 signatures of the survivor set, this party needs 4" in reason
    assert "\n" not in reason
    np.testing.assert_array_equal(secure, plain)


@pytest.mark.parametrize("own, signers, refused", [(1, 5, True), (1, 6, False), (4, 5, False)])
def test_a_partys_quorum_is_never_below_the_one_of_its_own_tolerance(monkeypatch, own, signers, refused):
    """9 parties, a server announcing T = 4 (quorum min(9 - 4, 13 // 2 + 1) = 5): a party whose own bound is 1 still
    asks the quorum of T = 1 (min(8, 10 // 2 + 1) = 6 signatures) before it reveals any share; at own bound 4, 5."""
    answer = secure_party.answer
    monkeypatch.setattr(secure_party, "answer", lambda state, node, request: answer(state, node, request, own))
    nodes = list(range(1, 10))
    settings = SecureSumSettings(bits=32, tolerance=4)
    grid = FakeGrid(nodes)
    secure = SecureRound(grid, nodes, settings, server_round=ROUND, timeout=5)
    records = secure.setup()
    for node, record in records.items():
        secure_party.mask_update(grid.states[node], node, record, np.arange(4))
    alive = {"round": ROUND, "alive": [str(n) for n in nodes], "dropped": []}

    def request(stage: str, **extra) -> Message:
        return Message(content=RecordDict({CONFIG: ConfigRecord({"stage": stage, **alive, **extra})}),
                       message_type=MESSAGE_TYPE, dst_node_id=nodes[0])

    (checked,) = grid.send_and_receive([request("check")])
    signatures = {nodes[0]: bytes(checked.content[CONFIG]["signature"])}
    for node in nodes[1:]:
        signatures[node] = bytes(secure_party.check_survivors(grid.states[node], node, {"stage": "check", **alive})
                                 ["signature"])
    chosen = nodes[:signers]
    (reply,) = grid.send_and_receive([request("unmask", signers=[str(n) for n in chosen],
                                              signatures=[signatures[n] for n in chosen])])
    assert reply.has_error() == refused
    if refused:
        assert "this party needs 6" in reply.error.reason and "\n" not in reply.error.reason
