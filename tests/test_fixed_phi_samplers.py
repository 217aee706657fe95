"""FedLDA's local samplers (fixed phi): both converge to the exact posterior, by enumeration."""

from __future__ import annotations

import itertools
from math import lgamma

import numpy as np
import pytest

from flower_topics.data.corpus import Corpus
from flower_topics.models.fixed_phi import FixedPhiSampler, build_alias_tables

PHI = np.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6], [0.3, 0.4, 0.3]])  # K=3 topics over V=3 words


def _posterior(corpus: Corpus, phi: np.ndarray, alpha: float) -> dict[tuple[int, ...], float]:
    """p(z | w, phi) ∝ prod_d prod_k Gamma(m_dk + alpha) * prod_i phi[z_i, w_i] (theta collapsed)."""
    k = phi.shape[0]
    logp = {}
    for z in itertools.product(range(k), repeat=corpus.n_tokens):
        z = np.array(z)
        m = np.zeros((corpus.n_docs, k))
        np.add.at(m, (corpus.doc_ids, z), 1)
        logp[tuple(z)] = sum(lgamma(x + alpha) for x in m.ravel()) + np.log(phi[z, corpus.tokens]).sum()
    top = max(logp.values())
    total = sum(np.exp(v - top) for v in logp.values())
    return {z: float(np.exp(v - top) / total) for z, v in logp.items()}


@pytest.mark.parametrize("method", ["gibbs", "mh"])
def test_sampler_converges_to_the_exact_posterior(method):
    corpus = Corpus.from_documents([[0, 1, 2], [2, 2]], ["a", "b", "c"])
    alpha = 0.3
    exact = _posterior(corpus, PHI, alpha)
    sampler = FixedPhiSampler(corpus, 3, alpha, seed=5)
    draws, counts = 40_000, {}
    for _ in range(draws):
        sampler.sweep(PHI, method=method)
        key = tuple(int(t) for t in sampler.z)
        counts[key] = counts.get(key, 0) + 1
    tv = 0.5 * sum(abs(counts.get(z, 0) / draws - p) for z, p in exact.items())
    assert 0.5 * sum(abs(1 / len(exact) - p) for p in exact.values()) > 0.1  # far from uniform
    assert tv < 0.03


def test_alias_tables_draw_each_row_distribution():
    rng = np.random.default_rng(0)
    weights = rng.random((4, 7)) ** 3
    prob, alias = build_alias_tables(weights)
    n = 200_000
    for w in range(4):
        u1, u2 = rng.random(n), rng.random(n)
        k = (u1 * 7).astype(int)
        k = np.where(u2 < prob[w, k], k, alias[w, k])
        freq = np.bincount(k, minlength=7) / n
        expected = weights[w] / weights[w].sum()
        assert np.all(np.abs(freq - expected) <= 5 * np.sqrt(expected * (1 - expected) / n) + 1e-12)


def test_reproducible_and_validated():
    corpus = Corpus.from_documents([[0, 1, 2, 0]], ["a", "b", "c"])
    a, b = FixedPhiSampler(corpus, 3, 0.1, seed=1), FixedPhiSampler(corpus, 3, 0.1, seed=1)
    a.sweep(PHI, "mh", 3)
    b.sweep(PHI, "mh", 3)
    np.testing.assert_array_equal(a.z, b.z)
    np.testing.assert_allclose(a.theta().sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="strictly positive"):
        a.sweep(np.array([[1.0, 0.0, 0.0]] * 3))
    with pytest.raises(ValueError, match="method"):
        a.sweep(PHI, method="vi")
