"""Held-out perplexity by document completion (docs/architecture.md, "Metric definitions")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit

from flower_topics.data.corpus import Corpus
from flower_topics.metrics.inference import check_topic_word, fold_in


@dataclass(frozen=True)
class PerplexityResult:
    """Outcome of :func:`perplexity`.

    Parameters
    ----------
    perplexity : float
        ``exp(-sum log p(w | theta_d, phi) / n_eval_tokens)`` over the held-out halves.
    n_eval_tokens : int
        Number of held-out tokens scored.
    n_oov : int
        Out-of-vocabulary tokens dropped before scoring (passed in by the caller,
        see :func:`flower_topics.metrics.align_corpus`).
    n_docs : int
        Number of documents scored (those with at least 2 in-vocabulary tokens).
    """

    perplexity: float
    n_eval_tokens: int
    n_oov: int
    n_docs: int


_MIX_1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX_2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_TOKEN_SALT = np.uint64(0xD6E8FEB86659FD93)


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer on a ``uint64`` array (wrapping arithmetic, a bijection)."""
    z = (z ^ (z >> np.uint64(30))) * _MIX_1
    z = (z ^ (z >> np.uint64(27))) * _MIX_2
    return z ^ (z >> np.uint64(31))


def document_hashes(corpus: Corpus) -> np.ndarray:
    """A stable 64-bit hash of each document's token id sequence.

    The hash depends only on the document's token ids, in order (and so on its
    length): the sum, modulo ``2**64``, of a mixed ``(token id, position)`` value per
    token, mixed once more with the length. The same document gets the same hash in
    any corpus, at any position, on any machine.

    Parameters
    ----------
    corpus : Corpus
        The documents.

    Returns
    -------
    np.ndarray
        ``(n_docs,)`` ``uint64`` hashes.
    """
    position = np.arange(corpus.n_tokens, dtype=np.int64) - np.repeat(corpus.doc_ptr[:-1], corpus.doc_lengths)
    per_token = _mix64(corpus.tokens.astype(np.uint64) * _TOKEN_SALT + position.astype(np.uint64) * _GOLDEN)
    running = np.zeros(corpus.n_tokens + 1, dtype=np.uint64)
    np.cumsum(per_token, out=running[1:])  # wraps modulo 2**64
    summed = running[corpus.doc_ptr[1:]] - running[corpus.doc_ptr[:-1]]
    return _mix64(summed ^ _mix64(corpus.doc_lengths.astype(np.uint64) + _GOLDEN))


def completion_split(corpus: Corpus, *, seed: int = 0) -> np.ndarray:
    """The observed half of each document, for document completion.

    Each document's token positions are put in a random order, and the first
    ``floor(n_d / 2)`` positions form the observed half, the remaining
    ``n_d - floor(n_d / 2)`` the held-out half. The order of a document depends only
    on ``seed`` and the document itself, never on the other documents or on the
    document's place in the corpus: token ``i`` of document ``d`` gets the key
    ``mix64(mix64(hash_d ^ mix64(seed)) + i * golden)`` (SplitMix64's mixer, with
    ``hash_d`` from :func:`document_hashes`), and positions are sorted by key (ties,
    practically impossible, to the lower position). So the split of any set of
    documents is the union of the splits of its parts, which lets parties score
    their own documents and a server sum the parts to the pooled perplexity
    (:mod:`flower_topics.metrics.pooled_sums`). Two identical documents get the same
    split.

    Parameters
    ----------
    corpus : Corpus
        The documents to split.
    seed : int, default 0
        Seed of the random permutations (taken modulo ``2**64``).

    Returns
    -------
    np.ndarray
        Boolean mask over ``corpus.tokens``: True for observed tokens.
    """
    doc_ids = corpus.doc_ids
    starts = np.repeat(corpus.doc_ptr[:-1], corpus.doc_lengths)
    position = np.arange(corpus.n_tokens, dtype=np.int64) - starts
    seed_key = _mix64(np.array([int(seed) % 2**64], dtype=np.uint64))
    doc_key = _mix64(document_hashes(corpus) ^ seed_key)
    keys = _mix64(doc_key[doc_ids] + position.astype(np.uint64) * _GOLDEN)
    order = np.lexsort((position, keys, doc_ids))
    observed = np.empty(corpus.n_tokens, dtype=bool)
    observed[order] = position < (corpus.doc_lengths // 2)[doc_ids]
    return observed


@dataclass(frozen=True)
class CompletionLogLikelihood:
    """The sums behind :func:`perplexity`, additive over disjoint sets of documents.

    Parameters
    ----------
    loglik : float
        ``sum log p(w | theta_d, phi)`` over the held-out halves (``-inf`` if a
        held-out word has probability 0).
    n_eval_tokens : int
        Number of held-out tokens scored.
    n_docs : int
        Number of documents scored (those with at least 2 tokens).
    """

    loglik: float
    n_eval_tokens: int
    n_docs: int


@dataclass(frozen=True)
class CompletionHalves:
    """A corpus split for document completion once, for scoring any number of models on it.

    Built by :func:`completion_halves`; :meth:`loglik` scores a model.

    Parameters
    ----------
    observed : scipy.sparse.csr_matrix
        ``(n_docs, V)`` float64 counts of each scored document's observed half (duplicates summed).
    held_doc, held_word : np.ndarray
        Document and word id of every held-out token.
    n_docs : int
        Number of documents scored (those with at least 2 tokens).
    """

    observed: sp.csr_matrix
    held_doc: np.ndarray
    held_word: np.ndarray
    n_docs: int

    def loglik(self, topic_word: np.ndarray, *, alpha: float = 0.01, n_iter: int = 100,
               phi_t: np.ndarray | None = None, check_input: bool = True) -> CompletionLogLikelihood:
        """The sums of :func:`completion_loglik` for ``topic_word`` (``(K, V)``, rows summing to 1); ``phi_t`` is
        its transpose as a C-contiguous float64 array when the caller has made it (else made here);
        ``check_input=False`` skips :func:`check_topic_word` of a float64 matrix the caller has checked."""
        phi = check_topic_word(topic_word, self.observed.shape[1]) if check_input else topic_word
        if phi.shape[1] != self.observed.shape[1]:
            raise ValueError(f"the model has {phi.shape[1]} columns, the documents {self.observed.shape[1]} words")
        if phi_t is None:
            phi_t = np.ascontiguousarray(phi.T)  # rows gathered by word, in the fold-in and here
        elif phi_t.shape != phi.shape[::-1] or phi_t.dtype != np.float64 or not phi_t.flags.c_contiguous:
            raise ValueError(f"phi_t must be the C-contiguous float64 transpose of the {phi.shape} model")
        theta = fold_in(phi, self.observed, alpha=alpha, n_iter=n_iter, phi_t=phi_t)
        log_likelihood = _held_out_loglik(theta, phi_t, self.held_doc, self.held_word)
        return CompletionLogLikelihood(loglik=log_likelihood, n_eval_tokens=int(self.held_word.size),
                                       n_docs=self.n_docs)


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _held_out_loglik(theta: np.ndarray, phi_t: np.ndarray, held_doc: np.ndarray,
                     held_word: np.ndarray) -> float:  # pragma: no cover - compiled
    """``sum_n log sum_k theta[held_doc[n], k] phi_t[held_word[n], k]`` (``-inf`` when a term is 0), without
    the two ``(n, K)`` gathers a numpy expression would make."""
    total = 0.0
    for n in range(held_doc.size):
        row, column = theta[held_doc[n]], phi_t[held_word[n]]
        p = 0.0
        for k in range(row.size):
            p += row[k] * column[k]
        total += np.log(p) if p > 0.0 else -np.inf
    return total


def completion_halves(corpus: Corpus, *, seed: int = 0) -> CompletionHalves:
    """``corpus`` split into observed and held-out halves (:func:`completion_split`); documents with fewer
    than 2 tokens are left out.

    Parameters
    ----------
    corpus : Corpus
        Documents over the model vocabulary (:func:`align_corpus`).
    seed : int, default 0
        Seed of the split into halves.

    Returns
    -------
    CompletionHalves
    """
    scored_docs = corpus.doc_lengths >= 2
    doc_ids = corpus.doc_ids
    scored = scored_docs[doc_ids]
    observed = completion_split(corpus, seed=seed) & scored
    held_out = ~observed & scored
    first_half = sp.csr_matrix(
        (np.ones(int(observed.sum())), (doc_ids[observed], corpus.tokens[observed])),
        shape=(corpus.n_docs, corpus.n_words),
    )
    first_half.sum_duplicates()
    return CompletionHalves(first_half, doc_ids[held_out], corpus.tokens[held_out], int(scored_docs.sum()))


def completion_loglik(
    topic_word: np.ndarray, corpus: Corpus, *, seed: int = 0, alpha: float = 0.01, n_iter: int = 100
) -> CompletionLogLikelihood:
    """Held-out log-likelihood by document completion, unnormalized.

    The numerator and denominator of :func:`perplexity` (see there). Because the
    split (:func:`completion_split`) and the fold-in (one theta per document) treat
    every document on its own, the sums over disjoint sets of documents add up to
    the sums over their union, up to floating-point summation order. Documents with
    fewer than 2 tokens are skipped; with none left, the sums are 0. To score many
    models on the same documents, split them once (:func:`completion_halves`) and call
    :meth:`CompletionHalves.loglik`: the same sums.

    Parameters
    ----------
    topic_word : np.ndarray
        ``(K, V)`` topic-word matrix, rows summing to 1.
    corpus : Corpus
        Documents over the model vocabulary (:func:`align_corpus`).
    seed : int, default 0
        Seed of the split into halves.
    alpha : float, default 0.01
        Fold-in pseudo-count.
    n_iter : int, default 100
        Fold-in EM iterations.

    Returns
    -------
    CompletionLogLikelihood
    """
    check_topic_word(topic_word, corpus.n_words)
    return completion_halves(corpus, seed=seed).loglik(topic_word, alpha=alpha, n_iter=n_iter)


def perplexity(
    topic_word: np.ndarray,
    corpus: Corpus,
    *,
    seed: int = 0,
    alpha: float = 0.01,
    n_iter: int = 100,
    n_oov: int = 0,
) -> PerplexityResult:
    """Held-out perplexity by document completion.

    As docs/architecture.md defines it: each document is split in two halves with a fixed seed
    (:func:`completion_split`); theta is folded in on the first half against the
    fixed ``topic_word`` (:func:`flower_topics.metrics.infer_theta`'s EM); then

    .. math::

        \\text{perplexity} = \\exp\\Big(-\\frac{\\sum_{(d, w) \\in \\text{held-out}}
            \\log \\sum_k \\theta_{dk}\\phi_{kw}}{\\#\\text{held-out tokens}}\\Big).

    Documents with fewer than 2 tokens are skipped. A held-out word with
    probability 0 under the document's theta makes the perplexity infinite.

    Parameters
    ----------
    topic_word : np.ndarray
        ``(K, V)`` topic-word matrix, rows summing to 1.
    corpus : Corpus
        Test documents, already over the model vocabulary (:func:`align_corpus`).
    seed : int, default 0
        Seed of the split into halves.
    alpha : float, default 0.01
        Fold-in pseudo-count.
    n_iter : int, default 100
        Fold-in EM iterations.
    n_oov : int, default 0
        Out-of-vocabulary tokens the caller dropped while aligning; reported as is.

    Returns
    -------
    PerplexityResult

    Raises
    ------
    ValueError
        If no document has at least 2 tokens.
    """
    sums = completion_loglik(topic_word, corpus, seed=seed, alpha=alpha, n_iter=n_iter)
    if sums.n_docs == 0:
        raise ValueError("no document has 2 or more in-vocabulary tokens; perplexity is undefined")
    return PerplexityResult(
        perplexity=float(np.exp(-sums.loglik / sums.n_eval_tokens)),
        n_eval_tokens=sums.n_eval_tokens,
        n_oov=int(n_oov),
        n_docs=sums.n_docs,
    )
