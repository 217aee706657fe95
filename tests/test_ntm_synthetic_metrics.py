"""The gFedNTM paper's document similarity-based score (DSS, eqs. 4-5)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from flower_topics.metrics.document_similarity import document_similarities, document_similarity_score

# Three documents. True proportions over K = 2 topics; inferred over K_model = 3.
TRUE = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
INFERRED = np.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])


def test_similarities_by_hand():
    # w_ij = sqrt(theta_i)^T sqrt(theta_j): w_12 = 0, w_13 = w_23 = sqrt(0.5), w_ii = 1
    w = document_similarities(TRUE)
    r = math.sqrt(0.5)
    assert np.allclose(w, [[1, 0, r], [0, 1, r], [r, r, 1]])


def test_similarity_is_one_minus_squared_hellinger():
    rng = np.random.default_rng(0)
    theta = rng.dirichlet(np.ones(4), size=5)
    hellinger2 = 0.5 * ((np.sqrt(theta)[:, None, :] - np.sqrt(theta)[None, :, :]) ** 2).sum(axis=2)
    assert np.allclose(document_similarities(theta), 1.0 - hellinger2)


def test_dss_by_hand():
    # true w: w_12 = 0, w_13 = w_23 = sqrt(.5); inferred w: w_12 = 1, w_13 = w_23 = 0.
    # ordered pairs i != j: 2 * (|0 - 1| + |sqrt(.5) - 0| + |sqrt(.5) - 0|) = 2 (1 + sqrt 2); divided by D = 3.
    expected = 2.0 * (1.0 + math.sqrt(2.0)) / 3.0
    assert document_similarity_score(TRUE, INFERRED) == pytest.approx(expected, rel=1e-12)
    assert document_similarity_score(TRUE, INFERRED) == pytest.approx(1.6094757082487299, rel=1e-12)
    # symmetric in its two arguments
    assert document_similarity_score(INFERRED, TRUE) == pytest.approx(expected, rel=1e-12)


def test_dss_zero_for_the_truth_and_invariant_to_topic_order():
    rng = np.random.default_rng(1)
    theta = rng.dirichlet(np.full(6, 0.3), size=40)
    assert document_similarity_score(theta, theta) == pytest.approx(0.0, abs=1e-12)
    assert document_similarity_score(theta, theta[:, rng.permutation(6)]) == pytest.approx(0.0, abs=1e-12)


def test_dss_blocks_give_the_same_score():
    rng = np.random.default_rng(2)
    true, inferred = rng.dirichlet(np.ones(5), size=37), rng.dirichlet(np.ones(3), size=37)
    dense = np.abs(document_similarities(true) - document_similarities(inferred)).sum() / 37  # diagonals cancel
    for block in (1, 5, 36, 37, 1000):
        assert document_similarity_score(true, inferred, block=block) == pytest.approx(dense, rel=1e-12)


def test_dss_rejects_bad_input():
    with pytest.raises(ValueError, match="same documents"):
        document_similarity_score(TRUE, INFERRED[:2])
    with pytest.raises(ValueError, match="sum to 1"):
        document_similarity_score(TRUE, INFERRED * 2)
    with pytest.raises(ValueError, match="non-negative"):
        document_similarity_score(TRUE, -INFERRED)
