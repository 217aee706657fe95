"""PC-TD client math: semantic units, the private E-step (eq. 5), eq. (7), the upload M_t (eq. 10)."""

from __future__ import annotations

import numpy as np
import pytest

from flower_topics.data.corpus import Corpus
from flower_topics.models.pctd import (
    SemanticUnits,
    boundary_units,
    local_em_step,
    naive_local_em_step,
    ngram_units,
    random_doc_topic,
    random_topic_word,
    unit_log_likelihood,
)
from flower_topics.models.pctd_server import normalize_topic_word, sum_statistics

VOCAB = ["a", "b", "c", "d", "e"]
DOCS = [[0, 1, 2, 3, 4], [2, 2], [], [1, 0, 1]]


def test_ngram_units_partition_each_document_into_chunks_of_n():
    units = ngram_units(Corpus.from_documents(DOCS, VOCAB), n=3)
    expected = np.array([
        [1, 1, 1, 0, 0],  # doc 0: a b c
        [0, 0, 0, 1, 1],  # doc 0: d e (shorter tail chunk)
        [0, 0, 2, 0, 0],  # doc 1: c c (document shorter than n)
        [1, 2, 0, 0, 0],  # doc 3: b a b (doc 2 is empty: no unit)
    ])
    np.testing.assert_array_equal(units.counts.toarray(), expected)
    np.testing.assert_array_equal(units.unit_doc, [0, 0, 1, 3])
    np.testing.assert_array_equal(units.doc_unit_ptr, [0, 2, 3, 3, 4])
    np.testing.assert_array_equal(units.unit_lengths, [3, 2, 2, 3])


def test_ngram_units_overlapping_windows_slide_by_one():
    units = ngram_units(Corpus.from_documents(DOCS, VOCAB), n=3, overlapping=True)
    expected = np.array([
        [1, 1, 1, 0, 0],
        [0, 1, 1, 1, 0],
        [0, 0, 1, 1, 1],
        [0, 0, 2, 0, 0],
        [1, 2, 0, 0, 0],
    ])
    np.testing.assert_array_equal(units.counts.toarray(), expected)
    np.testing.assert_array_equal(units.unit_doc, [0, 0, 0, 1, 3])


def test_boundary_units_follow_given_offsets_and_must_nest_in_documents():
    corpus = Corpus.from_documents(DOCS, VOCAB)  # doc_ptr = [0, 5, 7, 7, 10]
    units = boundary_units(corpus, np.array([0, 2, 5, 7, 7, 8, 10]))
    expected = np.array([
        [1, 1, 0, 0, 0],
        [0, 0, 1, 1, 1],
        [0, 0, 2, 0, 0],
        [0, 1, 0, 0, 0],
        [1, 1, 0, 0, 0],
    ])
    np.testing.assert_array_equal(units.counts.toarray(), expected)
    np.testing.assert_array_equal(units.unit_doc, [0, 0, 1, 3, 3])
    with pytest.raises(ValueError, match="nest"):
        boundary_units(corpus, np.array([0, 4, 10]))  # a unit straddles documents 0 and 1


def _tiny():
    units = ngram_units(Corpus.from_documents([[0, 1, 0], [2, 1], [2, 2, 0]], ["x", "y", "z"]), n=2)
    phi = np.array([[0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])
    theta = np.array([[0.7, 0.3], [0.4, 0.6], [0.5, 0.5]])
    return units, phi, theta


def test_noiseless_step_matches_the_papers_formulas_by_hand():
    units, phi, theta = _tiny()
    n = units.counts.toarray()
    # eq. (5) with sigma = 0, literally: products of p(w|z)^N, normalized over topics
    num = theta[units.unit_doc] * np.prod(phi[None, :, :] ** n[:, None, :], axis=2)
    r = num / num.sum(axis=1, keepdims=True)
    # eq. (7): per document, sum over its units, normalized
    expected_theta = np.stack([r[units.unit_doc == d].sum(0) / r[units.unit_doc == d].sum() for d in range(3)])
    expected_m = np.einsum("uw,uk->kw", n, r)  # eq. (10)
    for step in (local_em_step(units, phi, theta, 0.0), naive_local_em_step(units, phi, theta, 0.0)):
        np.testing.assert_allclose(step.responsibilities, r, rtol=1e-13)
        np.testing.assert_allclose(step.doc_topic, expected_theta, rtol=1e-13)
        np.testing.assert_allclose(step.statistic, expected_m, rtol=1e-13)
    # and a value worked out on paper: unit "x y" of document 0
    a, b = 0.7 * 0.6 * 0.3, 0.3 * 0.2 * 0.2
    assert local_em_step(units, phi, theta, 0.0).responsibilities[0, 0] == pytest.approx(a / (a + b), rel=1e-14)


def test_e_step_in_log_space_does_not_underflow():
    units = SemanticUnits(np.array([[2000.0, 0.0]]), np.array([0]), 1)
    phi = np.array([[0.01, 0.99], [0.0101, 0.9899]])
    theta = np.array([[0.5, 0.5]])
    assert np.prod(phi[:, 0] ** 2000) == 0.0  # the literal products of eq. (5) underflow
    r = local_em_step(units, phi, theta, 0.0).responsibilities
    log_odds = 2000 * np.log(0.0101 / 0.01)
    np.testing.assert_allclose(r[0], [1 / (1 + np.exp(log_odds)), 1 / (1 + np.exp(-log_odds))], rtol=1e-10)


def test_heavy_noise_keeps_the_e_step_well_defined_and_uploads_raw_negative_counts():
    units, phi, theta = _tiny()
    step = local_em_step(units, phi, theta, 50.0, np.random.default_rng(0))
    assert np.all(np.isfinite(step.responsibilities)) and np.all(step.responsibilities >= 0)
    np.testing.assert_allclose(step.responsibilities.sum(1), 1.0)
    np.testing.assert_allclose(step.doc_topic.sum(1), 1.0)
    assert np.all(step.statistic.shape == (2, 3)) and np.all(np.isfinite(step.statistic))
    assert step.statistic.min() < 0  # noisy counts are uploaded as they are


def test_documents_without_units_keep_their_topic_proportions():
    units = ngram_units(Corpus.from_documents(DOCS, VOCAB), n=3)
    rng = np.random.default_rng(1)
    theta = random_doc_topic(4, 2, rng)
    step = local_em_step(units, random_topic_word(2, 5, rng), theta, 0.3, rng)
    np.testing.assert_array_equal(step.doc_topic[2], theta[2])
    assert not np.allclose(step.doc_topic[0], theta[0])


def test_topic_word_must_be_strictly_positive():
    units, phi, theta = _tiny()
    phi[0, 2], phi[0, 0] = 0.0, 0.7
    with pytest.raises(ValueError, match="strictly positive"):
        local_em_step(units, phi, theta, 0.1, 0)


def _features(step) -> np.ndarray:
    return np.concatenate([step.responsibilities.ravel(), step.doc_topic.ravel(), step.statistic.ravel()])


def _draws(fn, units, phi, theta, sigma, n, seed):
    rng = np.random.default_rng(seed)
    return np.stack([_features(fn(units, phi, theta, sigma, rng)) for _ in range(n)])


def _independent_noise_step(units, phi, theta, sigma, rng):
    """The tempting shortcut: fresh noise in eq. (10), independent of the E-step's. Wrong."""
    step = naive_local_em_step(units, phi, theta, sigma, rng)
    noisy = units.counts.toarray() + sigma * rng.standard_normal((units.n_units, units.n_words))
    return type(step)(step.responsibilities, step.doc_topic, step.responsibilities.T @ noisy)


def _z_scores(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """z-scores of the differences of the means and of the covariance entries of two samples."""
    n = x.shape[0]
    mean_z = (x.mean(0) - y.mean(0)) / np.sqrt((x.var(0, ddof=1) + y.var(0, ddof=1)) / n)
    iu = np.triu_indices(x.shape[1])

    def cov_terms(s):  # per-sample products whose means are the covariance entries
        c = s - s.mean(0)
        return c[:, iu[0]] * c[:, iu[1]]

    px, py = cov_terms(x), cov_terms(y)
    cov_z = (px.mean(0) - py.mean(0)) / np.sqrt((px.var(0, ddof=1) + py.var(0, ddof=1)) / n)
    return mean_z, cov_z


def test_fast_noise_has_the_law_of_the_full_vocabulary_noise():
    """Means and covariances of (r^, p(z|d), M_t) agree between the fast and the naive U x V draw."""
    units = ngram_units(Corpus.from_documents([[0, 1, 2, 1], [3, 4, 5, 3, 0]], list("uvwxyz")), n=2)
    phi = np.array([[0.35, 0.30, 0.15, 0.10, 0.05, 0.05],
                    [0.05, 0.10, 0.15, 0.20, 0.25, 0.25],
                    [0.20, 0.05, 0.30, 0.05, 0.30, 0.10]])
    theta = np.array([[0.5, 0.3, 0.2], [0.2, 0.3, 0.5]])
    sigma, n = 0.35, 4_000
    fast = _draws(local_em_step, units, phi, theta, sigma, n, seed=11)
    naive = _draws(naive_local_em_step, units, phi, theta, sigma, n, seed=12)
    mean_z, cov_z = _z_scores(fast, naive)
    # ~820 statistics; under equality each is ~N(0, 1): |z| < 5 for all with probability > 0.999
    assert np.abs(mean_z).max() < 5.0
    assert np.abs(cov_z).max() < 5.0
    # the noise is not negligible here: responsibilities really move
    assert naive[:, :units.n_units * 3].std(0).max() > 0.1
    # power: the test rejects noise in eq. (10) drawn independently of the E-step's noise
    wrong = _draws(_independent_noise_step, units, phi, theta, sigma, n, seed=13)
    wrong_mean_z, _ = _z_scores(wrong, naive)
    assert np.abs(wrong_mean_z).max() > 8.0


def test_noiseless_federated_em_increases_the_likelihood_monotonically():
    rng = np.random.default_rng(3)
    k, v, n_docs = 3, 24, 60
    true_phi = rng.dirichlet(np.full(v, 0.2), size=k)
    docs = []
    for _ in range(n_docs):  # the PC-TD generative process: one topic per 3-word unit
        topics = rng.choice(k, size=8, p=rng.dirichlet(np.full(k, 0.3)))
        docs.append(np.concatenate([rng.choice(v, size=3, p=true_phi[z]) for z in topics]))
    corpus = Corpus.from_documents(docs, [f"w{i}" for i in range(v)])
    parties = [ngram_units(corpus.subset(range(0, 25)), 3), ngram_units(corpus.subset(range(25, n_docs)), 3)]
    thetas = [random_doc_topic(p.n_docs, k, rng) for p in parties]
    phi = random_topic_word(k, v, rng)
    history = []
    for _ in range(40):
        history.append(sum(unit_log_likelihood(p, phi, t) for p, t in zip(parties, thetas)))
        steps = [local_em_step(p, phi, t, 0.0) for p, t in zip(parties, thetas)]
        thetas = [s.doc_topic for s in steps]
        phi = normalize_topic_word(sum_statistics([s.statistic for s in steps]), pseudo_count=1e-12)
    diffs = np.diff(history)
    assert np.all(diffs >= -1e-9 * abs(history[0]))
    assert history[-1] - history[0] > 50.0
    # the two-party sum of M_t equals one party holding all documents (eq. 11's numerator)
    whole = ngram_units(corpus, 3)
    joint = local_em_step(whole, phi, np.vstack(thetas), 0.0).statistic
    split = sum_statistics([local_em_step(p, phi, t, 0.0).statistic for p, t in zip(parties, thetas)])
    np.testing.assert_allclose(split, joint, rtol=1e-12)


def test_identical_topics_get_identical_responsibilities_whatever_the_noise():
    """Equal topics: the noise term sum_w e_w log p(w|z_k) is the same for every k (also in the fast draw)."""
    units, _, _ = _tiny()
    phi = np.tile([0.5, 0.3, 0.2], (3, 1))
    theta = np.full((3, 3), 1 / 3)
    step = local_em_step(units, phi, theta, 5.0, np.random.default_rng(2))
    np.testing.assert_allclose(step.responsibilities, 1 / 3, rtol=1e-9)
