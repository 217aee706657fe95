"""Topic similarity score against known topics (docs/architecture.md, "Metric definitions")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from flower_topics.metrics.inference import check_topic_word


@dataclass(frozen=True)
class SimilarityResult:
    """Outcome of :func:`topic_similarity_score`.

    Parameters
    ----------
    score : float
        Sum over true topics of the best ``1 - H^2`` to an inferred topic.
    normalized : float
        ``score / K_true``, in ``[0, 1]``.
    """

    score: float
    normalized: float


def topic_similarity_score(true_topic_word: np.ndarray, topic_word: np.ndarray) -> SimilarityResult:
    """Topic similarity score (TSS) of inferred topics to the true ones.

    docs/architecture.md: the sum over true topics of the best (1 - squared Hellinger
    distance) to an inferred topic, and that sum divided by the number of true
    topics. With the squared Hellinger distance
    ``H^2(p, q) = 1/2 sum_w (sqrt p_w - sqrt q_w)^2 = 1 - sum_w sqrt(p_w q_w)``
    (for distributions ``p``, ``q``), ``1 - H^2`` is the Bhattacharyya
    coefficient ``sum_w sqrt(p_w q_w)``, which this computes. Several true topics
    may match the same inferred topic; the score is invariant to the order of
    either set of topics.

    Parameters
    ----------
    true_topic_word : np.ndarray
        ``(K_true, V)`` true topic-word distributions.
    topic_word : np.ndarray
        ``(K, V)`` inferred topic-word distributions over the same columns
        (:func:`align_topics` puts true topics on a model's vocabulary).

    Returns
    -------
    SimilarityResult
    """
    truth = check_topic_word(true_topic_word)
    phi = check_topic_word(topic_word, truth.shape[1])
    coefficient = np.sqrt(truth) @ np.sqrt(phi).T
    score = float(coefficient.max(axis=1).sum())
    return SimilarityResult(score=score, normalized=score / truth.shape[0])


def align_topics(
    true_topic_word: np.ndarray, true_vocabulary: Sequence[str], vocabulary: Sequence[str]
) -> np.ndarray:
    """Put true topics on a model's vocabulary for :func:`topic_similarity_score`.

    Columns of true words missing from ``vocabulary`` are dropped and each true
    row is renormalized to sum to 1 over the remaining words; model words missing
    from ``true_vocabulary`` get probability 0. A true topic with no mass left
    stays all zeros (it then scores 0).

    Parameters
    ----------
    true_topic_word : np.ndarray
        ``(K_true, V_true)`` true topic-word distributions.
    true_vocabulary : sequence of str
        The word of each column of ``true_topic_word``.
    vocabulary : sequence of str
        The model's vocabulary, in column order.

    Returns
    -------
    np.ndarray
        ``(K_true, len(vocabulary))`` true topics over the model's columns.
    """
    truth = check_topic_word(true_topic_word, len(true_vocabulary))
    column = {word: j for j, word in enumerate(vocabulary)}
    target = np.fromiter((column.get(w, -1) for w in true_vocabulary), dtype=np.int64, count=len(true_vocabulary))
    known = target >= 0
    aligned = np.zeros((truth.shape[0], len(column)))
    aligned[:, target[known]] = truth[:, known]
    totals = aligned.sum(axis=1, keepdims=True)
    return np.divide(aligned, totals, out=np.zeros_like(aligned), where=totals > 0)
