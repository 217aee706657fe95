"""PC-TD server math: eq. (11) with clamped negative mass, and global semantic consistency (eq. 13)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp

from flower_topics.models.pctd_server import (
    aggregate_topic_word,
    clamped_mass,
    normalize_topic_word,
    semantic_consistency,
    sum_statistics,
)


def test_eq11_sums_parties_clamps_negative_mass_and_adds_the_pseudo_count():
    m1 = np.array([[2.0, -1.0, 0.0], [0.5, 0.5, 1.0]])
    m2 = np.array([[1.0, 0.5, -0.5], [-3.0, -1.0, 0.5]])
    total = sum_statistics([m1, m2])
    np.testing.assert_array_equal(total, [[3.0, -0.5, -0.5], [-2.5, -0.5, 1.5]])
    np.testing.assert_array_equal(clamped_mass(total), [1.0, 3.0])
    phi = normalize_topic_word(total, pseudo_count=0.5)
    np.testing.assert_allclose(phi, [[3.5 / 4.5, 0.5 / 4.5, 0.5 / 4.5], [0.5 / 3.0, 0.5 / 3.0, 2.0 / 3.0]], rtol=1e-15)
    np.testing.assert_array_equal(aggregate_topic_word([m1, m2], 0.5), phi)


def test_eq11_is_reproduced_without_noise_and_phi_stays_strictly_positive():
    rng = np.random.default_rng(0)
    parts = [rng.random((4, 50)) * 10 for _ in range(3)]
    parts[0][1, 7] = parts[1][1, 7] = parts[2][1, 7] = 0.0  # a word no party saw in topic 1
    total = sum(parts)
    phi = aggregate_topic_word(parts)
    np.testing.assert_allclose(phi, total / total.sum(1, keepdims=True), rtol=1e-9, atol=1e-12)
    assert phi.min() > 0
    np.testing.assert_allclose(phi.sum(1), 1.0, rtol=1e-15)


def test_a_topic_with_only_negative_mass_becomes_uniform():
    phi = normalize_topic_word(np.array([[-1.0, -2.0, -0.1, -5.0], [1.0, 0.0, 0.0, 0.0]]))
    np.testing.assert_allclose(phi[0], 0.25, rtol=1e-15)
    with pytest.raises(ValueError):
        normalize_topic_word(np.ones((2, 3)), pseudo_count=0.0)


def test_semantic_consistency_with_tau_zero_returns_the_input_exactly():
    rng = np.random.default_rng(1)
    phi = rng.dirichlet(np.ones(30), size=5)
    r = sp.random(30, 30, density=0.2, random_state=2)
    out = semantic_consistency(phi, r, tau=0.0)
    assert out is not phi
    np.testing.assert_array_equal(out, phi)


def test_semantic_consistency_by_hand():
    phi = np.array([[0.5, 0.3, 0.2], [0.0, 0.0, 1.0]])
    r = sp.csr_matrix(np.array([[0.0, 0.8, 0.0], [0.8, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    out = semantic_consistency(phi, r, tau=0.3)
    # topic 0: R^T p = (0.24, 0.4, 0); p * R^T p = (0.12, 0.12, 0); p^T R p = 0.24
    # p' = p + 0.3 (0.5, 0.5, 0) = (0.65, 0.45, 0.2), / 1.3
    np.testing.assert_allclose(out[0], np.array([0.65, 0.45, 0.2]) / 1.3, rtol=1e-14)
    # topic 1 has no similar pair in its support (p^T R p = 0): unchanged
    np.testing.assert_array_equal(out[1], phi[1])


def test_semantic_consistency_reads_r_by_columns_as_eq13_and_mixes_with_a_distribution():
    rng = np.random.default_rng(3)
    phi = rng.dirichlet(np.ones(6), size=3)
    r = sp.csr_matrix(([1.0], ([0], [1])), shape=(6, 6))  # R_01 only: sum_i R_i1 p_i = p_0
    out = semantic_consistency(phi, r, tau=0.3)
    q = np.zeros_like(phi)
    q[:, 1] = 1.0  # q_k(w) ∝ p_w (R^T p)_w is non-zero only at w = 1
    np.testing.assert_allclose(out, (phi + 0.3 * q) / 1.3, rtol=1e-14)
    dense = rng.random((6, 6))
    np.testing.assert_allclose(semantic_consistency(phi, dense, 0.5).sum(1), 1.0, rtol=1e-14)
    with pytest.raises(ValueError, match="non-negative"):
        semantic_consistency(phi, -sp.identity(6), 0.3)
