"""NPMI and UMass coherence of each topic's top words (docs/architecture.md, "Metric definitions").

Both scores come from document co-occurrence in a reference corpus, each document
taken as a set of words: ``D(w)`` is the number of reference documents containing
``w`` and ``D(wi, wj)`` the number containing both.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit

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


def coherence_word_ids(topic_word: np.ndarray, top_n: int = 10, *, check_input: bool = True
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Each topic's top words and the set of all of them, as coherence scores them.

    Parameters
    ----------
    topic_word : np.ndarray
        ``(K, V)`` topic-word matrix.
    top_n : int, default 10
        Number of top words per topic, ``>= 2``; clamped to ``V``.
    check_input : bool (default: True)
        As :func:`~flower_topics.metrics.inference.top_word_indices`.

    Returns
    -------
    top_ids : np.ndarray
        ``(K, min(top_n, V))`` int64 columns, rank order (:func:`top_word_indices`).
    word_ids : np.ndarray
        Sorted distinct columns of ``top_ids``.
    """
    _check_top_n(top_n)
    n_words = np.shape(topic_word)[-1] if np.ndim(topic_word) else 1
    top = top_word_indices(topic_word, min(top_n, max(n_words, 1)), check_input=check_input)
    return top, np.unique(top)


def cooccurrence_counts(reference: Corpus, word_ids: np.ndarray) -> np.ndarray:
    """Document co-occurrence counts of a set of words, each document a set of words.

    Parameters
    ----------
    reference : Corpus
        Reference documents over the model vocabulary.
    word_ids : np.ndarray
        ``(n,)`` distinct word ids (columns of ``topic_word``).

    Returns
    -------
    np.ndarray
        ``(n, n)`` int64 matrix: entry ``(a, b)`` is ``D(word_ids[a], word_ids[b])``,
        the number of documents containing both; the diagonal is ``D(w)``.

    Raises
    ------
    ValueError
        If ``word_ids`` repeats a word or holds an id outside ``[0, V)``.
    """
    return presence_cooccurrence(document_presence(reference), word_ids)


def document_presence(reference: Corpus) -> sp.csr_matrix:
    """The distinct words of each document: the ``(n_docs, V)`` 0/1 matrix (int32), by rows, sorted.

    Built once, it gives :func:`presence_cooccurrence` of any set of words without another pass
    over the tokens (a party scores a new set of top words at every evaluation).
    """
    presence = sp.csr_matrix(
        (np.ones(reference.n_tokens, dtype=np.int32), (reference.doc_ids, reference.tokens)),
        shape=(reference.n_docs, reference.n_words),
    )
    presence.sum_duplicates()
    presence.data[:] = 1
    return presence


def presence_cooccurrence(presence: sp.csr_matrix, word_ids: np.ndarray) -> np.ndarray:
    """:func:`cooccurrence_counts` from a :func:`document_presence` matrix.

    Raises
    ------
    ValueError
        If ``word_ids`` repeats a word or holds an id outside ``[0, V)``.
    """
    word_ids = np.asarray(word_ids, dtype=np.int64).ravel()
    n_words = presence.shape[1]
    if word_ids.size and (word_ids.min() < 0 or word_ids.max() >= n_words):
        raise ValueError(f"word ids must lie in [0, {n_words})")
    if np.unique(word_ids).size != word_ids.size:
        raise ValueError("word ids must be distinct")
    column = np.full(n_words, -1, dtype=np.int64)
    column[word_ids] = np.arange(word_ids.size)
    counts = np.zeros((word_ids.size, word_ids.size), dtype=np.int64)
    _count_pairs(presence.indptr.astype(np.int64), presence.indices.astype(np.int64), column, counts)
    return counts


@njit(cache=True, nogil=True)
def _count_pairs(indptr: np.ndarray, indices: np.ndarray, column: np.ndarray,
                 counts: np.ndarray) -> None:  # pragma: no cover - compiled
    """Add 1 to ``counts[a, b]`` for every document holding the words of columns ``a`` and ``b`` (the
    document's distinct words are ``indices[indptr[d]:indptr[d + 1]]``; ``column`` maps a word to its
    column, -1 for words not counted)."""
    found = np.empty(counts.shape[0], dtype=np.int64)
    for d in range(indptr.size - 1):
        n_found = 0
        for j in range(indptr[d], indptr[d + 1]):
            c = column[indices[j]]
            if c >= 0:
                found[n_found] = c
                n_found += 1
        for x in range(n_found):
            a = found[x]
            for y in range(n_found):
                counts[a, found[y]] += 1


def coherence_from_cooccurrence(
    top_ids: np.ndarray, word_ids: np.ndarray, n_docs: int, co_doc_freq: np.ndarray
) -> tuple[CoherenceResult, CoherenceResult]:
    """NPMI and UMass coherence from document counts (the one implementation of both).

    :func:`npmi_coherence` and :func:`umass_coherence` (pooled) and
    :func:`flower_topics.metrics.pooled_sums.coherence_from_counts` (counts summed over
    parties) all score through this function; see the first two for the formulas.

    Parameters
    ----------
    top_ids : np.ndarray
        ``(K, n)`` word ids of each topic's top words, rank order, ``n >= 2``.
    word_ids : np.ndarray
        ``(m,)`` distinct word ids, including every id of ``top_ids``.
    n_docs : int
        Number of reference documents ``N``, ``>= 1``.
    co_doc_freq : np.ndarray
        ``(m, m)`` co-occurrence counts over ``word_ids`` (:func:`cooccurrence_counts`),
        the diagonal holding the document frequencies.

    Returns
    -------
    npmi, umass : CoherenceResult
        The two scores, each with its per-topic values and the number of top words
        absent from the reference.

    Raises
    ------
    ValueError
        If ``n_docs < 1``, the shapes disagree, or a top word is not in ``word_ids``.
    """
    top = np.asarray(top_ids, dtype=np.int64)
    word_ids = np.asarray(word_ids, dtype=np.int64).ravel()
    co = np.asarray(co_doc_freq, dtype=np.int64)
    if n_docs < 1:
        raise ValueError("the reference corpus has no documents")
    if top.ndim != 2 or top.shape[0] < 1 or top.shape[1] < 2:
        raise ValueError(f"top_ids must be a (K, n) matrix with n >= 2, got shape {top.shape}")
    if co.shape != (word_ids.size, word_ids.size):
        raise ValueError(f"co_doc_freq must be ({word_ids.size}, {word_ids.size}), got {co.shape}")
    sorter = np.argsort(word_ids, kind="stable")
    found = np.searchsorted(word_ids, top, sorter=sorter)
    found = sorter[np.minimum(found, word_ids.size - 1)] if word_ids.size else found
    if word_ids.size == 0 or not np.array_equal(word_ids[found], top):
        raise ValueError("every top word id must be in word_ids")
    i, j = np.triu_indices(top.shape[1], k=1)
    first, second = found[:, i], found[:, j]
    doc_freq = np.diag(co)
    d_i, d_j, d_ij = doc_freq[first], doc_freq[second], co[first, second]
    n_absent = int(np.count_nonzero(doc_freq[np.unique(found)] == 0))

    n = float(n_docs)
    with np.errstate(divide="ignore", invalid="ignore"):
        p_ij = d_ij / n
        npmi = np.log(p_ij / ((d_i / n) * (d_j / n))) / -np.log(p_ij)
    npmi = np.where(d_ij == 0, -1.0, np.where(d_ij == n_docs, 1.0, npmi))
    npmi_topics = npmi.mean(axis=1)
    umass_topics = np.log((d_ij + 1.0) / np.maximum(d_i, 1.0)).sum(axis=1)
    return (
        CoherenceResult(mean=float(npmi_topics.mean()), per_topic=npmi_topics, n_absent=n_absent),
        CoherenceResult(mean=float(umass_topics.mean()), per_topic=umass_topics, n_absent=n_absent),
    )


def _pooled(topic_word: np.ndarray, reference: Corpus, top_n: int) -> tuple[CoherenceResult, CoherenceResult]:
    _check_top_n(top_n)
    check_topic_word(topic_word, reference.n_words)
    if reference.n_docs == 0:
        raise ValueError("the reference corpus has no documents")
    top, word_ids = coherence_word_ids(topic_word, top_n)
    return coherence_from_cooccurrence(top, word_ids, reference.n_docs, cooccurrence_counts(reference, word_ids))


def npmi_coherence(topic_word: np.ndarray, reference: Corpus, *, top_n: int = 10) -> CoherenceResult:
    """NPMI coherence of each topic's ``top_n`` words.

    Exactly docs/architecture.md: with ``N`` reference documents, ``P(w) = D(w) / N`` and
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
    return _pooled(topic_word, reference, top_n)[0]


def umass_coherence(topic_word: np.ndarray, reference: Corpus, *, top_n: int = 10) -> CoherenceResult:
    """UMass coherence of each topic's ``top_n`` words, as in the PC-TD paper.

    For each topic with top words ``w_1, ..., w_n`` in rank order (largest phi
    first), the sum over its pairs ``i < j``

    .. math::

        \\sum_{i < j} \\log \\frac{D(w_i, w_j) + 1}{D(w_i)},

    where the denominator is the document frequency of the *higher-ranked* word
    ``w_i`` (docs/architecture.md's "i < j in rank order" applied to the paper's formula; the
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
    return _pooled(topic_word, reference, top_n)[1]


def _check_top_n(top_n: int) -> None:
    if top_n < 2:
        raise ValueError(f"top_n must be >= 2 (coherence scores word pairs), got {top_n}")
