"""Topic diversity (docs/architecture.md, "Metric definitions")."""

from __future__ import annotations

import numpy as np

from flower_topics.metrics.inference import check_topic_word, top_word_indices


def topic_diversity(topic_word: np.ndarray, *, top_n: int = 25) -> float:
    """Share of distinct words among all topics' top words.

    docs/architecture.md: unique words among all topics' top 25, divided by ``25 K``. Top
    words are ranked by :func:`top_word_indices` (ties to the lower column). When
    the vocabulary has fewer than ``top_n`` words, ``n = V`` words per topic are
    used and the divisor is ``n K``.

    Parameters
    ----------
    topic_word : np.ndarray
        ``(K, V)`` topic-word matrix.
    top_n : int, default 25
        Number of top words per topic, ``>= 1``.

    Returns
    -------
    float
        Diversity in ``(0, 1]``; 1 when no two topics share a top word.
    """
    if top_n < 1:
        raise ValueError(f"top_n must be >= 1, got {top_n}")
    phi = check_topic_word(topic_word)
    top = top_word_indices(phi, min(top_n, phi.shape[1]))
    return float(np.unique(top).size / top.size)
