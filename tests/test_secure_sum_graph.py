"""SecAgg+'s graph: its parameters against the bounds they rest on, its shape, who derives it, and sparse rounds."""

from __future__ import annotations

import itertools
import math
import os
import random

import numpy as np
import pytest
from flwr.common.secure_aggregation.secaggplus_utils import (
    share_keys_plaintext_separate,
)
from scipy.stats import hypergeom

from flower_topics.secure_sum import crypto, party, shamir
from flower_topics.secure_sum.graph import (
    CORRECTNESS_BITS,
    SECURITY_BITS,
    design,
    harary,
    log2_disconnected,
    round_graph,
)
from flower_topics.secure_sum.protocol import SecureSumSettings
from flower_topics.secure_sum.server import SecureRound, SecureRoundFailed
from tests.test_secure_sum import FakeGrid


def _connected(nodes, neighbours):
    nodes = set(nodes)
    if not nodes:
        return True
    seen, todo = set(), [next(iter(nodes))]
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend((neighbours[node] & nodes) - seen)
    return seen == nodes


def _keys(nodes):
    return [os.urandom(120) for _ in nodes], [os.urandom(120) for _ in nodes]


@pytest.mark.parametrize("parties, tolerance", [(2, 0), (3, 1), (5, 1), (5, 2), (6, 2), (50, 20)])
def test_where_no_sparse_degree_fits_the_graph_is_secaggs_complete_one(parties, tolerance):
    plan = design(parties, tolerance)
    assert plan.complete and plan.degree == parties - 1 and plan.threshold == parties - tolerance
    nodes = list(range(10, 10 + parties))
    graph = round_graph(7, parties, tolerance, nodes, *_keys(nodes))
    assert all(graph.neighbours[n] == frozenset(nodes) - {n} for n in nodes)
    assert graph.threshold == parties - tolerance


@pytest.mark.parametrize("parties, tolerance", [(6, 1), (20, 2), (50, 5), (100, 1), (100, 10), (200, 1), (200, 20)])
def test_the_sparse_parameters_meet_the_bounds_they_claim(parties, tolerance):
    plan = design(parties, tolerance)
    n, T, k, t = parties, tolerance, plan.degree, plan.threshold
    assert not plan.complete and k % 2 == 0 and k < n - 1 and 2 <= t <= k
    assert plan.log2_insecure <= -SECURITY_BITS and plan.log2_unrecoverable <= -CORRECTNESS_BITS
    # recompute each bound from its definition, independently of the module's arithmetic
    corrupt = hypergeom(n - 1, T, k)  # corrupt neighbours of an honest party
    exposed = n * max(corrupt.sf(t - 1), corrupt.sf(2 * t - k - 2))
    lost = n * (hypergeom(n - 1, max(T - 1, 0), k).sf(k - t) + hypergeom(n - 1, T, k).sf(k + 1 - t))
    disconnected = 0.0 if k > 2 * T else n * (n - k - 1) / 2 * math.comb(n - k, 2 * T - k) / math.comb(n, 2 * T)
    assert exposed + disconnected <= 2.0 ** -SECURITY_BITS and lost <= 2.0 ** -CORRECTNESS_BITS
    # and the smallest such k: k - 2 fails one of them
    if k > 2:
        smaller = [t2 for t2 in range(2, k - 1) if
                   2.0 ** log2_disconnected(n, k - 2, 2 * T) + n * max(hypergeom(n - 1, T, k - 2).sf(t2 - 1),
                                                             hypergeom(n - 1, T, k - 2).sf(2 * t2 - k))
                   <= 2.0 ** -SECURITY_BITS
                   and n * (hypergeom(n - 1, max(T - 1, 0), k - 2).sf(k - 2 - t2)
                            + hypergeom(n - 1, T, k - 2).sf(k - 1 - t2)) <= 2.0 ** -CORRECTNESS_BITS]
        assert not smaller


def test_the_disconnection_bound_is_above_the_exact_probability():
    """Every way of removing b parties from small Harary rings, counted: the bound is never below the truth."""
    for n, k, b in [(10, 2, 2), (10, 2, 4), (12, 4, 4), (12, 4, 6), (14, 4, 7), (11, 6, 6)]:
        ring = list(range(n))
        neighbours = {i: frozenset(ring[(i + d) % n] for d in range(-k // 2, k // 2 + 1) if d) for i in ring}
        bad = sum(not _connected(set(ring) - set(removed), neighbours) for removed in itertools.combinations(ring, b))
        exact = bad / math.comb(n, b)
        assert exact <= 2.0 ** log2_disconnected(n, k, b) + 1e-12, (n, k, b, exact)
        if b < k:
            assert bad == 0


def test_the_harary_graph_is_symmetric_k_regular_and_a_ring_lattice():
    nodes = random.Random(1).sample(range(1000, 9999), 40)
    neighbours = harary(nodes, 6, os.urandom(32))
    assert all(len(neighbours[n]) == 6 and n not in neighbours[n] for n in nodes)
    assert all(a in neighbours[b] for a in nodes for b in neighbours[a])  # symmetric
    start = nodes[0]  # walking "next" around the ring visits every party once
    order, previous, node = [start], None, start
    while True:
        both = [m for m in neighbours[node] if len(neighbours[node] & neighbours[m]) == 4 and m != previous]
        if not both:
            break
        step = both[0] if previous is None else next((m for m in both if m not in order), None)
        if step is None:
            break
        order.append(step)
        previous, node = node, step
    assert sorted(order) == sorted(nodes)
    assert all(_connected(set(nodes) - set(cut), neighbours) for cut in itertools.combinations(nodes[:8], 5))


def test_the_graph_is_a_function_of_the_round_and_every_partys_fresh_keys():
    """Each party derives the same graph from the listing; the server relays keys it did not make and
    cannot pick the graph without changing them; another round or any one key gives another graph."""
    nodes = list(range(1, 101))
    c_pks, s_pks = _keys(nodes)
    base = round_graph(5, 100, 1, nodes, c_pks, s_pks)
    assert round_graph(5, 100, 1, nodes, c_pks, s_pks).neighbours == base.neighbours
    assert round_graph(6, 100, 1, nodes, c_pks, s_pks).neighbours != base.neighbours
    other = list(s_pks)
    other[50] = os.urandom(120)
    assert round_graph(5, 100, 1, nodes, c_pks, other).neighbours != base.neighbours


def _sparse_round(nodes, values, settings, drop_after_shares=(), drop_before_unmask=()):
    grid = FakeGrid(nodes)
    secure = SecureRound(grid, list(nodes), settings, server_round=9, timeout=5)
    records = secure.setup()
    masked = {n: party.mask_update(grid.states[n], n, r, values[n]) for n, r in records.items()
              if n not in drop_after_shares}
    grid.down |= set(drop_before_unmask)
    return secure, secure.unmask(masked), grid


def test_a_sparse_round_sums_exactly_with_dropouts_and_each_party_talks_to_its_neighbours_only():
    nodes = list(range(201, 231))  # 30 parties, T = 2: k = 6, t = 5
    settings = SecureSumSettings(bits=32, tolerance=2)
    rng = np.random.default_rng(0)
    values = {n: rng.integers(-500, 500, size=300) for n in nodes}
    secure, total, grid = _sparse_round(nodes, values, settings, drop_after_shares=(205,), drop_before_unmask=(220,))
    np.testing.assert_array_equal(total, sum(values[n] for n in nodes if n != 205))
    graph = secure.graph
    assert (graph.design.degree, graph.threshold) == (design(30, 2).degree, design(30, 2).threshold) == (6, 5)
    for node in nodes:  # the party's own graph is the server's, and its shares went to its neighbours only
        record = grid.states[node][party.STATE]
        assert set(map(int, record["neighbours"])) == graph.neighbours[node]
        assert int(record["threshold"]) == 5
    for reply in grid.received:
        if "destinations" in reply["config"]:
            assert len(reply["config"]["destinations"]) == 6
        if "seed-shares" in reply["config"]:  # unmask: at most its neighbours and itself
            assert len(reply["config"]["nodes"]) <= 7


def test_the_server_and_t_minus_1_holders_cannot_rebuild_a_partys_secret():
    """With the t - 1 shares of a party's seed its corrupt holders could hand over, Lagrange gives another value."""
    nodes = list(range(1, 21))
    grid = FakeGrid(nodes)
    secure = SecureRound(grid, nodes, SecureSumSettings(bits=32, tolerance=2), server_round=2, timeout=5)
    secure.setup()
    owner = 7
    record = grid.states[owner][party.STATE]
    seed = int.from_bytes(bytes(record["self-seeds"][0]), "big")
    holders = secure.graph.holders(owner)
    own = share_keys_plaintext_separate(bytes(record["own-share"]))[2]
    t = secure.graph.threshold
    peers = [h for h in holders if h != owner]
    opened = []
    for holder in peers:  # what each holder decrypts of the owner's shares
        state = grid.states[holder][party.STATE]
        key = crypto.load_private(bytes(state["c-sk"]))
        nodes_listed = [int(n) for n in state["nodes"]]
        c_pk = bytes(state["c-pk"][nodes_listed.index(owner)])
        ciphertext = secure.outbox[holder][owner]
        opened.append(shamir.decode(share_keys_plaintext_separate(
            crypto.decrypt(crypto.shared_key(key, c_pk), ciphertext))[2]))
    all_shares = [shamir.decode(own), *opened]
    assert shamir.combine(all_shares[:t]) == seed
    assert all(shamir.combine(list(few)) != seed for few in itertools.combinations(all_shares, t - 1))


def test_too_few_live_holders_of_a_secret_stop_the_round_with_one_line():
    nodes = list(range(1, 31))
    settings = SecureSumSettings(bits=32, tolerance=2)
    values = {n: np.ones(4, dtype=np.int64) for n in nodes}
    grid = FakeGrid(nodes)
    secure = SecureRound(grid, nodes, settings, server_round=9, timeout=5)
    records = secure.setup()
    victim = nodes[0]
    # two of its neighbours go silent before unmask: with t = 5 of its 7 holders, it still has 5
    silent = sorted(secure.graph.neighbours[victim])[:2]
    masked = {n: party.mask_update(grid.states[n], n, r, values[n]) for n, r in records.items()}
    grid.down |= set(silent)
    np.testing.assert_array_equal(secure.unmask(dict(masked)), np.full(4, 30))
    # holders whose replies lack the victim's share (as if lost): 4 of 7 left, below t = 5
    grid2 = StrippingGrid(nodes, victim, strip_from=set(sorted(secure.graph.neighbours[victim])[:3]))
    secure2 = SecureRound(grid2, nodes, settings, server_round=9, timeout=5)
    records2 = secure2.setup()
    grid2.strip_from = set(sorted(secure2.graph.neighbours[victim])[:3])
    masked2 = {n: party.mask_update(grid2.states[n], n, r, values[n]) for n, r in records2.items()}
    with pytest.raises(SecureRoundFailed, match=f": 4 shares of node {victim}'s self-mask seed, the threshold is 5"):
        secure2.unmask(masked2)


class StrippingGrid(FakeGrid):
    """Drops ``victim``'s share from the ``unmask`` replies of the parties in ``strip_from``."""

    def __init__(self, nodes, victim, strip_from):
        super().__init__(nodes)
        self.victim, self.strip_from = victim, strip_from

    def send_and_receive(self, messages, timeout=None):
        replies = super().send_and_receive(messages, timeout)
        for reply in replies:
            record = reply.content["config"] if reply.has_content() else None
            if record is not None and record.get("stage") == "unmask" and reply.metadata.src_node_id in self.strip_from:
                keep = [i for i, owner in enumerate(record["nodes"]) if int(owner) != self.victim]
                for key in ("nodes", "seed-shares", "key-shares"):
                    record[key] = [record[key][i] for i in keep]
        return replies


def test_at_five_parties_a_round_is_secaggs_every_party_shares_with_every_other_at_n_minus_t():
    nodes = [11, 22, 33, 44, 55]
    values = {n: np.full(8, n, dtype=np.int64) for n in nodes}
    secure, total, grid = _sparse_round(nodes, values, SecureSumSettings(bits=32, tolerance=1), drop_after_shares=(33,))
    np.testing.assert_array_equal(total, np.full(8, 11 + 22 + 44 + 55))
    assert secure.graph.design.complete and secure.graph.threshold == 4
    for node in nodes:
        assert sorted(map(int, grid.states[node][party.STATE]["neighbours"])) == sorted(set(nodes) - {node})


def test_a_party_does_two_key_agreements_per_neighbour_whatever_the_number_of_parties(monkeypatch):
    """Shares encrypted to its k neighbours and k pairwise masks: 2k X25519 agreements a round, at 12 or 40 parties."""
    counts: dict[bytes, int] = {}
    real = crypto.shared_key

    def counted(private, peer_public):
        mine = crypto.private_bytes(private)
        counts[mine] = counts.get(mine, 0) + 1
        return real(private, peer_public)

    monkeypatch.setattr(crypto, "shared_key", counted)
    for parties in (12, 40):
        counts.clear()
        nodes = list(range(1, parties + 1))
        values = {n: np.ones(4, dtype=np.int64) for n in nodes}
        secure, total, grid = _sparse_round(nodes, values, SecureSumSettings(bits=32, tolerance=1))
        np.testing.assert_array_equal(total, np.full(4, parties))
        assert secure.graph.design.degree == 4
        for node in nodes:
            record = grid.states[node][party.STATE]
            mine = counts.get(bytes(record["c-sk"]), 0) + sum(counts.get(bytes(k), 0) for k in record["s-sk"])
            assert mine == 2 * 4, (parties, node, mine)
