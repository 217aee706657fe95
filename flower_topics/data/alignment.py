"""A corpus re-expressed over another vocabulary (a model's, a run's), its other words dropped: numpy only, so that
a check of a file against a vocabulary imports nothing of the metrics."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from flower_topics.data.corpus import Corpus


def align_corpus(corpus: Corpus, vocabulary: Sequence[str]) -> tuple[Corpus, int]:
    """Re-express ``corpus`` over the model's ``vocabulary``, dropping unknown words.

    Token ids are mapped through one lookup array (corpus id -> model column, -1
    for a word the model does not know); out-of-vocabulary tokens are removed, as
    docs/architecture.md says for perplexity ("Out-of-vocabulary words are skipped and
    counted"). Documents, their order, labels and split are kept; a document whose
    tokens are all out of vocabulary becomes empty.

    Parameters
    ----------
    corpus : Corpus
        Documents over any vocabulary.
    vocabulary : sequence of str
        The model's vocabulary, in ``topic_word`` column order (distinct words).

    Returns
    -------
    aligned : Corpus
        The corpus with token ids that index the columns of ``topic_word``.
    n_oov : int
        Number of tokens dropped because their word is not in ``vocabulary``.

    Raises
    ------
    ValueError
        If ``vocabulary`` contains a word twice.
    """
    vocabulary = tuple(vocabulary)
    if corpus.vocabulary == vocabulary:
        return corpus, 0
    column = {word: j for j, word in enumerate(vocabulary)}
    if len(column) != len(vocabulary):
        raise ValueError("the model vocabulary contains duplicate words")
    lookup = np.fromiter(
        (column.get(word, -1) for word in corpus.vocabulary), dtype=np.int64, count=corpus.n_words
    )
    mapped = lookup[corpus.tokens]
    keep = mapped >= 0
    kept_before = np.zeros(corpus.n_tokens + 1, dtype=np.int64)
    np.cumsum(keep, out=kept_before[1:])
    aligned = Corpus(
        tokens=mapped[keep].astype(np.int32),
        doc_ptr=kept_before[corpus.doc_ptr],
        vocabulary=vocabulary,
        labels=corpus.labels,
        split=corpus.split,
        dates=corpus.dates,
    )
    return aligned, int(corpus.n_tokens - aligned.n_tokens)


__all__ = ["align_corpus"]
