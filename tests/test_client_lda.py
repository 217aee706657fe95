"""The LDA client algorithm (without Flower): count updates and the rollback protocol."""

from __future__ import annotations

import numpy as np

from flower_topics.clients.lda import LDAClientState, train_round
from flower_topics.data.corpus import Corpus
from flower_topics.wire.lda import LDASettings

K, V = 3, 6


def _corpus(seed: int, n_docs: int = 8) -> Corpus:
    rng = np.random.default_rng(seed)
    docs = [rng.integers(0, V, size=rng.integers(5, 15)) for _ in range(n_docs)]
    return Corpus.from_documents(docs, [f"w{i}" for i in range(V)])


def _counts(corpus: Corpus, z: np.ndarray) -> np.ndarray:
    counts = np.zeros((K, V), dtype=np.int64)
    np.add.at(counts, (z, corpus.tokens), 1)
    return counts


def _round(corpus, global_counts, state, r, applied, seed=1):
    """A round against the K x V ``global_counts`` (handed over word-major, as a party decodes them)."""
    word_major = np.ascontiguousarray(np.asarray(global_counts).T, dtype=np.int32)
    return train_round(corpus, word_major, state, server_round=r, last_applied_round=applied,
                       settings=LDASettings(n_topics=K, alpha=0.1, beta=0.01, local_sweeps=2), seed=seed)


def test_first_update_is_the_clients_own_counts():
    corpus = _corpus(0)
    state = LDAClientState()
    delta = _round(corpus, np.zeros((K, V), dtype=np.int32), state, 1, 0)
    np.testing.assert_array_equal(delta, _counts(corpus, state.pending))
    assert delta.sum() == corpus.n_tokens


def test_global_counts_track_every_clients_assignments_over_rounds():
    """Server-side sum of deltas == counts rebuilt from every client's assignments."""
    corpora = [_corpus(1), _corpus(2)]
    states = [LDAClientState(), LDAClientState()]
    global_counts = np.zeros((K, V), dtype=np.int64)
    for r in range(1, 5):
        deltas = [_round(c, global_counts.astype(np.int32), s, r, r - 1 if r > 1 else 0, seed=i)
                  for i, (c, s) in enumerate(zip(corpora, states))]
        global_counts += sum(deltas)
        rebuilt = sum(_counts(c, s.pending) for c, s in zip(corpora, states))
        np.testing.assert_array_equal(global_counts, rebuilt)
        assert global_counts.min() >= 0


def test_unapplied_reply_is_rolled_back():
    """If the server did not apply round 2's reply, round 3 starts from round 1's assignments."""
    corpus = _corpus(3)
    state = LDAClientState()
    global_counts = _round(corpus, np.zeros((K, V), dtype=np.int32), state, 1, 0).astype(np.int64)
    z_round1 = state.pending.copy()
    _round(corpus, global_counts.astype(np.int32), state, 2, 1)  # reply lost: server keeps round-1 counts
    delta3 = _round(corpus, global_counts.astype(np.int32), state, 3, 1)  # server says: last applied = 1
    np.testing.assert_array_equal(state.applied, z_round1)
    np.testing.assert_array_equal(global_counts + delta3, _counts(corpus, state.pending))


def test_reproducible_from_the_seed():
    corpus = _corpus(4)
    a, b = LDAClientState(), LDAClientState()
    zero = np.zeros((K, V), dtype=np.int32)
    np.testing.assert_array_equal(_round(corpus, zero, a, 1, 0, seed=5), _round(corpus, zero, b, 1, 0, seed=5))
    c = LDAClientState()
    assert not np.array_equal(_round(corpus, zero, c, 1, 0, seed=6), _round(corpus, zero, LDAClientState(), 1, 0, seed=5))


def test_the_change_is_the_counts_difference_on_either_path():
    """A party takes its change as the difference of its counts when they have fewer cells than it has tokens,
    else from its topics before and after: both give the counts of its new topics minus those of its old ones."""
    corpus = _corpus(9, n_docs=10)
    for n_topics in (3, 40):  # 18 cells (fewer than the tokens), then 240 (more)
        assert (n_topics * V < corpus.n_tokens) == (n_topics == 3)
        settings = LDASettings(n_topics=n_topics, alpha=0.1, beta=0.01, local_sweeps=2)
        state = LDAClientState()
        others = np.random.default_rng(n_topics).integers(0, 4, (n_topics, V)).astype(np.int32)
        held = others + train_round(corpus, np.ascontiguousarray(others.T), state, server_round=1,
                                    last_applied_round=0, settings=settings, seed=4)
        for r in range(2, 5):
            old = state.pending.astype(np.int64)
            received = np.ascontiguousarray(held.T, dtype=np.int32)
            delta = train_round(corpus, received.copy(), state, server_round=r, last_applied_round=r - 1,
                                settings=settings, seed=4)
            counts = np.zeros((n_topics, V), np.int64)
            np.add.at(counts, (state.pending.astype(np.int64), corpus.tokens), 1)
            np.add.at(counts, (old, corpus.tokens), -1)
            assert delta.dtype == np.int32 and delta.flags.c_contiguous
            np.testing.assert_array_equal(delta, counts)
            held = held + delta
