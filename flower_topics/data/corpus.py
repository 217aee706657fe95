"""The in-memory corpus every part of the package works on.

A :class:`Corpus` holds documents as one flat array of token ids plus document
offsets (CSR layout), so that samplers and metrics run over contiguous integer
arrays at compiled speed and no Python list of strings is kept per token.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

if TYPE_CHECKING:  # imported where a matrix is built: a party's training message needs no scipy
    import scipy.sparse as sp

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class Corpus:
    """Tokenized documents over a fixed vocabulary.

    Parameters
    ----------
    tokens : np.ndarray
        ``int32`` token ids of all documents, concatenated in document order.
    doc_ptr : np.ndarray
        ``int64`` offsets of length ``n_docs + 1``: document ``d`` is
        ``tokens[doc_ptr[d]:doc_ptr[d + 1]]``.
    vocabulary : tuple of str
        Word of each token id, in id order.
    labels : np.ndarray or None
        Label (string) of each document, or None when the corpus has none.
    split : np.ndarray or None
        ``"train"``, ``"val"`` or ``"test"`` for each document, or None when the
        corpus came without a partition.
    sentence_start : np.ndarray or None
        ``bool`` per token, True where a sentence begins (always at a document's
        first token), for raw-text corpora; None when the corpus has no sentences
        (OCTIS and synthetic corpora).
    dates : np.ndarray or None
        Each document's date as read (a string, ``""`` for a document without one,
        see :mod:`flower_topics.data.periods`), or None when the corpus was read
        without a ``date-column``.
    """

    tokens: np.ndarray
    doc_ptr: np.ndarray
    vocabulary: tuple[str, ...]
    labels: np.ndarray | None = None
    split: np.ndarray | None = None
    sentence_start: np.ndarray | None = None
    dates: np.ndarray | None = None
    _word_index: dict[str, int] = field(default=None, repr=False, compare=False)  # type: ignore[assignment]
    #: Forms derived from the documents that a method keeps for the corpus' lifetime (:func:`derived`).
    _derived: dict[str, object] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        tokens = np.ascontiguousarray(self.tokens, dtype=np.int32)
        doc_ptr = np.ascontiguousarray(self.doc_ptr, dtype=np.int64)
        object.__setattr__(self, "tokens", tokens)
        object.__setattr__(self, "doc_ptr", doc_ptr)
        object.__setattr__(self, "vocabulary", tuple(self.vocabulary))
        if doc_ptr.ndim != 1 or doc_ptr.size < 1 or doc_ptr[0] != 0 or doc_ptr[-1] != tokens.size:
            raise ValueError("doc_ptr must start at 0 and end at len(tokens)")
        if np.any(np.diff(doc_ptr) < 0):
            raise ValueError("doc_ptr must be non-decreasing")
        if tokens.size and (tokens.min() < 0 or tokens.max() >= len(self.vocabulary)):
            raise ValueError("token ids must lie in [0, len(vocabulary))")
        if self.dates is not None:
            dates = np.asarray(self.dates, dtype=object)
            if dates.ndim == 1 and dates.size:  # None (no date) becomes "", as the readers write it
                dates = np.where(dates == None, "", dates)  # elementwise on an object array
            object.__setattr__(self, "dates", dates)
        for name in ("labels", "split", "dates"):
            value = getattr(self, name)
            if value is not None:
                value = np.asarray(value, dtype=object)
                if value.shape != (self.n_docs,):
                    raise ValueError(f"{name} must have one entry per document")
                object.__setattr__(self, name, value)
        if self.split is not None and not set(self.split) <= set(SPLITS):
            raise ValueError(f"split entries must be one of {SPLITS}")
        if self.sentence_start is not None:
            starts = np.ascontiguousarray(self.sentence_start, dtype=bool)
            if starts.shape != tokens.shape:
                raise ValueError("sentence_start must have one entry per token")
            firsts = doc_ptr[:-1][np.diff(doc_ptr) > 0]
            if not starts[firsts].all():
                raise ValueError("sentence_start must be True at the first token of every document")
            object.__setattr__(self, "sentence_start", starts)

    # ------------------------------------------------------------------ sizes
    @property
    def n_docs(self) -> int:
        """Number of documents."""
        return int(self.doc_ptr.size - 1)

    @property
    def n_tokens(self) -> int:
        """Number of tokens over all documents."""
        return int(self.tokens.size)

    @property
    def n_words(self) -> int:
        """Vocabulary size V."""
        return len(self.vocabulary)

    @property
    def doc_lengths(self) -> np.ndarray:
        """Number of tokens of each document."""
        return np.diff(self.doc_ptr)

    @property
    def doc_ids(self) -> np.ndarray:
        """Document index of every token (``int32``, same length as ``tokens``)."""
        return np.repeat(np.arange(self.n_docs, dtype=np.int32), self.doc_lengths)

    @property
    def word_index(self) -> dict[str, int]:
        """Map from word to token id."""
        if self._word_index is None:
            object.__setattr__(self, "_word_index", {w: i for i, w in enumerate(self.vocabulary)})
        return self._word_index

    @property
    def sentence_ptr(self) -> np.ndarray | None:
        """``int64`` offsets of the sentences into ``tokens`` (CSR, like ``doc_ptr``, which
        they refine: every document boundary is a sentence boundary); None without sentences."""
        if self.sentence_start is None:
            return None
        return np.union1d(np.flatnonzero(self.sentence_start), self.doc_ptr).astype(np.int64)

    def largest_word_count(self) -> int:
        """The most times one word occurs over all documents (0 without tokens): the largest count of one word that
        a party holding this corpus can contribute to a sum."""
        return int(np.bincount(self.tokens).max()) if self.n_tokens else 0

    def document(self, d: int) -> np.ndarray:
        """Token ids of document ``d``."""
        return self.tokens[self.doc_ptr[d] : self.doc_ptr[d + 1]]

    def words(self, d: int) -> list[str]:
        """Words of document ``d``."""
        return [self.vocabulary[t] for t in self.document(d)]

    # ---------------------------------------------------------- derived forms
    def derived(self, name: str, build: Callable[[Corpus], object]) -> object:
        """``build(self)``, computed once per corpus and kept under ``name`` (the corpus is immutable)."""
        if name not in self._derived:
            self._derived[name] = build(self)
        return self._derived[name]

    def doc_term_matrix(self) -> sp.csr_matrix:
        """Document-term count matrix, shape ``(n_docs, V)``, ``int64`` counts."""
        import scipy.sparse as sp

        data = np.ones(self.n_tokens, dtype=np.int64)
        # copies: sum_duplicates() sorts the index arrays in place, which must not touch self.tokens
        m = sp.csr_matrix((data, self.tokens.copy(), self.doc_ptr.copy()), shape=(self.n_docs, self.n_words))
        m.sum_duplicates()
        return m

    def subset(self, indices: Sequence[int] | np.ndarray) -> "Corpus":
        """The documents at ``indices`` (in that order), same vocabulary."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.size and (idx.min() < 0 or idx.max() >= self.n_docs):
            raise IndexError("document index out of range")
        lengths = self.doc_lengths[idx]
        doc_ptr = np.zeros(idx.size + 1, dtype=np.int64)
        np.cumsum(lengths, out=doc_ptr[1:])
        if idx.size:
            starts = self.doc_ptr[idx]
            token_pos = np.repeat(starts - doc_ptr[:-1], lengths) + np.arange(doc_ptr[-1])
            tokens = self.tokens[token_pos]
        else:
            token_pos = np.zeros(0, dtype=np.int64)
            tokens = np.zeros(0, dtype=np.int32)
        return Corpus(
            tokens=tokens,
            doc_ptr=doc_ptr,
            vocabulary=self.vocabulary,
            labels=None if self.labels is None else self.labels[idx],
            split=None if self.split is None else self.split[idx],
            sentence_start=None if self.sentence_start is None else self.sentence_start[token_pos],
            dates=None if self.dates is None else self.dates[idx],
        )

    def select_split(self, *names: str) -> "Corpus":
        """The documents whose split is one of ``names`` (corpus order kept)."""
        if self.split is None:
            raise ValueError("this corpus has no train/val/test split")
        unknown = set(names) - set(SPLITS)
        if unknown:
            raise ValueError(f"unknown split name(s) {sorted(unknown)}; use {SPLITS}")
        return self.subset(np.flatnonzero(np.isin(self.split, names)))

    @classmethod
    def from_documents(
        cls,
        documents: Sequence[Sequence[int]],
        vocabulary: Sequence[str],
        labels: Sequence[str] | None = None,
        split: Sequence[str] | None = None,
        dates: Sequence[str | None] | None = None,
    ) -> "Corpus":
        """Build a corpus from per-document token id lists (``labels``, ``split`` and ``dates``: one per document)."""
        lengths = np.fromiter((len(d) for d in documents), dtype=np.int64, count=len(documents))
        doc_ptr = np.zeros(len(documents) + 1, dtype=np.int64)
        np.cumsum(lengths, out=doc_ptr[1:])
        tokens = (
            np.concatenate([np.asarray(d, dtype=np.int32) for d in documents])
            if len(documents) and doc_ptr[-1]
            else np.zeros(0, dtype=np.int32)
        )
        return cls(
            tokens=tokens,
            doc_ptr=doc_ptr,
            vocabulary=tuple(vocabulary),
            labels=None if labels is None else np.asarray(labels, dtype=object),
            split=None if split is None else np.asarray(split, dtype=object),
            dates=None if dates is None else np.asarray(dates, dtype=object),
        )
