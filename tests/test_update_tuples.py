"""FedLDA updating vector: dense tuples, padding & sampling, dummies, server application."""

from __future__ import annotations

import numpy as np
import pytest

from flower_topics.numeric.categorical import draw_categorical
from flower_topics.models.update_tuples import (
    Tuples,
    apply_tuples,
    changed_tuples,
    clamped_topic_word,
    model_dummies,
    pad_and_sample,
    sample_sizes,
)


def test_changed_tuples_are_the_moved_assignments():
    tokens = np.array([4, 1, 4, 2])
    doc_ids = np.array([0, 0, 1, 1])
    doc, t = changed_tuples(tokens, doc_ids, np.array([0, 1, 2, 0]), np.array([0, 2, 1, 0]))
    assert doc.tolist() == [0, 1] and t.words.tolist() == [1, 4]
    assert t.k_old.tolist() == [1, 2] and t.k_new.tolist() == [2, 1]


def _model(k, v, n_docs, seed=0):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(k), n_docs), rng.dirichlet(np.ones(v), k)


def test_sample_sizes_pad_to_own_length_or_a_public_m():
    m, l = sample_sizes(np.array([10, 3, 0]), pad_length=0, sample_ratio=0.7)
    assert m.tolist() == [10, 3, 1] and l.tolist() == [7, 2, 1]
    m, l = sample_sizes(np.array([10, 3]), pad_length=20, sample_ratio=0.0)
    assert m.tolist() == [20, 20] and l.tolist() == [1, 1]  # ratio 0: one tuple, as in Fig. 5j
    with pytest.raises(ValueError):
        sample_sizes(np.array([3]), pad_length=0, sample_ratio=1.5)


def test_all_real_tuples_at_full_sample_reproduce_the_count_change():
    rng = np.random.default_rng(0)
    k, v, n_docs = 4, 9, 6
    doc_ids = np.repeat(np.arange(n_docs), 5)
    tokens = rng.integers(0, v, doc_ids.size)
    z_old, z_new = rng.integers(0, k, doc_ids.size), rng.integers(0, k, doc_ids.size)
    doc, real = changed_tuples(tokens, doc_ids, z_old, z_new)
    theta, phi = _model(k, v, n_docs)
    m, l = sample_sizes(np.full(n_docs, 5), pad_length=0, sample_ratio=1.0)
    out_doc, out, source = pad_and_sample(doc, real, pad_lengths=m, sample_sizes=l, theta=theta, phi=phi, rng=rng)
    is_dummy = source < 0
    counts = np.zeros((k, v), dtype=np.int64)
    np.add.at(counts, (z_old, tokens), 1)
    apply_tuples(counts, Tuples(out.words[~is_dummy], out.k_old[~is_dummy], out.k_new[~is_dummy]))
    expected = np.zeros((k, v), dtype=np.int64)
    np.add.at(expected, (z_new, tokens), 1)
    np.testing.assert_array_equal(counts, expected)
    assert (~is_dummy).sum() == len(real)
    assert np.all(np.bincount(out_doc[is_dummy], minlength=n_docs) == 5 - np.bincount(doc, minlength=n_docs))


def test_every_document_sends_exactly_l_tuples_noop_dummies_are_recognisable_noise_dummies_are_not():
    rng = np.random.default_rng(1)
    doc = np.array([0, 0, 0, 2])  # doc 0: 3 changes, doc 1: none, doc 2: one
    real = Tuples(np.array([1, 2, 3, 4], np.int32), np.array([0, 1, 2, 0], np.int32), np.array([1, 2, 0, 2], np.int32))
    theta, phi = _model(3, 8, 3)
    out_doc, out, source = pad_and_sample(doc, real, pad_lengths=np.array([10, 10, 10]),
                                          sample_sizes=np.array([7, 7, 7]), theta=theta, phi=phi, rng=rng)
    is_dummy = source < 0
    np.testing.assert_array_equal(out.words[~is_dummy], real.words[source[~is_dummy]])
    assert np.bincount(out_doc).tolist() == [7, 7, 7]
    assert np.all(out.k_old[is_dummy] == out.k_new[is_dummy])  # no-op dummies (the default)
    assert np.all(out.k_old[~is_dummy] != out.k_new[~is_dummy])
    _, noisy, noisy_source = pad_and_sample(doc, real, pad_lengths=np.array([10, 10, 10]),
                                           sample_sizes=np.array([7, 7, 7]), theta=theta, phi=phi, rng=rng,
                                           dummies="noise")
    assert (noisy_source < 0).any() and np.all(noisy.k_old != noisy.k_new)  # noise dummies look like changes
    assert out.words.dtype == out.k_old.dtype == out.k_new.dtype == np.int32
    assert 0 <= out.words.min() and out.words.max() < 8 and out.k_old.max() < 3


def test_sampling_is_uniform_over_the_padded_slots():
    """A document with r real tuples padded to M sends each of them with probability l / M."""
    rng = np.random.default_rng(2)
    real = Tuples(np.arange(3, dtype=np.int32), np.zeros(3, np.int32), np.ones(3, np.int32))
    theta, phi = _model(2, 5, 1)
    sent = np.zeros(3)
    trials = 4000
    for _ in range(trials):
        _, out, source = pad_and_sample(np.zeros(3, np.int64), real, pad_lengths=np.array([10]),
                                        sample_sizes=np.array([7]), theta=theta, phi=phi, rng=rng)
        sent[source[source >= 0]] += 1
    se = np.sqrt(0.7 * 0.3 / trials)
    assert np.all(np.abs(sent / trials - 0.7) < 4 * se)  # each real tuple with probability l / M


def test_dummies_are_generated_by_the_model_and_zero_mean_on_the_counts():
    rng = np.random.default_rng(3)
    theta = np.array([[0.7, 0.2, 0.1]])
    phi = np.array([[0.6, 0.3, 0.05, 0.05], [0.1, 0.1, 0.4, 0.4], [0.25, 0.25, 0.25, 0.25]])
    n = 400_000
    d = model_dummies(np.zeros(n, np.int64), theta, phi, rng, kind="noise")
    assert np.all(d.k_old != d.k_new)
    # the word follows the document's generative distribution theta @ phi
    word_freq = np.bincount(d.words, minlength=4) / n
    expected = theta[0] @ phi
    assert np.all(np.abs(word_freq - expected) < 5 * np.sqrt(expected * (1 - expected) / n))
    # exchangeable topics: each (k, w) cell's expected change is zero
    change = np.zeros((3, 4))
    apply_tuples(change, d)
    pair = np.zeros((3, 4, 2))
    np.add.at(pair, (d.k_new, d.words, 0), 1)
    np.add.at(pair, (d.k_old, d.words, 1), 1)
    se = np.sqrt(pair.sum(axis=2)) + 1.0
    assert np.all(np.abs(change) < 5 * se)
    # the pair's topics follow the posterior p(k | w, d) (two distinct draws): for w=0, topic 0 dominates
    share0 = ((d.k_old == 0) | (d.k_new == 0))[d.words == 0].mean()
    assert share0 > 0.9


def test_noop_dummies_follow_the_model_and_leave_the_counts_unchanged():
    rng = np.random.default_rng(5)
    theta = np.array([[0.9, 0.1]])
    phi = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    n = 200_000
    d = model_dummies(np.zeros(n, np.int64), theta, phi, rng)
    assert np.all(d.k_old == d.k_new)
    joint = np.zeros((2, 3))
    np.add.at(joint, (d.k_old, d.words), 1)
    expected = theta[0][:, None] * phi  # k ~ theta_d, w ~ phi_k
    assert np.all(np.abs(joint / n - expected) < 5 * np.sqrt(expected * (1 - expected) / n))
    counts = np.arange(6).reshape(2, 3)
    before = counts.copy()
    apply_tuples(counts, d)
    np.testing.assert_array_equal(counts, before)


def test_unassigned_k_old_enters_a_word():
    counts = np.zeros((2, 3), dtype=np.int64)
    apply_tuples(counts, Tuples(np.array([2, 2, 0]), np.array([2, 2, 2]), np.array([0, 1, 1])))  # k_old = K
    np.testing.assert_array_equal(counts, [[0, 0, 1], [1, 0, 1]])
    apply_tuples(counts, Tuples(np.array([2]), np.array([0]), np.array([1])))
    np.testing.assert_array_equal(counts, [[0, 0, 0], [1, 0, 2]])


def test_draw_categorical_matches_each_row():
    rng = np.random.default_rng(6)
    p = np.array([[0.5, 0.0, 0.5], [0.1, 0.2, 0.7]])
    rows = np.repeat([0, 1], 100_000)
    draws = draw_categorical(np.cumsum(p, axis=1), rows, rng)
    for r in (0, 1):
        freq = np.bincount(draws[rows == r], minlength=3) / 100_000
        assert np.all(np.abs(freq - p[r]) < 5 * np.sqrt(p[r] * (1 - p[r]) / 100_000) + 1e-12)


def test_more_real_tuples_than_m_keeps_a_subset_and_validation():
    rng = np.random.default_rng(4)
    real = Tuples(np.arange(6, dtype=np.int32), np.zeros(6, np.int32), np.ones(6, np.int32))
    theta, phi = _model(2, 6, 1)
    _, out, source = pad_and_sample(np.zeros(6, np.int64), real, pad_lengths=np.array([4]),
                                    sample_sizes=np.array([4]), theta=theta, phi=phi, rng=rng)
    assert np.all(source >= 0) and len(set(out.words.tolist())) == 4
    with pytest.raises(ValueError):
        pad_and_sample(np.zeros(0, np.int64), real, pad_lengths=np.array([4]), sample_sizes=np.array([5]),
                       theta=theta, phi=phi, rng=rng)


def test_clamped_topic_word():
    phi = clamped_topic_word(np.array([[-2, 3], [0, 0]]), beta=1.0)
    np.testing.assert_allclose(phi, [[1 / 5, 4 / 5], [0.5, 0.5]])


def test_a_tuple_leaving_a_topic_that_holds_no_such_word_is_skipped_whole():
    """Hand-computed: n[0, 1] = 1, so of three tuples leaving (0, 1) one is applied; (1, 2) holds none."""
    counts = np.array([[0, 1, 0], [0, 0, 0]], dtype=np.int64)
    tuples = Tuples(np.array([1, 1, 1, 2, 0]), np.array([0, 0, 0, 1, 2]), np.array([1, 1, 1, 0, 0]))
    skipped = apply_tuples(counts, tuples)
    assert skipped == 3
    # one (1: 0 -> 1) applied, the entry (0: K -> 0) applied, (2: 1 -> 0) and two (1: 0 -> 1) skipped
    np.testing.assert_array_equal(counts, [[1, 0, 0], [0, 1, 0]])
    assert counts.min() >= 0


def test_skipping_keeps_counts_non_negative_under_random_tuples():
    rng = np.random.default_rng(9)
    counts = rng.integers(0, 3, size=(4, 20))
    total = counts.sum()
    k_old = rng.integers(0, 5, size=5000)  # 4 = K enters a word
    tuples = Tuples(rng.integers(0, 20, size=5000), k_old, rng.integers(0, 4, size=5000))
    skipped = apply_tuples(counts, tuples)
    assert counts.min() >= 0
    # every applied entry adds one, every applied move keeps the total
    entries = int((k_old == 4).sum())
    assert counts.sum() == total + entries
    assert 0 < skipped < 5000


def test_cancelling_dummies_look_like_changes_and_their_reversals_restore_the_counts():
    """Round A opens a dummy in every dummy slot; round B, with as many slots, reverses them all:
    the server's counts after both rounds are exactly those before, and each half is a change
    (k_old != k_new) leaving a topic that holds its word."""
    from flower_topics.models.update_tuples import cancelling_dummies

    rng = np.random.default_rng(8)
    k, v, n_docs = 4, 30, 5
    counts = rng.integers(4, 9, size=(k, v))  # more than the slots of one batch that can leave a cell
    counts[:, :3] = 0  # words no topic holds
    counts[0, 3:10] = 0  # and words topic 0 does not hold
    before = counts.copy()
    phi = clamped_topic_word(counts, beta=0.01)
    theta = rng.dirichlet(np.ones(k), size=n_docs)
    docs = np.repeat(np.arange(n_docs), 6)
    words = rng.integers(3, v, size=docs.size)
    slots = np.tile([True, True, False, True, False, True], n_docs)
    zeros = np.zeros(docs.size, dtype=np.int32)
    tuples = Tuples(words, zeros, zeros)
    first, reversal, opened = cancelling_dummies(docs, tuples, slots, np.zeros((0, 4), np.int64), theta, phi, rng)
    assert not reversal.any() and opened.shape == (slots.sum(), 4)
    assert np.all(first.k_old[slots] != first.k_new[slots])
    assert np.all(counts[first.k_old[slots], first.words[slots]] > 0)  # a holds w: the server applies it
    np.testing.assert_array_equal(first.words[~slots], words[~slots])  # real tuples untouched
    assert apply_tuples(counts, Tuples(first.words[slots], first.k_old[slots], first.k_new[slots])) == 0
    assert not np.array_equal(counts, before)
    second, reversal, still_open = cancelling_dummies(docs, Tuples(rng.integers(3, v, docs.size), zeros, zeros),
                                                      slots, opened, theta, clamped_topic_word(counts, 0.01), rng)
    assert np.array_equal(reversal, slots) and still_open.shape == (0, 4)
    assert apply_tuples(counts, Tuples(second.words[slots], second.k_old[slots], second.k_new[slots])) == 0
    np.testing.assert_array_equal(counts, before)


def test_cancelling_dummies_reverse_the_oldest_first_and_keep_the_rest_open():
    from flower_topics.models.update_tuples import cancelling_dummies

    rng = np.random.default_rng(3)
    phi = np.full((2, 4), 0.25)
    theta = np.full((2, 2), 0.5)
    opened = np.array([[0, 1, 0, 1], [0, 2, 1, 0], [1, 3, 0, 1]])  # doc 0 has two, doc 1 one
    docs = np.array([0, 1, 1])
    slots = np.array([True, True, True])
    zeros = np.zeros(3, dtype=np.int32)
    out, reversal, still_open = cancelling_dummies(docs, Tuples(np.array([0, 0, 0]), zeros, zeros), slots, opened,
                                                   theta, phi, rng)
    # doc 0: one slot, reverses its oldest (w 1: 0 -> 1 becomes 1 -> 0); doc 1: reverses (3: 0 -> 1), then a new one
    assert reversal.tolist() == [True, True, False]
    assert (out.words[0], out.k_old[0], out.k_new[0]) == (1, 1, 0)
    assert (out.words[1], out.k_old[1], out.k_new[1]) == (3, 1, 0)
    assert still_open[:, 0].tolist() == [0, 1] and still_open[0].tolist() == [0, 2, 1, 0]


def test_cancelling_dummies_leave_only_cells_with_capacity_left():
    """With a capacity, no cell gives up more new dummies than it can back; a word no topic can give up
    is exchanged for one the party's cells can."""
    from flower_topics.models.update_tuples import cancelling_dummies

    rng = np.random.default_rng(21)
    k, v = 3, 6
    phi = np.full((k, v), 1 / v)
    theta = np.full((4, k), 1 / k)
    capacity = np.zeros((k, v), dtype=np.int64)
    capacity[0, 1], capacity[2, 1], capacity[1, 4] = 2, 1, 5  # word 1: 3 words to give, word 4: 5, others none
    docs = np.repeat(np.arange(4), 2)
    words = np.array([1, 1, 1, 1, 4, 0, 5, 1])  # six dummies want word 1 or words no cell can give
    zeros = np.zeros(8, dtype=np.int32)
    out, _, opened = cancelling_dummies(docs, Tuples(words, zeros, zeros), np.ones(8, dtype=bool),
                                        np.zeros((0, 4), np.int64), theta, phi, rng, capacity=capacity)
    taken = np.zeros((k, v), dtype=np.int64)
    np.add.at(taken, (out.k_old, out.words), 1)
    assert np.all(taken <= capacity)
    assert np.all(out.k_old != out.k_new) and opened.shape == (8, 4)
