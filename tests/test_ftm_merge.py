"""FTM master side: eq. 17 by hand, Algorithm 2's union-find merge with exact weighted averages,
Algorithm 3's composition, determinism and vectorized scale; the incremental merge against the
full pairwise loop it replaced (kept here as the reference)."""

from __future__ import annotations

import time

import numpy as np
import pytest
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from flower_topics.models.ftm_merge import (
    GlobalModel,
    compose_local_model,
    compose_local_models,
    integrate_local_models,
    merge_into_global,
    pairwise_weighted_jaccard,
    top_words,
    weighted_jaccard,
)
from flower_topics.models.topic_word import normalize_rows


def _brute_rho(p: np.ndarray, q: np.ndarray, top_l: int) -> float:
    """Eq. 17, first line, written with sets."""
    tp = set(np.argsort(-p, kind="stable")[:top_l].tolist())
    tq = set(np.argsort(-q, kind="stable")[:top_l].tolist())
    common = tp & tq
    num = sum(min(p[w], q[w]) for w in common)
    den = sum(max(p[w], q[w]) for w in common) + sum(p[w] for w in tp - common) + sum(q[w] for w in tq - common)
    return num / den


def test_weighted_jaccard_by_hand():
    p = np.array([0.5, 0.3, 0.2, 0.0, 0.0])
    q = np.array([0.1, 0.4, 0.0, 0.5, 0.0])
    # L = 2: top {0, 1} and {3, 1}; common {1}: min 0.3; denominator 0.8 + 0.9 - 0.3
    assert weighted_jaccard(p, q, 2) == pytest.approx(0.3 / 1.4)
    # L = 3: top {0, 1, 2} and {3, 1, 0}; common {0, 1}: 0.1 + 0.3; denominator 1.0 + 1.0 - 0.4
    assert weighted_jaccard(p, q, 3) == pytest.approx(0.25)
    assert weighted_jaccard(p, p, 3) == pytest.approx(1.0)
    assert weighted_jaccard(p, np.array([0.0, 0.0, 0.0, 0.5, 0.5]), 2) == 0.0
    assert weighted_jaccard(q, p, 3) == pytest.approx(weighted_jaccard(p, q, 3))


def test_pairwise_matches_the_set_definition():
    rng = np.random.default_rng(0)
    a = rng.dirichlet(np.full(40, 0.2), size=7)
    b = np.vstack([rng.dirichlet(np.full(40, 0.2), size=5), a[:2]])
    for top_l in (1, 5, 40):
        sim = pairwise_weighted_jaccard(a, b, top_l)
        brute = np.array([[_brute_rho(x, y, top_l) for y in b] for x in a])
        np.testing.assert_allclose(sim, brute, rtol=1e-12, atol=1e-15)
    assert np.all((sim >= 0) & (sim <= 1 + 1e-12))
    np.testing.assert_allclose(pairwise_weighted_jaccard(a, a, 5).diagonal(), 1.0)


# topics over V = 6 words: A, C, F share words 0-1; D, E share words 4-5; B alone on 2-3
A = [0.6, 0.4, 0, 0, 0, 0]
B = [0, 0, 0.5, 0.5, 0, 0]
C = [0.5, 0.5, 0, 0, 0, 0]
D = [0, 0, 0, 0, 0.7, 0.3]
E = [0, 0, 0, 0, 0.6, 0.4]
F = [0.4, 0.6, 0, 0, 0, 0]
PARTIES = [np.array([A, B]), np.array([C, D]), np.array([E, F])]
AMOUNTS = [1.0, 2.0, 3.0]


def test_union_find_merge_gives_the_data_weighted_averages():
    # rho(A,C) = 0.9/1.1, rho(A,F) = 0.8/1.2, rho(C,F) = 0.9/1.1, rho(D,E) = 0.9/1.1, all others 0
    g = integrate_local_models(PARTIES, AMOUNTS, xi=0.6, top_l=2)
    expected = np.array([
        (1 * np.array(A) + 2 * np.array(C) + 3 * np.array(F)) / 6,  # at A's position
        B,
        (2 * np.array(D) + 3 * np.array(E)) / 5,  # at D's position
    ])
    np.testing.assert_allclose(g.topic_word, expected, rtol=0, atol=1e-15)
    np.testing.assert_allclose(g.topic_word[0, :2], [2.8 / 6, 3.2 / 6], atol=1e-15)
    np.testing.assert_allclose(g.weight, [6.0, 1.0, 5.0])
    assert g.members == [[(0, 0), (1, 0), (2, 1)], [(0, 1)], [(1, 1), (2, 0)]]
    np.testing.assert_allclose(g.topic_word.sum(axis=1), 1.0)
    # one party holding all six topics: the same sets
    at_once = merge_into_global(GlobalModel.empty(6), np.vstack(PARTIES), 1.0, 0, xi=0.6, top_l=2)
    assert [len(m) for m in at_once.members] == [3, 1, 2]
    # xi = 0.8: A-C (0.818) merge into AC = (A + 2C) / 3 = [0.533, 0.467]; F is then compared with AC
    # (0.4 + 0.467) / (2 - 0.867) = 0.765 < 0.8 and stays apart, though rho(C, F) = 0.818: the grouping
    # depends on the order of the parties, as in the paper's sequential Algorithm 2
    g2 = integrate_local_models(PARTIES, AMOUNTS, xi=0.8, top_l=2)
    assert g2.members == [[(0, 0), (1, 0)], [(0, 1)], [(1, 1), (2, 0)], [(2, 1)]]
    np.testing.assert_allclose(g2.topic_word[0, :2], [1.6 / 3, 1.4 / 3], atol=1e-15)
    np.testing.assert_allclose(g2.weight, [3.0, 1.0, 5.0, 3.0])
    # xi above every similarity: nothing merges, order is party by party
    g3 = integrate_local_models(PARTIES, AMOUNTS, xi=0.95, top_l=2)
    np.testing.assert_allclose(g3.topic_word, np.vstack(PARTIES))
    np.testing.assert_allclose(g3.weight, [1, 1, 2, 2, 3, 3])


def test_transitive_chain_is_one_set_and_within_party_option():
    x1 = [0.5, 0.5, 0.0, 0.0]
    x2 = [0.0, 0.5, 0.5, 0.0]
    x3 = [0.0, 0.0, 0.5, 0.5]  # rho(x1,x2) = rho(x2,x3) = 1/3, rho(x1,x3) = 0
    g = integrate_local_models([np.array([x1, x3]), np.array([x2])], [1.0, 1.0], xi=0.3, top_l=2)
    assert g.members == [[(0, 0), (0, 1), (1, 0)]]
    np.testing.assert_allclose(g.topic_word, [[1 / 6, 1 / 3, 1 / 3, 1 / 6]])
    twins = np.array([x1, [0.55, 0.45, 0.0, 0.0]])
    assert integrate_local_models([twins], [1.0], xi=0.5, top_l=2).n_topics == 1
    assert integrate_local_models([twins], [1.0], xi=0.5, top_l=2, merge_within_party=False).n_topics == 2


def test_composition_takes_the_most_similar_unused_global_topic():
    glob = np.array([A, C, D, B], dtype=float)  # rho to F: A 0.667, C 0.818, D 0, B 0
    local = np.array([F, [0.45, 0.55, 0, 0, 0, 0], E, [0, 0, 0, 0, 0, 1.0]])
    composed, source = compose_local_model(glob, local, xi=0.6, top_l=2)
    # F -> C (best); the second 0-1 topic's best, C, is used -> A; E -> D; the last matches nothing -> kept
    np.testing.assert_array_equal(source, [1, 0, 2, -1])
    np.testing.assert_allclose(composed, [C, A, D, [0, 0, 0, 0, 0, 1.0]])
    np.testing.assert_allclose(composed.sum(axis=1), 1.0)
    # literal reading: the best candidate is consumed even when it was not used
    local2 = np.array([[0, 0, 0, 0, 0.5, 0.5], E])  # rho(first, D) = 0.8/1.2 < 0.7 -> kept but D consumed
    _, src_default = compose_local_model(glob, local2, xi=0.7, top_l=2)
    _, src_literal = compose_local_model(glob, local2, xi=0.7, top_l=2, consume_unmatched=True)
    np.testing.assert_array_equal(src_default, [-1, 2])
    np.testing.assert_array_equal(src_literal, [-1, -1])
    assert compose_local_model(np.zeros((0, 6)), local, xi=0.6, top_l=2)[1].tolist() == [-1] * 4


def test_deterministic_and_vectorized_at_scale():
    rng = np.random.default_rng(1)
    v = 2000
    base = rng.dirichlet(np.full(v, 0.05), size=60)
    models = []
    for k in (2, 100, 37, 100, 100, 64, 100, 10, 100, 80):  # K_p from 2 to 100
        pick = rng.integers(0, 60, size=k)
        noisy = base[pick] * rng.uniform(0.7, 1.3, size=(k, v))
        models.append(noisy / noisy.sum(axis=1, keepdims=True))
    amounts = rng.integers(100, 10_000, size=len(models)).astype(float)
    start = time.perf_counter()
    g = integrate_local_models(models, amounts, xi=0.5, top_l=20)
    elapsed = time.perf_counter() - start
    again = integrate_local_models(models, amounts, xi=0.5, top_l=20)
    np.testing.assert_array_equal(g.topic_word, again.topic_word)
    assert g.members == again.members
    assert 0 < g.n_topics <= 60 + 10
    np.testing.assert_allclose(g.weight.sum(), sum(a * m.shape[0] for a, m in zip(amounts, models)))
    np.testing.assert_allclose(g.topic_word.sum(axis=1), 1.0)
    assert elapsed < 5.0, elapsed
    composed = compose_local_models(g, models, xi=0.5, top_l=20)
    assert [c.shape for c in composed] == [m.shape for m in models]
    for c, m in zip(composed, models):
        np.testing.assert_allclose(c.sum(axis=1), 1.0)


# --------------------------------------------------------------------------- the full pairwise loop
# The straightforward implementation the package had before the incremental one (commit f679829):
# every merge sorts every row over V, compares every pair of M^B and rebuilds every row. Kept as the
# reference. ``keep_singletons=False`` is that code verbatim; it divides every output row by its sum,
# also a topic in no redundant set, which moves such a row by a rounding error each merge. The paper
# normalizes the redundant sets' representatives only (Algorithm 2, lines 12-16) and the package now
# keeps the other rows as they are: ``keep_singletons=True`` is the old code with only that changed.
def _reference_top_words(m: np.ndarray, top_l: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.argsort(-m, axis=1, kind="stable")[:, :top_l]
    return idx, np.take_along_axis(m, idx, axis=1)


def _reference_pairwise(a: np.ndarray, b: np.ndarray, top_l: int) -> np.ndarray:
    ia, va = _reference_top_words(a, top_l)
    ib, vb = _reference_top_words(b, top_l)
    na, nb = ia.shape[0], ib.shape[0]
    words_a, words_b = ia.ravel(), ib.ravel()
    order = np.argsort(words_b, kind="stable")
    sorted_b = words_b[order]
    lo = np.searchsorted(sorted_b, words_a, side="left")
    count = np.searchsorted(sorted_b, words_a, side="right") - lo
    ent_a = np.repeat(np.arange(words_a.size), count)
    offsets = np.arange(ent_a.size) - np.repeat(np.cumsum(count) - count, count)
    ent_b = order[np.repeat(lo, count) + offsets]
    mins = np.minimum(va.ravel()[ent_a], vb.ravel()[ent_b])
    pair = (ent_a // top_l) * nb + ent_b // top_l
    inter = np.bincount(pair, weights=mins, minlength=na * nb).astype(np.float64).reshape(na, nb)
    denom = va.sum(axis=1)[:, None] + vb.sum(axis=1)[None, :] - inter
    return np.divide(inter, denom, out=np.zeros_like(inter), where=denom > 0)


def _reference_merge(g: GlobalModel, local: np.ndarray, weight: float, party: int, *, xi: float, top_l: int,
                     within: bool, keep_singletons: bool) -> GlobalModel:
    local = normalize_rows(np.asarray(local, dtype=np.float64))
    stacked = np.vstack([g.topic_word, local])
    weights = np.concatenate([g.weight, np.full(local.shape[0], float(weight))])
    members = [list(m) for m in g.members] + [[(party, k)] for k in range(local.shape[0])]
    n_global, n = g.n_topics, stacked.shape[0]
    sim = _reference_pairwise(stacked, stacked, top_l)
    linked = np.triu(sim >= xi, k=1)
    if not within:
        linked[:n_global, :n_global] = False
        linked[n_global:, n_global:] = False
    rows, cols = np.nonzero(linked)
    _, labels = connected_components(coo_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n)), directed=False)
    first = np.full(labels.max() + 1, n, dtype=np.int64)
    np.minimum.at(first, labels, np.arange(n))
    order = np.argsort(first, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    out_index = rank[labels]
    merged = np.zeros((order.size, stacked.shape[1]))
    np.add.at(merged, out_index, weights[:, None] * stacked)
    out_weight = np.bincount(out_index, weights=weights, minlength=order.size)
    merged /= merged.sum(axis=1, keepdims=True)
    if keep_singletons:
        sizes = np.bincount(out_index, minlength=order.size)
        merged[sizes == 1] = stacked[np.sort(first)[sizes == 1]]
    out_members: list[list[tuple[int, int]]] = [[] for _ in range(order.size)]
    for i in range(n):
        out_members[out_index[i]].extend(members[i])
    return GlobalModel(merged, out_weight, out_members)


def _reference_integrate(models, amounts, *, xi, top_l, within, keep_singletons, initial=None) -> GlobalModel:
    g = initial if initial is not None else GlobalModel.empty(models[0].shape[1])
    for party, (m, a) in enumerate(zip(models, amounts)):
        g = _reference_merge(g, m, a, party, xi=xi, top_l=top_l, within=within, keep_singletons=keep_singletons)
    return g


def _random_parties(rng: np.random.Generator, continuous: bool = False):
    """A few parties (K_p 1 to 6) drawn around shared prototypes: merges, chains of merges and, unless
    ``continuous``, many equal values (ties in the top-L order, duplicate topics, similarities at xi)."""
    v = int(rng.choice([5, 8, 16, 40]))
    kind = 0 if continuous else int(rng.integers(0, 4))
    n_proto = int(rng.integers(2, 8))
    if kind == 0:
        protos = rng.dirichlet(np.full(v, 0.3), size=n_proto)
    else:
        protos = rng.integers(0, 4, size=(n_proto, v)).astype(float)
    models = []
    for _ in range(int(rng.integers(1, 12))):
        m = protos[rng.integers(0, n_proto, size=int(rng.integers(1, 7)))].copy()
        if kind in (0, 1):
            m *= rng.uniform(0.5, 1.5, size=m.shape)
        elif kind == 3:
            m += rng.integers(0, 2, size=m.shape)  # kind 2: exact copies of the prototypes
        m[m.sum(axis=1) == 0, 0] = 1.0
        models.append(m / m.sum(axis=1, keepdims=True))
    return models, rng.integers(1, 50, size=len(models)).astype(float)


def _assert_same(got: GlobalModel, expected: GlobalModel, exact: bool) -> None:
    assert got.members == expected.members
    if exact:
        np.testing.assert_array_equal(got.topic_word, expected.topic_word)
        np.testing.assert_array_equal(got.weight, expected.weight)
    else:
        np.testing.assert_allclose(got.topic_word, expected.topic_word, rtol=0, atol=1e-12)
        np.testing.assert_allclose(got.weight, expected.weight, rtol=1e-12, atol=0)


@pytest.mark.parametrize("within", [True, False])
def test_incremental_merge_equals_the_full_pairwise_loop_bit_for_bit(within):
    rng = np.random.default_rng(7)
    xis = [0.0, 0.2, 0.4, 0.6, 0.9, 1.0]
    merged_sets = 0
    for case in range(240):
        models, amounts = _random_parties(rng)
        v = models[0].shape[1]
        top_l = int(rng.choice([1, 2, max(1, v // 3), v]))
        xi = xis[case % len(xis)]
        expected = _reference_integrate(models, amounts, xi=xi, top_l=top_l, within=within, keep_singletons=True)
        got = integrate_local_models(models, amounts, xi=xi, top_l=top_l, merge_within_party=within)
        _assert_same(got, expected, exact=True)
        merged_sets += sum(len(m) > 1 for m in got.members)
        # from a non-empty starting model (no pair of it compared yet), and one merge at a time
        half = max(1, len(models) // 2)
        start = _reference_integrate(models[:half], amounts[:half], xi=0.95, top_l=top_l, within=within,
                                     keep_singletons=True)
        expected = _reference_merge(start, models[half - 1], 3.0, 99, xi=xi, top_l=top_l, within=within,
                                    keep_singletons=True)
        got = merge_into_global(start, models[half - 1], 3.0, 99, xi=xi, top_l=top_l, merge_within_party=within)
        _assert_same(got, expected, exact=True)
    assert merged_sets > 200  # the cases do merge


@pytest.mark.parametrize("within", [True, False])
def test_incremental_merge_equals_the_previous_code_on_continuous_topics(within):
    rng = np.random.default_rng(8)
    for case in range(120):
        models, amounts = _random_parties(rng, continuous=True)
        v = models[0].shape[1]
        top_l = int(rng.choice([1, 3, v // 2, v]))
        xi = [0.0, 0.3, 0.5, 0.8, 1.0][case % 5]
        expected = _reference_integrate(models, amounts, xi=xi, top_l=top_l, within=within, keep_singletons=False)
        got = integrate_local_models(models, amounts, xi=xi, top_l=top_l, merge_within_party=within)
        _assert_same(got, expected, exact=False)


def test_two_merged_topics_are_compared_with_each_other_at_the_next_party():
    # eq. 17 with L = V = 4: rho(x1, x2) = 0.75, rho(y1, y2) = 0.67; the four cross pairs 0.39 to 0.48;
    # the averages x' = (x1 + x2) / 2 and y' = (y1 + y2) / 2 reach 0.54
    x1, y1 = np.array([3, 4, 1, 3]) / 11, np.array([2, 0, 2, 1]) / 5
    x2, y2 = np.array([3, 2, 1, 3]) / 9, np.array([1, 0, 2, 2]) / 5
    z = np.array([0.0, 1.0, 0.0, 0.0])
    parties = [np.array([x1, y1]), np.array([x2, y2]), np.array([z])]
    after_two = integrate_local_models(parties[:2], [1.0, 1.0], xi=0.5, top_l=4)
    assert after_two.members == [[(0, 0), (1, 0)], [(0, 1), (1, 1)]]
    x_, y_ = after_two.topic_word
    assert weighted_jaccard(x_, y_, 4) > 0.5
    # both were changed by party 1's merge: party 2's merge must compare them (the full loop does)
    g = integrate_local_models(parties, [1.0, 1.0, 1.0], xi=0.5, top_l=4)
    assert g.members == [[(0, 0), (1, 0), (0, 1), (1, 1)], [(2, 0)]]
    np.testing.assert_allclose(g.topic_word[0], (x_ + y_) / 2, atol=1e-15)
    np.testing.assert_allclose(g.weight, [4.0, 1.0])
    # without links between two global topics they stay apart
    g = integrate_local_models(parties, [1.0, 1.0, 1.0], xi=0.5, top_l=4, merge_within_party=False)
    assert g.members == [[(0, 0), (1, 0)], [(0, 1), (1, 1)], [(2, 0)]]


def test_a_topic_in_no_redundant_set_is_kept_bit_for_bit():
    rng = np.random.default_rng(3)
    first = rng.dirichlet(np.full(50, 0.1), size=8)
    g = integrate_local_models([first, rng.dirichlet(np.full(50, 0.1), size=8)], [7.0, 3.0], xi=0.99, top_l=10)
    assert g.n_topics == 16
    np.testing.assert_array_equal(g.topic_word[:8], normalize_rows(first))


def test_top_words_equal_a_full_stable_sort_with_ties():
    rng = np.random.default_rng(4)
    for v in (1, 3, 10, 57):
        m = rng.integers(0, 4, size=(30, v)).astype(float)  # many ties, also at the L-th place
        m[::3] = rng.random((10, v))
        for top_l in sorted({1, max(1, v // 2), v}):
            idx, val = top_words(m, top_l)
            expected = np.argsort(-m, axis=1, kind="stable")[:, :top_l]
            np.testing.assert_array_equal(idx, expected)
            np.testing.assert_array_equal(val, np.take_along_axis(m, expected, axis=1))
    with pytest.raises(ValueError, match="top_l"):
        top_words(m, 0)


def test_composition_equals_the_pairwise_definition():
    rng = np.random.default_rng(5)
    for _ in range(30):
        models, amounts = _random_parties(rng)
        v = models[0].shape[1]
        top_l = max(1, v // 3)
        g = integrate_local_models(models, amounts, xi=0.4, top_l=top_l)
        composed = compose_local_models(g, models, xi=0.4, top_l=top_l)
        glob = normalize_rows(g.topic_word)
        for m, c in zip(models, composed):
            m = normalize_rows(m)
            sim = _reference_pairwise(m, glob, top_l)
            expected, available = m.copy(), np.ones(glob.shape[0], dtype=bool)
            for k in range(m.shape[0]):
                row = np.where(available, sim[k], -np.inf)
                best = int(np.argmax(row))
                if available.any() and row[best] >= 0.4:
                    expected[k], available[best] = glob[best], False
            np.testing.assert_array_equal(c, expected)


def test_many_small_parties_merge_in_seconds():
    # the full pairwise loop took 99 s for 200 such parties (docs/results.md); this is 300
    rng = np.random.default_rng(6)
    models = [rng.dirichlet(np.full(200, 0.05), size=10) for _ in range(300)]
    start = time.perf_counter()
    g = integrate_local_models(models, [300.0] * len(models), xi=0.5, top_l=20)
    composed = compose_local_models(g, models, xi=0.5, top_l=20)
    elapsed = time.perf_counter() - start
    assert g.n_topics > 2500 and len(composed) == 300
    assert elapsed < 30.0, elapsed


def test_the_decision_at_xi_uses_the_full_loops_summation_order():
    # eq. 17 sums the common words' minima along the earlier topic's top-L list; the other order can
    # round differently. With xi set to the earlier-order value exactly, only that order links the pair.
    rng = np.random.default_rng(11)
    for _ in range(1000):
        a, b = normalize_rows(rng.dirichlet(np.full(30, 0.5), size=2))
        if not np.array_equal(normalize_rows(np.array([a, b])), np.array([a, b])):
            continue  # the merge normalizes its input: keep the rows it will see
        sim = _reference_pairwise(np.array([a, b]), np.array([a, b]), 10)
        if sim[1, 0] < sim[0, 1]:
            break
    else:
        pytest.fail("no pair whose two summation orders round apart")
    xi = float(sim[0, 1])  # rho(a, b) summed along a's list; along b's list it is smaller
    for within in (True, False):
        assert integrate_local_models([a[None], b[None]], [1.0, 2.0], xi=xi, top_l=10,
                                      merge_within_party=within).n_topics == 1
        assert integrate_local_models([b[None], a[None]], [1.0, 2.0], xi=xi, top_l=10,
                                      merge_within_party=within).n_topics == 2
    assert integrate_local_models([np.array([a, b])], [1.0], xi=xi, top_l=10).n_topics == 1
    assert integrate_local_models([np.array([b, a])], [1.0], xi=xi, top_l=10).n_topics == 2
