"""Guided topics: a public file of seed words and the asymmetric topic-word prior it makes.

The file (run-config ``seed-words``) holds one topic per line, its seed words separated by
spaces; blank lines and lines starting with ``#`` are skipped. Line i seeds topic i: seeded
topics come first, in the file's order, and the other topics are free. The prior adds
``seed-weight`` to the symmetric ``beta`` of each seed word in its topic, as tomotopy's
``set_word_prior`` and gensim's matrix ``eta`` do::

    beta_kw = beta + seed_weight   if w is a seed word of topic k
    beta_kw = beta                 otherwise

and the topic's prior mass ``B_k = sum_w beta_kw`` replaces ``V beta`` in the collapsed
conditional ``(n_kw + beta_kw) / (n_k + B_k)`` and in ``phi_kw = (n_kw + beta_kw) / (n_k + B_k)``.
The file is public text the server reads; it depends on no party's documents.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from flower_topics.errors import UserInputError
from flower_topics.options import shown

#: The default ``seed-weight``: the pseudo-count a seed word adds to its topic's prior.
SEED_WEIGHT = 100.0

logger = logging.getLogger("flower_topics")


def read_seed_lines(path: str) -> list[list[str]]:
    """The seed words of each topic in a ``seed-words`` file, in the file's order.

    Parameters
    ----------
    path : str
        A text file (UTF-8): one topic per line, its seed words separated by spaces; blank lines
        and lines starting with ``#`` are skipped; a word repeated on a line counts once.

    Returns
    -------
    list of list of str
        One list of distinct words per seeded topic.

    Raises
    ------
    UserInputError
        One line when the file is missing, unreadable or holds no seed word.
    """
    file = Path(path).expanduser()
    if not file.is_file():
        raise UserInputError(f"seed-words {shown(path, 200)} is not a file (one topic per line, its seed words "
                             "separated by spaces)")
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UserInputError(f"seed-words file {shown(path, 200)} cannot be read: {' '.join(str(exc).split())}"
                             ) from None
    lines = [list(dict.fromkeys(line.split())) for line in text.splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    if not lines:
        raise UserInputError(f"seed-words file {shown(path, 200)} holds no seed words (one topic per line, its "
                             "seed words separated by spaces)")
    return lines


@dataclass(frozen=True)
class SeedPrior:
    """Seed words as (topic, word id) pairs and the weight each adds to ``beta``.

    Parameters
    ----------
    topics, words : numpy.ndarray
        ``int32`` topic and word id of each seed pair (no pair twice).
    weight : float
        What a seed word adds to ``beta`` in its topic (``> 0``).
    n_topics, n_words : int
        K and V of the model the prior belongs to.
    """

    topics: np.ndarray
    words: np.ndarray
    weight: float
    n_topics: int
    n_words: int

    def __post_init__(self) -> None:
        topics = np.asarray(self.topics, dtype=np.int32).reshape(-1)
        words = np.asarray(self.words, dtype=np.int32).reshape(-1)
        if topics.shape != words.shape:
            raise ValueError("topics and words must have one entry per seed pair")
        if topics.size and (topics.min() < 0 or topics.max() >= self.n_topics
                            or words.min() < 0 or words.max() >= self.n_words):
            raise ValueError(f"seed pairs must lie in [0, {self.n_topics}) x [0, {self.n_words})")
        if np.unique(topics.astype(np.int64) * self.n_words + words).size != topics.size:
            raise ValueError("a seed pair is listed twice")
        if not 0 < self.weight < float("inf"):
            raise ValueError("the seed weight must be > 0 and finite")
        object.__setattr__(self, "topics", topics)
        object.__setattr__(self, "words", words)

    @property
    def seeded_topics(self) -> int:
        """How many topics (the first ones) have seed words."""
        return int(self.topics.max()) + 1 if self.topics.size else 0

    def matrix(self, beta: float) -> np.ndarray:
        """``(K, V)`` float64 ``beta_kw``."""
        prior = np.full((self.n_topics, self.n_words), float(beta))
        prior[self.topics, self.words] += self.weight
        return prior

    def topic_sums(self, beta: float) -> np.ndarray:
        """``(K,)`` float64 ``B_k = sum_w beta_kw = V beta + weight x (seed words of topic k)``."""
        seeds = np.bincount(self.topics, minlength=self.n_topics).astype(np.float64)
        return self.n_words * float(beta) + self.weight * seeds

    def word_rows(self, beta: float) -> tuple[np.ndarray, np.ndarray]:
        """The prior by seeded word, as the samplers read it.

        Returns
        -------
        rows : numpy.ndarray
            ``(V,)`` int32: the row of ``priors`` of each seed word, -1 for a word no topic seeds.
        priors : numpy.ndarray
            ``(R, K)`` float64 ``beta_kw`` of the R seed words (in word order).
        """
        seeded = np.unique(self.words)
        rows = np.full(self.n_words, -1, dtype=np.int32)
        rows[seeded] = np.arange(seeded.size, dtype=np.int32)
        priors = np.full((seeded.size, self.n_topics), float(beta))
        priors[rows[self.words], self.topics] += self.weight
        return rows, priors

    def privacy_note(self) -> str:
        """What the privacy report says of the seeds (its ``seed_words`` entry)."""
        return (f"public: {self.topics.size} seed word(s) for {self.seeded_topics} topic(s), read by the server from "
                "the seed-words file; they depend on no party's documents and cost no privacy")


def seed_prior(lines: Sequence[Sequence[str]], vocabulary: Sequence[str], n_topics: int, weight: float
               ) -> tuple[SeedPrior, list[str]]:
    """The prior of seed lines over a vocabulary: line i seeds topic i; words outside it are dropped.

    Parameters
    ----------
    lines : sequence of sequence of str
        Each seeded topic's words (:func:`read_seed_lines`).
    vocabulary : sequence of str
        The agreed vocabulary, in column order.
    n_topics : int
        K; at least the number of lines.
    weight : float
        ``seed-weight``.

    Returns
    -------
    (SeedPrior, list of str)
        The prior and the seed words outside the vocabulary (dropped), in the file's order.

    Raises
    ------
    UserInputError
        One line when there are more lines than topics, or when no seed word is in the vocabulary.
    """
    if len(lines) > n_topics:
        raise UserInputError(f"seed-words: the file seeds {len(lines)} topics but num-topics is {n_topics}; "
                             "give at most one line per topic")
    column = {word: i for i, word in enumerate(vocabulary)}
    pairs: dict[tuple[int, int], None] = {}
    dropped: list[str] = []
    for topic, words in enumerate(lines):
        for word in words:
            if word in column:
                pairs[(topic, column[word])] = None
            elif word not in dropped:
                dropped.append(word)
    if not pairs:
        raise UserInputError(f"seed-words: none of the {len(dropped)} seed words is in the agreed vocabulary of "
                             f"{len(vocabulary)} words (e.g. {', '.join(dropped[:5])}); nothing to guide the topics")
    topics, words = (np.array(side, dtype=np.int32) for side in zip(*pairs))
    return SeedPrior(topics, words, float(weight), int(n_topics), len(vocabulary)), dropped


def load_seed_prior(path: str, vocabulary: Sequence[str], n_topics: int, weight: float, *,
                    lowercase: bool = False) -> tuple[SeedPrior, list[str]]:
    """:func:`seed_prior` of the file ``path`` (:func:`read_seed_lines`), its words lowercased first when the
    corpus is (run-config ``lowercase``), as the vocabulary's words are."""
    lines = read_seed_lines(path)
    if lowercase:
        lines = [list(dict.fromkeys(word.lower() for word in line)) for line in lines]
    return seed_prior(lines, vocabulary, n_topics, weight)


def check_seed_file(config: Mapping[str, Any]) -> None:
    """Before a run: the validated run config's ``seed-words`` file (if any) can be read, holds seed words and
    seeds at most ``num-topics`` topics; its words meet the vocabulary only once that is agreed.

    Raises
    ------
    UserInputError
        One line naming what is wrong with the file.
    """
    path = str(config.get("seed-words", ""))
    if not path:
        return
    lines = read_seed_lines(path)
    if len(lines) > int(config["num-topics"]):
        raise UserInputError(f"seed-words: the file seeds {len(lines)} topics but num-topics is "
                             f"{config['num-topics']}; give at most one line per topic")


def config_seed_prior(config: Mapping[str, Any], vocabulary: Sequence[str]) -> SeedPrior | None:
    """The seed prior of a validated run config over the agreed ``vocabulary`` (None without ``seed-words``);
    the seed words outside it are named in one warning line (:func:`dropped_line`) and dropped.

    Raises
    ------
    UserInputError
        As :func:`load_seed_prior`.
    """
    path = str(config.get("seed-words", ""))
    if not path:
        return None
    seeds, dropped = load_seed_prior(path, vocabulary, int(config["num-topics"]), float(config["seed-weight"]),
                                     lowercase=bool(config["lowercase"]))
    if dropped:
        logger.warning("%s", dropped_line(dropped))
    return seeds


def dropped_line(dropped: Sequence[str], limit: int = 20) -> str:
    """One line naming the seed words outside the vocabulary (at most ``limit`` of them, then how many more)."""
    named = ", ".join(dropped[:limit]) + (f" and {len(dropped) - limit} more" if len(dropped) > limit else "")
    return f"seed-words: {len(dropped)} seed word(s) not in the agreed vocabulary, dropped: {named}"
