"""FedLDA's updating vector (Wang, Tong and Shi 2020, Section 4), shared by client and server.

Dense representation: a document's update is the list of tuples ``(w, k_old, k_new)``
of its tokens whose topic changed. Padding & sampling: every document's list is padded
to the same length ``M`` with dummy tuples, and ``l`` tuples are drawn uniformly
without replacement, so that every document sends exactly ``l`` tuples whatever its
length or how many of its topics changed.

Dummy tuples are indistinguishable from real ones on the wire: a dummy is
``(w, k1, k2)`` with ``w`` drawn from a word prior and ``k1 != k2`` uniform, exactly the
shape of a real change. The server therefore applies them like real tuples (Algorithm
2); their net effect on the counts is zero in expectation (``k1`` and ``k2`` are
exchangeable), and they add variance. Counts may go negative at the server; phi is
computed from the counts clamped at zero (:func:`clamped_topic_word`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Tuples:
    """Update tuples ``(word, k_old, k_new)`` as three int32 arrays of equal length."""

    words: np.ndarray
    k_old: np.ndarray
    k_new: np.ndarray

    def __len__(self) -> int:
        return int(self.words.size)


def changed_tuples(tokens: np.ndarray, doc_ids: np.ndarray, z_old: np.ndarray, z_new: np.ndarray
                   ) -> tuple[np.ndarray, Tuples]:
    """Dense representation: the tuples of tokens whose topic changed, and each tuple's document."""
    changed = np.flatnonzero(z_old != z_new)
    return doc_ids[changed].astype(np.int64), Tuples(
        tokens[changed].astype(np.int32), z_old[changed].astype(np.int32), z_new[changed].astype(np.int32)
    )


def pad_and_sample(
    doc_of_tuple: np.ndarray,
    real: Tuples,
    *,
    n_docs: int,
    pad_length: int,
    sample_size: int,
    n_topics: int,
    word_prior: np.ndarray,
    rng: np.random.Generator,
) -> tuple[np.ndarray, Tuples, np.ndarray]:
    """Pad each document's tuples to ``pad_length`` with dummies and sample ``sample_size`` of them.

    Parameters
    ----------
    doc_of_tuple : np.ndarray
        Document of each real tuple (from :func:`changed_tuples`).
    real : Tuples
        The real tuples.
    n_docs : int
        Number of documents (each sends exactly ``sample_size`` tuples).
    pad_length : int
        M. A document with more than M real tuples keeps a uniform subset of M.
    sample_size : int
        l <= M, drawn uniformly without replacement from the padded list.
    n_topics : int
        K (dummies draw ``k1 != k2`` uniformly from it; needs K >= 2).
    word_prior : np.ndarray
        Distribution the dummies' words are drawn from (length V).
    rng : numpy.random.Generator
        Randomness.

    Returns
    -------
    doc : np.ndarray
        Document of each output tuple (``n_docs * sample_size``, document order).
    tuples : Tuples
        The sampled tuples.
    is_dummy : np.ndarray
        Which outputs are dummies (for the client's own bookkeeping; never sent).
    """
    if not 1 <= sample_size <= pad_length:
        raise ValueError("need 1 <= sample_size <= pad_length")
    if n_topics < 2:
        raise ValueError("dummy tuples need at least 2 topics")
    # rank each document's real tuples in a random order; keep the first pad_length
    order = np.lexsort((rng.random(doc_of_tuple.size), doc_of_tuple))
    doc_sorted = doc_of_tuple[order]
    starts = np.searchsorted(doc_sorted, np.arange(n_docs))
    slot = np.arange(doc_sorted.size) - starts[doc_sorted]
    keep = slot < pad_length
    table = np.full((n_docs, pad_length), -1, dtype=np.int64)  # index into real tuples, -1 = dummy
    table[doc_sorted[keep], slot[keep]] = order[keep]
    # uniform sample of sample_size slots per document, without replacement
    chosen = np.argsort(rng.random((n_docs, pad_length)), axis=1)[:, :sample_size]
    picked = np.take_along_axis(table, chosen, axis=1).ravel()
    is_dummy = picked < 0
    n_dummy = int(is_dummy.sum())
    words = np.empty(picked.size, dtype=np.int32)
    k_old = np.empty(picked.size, dtype=np.int32)
    k_new = np.empty(picked.size, dtype=np.int32)
    real_idx = picked[~is_dummy]
    words[~is_dummy], k_old[~is_dummy], k_new[~is_dummy] = real.words[real_idx], real.k_old[real_idx], real.k_new[real_idx]
    words[is_dummy] = rng.choice(word_prior.size, size=n_dummy, p=word_prior / word_prior.sum())
    first = rng.integers(0, n_topics, size=n_dummy)
    second = (first + rng.integers(1, n_topics, size=n_dummy)) % n_topics  # uniform over the other topics
    k_old[is_dummy], k_new[is_dummy] = first, second
    doc = np.repeat(np.arange(n_docs), sample_size)
    return doc, Tuples(words, k_old, k_new), is_dummy


def apply_tuples(counts: np.ndarray, tuples: Tuples) -> None:
    """Algorithm 2 on received tuples: ``n[k_old, w] -= 1`` and ``n[k_new, w] += 1`` (in place)."""
    np.subtract.at(counts, (tuples.k_old, tuples.words), 1)
    np.add.at(counts, (tuples.k_new, tuples.words), 1)


def clamped_topic_word(counts: np.ndarray, beta: float) -> np.ndarray:
    """phi = (max(n, 0) + beta) / row sums: the normalization of Section 4 on counts that noise
    and dummies may have pushed below zero."""
    smoothed = np.maximum(counts, 0).astype(np.float64) + beta
    return smoothed / smoothed.sum(axis=1, keepdims=True)
