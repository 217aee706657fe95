"""Held-out perplexity by document completion (DESIGN.md, "Metric definitions")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

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


def completion_split(corpus: Corpus, *, seed: int = 0) -> np.ndarray:
    """The observed half of each document, for document completion.

    Each document's token positions are put in a random order drawn from
    ``numpy.random.default_rng(seed)`` (one uniform key per token of the corpus,
    sorted within documents); the first ``floor(n_d / 2)`` positions form the
    observed half, the remaining ``n_d - floor(n_d / 2)`` the held-out half.

    Parameters
    ----------
    corpus : Corpus
        The documents to split.
    seed : int, default 0
        Seed of the random permutation.

    Returns
    -------
    np.ndarray
        Boolean mask over ``corpus.tokens``: True for observed tokens.
    """
    keys = np.random.default_rng(seed).random(corpus.n_tokens)
    doc_ids = corpus.doc_ids
    order = np.lexsort((keys, doc_ids))
    rank = np.arange(corpus.n_tokens) - corpus.doc_ptr[doc_ids]
    observed = np.empty(corpus.n_tokens, dtype=bool)
    observed[order] = rank < (corpus.doc_lengths // 2)[doc_ids]
    return observed


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

    As DESIGN.md defines it: each document is split in two halves with a fixed seed
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
    phi = check_topic_word(topic_word, corpus.n_words)
    scored_docs = corpus.doc_lengths >= 2
    if not scored_docs.any():
        raise ValueError("no document has 2 or more in-vocabulary tokens; perplexity is undefined")
    doc_ids = corpus.doc_ids
    scored = scored_docs[doc_ids]
    observed = completion_split(corpus, seed=seed) & scored
    held_out = ~observed & scored
    first_half = sp.csr_matrix(
        (np.ones(int(observed.sum())), (doc_ids[observed], corpus.tokens[observed])),
        shape=(corpus.n_docs, corpus.n_words),
    )
    theta = fold_in(phi, first_half, alpha=alpha, n_iter=n_iter)
    p_w = np.einsum("nk,nk->n", theta[doc_ids[held_out]], phi.T[corpus.tokens[held_out]])
    with np.errstate(divide="ignore"):
        log_likelihood = float(np.log(p_w).sum())
    n_eval = int(held_out.sum())
    return PerplexityResult(
        perplexity=float(np.exp(-log_likelihood / n_eval)),
        n_eval_tokens=n_eval,
        n_oov=int(n_oov),
        n_docs=int(scored_docs.sum()),
    )
