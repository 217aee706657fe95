"""Collapsed Gibbs sampler: exact stationary distribution, count bookkeeping, AD-LDA sums."""

from __future__ import annotations

import itertools
from math import lgamma

import numpy as np
import pytest

from flower_topics.data.corpus import Corpus
from flower_topics.models.lda import CollapsedGibbs, fit_lda, topic_word_distribution


def _rebuilt(corpus: Corpus, z: np.ndarray, k: int) -> np.ndarray:
    counts = np.zeros((k, corpus.n_words), dtype=np.int64)
    np.add.at(counts, (z, corpus.tokens), 1)
    return counts


def _exact_posterior(corpus: Corpus, k: int, alpha: float, beta: float) -> dict[tuple[int, ...], float]:
    """p(z | w) by enumeration: prod_d prod_k G(n_dk+a) * prod_k [prod_w G(n_kw+b) / G(n_k+Vb)]."""
    v, doc_ids = corpus.n_words, corpus.doc_ids
    logp = {}
    for z in itertools.product(range(k), repeat=corpus.n_tokens):
        z = np.array(z)
        n_dk = np.zeros((corpus.n_docs, k))
        np.add.at(n_dk, (doc_ids, z), 1)
        n_kw = _rebuilt(corpus, z, k)
        lp = sum(lgamma(x + alpha) for x in n_dk.ravel())
        lp += sum(lgamma(x + beta) for x in n_kw.ravel()) - sum(lgamma(x + v * beta) for x in n_kw.sum(1))
        logp[tuple(z)] = lp
    m = max(logp.values())
    total = sum(np.exp(x - m) for x in logp.values())
    return {z: float(np.exp(x - m) / total) for z, x in logp.items()}


def test_sampler_draws_from_the_exact_lda_posterior():
    """Long-run frequencies of the 27 joint states match the posterior computed by enumeration."""
    corpus = Corpus.from_documents([[0, 1], [1]], ["a", "b"])
    k, alpha, beta = 3, 0.3, 0.2
    exact = _exact_posterior(corpus, k, alpha, beta)
    sampler = CollapsedGibbs(corpus, k, alpha, beta, seed=11)
    n_kw = sampler.topic_word_counts()
    draws = 30000
    freq: dict[tuple[int, ...], int] = {}
    for _ in range(draws):
        sampler.sweep(n_kw)
        key = tuple(int(t) for t in sampler.z)
        freq[key] = freq.get(key, 0) + 1
    tv = 0.5 * sum(abs(freq.get(z, 0) / draws - p) for z, p in exact.items())
    uniform_tv = 0.5 * sum(abs(1 / len(exact) - p) for p in exact.values())
    assert uniform_tv > 0.1  # the posterior is far from uniform: the test can tell samplers apart
    assert tv < 0.02


def test_counts_stay_consistent_with_assignments():
    rng = np.random.default_rng(0)
    corpus = Corpus.from_documents([rng.integers(0, 30, rng.integers(1, 40)) for _ in range(50)],
                                   [f"w{i}" for i in range(30)])
    sampler = CollapsedGibbs(corpus, 5, 0.1, 0.01, seed=1)
    n_kw = sampler.topic_word_counts()
    sampler.sweep(n_kw, n_sweeps=7)
    np.testing.assert_array_equal(n_kw, _rebuilt(corpus, sampler.z, 5))
    n_dk = np.zeros((corpus.n_docs, 5), dtype=np.int64)
    np.add.at(n_dk, (corpus.doc_ids, sampler.z), 1)
    np.testing.assert_array_equal(sampler.n_dk, n_dk)
    assert n_kw.sum() == corpus.n_tokens


def test_two_clients_deltas_sum_to_rebuilt_global_counts():
    rng = np.random.default_rng(2)
    vocab = [f"w{i}" for i in range(20)]
    corpora = [Corpus.from_documents([rng.integers(0, 20, 15) for _ in range(10)], vocab) for _ in range(2)]
    samplers = [CollapsedGibbs(c, 4, 0.1, 0.01, seed=i) for i, c in enumerate(corpora)]
    global_counts = sum(s.topic_word_counts() for s in samplers).astype(np.int32)
    for _ in range(3):
        deltas = []
        for s in samplers:
            view = global_counts.copy()
            s.sweep(view, n_sweeps=2)
            deltas.append(view - global_counts)
        global_counts = global_counts + sum(deltas)
        np.testing.assert_array_equal(global_counts, sum(_rebuilt(c, s.z, 4) for c, s in zip(corpora, samplers)))


def test_reproducible_from_seed():
    rng = np.random.default_rng(3)
    corpus = Corpus.from_documents([rng.integers(0, 10, 12) for _ in range(6)], [f"w{i}" for i in range(10)])

    def run(seed):
        s = CollapsedGibbs(corpus, 3, 0.1, 0.01, seed=seed)
        n = s.topic_word_counts()
        s.sweep(n, 3)
        return s.z.copy()

    np.testing.assert_array_equal(run(5), run(5))
    assert not np.array_equal(run(5), run(6))


def test_inconsistent_counts_are_refused():
    corpus = Corpus.from_documents([[0, 1, 1]], ["a", "b"])
    s = CollapsedGibbs(corpus, 2, 0.1, 0.01, seed=0)
    with pytest.raises(ValueError, match="own topic-word counts"):
        s.sweep(np.zeros((2, 2), dtype=np.int32))
    with pytest.raises(ValueError, match="int32"):
        s.sweep(s.topic_word_counts().astype(np.int64))


def test_recovers_well_separated_topics():
    rng = np.random.default_rng(4)
    k, block = 3, 10
    true = np.zeros((k, k * block))
    for t in range(k):
        true[t, t * block:(t + 1) * block] = 1.0 / block
    docs = [rng.choice(k * block, size=60, p=true[rng.integers(k)]) for _ in range(90)]
    corpus = Corpus.from_documents(docs, [f"w{i}" for i in range(k * block)])
    phi = fit_lda(corpus, k, alpha=0.1, beta=0.01, n_iter=60, seed=0)
    bc = np.sqrt(true) @ np.sqrt(phi).T  # Bhattacharyya coefficients
    assert np.all(bc.max(axis=1) > 0.95)


def test_topic_word_distribution_rows():
    phi = topic_word_distribution(np.array([[3, 1], [0, 0]]), beta=0.5)
    np.testing.assert_allclose(phi, [[3.5 / 5, 1.5 / 5], [0.5, 0.5]])
