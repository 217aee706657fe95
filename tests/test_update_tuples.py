"""FedLDA updating vector: dense tuples, padding & sampling, dummies, server application."""

from __future__ import annotations

import numpy as np
import pytest

from flower_topics.models.update_tuples import (
    Tuples,
    apply_tuples,
    changed_tuples,
    clamped_topic_word,
    pad_and_sample,
)


def test_changed_tuples_are_the_moved_assignments():
    tokens = np.array([4, 1, 4, 2])
    doc_ids = np.array([0, 0, 1, 1])
    doc, t = changed_tuples(tokens, doc_ids, np.array([0, 1, 2, 0]), np.array([0, 2, 1, 0]))
    assert doc.tolist() == [0, 1] and t.words.tolist() == [1, 4]
    assert t.k_old.tolist() == [1, 2] and t.k_new.tolist() == [2, 1]


def test_all_real_tuples_at_full_sample_reproduce_the_count_change():
    rng = np.random.default_rng(0)
    k, v, n_docs = 4, 9, 6
    doc_ids = np.repeat(np.arange(n_docs), 5)
    tokens = rng.integers(0, v, doc_ids.size)
    z_old, z_new = rng.integers(0, k, doc_ids.size), rng.integers(0, k, doc_ids.size)
    doc, real = changed_tuples(tokens, doc_ids, z_old, z_new)
    out_doc, out, is_dummy = pad_and_sample(doc, real, n_docs=n_docs, pad_length=5, sample_size=5, n_topics=k,
                                            word_prior=np.ones(v), rng=rng)
    counts = np.zeros((k, v), dtype=np.int64)
    np.add.at(counts, (z_old, tokens), 1)
    real_only = Tuples(out.words[~is_dummy], out.k_old[~is_dummy], out.k_new[~is_dummy])
    apply_tuples(counts, real_only)
    expected = np.zeros((k, v), dtype=np.int64)
    np.add.at(expected, (z_new, tokens), 1)
    np.testing.assert_array_equal(counts, expected)
    assert (~is_dummy).sum() == len(real)


def test_every_document_sends_exactly_l_tuples_and_dummies_look_real():
    rng = np.random.default_rng(1)
    doc = np.array([0, 0, 0, 2])  # doc 0: 3 changes, doc 1: none, doc 2: one
    real = Tuples(np.array([1, 2, 3, 4], np.int32), np.array([0, 1, 2, 0], np.int32), np.array([1, 2, 0, 2], np.int32))
    out_doc, out, is_dummy = pad_and_sample(doc, real, n_docs=3, pad_length=10, sample_size=7, n_topics=3,
                                            word_prior=np.ones(8), rng=rng)
    assert np.bincount(out_doc).tolist() == [7, 7, 7]
    assert np.all(out.k_old != out.k_new)  # dummies have the shape of a real change
    assert out.words.dtype == out.k_old.dtype == out.k_new.dtype == np.int32
    assert 0 <= out.words.min() and out.words.max() < 8


def test_sampling_is_uniform_over_the_padded_slots():
    """A document with r real tuples padded to M sends each of them with probability l / M."""
    rng = np.random.default_rng(2)
    real = Tuples(np.arange(3, dtype=np.int32), np.zeros(3, np.int32), np.ones(3, np.int32))
    hits, trials = 0, 4000
    for _ in range(trials):
        _, _, dummy = pad_and_sample(np.zeros(3, np.int64), real, n_docs=1, pad_length=10, sample_size=7,
                                     n_topics=2, word_prior=np.ones(5), rng=rng)
        hits += int((~dummy).sum())
    assert hits / (3 * trials) == pytest.approx(0.7, abs=4 * np.sqrt(0.7 * 0.3 / (3 * trials)))


def test_dummies_are_zero_mean_noise_on_the_counts():
    rng = np.random.default_rng(3)
    k, v, rounds = 3, 4, 3000
    changes = np.zeros((rounds, k, v))
    for r in range(rounds):
        _, out, _ = pad_and_sample(np.zeros(0, np.int64), Tuples(*(np.zeros(0, np.int32),) * 3), n_docs=5,
                                   pad_length=4, sample_size=4, n_topics=k, word_prior=np.array([4, 3, 2, 1.0]),
                                   rng=rng)
        apply_tuples(changes[r], out)
    mean, se = changes.mean(axis=0), changes.std(axis=0, ddof=1) / np.sqrt(rounds)
    assert np.all(se > 0) and np.all(np.abs(mean) < 5 * se)  # each cell's expected change is 0


def test_more_real_tuples_than_m_keeps_a_subset_and_validation():
    rng = np.random.default_rng(4)
    real = Tuples(np.arange(6, dtype=np.int32), np.zeros(6, np.int32), np.ones(6, np.int32))
    _, out, dummy = pad_and_sample(np.zeros(6, np.int64), real, n_docs=1, pad_length=4, sample_size=4, n_topics=2,
                                   word_prior=np.ones(6), rng=rng)
    assert not dummy.any() and len(set(out.words.tolist())) == 4
    with pytest.raises(ValueError):
        pad_and_sample(np.zeros(0, np.int64), real, n_docs=1, pad_length=4, sample_size=5, n_topics=2,
                       word_prior=np.ones(6), rng=rng)


def test_clamped_topic_word():
    phi = clamped_topic_word(np.array([[-2, 3], [0, 0]]), beta=1.0)
    np.testing.assert_allclose(phi, [[1 / 5, 4 / 5], [0.5, 0.5]])
