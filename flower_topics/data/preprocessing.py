"""From raw texts to a :class:`Corpus`: tokenize, drop stopwords, filter the vocabulary.

Word order is kept (semantic units such as n-gram windows and sentences need it), so
the documents are tokenized with a regular expression rather than reduced to a
bag-of-words matrix. Every step after tokenization works on integer arrays.
"""

from __future__ import annotations

import functools
import importlib.util

import itertools
import logging
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError

logger = logging.getLogger("flower_topics")

#: The stopword lists ``stopwords`` may name.
STOPWORD_LISTS: tuple[str, ...] = ("english",)


@functools.lru_cache(maxsize=None)
def stopword_list(name: str) -> frozenset[str]:
    """The words of a stopword list (``"english"``: scikit-learn's ``ENGLISH_STOP_WORDS``).

    The list is read from scikit-learn's own file (``sklearn/feature_extraction/_stop_words.py``, a module
    without imports) without importing scikit-learn: importing ``sklearn.feature_extraction.text`` costs
    seconds of CPU, and on the deployment engine every message starts a ClientApp process that reads the party's
    raw texts again. Where that file is not found (another scikit-learn layout), scikit-learn is imported.
    """
    if name != "english":
        raise ValueError(f"unknown stopword list {name!r}; use one of {STOPWORD_LISTS}")
    loaded = sys.modules.get("sklearn.feature_extraction.text")
    if loaded is not None:
        return frozenset(loaded.ENGLISH_STOP_WORDS)
    package = importlib.util.find_spec("sklearn")  # finds the package without importing it
    path = Path(package.origin).parent / "feature_extraction" / "_stop_words.py" if package and package.origin else None
    if path is None or not path.is_file():
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

        return frozenset(ENGLISH_STOP_WORDS)
    spec = importlib.util.spec_from_file_location("flower_topics._sklearn_stop_words", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return frozenset(module.ENGLISH_STOP_WORDS)

#: Where a sentence ends: after ``.``, ``!`` or ``?`` followed by white space, and at line breaks.
#: Texts are split there before tokenizing (the corpus keeps the boundaries, ``Corpus.sentence_start``).
SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\s*\n\s*")


@dataclass(frozen=True)
class PreprocessConfig:
    """How raw texts become token ids.

    Parameters
    ----------
    lowercase : bool
        Lowercase each text before tokenizing.
    stopwords : str or None
        Name of a stopword list (``"english"``: scikit-learn's ``ENGLISH_STOP_WORDS``),
        or None to keep every word. Stopwords are matched case-insensitively.
    token_pattern : str
        Regular expression whose matches are the tokens (at most one capturing group,
        which then is the token). The default keeps words of two or more letters.
        It is matched within each sentence (:data:`SENTENCE_BREAK`), so a token never
        spans a sentence break; a pattern that cannot match white space (such as the
        default) finds the same tokens as on the whole text.
    min_df : float
        Drop words found in fewer documents: a whole number ``>= 1`` is a document
        count, a value in ``(0, 1)`` a fraction of the input documents.
    max_df : float
        Drop words found in more documents: a value in ``(0, 1]`` is a fraction of the
        input documents, a whole number ``> 1`` a document count.
    max_vocab : int or None
        Keep at most this many words, those in the most documents (ties broken
        alphabetically); None for no cap.
    min_doc_length : int
        Drop documents with fewer tokens than this after preprocessing.
    """

    lowercase: bool = True
    stopwords: str | None = "english"
    token_pattern: str = r"(?u)\b[^\W\d_][^\W\d_]+\b"
    min_df: float = 1
    max_df: float = 1.0
    max_vocab: int | None = None
    min_doc_length: int = 1

    def __post_init__(self) -> None:
        if self.stopwords is not None and self.stopwords not in STOPWORD_LISTS:
            raise UserInputError(
                f"stopwords {self.stopwords!r} is not a known list; use one of {sorted(STOPWORD_LISTS)} or none"
            )
        try:
            groups = re.compile(self.token_pattern).groups
        except re.error as exc:
            raise UserInputError(
                f"token pattern {self.token_pattern!r} is not a valid regular expression ({exc})"
            ) from None
        if groups > 1:
            raise UserInputError(
                f"token pattern {self.token_pattern!r} has {groups} capturing groups; use at most one, "
                "or (?:...) for non-capturing groups"
            )
        if not _is_number(self.min_df) or not (0 < self.min_df < 1 or (self.min_df >= 1 and _is_whole(self.min_df))):
            raise UserInputError(
                f"min-df {self.min_df!r} is invalid; use a document count >= 1 (e.g. 2) "
                "or a fraction in (0, 1) (e.g. 0.01)"
            )
        if not _is_number(self.max_df) or not (0 < self.max_df <= 1 or (self.max_df > 1 and _is_whole(self.max_df))):
            raise UserInputError(
                f"max-df {self.max_df!r} is invalid; use a fraction in (0, 1] (e.g. 0.5) "
                "or a document count > 1 (e.g. 100)"
            )
        if self.max_vocab is not None and (not _is_int(self.max_vocab) or self.max_vocab < 1):
            raise UserInputError(
                f"max-vocab {self.max_vocab!r} is invalid; use a positive word count, or none for no cap"
            )
        if not _is_int(self.min_doc_length) or self.min_doc_length < 1:
            raise UserInputError(f"min-doc-length {self.min_doc_length!r} is invalid; use a token count >= 1")

    def document_count_bounds(self, n_docs: int) -> tuple[float, float]:
        """The ``(min, max)`` number of documents a kept word may occur in.

        Parameters
        ----------
        n_docs : int
            Number of input documents the fractions refer to.
        """
        low = self.min_df * n_docs if self.min_df < 1 else self.min_df
        high = self.max_df * n_docs if self.max_df <= 1 else self.max_df
        return float(low), float(high)


@dataclass(frozen=True)
class PreprocessReport:
    """What preprocessing did.

    Parameters
    ----------
    n_input_docs : int
        Number of texts given.
    n_dropped_empty : int
        Documents dropped for having fewer than ``min_doc_length`` tokens left.
    vocabulary_size : int
        Number of words kept.
    n_tokens : int
        Number of tokens in the resulting corpus.
    """

    n_input_docs: int
    n_dropped_empty: int
    vocabulary_size: int
    n_tokens: int


def preprocess(
    texts: Sequence[str],
    config: PreprocessConfig,
    labels: Sequence[str] | None = None,
    dates: Sequence[str | None] | None = None,
) -> tuple[Corpus, PreprocessReport]:
    """Tokenize raw texts and build a corpus over an alphabetically sorted vocabulary.

    Each text is cut into sentences (:data:`SENTENCE_BREAK`) and the sentences are
    tokenized; the corpus keeps where each sentence starts (a sentence whose first words
    were dropped starts at its first kept word; one with no kept word vanishes).

    Document frequencies (and the ``min_df``/``max_df`` fractions) are counted over all
    input texts. Documents left with fewer than ``config.min_doc_length`` tokens are
    dropped (their count is logged), and the vocabulary keeps only words that still
    occur in the corpus.

    Parameters
    ----------
    texts : sequence of str
        One raw text per document.
    config : PreprocessConfig
        Tokenization and filtering options.
    labels : sequence of str, optional
        One label per text; kept for the surviving documents.
    dates : sequence of str, optional
        One date string per text (``""`` or None: no date); kept for the surviving documents.

    Returns
    -------
    corpus : Corpus
        The surviving documents, in input order, without a split.
    report : PreprocessReport
        Counts of what was kept and dropped.

    Raises
    ------
    UserInputError
        If a text is not a string, if ``max_df`` admits fewer documents than ``min_df``,
        or if no document survives.
    """
    n_input = len(texts)
    if labels is not None and len(labels) != n_input:
        raise ValueError(f"got {len(labels)} labels for {n_input} texts")
    if dates is not None and len(dates) != n_input:
        raise ValueError(f"got {len(dates)} dates for {n_input} texts")
    for d, text in enumerate(texts):
        if not isinstance(text, str):
            raise UserInputError(f"document {d} is {type(text).__name__}, not text; every document needs a text string")
    low, high = config.document_count_bounds(n_input)
    if high < low:
        raise UserInputError(
            f"max-df {config.max_df} allows fewer documents ({high:g}) than min-df {config.min_df} requires ({low:g}); "
            "raise max-df or lower min-df"
        )

    pattern = re.compile(config.token_pattern)
    sentences = [[pattern.findall(s) for s in SENTENCE_BREAK.split(t.lower() if config.lowercase else t)]
                 for t in texts]
    sentence_lengths = np.fromiter((len(s) for doc in sentences for s in doc), dtype=np.int64)
    per_doc = [list(itertools.chain.from_iterable(doc)) for doc in sentences]
    lengths = np.fromiter(map(len, per_doc), dtype=np.int64, count=n_input)
    words = list(dict.fromkeys(itertools.chain.from_iterable(per_doc)))  # in order of first occurrence
    index = {w: i for i, w in enumerate(words)}
    ids = np.fromiter(map(index.__getitem__, itertools.chain.from_iterable(per_doc)), dtype=np.int64,
                      count=int(lengths.sum()))
    doc_ids = np.repeat(np.arange(n_input, dtype=np.int64), lengths)

    keep_word = _vocabulary_mask(words, ids, doc_ids, config, low, high)
    keep_token = keep_word[ids]
    kept_lengths = np.bincount(doc_ids[keep_token], minlength=n_input)
    keep_doc = kept_lengths >= config.min_doc_length
    keep_token &= keep_doc[doc_ids]
    n_dropped = int(n_input - keep_doc.sum())
    if n_dropped:
        logger.info(
            "dropped %d of %d documents with fewer than %d tokens after preprocessing",
            n_dropped, n_input, config.min_doc_length,
        )
    if not keep_doc.any():
        raise UserInputError(
            f"the corpus ({n_input} texts) has no documents after preprocessing; relax min-df/max-df/stopwords/"
            "max-vocab/min-doc-length or check the text column"
        )

    kept_ids = ids[keep_token]
    kept_sentence = np.repeat(np.arange(sentence_lengths.size), sentence_lengths)[keep_token]
    sentence_start = np.ones(kept_sentence.size, dtype=bool)  # a sentence starts at its first kept token
    sentence_start[1:] = kept_sentence[1:] != kept_sentence[:-1]
    used = np.flatnonzero(np.bincount(kept_ids, minlength=len(words)))
    order = sorted(used.tolist(), key=words.__getitem__)
    remap = np.full(len(words), -1, dtype=np.int64)
    remap[order] = np.arange(len(order))
    doc_ptr = np.zeros(int(keep_doc.sum()) + 1, dtype=np.int64)
    np.cumsum(kept_lengths[keep_doc], out=doc_ptr[1:])
    corpus = Corpus(
        tokens=remap[kept_ids],
        doc_ptr=doc_ptr,
        vocabulary=tuple(words[i] for i in order),
        labels=None if labels is None else np.asarray([str(x) for x in labels], dtype=object)[keep_doc],
        sentence_start=sentence_start,
        dates=None if dates is None else np.asarray(["" if x is None else str(x) for x in dates], dtype=object)[keep_doc],
    )
    report = PreprocessReport(
        n_input_docs=n_input,
        n_dropped_empty=n_dropped,
        vocabulary_size=corpus.n_words,
        n_tokens=corpus.n_tokens,
    )
    return corpus, report


def _vocabulary_mask(
    words: list[str],
    ids: np.ndarray,
    doc_ids: np.ndarray,
    config: PreprocessConfig,
    low: float,
    high: float,
) -> np.ndarray:
    """Which of ``words`` survive the stopword, document-frequency and size filters."""
    n_words = len(words)
    keep = np.ones(n_words, dtype=bool)
    if config.stopwords is not None:
        stop = stopword_list(config.stopwords)
        keep &= np.fromiter((w.lower() not in stop for w in words), dtype=bool, count=n_words)
    pairs = np.sort(doc_ids * n_words + ids)  # the distinct (document, word) pairs: a sort, then the changes
    pairs = pairs[np.r_[True, pairs[1:] != pairs[:-1]]] if pairs.size else pairs
    df = np.bincount(pairs % n_words, minlength=n_words) if n_words else np.zeros(0, dtype=np.int64)
    keep &= (df >= low) & (df <= high)
    if config.max_vocab is not None and keep.sum() > config.max_vocab:
        ranked = sorted(np.flatnonzero(keep).tolist(), key=lambda i: (-df[i], words[i]))
        keep[:] = False
        keep[ranked[: config.max_vocab]] = True
    return keep


def _is_number(value: object) -> bool:
    numeric = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)
    return numeric and bool(np.isfinite(value))


def _is_whole(value: float) -> bool:
    return float(value).is_integer()


def _is_int(value: object) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)
