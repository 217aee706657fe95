"""Reading a corpus against a fixed model: vocabulary alignment, top words, theta fold-in.

Every metric of docs/architecture.md ("Metric definitions") scores a model's ``topic_word``
matrix against documents. The helpers here put the documents on the model's
vocabulary, rank each topic's words, and fold in document-topic proportions.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp
from numba import njit

from flower_topics.data.alignment import align_corpus
from flower_topics.data.corpus import Corpus
from flower_topics.numeric.document_threads import over_documents
from flower_topics.numeric.word_blocks import gather_block, longest_document, weighted_sum, word_weights


def check_topic_word(topic_word: np.ndarray, n_words: int | None = None) -> np.ndarray:
    """``topic_word`` as a float64 ``(K, V)`` array, validated.

    Parameters
    ----------
    topic_word : np.ndarray
        Topic-word matrix, one distribution over the vocabulary per row.
    n_words : int, optional
        Required number of columns (the vocabulary size of the scored corpus).

    Returns
    -------
    np.ndarray
        The matrix as a C-contiguous float64 array.

    Raises
    ------
    ValueError
        If the matrix is not 2-D with at least one row, has negative or non-finite
        entries, or does not have ``n_words`` columns.
    """
    phi = np.ascontiguousarray(topic_word, dtype=np.float64)
    if phi.ndim != 2 or phi.shape[0] < 1 or phi.shape[1] < 1:
        raise ValueError(f"topic_word must be a non-empty (K, V) matrix, got shape {phi.shape}")
    if not _finite_non_negative(phi.reshape(-1)):
        raise ValueError("topic_word must be finite and non-negative")
    if n_words is not None and phi.shape[1] != n_words:
        raise ValueError(
            f"topic_word has {phi.shape[1]} columns but the corpus vocabulary has {n_words} words; "
            "align the corpus to the model vocabulary first (align_corpus)"
        )
    return phi


@njit(cache=True, nogil=True)
def _finite_non_negative(values: np.ndarray) -> bool:  # pragma: no cover - compiled
    """Whether every entry is finite and ``>= 0``: one pass, stopping at the first that is not (a NaN fails
    ``>= 0``)."""
    for v in values:
        if not (v >= 0.0 and v < np.inf):
            return False
    return True


def top_word_indices(topic_word: np.ndarray, n: int, *, check_input: bool = True) -> np.ndarray:
    """Column indices of each topic's ``n`` most probable words.

    Largest phi first; ties go to the lower column (a stable sort on ``-phi``), as
    docs/architecture.md ("Metric definitions") requires.

    Parameters
    ----------
    topic_word : np.ndarray
        ``(K, V)`` topic-word matrix.
    n : int
        Number of words per topic, ``1 <= n <= V``.
    check_input : bool (default: True)
        Check the matrix (:func:`check_topic_word`); False for a C-contiguous float64 matrix the caller
        has checked (one pass over ``K x V`` less).

    Returns
    -------
    np.ndarray
        ``(K, n)`` int64 column indices, rank order along each row.

    Raises
    ------
    ValueError
        If ``n`` is outside ``[1, V]``.
    """
    phi = check_topic_word(topic_word) if check_input else topic_word
    n_topics, n_words = phi.shape
    if not 1 <= n <= n_words:
        raise ValueError(f"n must lie in [1, {n_words}] (the vocabulary size), got {n}")
    if n > _KERNEL_MAX_N:  # the kernel's insertion costs up to n per entering word
        return np.argsort(-phi, axis=1, kind="stable")[:, :n]
    top = np.empty((n_topics, n), dtype=np.int64)
    _top_n_kernel(phi, top)
    return top


#: Largest ``n`` that :func:`top_word_indices` ranks in one pass (coherence uses 10, diversity 25).
_KERNEL_MAX_N = 64


@njit(cache=True, nogil=True)
def _top_n_kernel(phi: np.ndarray, top: np.ndarray) -> None:  # pragma: no cover - compiled
    """:func:`top_word_indices` in one pass per row: the ``n`` best columns seen so far are kept in rank order
    (larger phi first, the lower column first on a tie); a column enters when it beats the last of them, which
    on a tie it cannot (it is the higher column). O(V) comparisons per row for the few words that enter."""
    n_topics, n_words = phi.shape
    n = top.shape[1]
    values = np.empty(n)
    for k in range(n_topics):
        row = phi[k]
        for i in range(n):  # the first n columns, ranked by insertion
            v = row[i]
            j = i
            while j > 0 and values[j - 1] < v:
                values[j] = values[j - 1]
                top[k, j] = top[k, j - 1]
                j -= 1
            values[j] = v
            top[k, j] = i
        for w in range(n, n_words):
            v = row[w]
            if v > values[n - 1]:
                j = n - 1
                while j > 0 and values[j - 1] < v:
                    values[j] = values[j - 1]
                    top[k, j] = top[k, j - 1]
                    j -= 1
                values[j] = v
                top[k, j] = w


def infer_theta(
    topic_word: np.ndarray, corpus: Corpus, *, alpha: float = 0.01, n_iter: int = 100
) -> np.ndarray:
    """Fold in document-topic proportions against a fixed ``topic_word``.

    MAP estimate of each document's theta under a symmetric Dirichlet(alpha + 1)
    prior, by EM with phi held fixed. Starting from the uniform theta, each of the
    ``n_iter`` iterations applies, to all documents at once,

    .. math::

        \\theta_{dk} \\leftarrow \\frac{\\alpha + \\sum_w n_{dw}\\,
            \\theta_{dk}\\phi_{kw} / \\sum_j \\theta_{dj}\\phi_{jw}}
            {K\\alpha + \\sum_w n_{dw}}

    (the standard fold-in EM, docs/architecture.md "held-out perplexity": "a fixed number of
    EM iterations, small symmetric alpha"). A token whose word has probability 0
    under every topic of the document's theta carries no responsibility. Empty
    documents get the uniform theta.

    Parameters
    ----------
    topic_word : np.ndarray
        ``(K, V)`` topic-word matrix, rows summing to 1.
    corpus : Corpus
        Documents over the model vocabulary (see :func:`align_corpus`).
    alpha : float, default 0.01
        Symmetric pseudo-count added to each topic's expected count, ``>= 0``.
    n_iter : int, default 100
        Number of EM iterations, ``>= 0``.

    Returns
    -------
    np.ndarray
        ``(D, K)`` float64 matrix, each row a distribution over topics.
    """
    phi = check_topic_word(topic_word, corpus.n_words)
    counts = sp.csr_matrix(
        (np.ones(corpus.n_tokens), (corpus.doc_ids, corpus.tokens)), shape=(corpus.n_docs, corpus.n_words)
    )
    return fold_in(phi, counts, alpha=alpha, n_iter=n_iter)


def fold_in(phi: np.ndarray, counts: sp.csr_matrix, *, alpha: float, n_iter: int,
            phi_t: np.ndarray | None = None, threads: int | None = None) -> np.ndarray:
    """The EM of :func:`infer_theta` on a ``(D, V)`` sparse count matrix.

    Parameters
    ----------
    phi : np.ndarray
        ``(K, V)`` float64 topic-word matrix (validated by the caller).
    counts : scipy.sparse.csr_matrix
        Document-term counts ``n_dw``.
    alpha : float
        Symmetric pseudo-count, ``>= 0``.
    n_iter : int
        Number of EM iterations, ``>= 0``.
    phi_t : np.ndarray, optional
        ``phi.T`` as a C-contiguous array, when the caller has made it (else made here).
    threads : int, optional
        Threads the documents are split over (each document's theta depends on its own words only, so
        the result is the same for any number); default numba's thread count (the cores, or
        ``NUMBA_NUM_THREADS``), one for fewer than :data:`flower_topics.numeric.document_threads.PARALLEL_MIN_ENTRIES` nonzero counts.

    Returns
    -------
    np.ndarray
        ``(D, K)`` document-topic proportions.
    """
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    if n_iter < 0:
        raise ValueError(f"n_iter must be >= 0, got {n_iter}")
    counts = sp.csr_matrix(counts, dtype=np.float64, copy=True)
    counts.sum_duplicates()
    theta = np.empty((counts.shape[0], phi.shape[0]))
    indptr, indices = counts.indptr.astype(np.int64), counts.indices.astype(np.int64)
    phi_t = np.ascontiguousarray(phi.T) if phi_t is None else phi_t

    def run(first: int, last: int) -> None:
        lo, hi = indptr[first], indptr[last]
        _fold_in_kernel(indptr[first:last + 1] - lo, indices[lo:hi], counts.data[lo:hi], phi_t, float(alpha),
                        int(n_iter), theta[first:last])

    over_documents(indptr, run, threads)
    return theta


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})  # SIMD sums over topics
def _fold_in_kernel(indptr: np.ndarray, indices: np.ndarray, n_dw: np.ndarray, phi_t: np.ndarray, alpha: float,
                    n_iter: int, theta: np.ndarray) -> None:  # pragma: no cover - compiled
    """:func:`fold_in`'s EM, document by document (each document's theta depends on its own words only):
    ``theta_dk <- alpha + theta_dk sum_w n_dw phi_wk / sum_j theta_dj phi_wj``, then normalized (uniform when
    the total is 0); a word of probability 0 under the document's theta carries no responsibility. A
    document's rows of phi are a block (:mod:`flower_topics.numeric.word_blocks`); thetas move by about 1e-16 against
    one word at a time."""
    n_docs, n_topics = theta.shape
    acc = np.empty(n_topics)
    longest = longest_document(indptr)
    block, weight = np.zeros((longest + 3, n_topics)), np.zeros(longest + 3)
    for d in range(n_docs):
        row = theta[d]
        row[:] = 1.0 / n_topics
        start = indptr[d]
        n_padded = gather_block(phi_t, indices, start, indptr[d + 1] - start, block)
        for _ in range(n_iter):
            word_weights(block, n_padded, n_dw, start, row, weight)
            weighted_sum(block, n_padded, weight, acc)
            total = 0.0
            for k in range(n_topics):
                row[k] = alpha + row[k] * acc[k]
                total += row[k]
            if total > 0.0:
                for k in range(n_topics):
                    row[k] /= total
            else:
                row[:] = 1.0 / n_topics
