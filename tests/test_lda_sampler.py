"""Collapsed Gibbs sampler: exact stationary distribution, count bookkeeping, AD-LDA sums."""

from __future__ import annotations

import itertools
import threading
from math import lgamma

import numpy as np
import pytest

from scipy.stats import chisquare

from flower_topics.numeric import work_arrays as scratch
from flower_topics.data.corpus import Corpus
from flower_topics.models.lda import (_LANES, SPARSE_MIN_TOPICS, CollapsedGibbs, choose_kernel, fit_lda,
                                      topic_word_distribution, word_topic_buffer)
from flower_topics.models.seed_words import SeedPrior

KERNELS = ["dense", "sparse"]


def _rebuilt(corpus: Corpus, z: np.ndarray, k: int) -> np.ndarray:
    counts = np.zeros((k, corpus.n_words), dtype=np.int64)
    np.add.at(counts, (z, corpus.tokens), 1)
    return counts


def _prior(k: int, v: int, beta: float, seeds: SeedPrior | None) -> np.ndarray:
    """beta_kw as a (K, V) matrix, written out by hand: beta, plus the seed weight at each seed pair."""
    prior = np.full((k, v), beta)
    for topic, word in zip(seeds.topics if seeds else [], seeds.words if seeds else []):
        prior[topic, word] = beta + seeds.weight
    return prior


def _exact_posterior(corpus: Corpus, k: int, alpha: float, beta: float,
                     seeds: SeedPrior | None = None) -> dict[tuple[int, ...], float]:
    """p(z | w) by enumeration: prod_d prod_k G(n_dk+a) * prod_k [prod_w G(n_kw+b_kw) / G(n_k+sum_w b_kw)]."""
    doc_ids = corpus.doc_ids
    prior = _prior(k, corpus.n_words, beta, seeds)
    logp = {}
    for z in itertools.product(range(k), repeat=corpus.n_tokens):
        z = np.array(z)
        n_dk = np.zeros((corpus.n_docs, k))
        np.add.at(n_dk, (doc_ids, z), 1)
        n_kw = _rebuilt(corpus, z, k)
        lp = sum(lgamma(x + alpha) for x in n_dk.ravel())
        lp += sum(lgamma(x + b) for x, b in zip(n_kw.ravel(), prior.ravel()))
        lp -= sum(lgamma(x + b) for x, b in zip(n_kw.sum(1), prior.sum(1)))
        logp[tuple(z)] = lp
    m = max(logp.values())
    total = sum(np.exp(x - m) for x in logp.values())
    return {z: float(np.exp(x - m) / total) for z, x in logp.items()}


#: An asymmetric prior for the tests (guided topics): word 1 seeded in topics 0 and 2, word 0 in topic 1.
_SEED_PAIRS = ([0, 2, 1], [1, 1, 0])


@pytest.mark.parametrize("seeded", [False, True])
@pytest.mark.parametrize("kernel", KERNELS)
def test_sampler_draws_from_the_exact_lda_posterior(kernel, seeded):
    """Long-run frequencies of the 27 joint states match the posterior computed by enumeration, with the
    symmetric prior and with an asymmetric one (seed words)."""
    corpus = Corpus.from_documents([[0, 1], [1]], ["a", "b"])
    k, alpha, beta = 3, 0.3, 0.2
    seeds = SeedPrior(*_SEED_PAIRS, weight=0.9, n_topics=k, n_words=2) if seeded else None
    exact = _exact_posterior(corpus, k, alpha, beta, seeds)
    if seeded:  # the seeds move the posterior by far more than the test resolves
        plain = _exact_posterior(corpus, k, alpha, beta)
        assert 0.5 * sum(abs(plain[z] - p) for z, p in exact.items()) > 0.1
    sampler = CollapsedGibbs(corpus, k, alpha, beta, seed=11, kernel=kernel, seeds=seeds)
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


def _one_token_conditional(corpus: Corpus, z: np.ndarray, n_kw: np.ndarray, i: int, alpha: float,
                           beta: float, seeds: SeedPrior | None = None) -> np.ndarray:
    """p(z_i = k | rest) ∝ (n_dk + alpha)(n_kw + beta_kw)/(n_k + sum_w beta_kw), counts without token i, in
    plain numpy."""
    k = n_kw.shape[0]
    prior = _prior(k, corpus.n_words, beta, seeds)
    w, d = corpus.tokens[i], corpus.doc_ids[i]
    n_dk = np.bincount(z[corpus.doc_ids == d], minlength=k).astype(float)
    n_w = n_kw[:, w].astype(float)
    n_k = n_kw.sum(axis=1).astype(float)
    n_dk[z[i]] -= 1
    n_w[z[i]] -= 1
    n_k[z[i]] -= 1
    p = (n_dk + alpha) * (n_w + prior[:, w]) / (n_k + prior.sum(axis=1))
    return p / p.sum()


@pytest.mark.parametrize("seeded", [False, True])
@pytest.mark.parametrize("k", [7, 37])
@pytest.mark.parametrize("kernel", KERNELS)
def test_one_token_draws_match_its_enumerated_conditional(kernel, k, seeded):
    """Redrawing one token many times, all else fixed, gives its exact full conditional (chi-square).

    The counts conditioned on hold other parties' tokens as well (the federated case),
    and the priors are large enough that every term (alpha, beta, both buckets of the
    sparse kernel) moves the conditional by more than the test can resolve. K=7 and
    K=37 take the dense kernel's 4-lane and 8-lane forms, each with padding topics.
    ``seeded``: an asymmetric prior (seed words), the token's own word seeded in some topics and
    other words in others, so that both its numerator and every topic's prior mass change.
    """
    rng = np.random.default_rng(5)
    alpha, beta = 0.4, 0.3
    corpus = Corpus.from_documents([[0, 1, 2, 1, 3], [1, 1, 4, 0], [2, 3, 3, 5, 1, 1]],
                                   [f"w{i}" for i in range(6)])
    z = rng.integers(0, k, corpus.n_tokens).astype(np.int32)
    seeds = (SeedPrior([0, 3, 5, 1, 2, 6], [1, 1, 1, 0, 4, 2], weight=1.2, n_topics=k, n_words=6)
             if seeded else None)
    sampler = CollapsedGibbs(corpus, k, alpha, beta, seed=3, z=z.copy(), kernel=kernel, seeds=seeds)
    others = rng.integers(0, 3, (k, corpus.n_words)).astype(np.int32)
    others[:, 1] = 0  # word 1: no counts elsewhere, so n_kw = 0 for some topics and beta matters
    n_kw = sampler.topic_word_counts() + others
    draws = 20_000
    for i in (1, 7):  # word 1 in documents 0 and 1
        expected = _one_token_conditional(corpus, sampler.z, n_kw, i, alpha, beta, seeds)
        assert expected.min() * draws > 50 and expected.max() < 0.5  # every cell of the chi-square well filled
        counts = np.zeros(k, dtype=np.int64)
        for _ in range(draws):
            sampler._sweep(n_kw, 1, np.array([i]))
            counts[sampler.z[i]] += 1
        np.testing.assert_array_equal(n_kw, sampler.topic_word_counts() + others)  # bookkeeping kept
        assert chisquare(counts, expected * draws).pvalue > 1e-4, (counts / draws, expected)
        if seeded:  # the test tells the seeded conditional from the symmetric one
            plain = _one_token_conditional(corpus, sampler.z, n_kw, i, alpha, beta)
            assert chisquare(counts, plain * draws).pvalue < 1e-9


@pytest.mark.parametrize("kernel", KERNELS)
def test_counts_stay_consistent_with_assignments(kernel):
    rng = np.random.default_rng(0)
    corpus = Corpus.from_documents([rng.integers(0, 30, rng.integers(1, 40)) for _ in range(50)],
                                   [f"w{i}" for i in range(30)])
    sampler = CollapsedGibbs(corpus, 5, 0.1, 0.01, seed=1, kernel=kernel)
    n_kw = sampler.topic_word_counts()
    sampler.sweep(n_kw, n_sweeps=7)
    np.testing.assert_array_equal(n_kw, _rebuilt(corpus, sampler.z, 5))
    n_dk = np.zeros((corpus.n_docs, 5), dtype=np.int64)
    np.add.at(n_dk, (corpus.doc_ids, sampler.z), 1)
    np.testing.assert_array_equal(sampler.n_dk, n_dk)
    assert n_kw.sum() == corpus.n_tokens


@pytest.mark.parametrize("kernel", KERNELS)
def test_two_clients_deltas_sum_to_rebuilt_global_counts(kernel):
    rng = np.random.default_rng(2)
    vocab = [f"w{i}" for i in range(20)]
    corpora = [Corpus.from_documents([rng.integers(0, 20, 15) for _ in range(10)], vocab) for _ in range(2)]
    samplers = [CollapsedGibbs(c, 4, 0.1, 0.01, seed=i, kernel=kernel) for i, c in enumerate(corpora)]
    global_counts = sum(s.topic_word_counts() for s in samplers).astype(np.int32)
    for _ in range(3):
        deltas = []
        for s in samplers:
            view = global_counts.copy()
            s.sweep(view, n_sweeps=2)
            deltas.append(view - global_counts)
        global_counts = global_counts + sum(deltas)
        np.testing.assert_array_equal(global_counts, sum(_rebuilt(c, s.z, 4) for c, s in zip(corpora, samplers)))


@pytest.mark.parametrize("kernel", KERNELS)
def test_reproducible_from_seed(kernel):
    rng = np.random.default_rng(3)
    corpus = Corpus.from_documents([rng.integers(0, 10, 12) for _ in range(6)], [f"w{i}" for i in range(10)])

    def run(seed):
        s = CollapsedGibbs(corpus, 3, 0.1, 0.01, seed=seed, kernel=kernel)
        n = s.topic_word_counts()
        s.sweep(n, 3)
        return s.z.copy()

    np.testing.assert_array_equal(run(5), run(5))
    assert not np.array_equal(run(5), run(6))


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_sweep_does_not_depend_on_what_its_work_arrays_held(kernel):
    """Parties served by one process share the sampler's work arrays (flower_topics.numeric.work_arrays): whatever another
    party, or garbage, left in them, a sweep gives the same draws as in a fresh thread."""
    rng = np.random.default_rng(4)
    corpus = Corpus.from_documents([rng.integers(0, 10, 12) for _ in range(6)], [f"w{i}" for i in range(10)])

    def run():
        s = CollapsedGibbs(corpus, 3, 0.1, 0.01, seed=7, kernel=kernel)
        n = s.topic_word_counts()
        s.sweep(n, 3)
        return s.z.copy(), n

    fresh: list = []
    thread = threading.Thread(target=lambda: fresh.append(run()))
    thread.start()
    thread.join()
    run()  # sizes this thread's work arrays to this corpus; then they are poisoned
    work = {"lda.word-topic": (10 * 3 + _LANES,), "lda.doc-topic": (6 * 3 + _LANES,)}
    if kernel == "dense":
        work["lda.own-word-topic"] = (10, 3)
    poisoned = {name: scratch.array(name, shape, np.int32) for name, shape in work.items()}
    for array in poisoned.values():
        array.fill(-12345)
    z, n = run()
    np.testing.assert_array_equal(z, fresh[0][0])
    np.testing.assert_array_equal(n, fresh[0][1])
    for name, shape in work.items():  # the sweep used the poisoned arrays (it did not replace them)
        assert scratch.array(name, shape, np.int32) is poisoned[name]


@pytest.mark.parametrize("kernel", KERNELS)
def test_word_major_sweeps_draw_as_sweep_does(kernel):
    """``sweep_word_topic`` on the transpose of ``sweep``'s counts makes the same draws and counts, whether the
    counts are the sampler's own buffer (swept in place) or another array (copied in and out); and
    ``topic_word_change`` is the counts after minus those before, cell for cell."""
    rng = np.random.default_rng(8)
    corpus = Corpus.from_documents([rng.integers(0, 12, rng.integers(3, 20)) for _ in range(9)],
                                   [f"w{i}" for i in range(12)])
    others = rng.integers(0, 3, (4, 12)).astype(np.int32)
    reference = CollapsedGibbs(corpus, 4, 0.1, 0.05, seed=2, kernel=kernel)
    n_kw = reference.topic_word_counts() + others
    reference.sweep(n_kw, 3)
    for in_buffer in (True, False):
        s = CollapsedGibbs(corpus, 4, 0.1, 0.05, seed=2, kernel=kernel)
        start = s.z.copy()
        before = s.topic_word_counts()
        n_wk = word_topic_buffer(12, 4) if in_buffer else np.empty((12, 4), np.int32)
        n_wk[...] = (before + others).T
        s.sweep_word_topic(n_wk, 3)
        np.testing.assert_array_equal(s.z, reference.z)
        np.testing.assert_array_equal(n_wk, n_kw.T)
        change = s.topic_word_change(start)
        assert change.dtype == np.int32
        np.testing.assert_array_equal(change, s.topic_word_counts() - before)
    with pytest.raises(ValueError, match="z_before"):
        s.topic_word_change(np.full(corpus.n_tokens, 4))
    with pytest.raises(ValueError, match="n_wk"):
        s.sweep_word_topic(n_kw)  # topic-major


@pytest.mark.parametrize("kernel", KERNELS)
def test_inconsistent_counts_are_refused(kernel):
    corpus = Corpus.from_documents([[0, 1, 1]], ["a", "b"])
    s = CollapsedGibbs(corpus, 2, 0.1, 0.01, seed=0, kernel=kernel)
    with pytest.raises(ValueError, match="own topic-word counts"):
        s.sweep(np.zeros((2, 2), dtype=np.int32))
    with pytest.raises(ValueError, match="int32"):
        s.sweep(s.topic_word_counts().astype(np.int64))


def test_kernel_is_chosen_by_topics_and_document_length():
    short = Corpus.from_documents([[0, 1, 1]], ["a", "b"])
    assert CollapsedGibbs(short, SPARSE_MIN_TOPICS - 1, 0.1, 0.01, seed=0).kernel == "dense"
    assert CollapsedGibbs(short, SPARSE_MIN_TOPICS, 0.1, 0.01, seed=0).kernel == "sparse"
    long_docs = Corpus.from_documents([[0, 1] * 60], ["a", "b"])  # 120 tokens a document, like BBC_News
    assert CollapsedGibbs(long_docs, 959, 0.1, 0.01, seed=0).kernel == "dense"
    assert CollapsedGibbs(long_docs, 960, 0.1, 0.01, seed=0).kernel == "sparse"
    assert choose_kernel(1000, 120.0) == "sparse"
    assert CollapsedGibbs(long_docs, 1000, 0.1, 0.01, seed=0, kernel="dense").kernel == "dense"
    with pytest.raises(ValueError, match="kernel must be one of"):
        CollapsedGibbs(short, 2, 0.1, 0.01, seed=0, kernel="alias")


@pytest.mark.parametrize("kernel", KERNELS)
def test_kernels_agree_on_a_corpus_at_large_k(kernel):
    """At K=200 (word lists shorter than K, documents with few of the topics) both kernels keep exact counts."""
    rng = np.random.default_rng(8)
    corpus = Corpus.from_documents([rng.integers(0, 50, rng.integers(1, 30)) for _ in range(40)],
                                   [f"w{i}" for i in range(50)])
    sampler = CollapsedGibbs(corpus, 200, 0.05, 0.01, seed=2, kernel=kernel)
    n_kw = sampler.topic_word_counts()
    sampler.sweep(n_kw, n_sweeps=5)
    np.testing.assert_array_equal(n_kw, _rebuilt(corpus, sampler.z, 200))


@pytest.mark.parametrize("kernel", KERNELS)
def test_recovers_well_separated_topics(kernel):
    rng = np.random.default_rng(4)
    k, block = 3, 10
    true = np.zeros((k, k * block))
    for t in range(k):
        true[t, t * block:(t + 1) * block] = 1.0 / block
    docs = [rng.choice(k * block, size=60, p=true[rng.integers(k)]) for _ in range(90)]
    corpus = Corpus.from_documents(docs, [f"w{i}" for i in range(k * block)])
    recovered = 0
    # a Gibbs chain can settle in a local mode (two topics merged): 1 seed in 20 for either
    # kernel on this corpus, so two of three seeds must recover every topic
    for seed in range(3):
        phi = fit_lda(corpus, k, alpha=0.1, beta=0.01, n_iter=60, seed=seed, kernel=kernel)
        bc = np.sqrt(true) @ np.sqrt(phi).T  # Bhattacharyya coefficients
        recovered += bool(np.all(bc.max(axis=1) > 0.95))
    assert recovered >= 2


def test_topic_word_distribution_rows():
    phi = topic_word_distribution(np.array([[3, 1], [0, 0]]), beta=0.5)
    np.testing.assert_allclose(phi, [[3.5 / 5, 1.5 / 5], [0.5, 0.5]])
