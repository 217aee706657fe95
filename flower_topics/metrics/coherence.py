"""NPMI and UMass coherence of each topic's top words (DESIGN.md, "Metric definitions").

Both scores come from document co-occurrence in a reference corpus, each document
taken as a set of words: ``D(w)`` is the number of reference documents containing
``w`` and ``D(wi, wj)`` the number containing both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from flower_topics.data.corpus import Corpus
from flower_topics.metrics.inference import check_topic_word, top_word_indices


@dataclass(frozen=True)
class CoherenceResult:
    """Outcome of :func:`npmi_coherence` and :func:`umass_coherence`.

    Parameters
    ----------
    mean : float
        Mean of the per-topic scores (the reported coherence).
    per_topic : np.ndarray
        ``(K,)`` score of each topic.
    n_absent : int
        Number of distinct top words that occur in no reference document.
    """

    mean: float
    per_topic: np.ndarray
    n_absent: int = 0


@dataclass(frozen=True)
class _PairCounts:
    """Document frequencies of every top-word pair ``i < j`` (rank order) of every topic."""

    d_i: np.ndarray
    d_j: np.ndarray
    d_ij: np.ndarray
    n_docs: int
    n_absent: int


def _pair_counts(topic_word: np.ndarray, reference: Corpus, top_n: int) -> _PairCounts:
    phi = check_topic_word(topic_word, reference.n_words)
    if reference.n_docs == 0:
        raise ValueError("the reference corpus has no documents")
    top = top_word_indices(phi, min(top_n, phi.shape[1]))
    union, position = np.unique(top, return_inverse=True)
    position = position.reshape(top.shape)
    column = np.full(reference.n_words, -1, dtype=np.int64)
    column[union] = np.arange(union.size)
    mapped = column[reference.tokens]
    keep = mapped >= 0
    presence = sp.csr_matrix(
        (np.ones(int(keep.sum())), (reference.doc_ids[keep], mapped[keep])),
        shape=(reference.n_docs, union.size),
    )
    presence.data[:] = 1.0
    co = (presence.T @ presence).toarray()
    i, j = np.triu_indices(top.shape[1], k=1)
    first, second = position[:, i], position[:, j]
    doc_freq = np.diag(co)
    return _PairCounts(
        d_i=doc_freq[first],
        d_j=doc_freq[second],
        d_ij=co[first, second],
        n_docs=reference.n_docs,
        n_absent=int(np.count_nonzero(doc_freq == 0)),
    )


def npmi_coherence(topic_word: np.ndarray, reference: Corpus, *, top_n: int = 10) -> CoherenceResult:
    """NPMI coherence of each topic's ``top_n`` words.

    Exactly DESIGN.md: with ``N`` reference documents, ``P(w) = D(w) / N`` and
    ``P(wi, wj) = D(wi, wj) / N``,

    .. math::

        \\text{NPMI}(w_i, w_j) = \\frac{\\log \\frac{P(w_i, w_j)}{P(w_i) P(w_j)}}
            {-\\log P(w_i, w_j)},

    with -1 when the pair never co-occurs (including a word absent from the
    reference) and +1 when ``P(wi, wj) = 1``. A topic scores the mean over its
    ``top_n (top_n - 1) / 2`` pairs (45 for the top 10); the result's ``mean`` is
    the mean over topics. Top words are ranked by :func:`top_word_indices`; when
    the vocabulary has fewer than ``top_n`` words, all of them are used.

    Parameters
    ----------
    topic_word : np.ndarray
        ``(K, V)`` topic-word matrix.
    reference : Corpus
        Reference documents over the model vocabulary (:func:`align_corpus`).
    top_n : int, default 10
        Number of top words per topic, ``>= 2``.

    Returns
    -------
    CoherenceResult
    """
    _check_top_n(top_n)
    c = _pair_counts(topic_word, reference, top_n)
    n = float(c.n_docs)
    with np.errstate(divide="ignore", invalid="ignore"):
        p_ij = c.d_ij / n
        npmi = np.log(p_ij / ((c.d_i / n) * (c.d_j / n))) / -np.log(p_ij)
    npmi = np.where(c.d_ij == 0, -1.0, np.where(c.d_ij == c.n_docs, 1.0, npmi))
    per_topic = npmi.mean(axis=1)
    return CoherenceResult(mean=float(per_topic.mean()), per_topic=per_topic, n_absent=c.n_absent)


def umass_coherence(topic_word: np.ndarray, reference: Corpus, *, top_n: int = 10) -> CoherenceResult:
    """UMass coherence of each topic's ``top_n`` words, as in the PC-TD paper.

    For each topic with top words ``w_1, ..., w_n`` in rank order (largest phi
    first), the sum over its pairs ``i < j``

    .. math::

        \\sum_{i < j} \\log \\frac{D(w_i, w_j) + 1}{D(w_i)},

    where the denominator is the document frequency of the *higher-ranked* word
    ``w_i`` (DESIGN.md's "i < j in rank order" applied to the paper's formula; the
    same orientation as Mimno et al., 2011). The result's ``mean`` is the mean
    over topics. A higher-ranked word absent from the reference (``D(w_i) = 0``)
    would divide by zero; its count is clamped to 1, so such a pair contributes
    ``log(1 / 1) = 0`` (as ``D(w_i, w_j) = 0`` too), i.e. it is left out of the
    sum. ``CoherenceResult.n_absent`` reports how many top words this affects.
    When the vocabulary has fewer than ``top_n`` words, all of them are used.

    Parameters
    ----------
    topic_word : np.ndarray
        ``(K, V)`` topic-word matrix.
    reference : Corpus
        Reference documents over the model vocabulary (:func:`align_corpus`).
    top_n : int, default 10
        Number of top words per topic, ``>= 2``.

    Returns
    -------
    CoherenceResult
    """
    _check_top_n(top_n)
    c = _pair_counts(topic_word, reference, top_n)
    per_topic = np.log((c.d_ij + 1.0) / np.maximum(c.d_i, 1.0)).sum(axis=1)
    return CoherenceResult(mean=float(per_topic.mean()), per_topic=per_topic, n_absent=c.n_absent)


def _check_top_n(top_n: int) -> None:
    if top_n < 2:
        raise ValueError(f"top_n must be >= 2 (coherence scores word pairs), got {top_n}")
