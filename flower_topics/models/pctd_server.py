"""PC-TD server-side math: merging the parties' statistics and global semantic consistency.

Shi et al., "Federated Topic Discovery: A Semantic Consistent Approach" (PC-TD), IEEE
Intelligent Systems 2020.

- Algorithm 1, line 11, eq. (11): ``p^(w|z_k) = sum_t M_t(w, z_k) / sum_t' sum_w' M_t'(w', z_k)``.
- Global semantic consistency, eqs. (12)-(13): with a word-similarity matrix ``R``,
  ``p'(w|z_k) = p(w|z_k) + tau p(w|z_k) sum_i R_iw p(i|z_k) / (P(.|z_k)^T R P(.|z_k))``,
  renormalized to sum to 1; applied after every private EM iteration, on the server, and
  pushed to the parties (Algorithm 1, lines 12-13).

Negative noisy mass
-------------------
``M_t`` carries Gaussian noise on every (word, topic) entry (eq. 10), so the summed
statistic can be negative, and eq. (11) applied literally would give negative
"probabilities", or a zero or negative denominator that flips a topic's sign. We clamp
each summed entry at 0 and add a pseudo-count ``c > 0`` to every entry before
normalizing::

    p^(w|z_k) = (max(S_kw, 0) + c) / sum_w' (max(S_kw', 0) + c),   S = sum_t M_t.

Why: the noiseless statistic is non-negative, and clamping is the projection onto that set,
which never moves an entry further from its true value (``|max(x, 0) - y| <= |x - y|`` for
``y >= 0``); it is post-processing of the released ``M_t``, so the privacy guarantee is
unchanged; and ``c > 0`` keeps ``p(w|z)`` strictly positive, which the next E-step needs
(its ``log p(w|z)`` meets noise on every word, eq. 5). The default ``c = 1e-10`` is a floor,
not smoothing: a noiseless statistic is reproduced up to a relative ``V c / sum_w S_kw``.
Pass ``c = beta`` (e.g. 0.01) for LDA-like smoothing. A topic whose entries are all
clamped becomes uniform. :func:`clamped_mass` reports how much negative mass was dropped.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import scipy.sparse as sp

from flower_topics.models.topic_word import normalize_rows


def sum_statistics(statistics: Sequence[np.ndarray]) -> np.ndarray:
    """``sum_t M_t(w, z_k)`` over the parties' uploads (numerator of eq. 11), ``(K, V)`` float64."""
    if len(statistics) == 0:
        raise ValueError("need at least one statistic")
    shapes = {np.shape(m) for m in statistics}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError("all statistics must be (K, V) arrays of one shape")
    total = np.zeros(next(iter(shapes)), dtype=np.float64)
    for m in statistics:  # one add per party
        total += m
    if not np.all(np.isfinite(total)):
        raise ValueError("statistics must be finite")
    return total


def clamped_mass(total: np.ndarray) -> np.ndarray:
    """Per topic, the negative mass that :func:`normalize_topic_word` drops: ``sum_w max(-S_kw, 0)``."""
    return np.clip(-np.asarray(total, dtype=np.float64), 0.0, None).sum(axis=1)


def normalize_topic_word(total: np.ndarray, pseudo_count: float | np.ndarray = 1e-10) -> np.ndarray:
    """Eq. (11) with negative noisy mass clamped at 0 and a pseudo-count added (see module doc).

    Parameters
    ----------
    total : np.ndarray
        ``(K, V)`` summed statistics ``S = sum_t M_t``.
    pseudo_count : float or np.ndarray
        ``c > 0`` added to every clamped entry (a ``(K, V)`` array: one per entry, e.g. seed words).

    Returns
    -------
    np.ndarray
        ``(K, V)`` strictly positive ``p^(w|z)``, rows summing to 1.
    """
    if not np.all(np.asarray(pseudo_count) > 0):
        raise ValueError("pseudo_count must be > 0 (p(w|z) must stay strictly positive)")
    return normalize_rows(total, pseudo_count, clamp=True)


def aggregate_topic_word(statistics: Sequence[np.ndarray], pseudo_count: float = 1e-10) -> np.ndarray:
    """Algorithm 1, line 11: merge the parties' ``M_t`` and normalize (eq. 11, clamped)."""
    return normalize_topic_word(sum_statistics(statistics), pseudo_count)


def semantic_consistency(topic_word: np.ndarray, similarity: sp.spmatrix | np.ndarray, tau: float = 0.3) -> np.ndarray:
    """Global semantic consistency, eq. (13), renormalized.

    ``p'(w|z_k) = p(w|z_k) + tau q_k(w)`` with ``q_k(w) = p(w|z_k) (R^T p_k)_w / (p_k^T R p_k)``,
    then each row is divided by its sum. Since ``sum_w p_w (R^T p)_w = p^T R p``, ``q_k`` is
    itself a distribution (for ``R >= 0``): the update mixes each topic with its
    similarity-reweighted version, ``(p + tau q) / (1 + tau)`` for a normalized ``p``. A topic
    with ``p_k^T R p_k = 0`` (no similar pair in its support) has no adjustment. ``tau = 0``
    returns a copy of the input unchanged (no renormalization).

    Parameters
    ----------
    topic_word : np.ndarray
        ``(K, V)`` non-negative ``p(w|z)``.
    similarity : scipy.sparse matrix or np.ndarray
        ``(V, V)`` non-negative word similarities ``R`` (eq. 12), e.g. from
        :func:`flower_topics.models.word_similarity.similarity_from_embeddings`. Used as in
        eq. (13), ``sum_i R_iw p(i|z_k)``, so an asymmetric ``R`` is read by columns.
    tau : float
        Tradeoff ``tau >= 0`` (the paper's default 0.3).

    Returns
    -------
    np.ndarray
        ``(K, V)`` adjusted ``p'(w|z)``, rows summing to 1.
    """
    phi = np.asarray(topic_word, dtype=np.float64)
    if phi.ndim != 2 or not np.all(np.isfinite(phi)) or np.any(phi < 0) or np.any(phi.sum(axis=1) <= 0):
        raise ValueError("topic_word must be a finite non-negative (K, V) array with positive row sums")
    if not tau >= 0:
        raise ValueError("tau must be >= 0")
    r = sp.csr_matrix(similarity, dtype=np.float64)
    if r.shape != (phi.shape[1], phi.shape[1]):
        raise ValueError("similarity must be (V, V)")
    if r.nnz and (r.data.min() < 0 or not np.all(np.isfinite(r.data))):
        raise ValueError("similarity must be finite and non-negative (eq. 13 must keep p' >= 0)")
    if tau == 0:
        return phi.copy()
    smoothed = np.asarray(r.T @ phi.T).T  # (R^T p_k)_w = sum_i R_iw p(i|z_k)
    smoothed *= phi
    quad = smoothed.sum(axis=1, keepdims=True)  # p_k^T R p_k
    has_pairs = quad[:, 0] > 0
    adjusted = phi.copy()
    adjusted[has_pairs] += tau * smoothed[has_pairs] / quad[has_pairs]
    adjusted /= adjusted.sum(axis=1, keepdims=True)
    return adjusted
