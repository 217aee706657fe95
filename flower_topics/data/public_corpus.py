"""A public corpus (``dplda.public-corpus``): read with the run's reading options, put over a vocabulary, and refused
when too small to start K topics from. Numpy only, so that a launcher's check of it before anything starts imports
nothing of the method."""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from flower_topics.data.alignment import align_corpus
from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError

#: A public corpus must hold at least K documents and this many tokens per topic over the vocabulary.
PUBLIC_TOKENS_PER_TOPIC = 10


def public_corpus(config: Mapping[str, Any]) -> Callable[[], Corpus] | None:
    """A reader of the run's ``dplda.public-corpus`` with its reading options (every word kept), or None when
    unset."""
    from flower_topics.data.corpus_cache import read_source

    path = str(config["dplda.public-corpus"])
    reading = {key: config[key] for key in ("lowercase", "stopwords", "text-column", "label-column")}
    return functools.partial(read_source, path, reading) if path else None


def over_vocabulary(corpus: Corpus, vocabulary: Sequence[str]) -> Corpus:
    """``corpus`` over ``vocabulary``'s columns (:func:`~flower_topics.data.alignment.align_corpus`: other words
    dropped), without the documents left empty."""
    aligned, _ = align_corpus(corpus, vocabulary)
    lengths = np.diff(aligned.doc_ptr)
    doc_ptr = np.zeros(int((lengths > 0).sum()) + 1, dtype=np.int64)
    np.cumsum(lengths[lengths > 0], out=doc_ptr[1:])
    return Corpus(tokens=aligned.tokens, doc_ptr=doc_ptr, vocabulary=aligned.vocabulary)


def check_public_size(public: Corpus, n_topics: int, *, source: str = "dplda.public-corpus",
                      vocabulary_size: int | None = None, over: str = "the agreed vocabulary") -> None:
    """Refuse a public corpus (over the vocabulary ``over`` names) too small to start ``n_topics`` topics from.

    Raises
    ------
    UserInputError
        When it has no token, fewer than ``n_topics`` documents or fewer than :data:`PUBLIC_TOKENS_PER_TOPIC`
        x ``n_topics`` tokens (one line).
    """
    if public.n_tokens == 0:
        size = "" if vocabulary_size is None else f" ({vocabulary_size} words)"
        raise UserInputError(f"{source} shares no word with {over}{size}; pass public text of the same domain and "
                             "language, or '' for none")
    least = PUBLIC_TOKENS_PER_TOPIC * n_topics
    if public.n_docs < n_topics or public.n_tokens < least:
        raise UserInputError(f"{source} is too small to train {n_topics} topics: {public.n_docs} documents and "
                             f"{public.n_tokens} tokens over {over}; it needs at least {n_topics} documents and "
                             f"{least} tokens")


__all__ = ["PUBLIC_TOKENS_PER_TOPIC", "check_public_size", "over_vocabulary", "public_corpus"]
