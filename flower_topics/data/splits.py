"""Train/val/test splits: a fixed-seed split for corpora without one, stored next to a run.

Methods train on ``train`` + ``val`` and are evaluated on ``test`` (docs/architecture.md, "Data
flow"). OCTIS corpora bring their own split; every other corpus gets a random one,
drawn from the run's seed and written to the run's output folder so that it can be
reused.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Sequence

import numpy as np

from flower_topics.data.corpus import SPLITS, Corpus
from flower_topics.errors import UserInputError


def split_counts(n_docs: int, ratios: Sequence[float]) -> tuple[int, int, int]:
    """Number of train, val and test documents for ``ratios`` of ``n_docs``.

    Each count is ``ratio * n_docs`` rounded half up, the test count takes the rest.
    A split with a positive ratio that would get no document takes one from the
    largest split, as long as there are enough documents to go round.

    Parameters
    ----------
    n_docs : int
        Number of documents.
    ratios : sequence of 3 floats
        Train, val and test fractions, non-negative and summing to 1.
    """
    if len(ratios) != 3 or any(not np.isfinite(r) or r < 0 for r in ratios) or abs(sum(ratios) - 1) > 1e-6:
        raise UserInputError(
            f"split ratios {tuple(ratios)} are invalid; give 3 non-negative train/val/test fractions summing to 1"
        )
    n_train = int(np.floor(ratios[0] * n_docs + 0.5))
    n_val = min(int(np.floor(ratios[1] * n_docs + 0.5)), n_docs - n_train)
    counts = [n_train, n_val, n_docs - n_train - n_val]
    if n_docs >= sum(r > 0 for r in ratios):
        for i, ratio in enumerate(ratios):
            if ratio > 0 and counts[i] == 0:
                counts[int(np.argmax(counts))] -= 1
                counts[i] = 1
    return counts[0], counts[1], counts[2]


def ensure_split(corpus: Corpus, seed: int, ratios: Sequence[float] = (0.8, 0.1, 0.1)) -> Corpus:
    """The corpus with a train/val/test split: its own, or a random one drawn from ``seed``.

    Parameters
    ----------
    corpus : Corpus
        Any corpus.
    seed : int
        Seed of the random split (used only when ``corpus.split`` is None).
    ratios : sequence of 3 floats
        Train, val and test fractions; the counts are given by :func:`split_counts`.

    Returns
    -------
    Corpus
        ``corpus`` itself if it has a split, otherwise a copy with a random split
        (document order kept).
    """
    if corpus.split is not None:
        return corpus
    n_train, n_val, _ = split_counts(corpus.n_docs, ratios)
    order = np.random.default_rng(seed).permutation(corpus.n_docs)
    split = np.full(corpus.n_docs, "test", dtype=object)
    split[order[:n_train]] = "train"
    split[order[n_train : n_train + n_val]] = "val"
    return dataclasses.replace(corpus, split=split)


def write_split(path: str | os.PathLike[str], corpus: Corpus) -> Path:
    """Write the split of ``corpus``, one name per line in document order.

    Parameters
    ----------
    path : str or path-like
        File to write; missing parent folders are created.
    corpus : Corpus
        A corpus with a split (see :func:`ensure_split`).

    Returns
    -------
    Path
        The written file.
    """
    if corpus.split is None:
        raise ValueError("the corpus has no split to write; call ensure_split first")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{name}\n" for name in corpus.split), encoding="utf-8")
    return path


def read_split(path: str | os.PathLike[str]) -> np.ndarray:
    """Read a split written by :func:`write_split`.

    Parameters
    ----------
    path : str or path-like
        File with one of ``train``, ``val``, ``test`` per line.

    Returns
    -------
    np.ndarray
        Object array of split names, one per document.
    """
    path = Path(path)
    if not path.is_file():
        raise UserInputError(f"split file {str(path)!r} does not exist; pass the split.txt a run wrote")
    names = path.read_text(encoding="utf-8").splitlines()
    for number, name in enumerate(names, start=1):
        if name not in SPLITS:
            raise UserInputError(f"{path} line {number} is {name!r}; every line must be one of {', '.join(SPLITS)}")
    if not names:
        raise UserInputError(f"split file {path} is empty; pass the split.txt a run wrote")
    return np.asarray(names, dtype=object)


def training_corpus(corpus: Corpus) -> Corpus:
    """The documents models train on: ``train`` and ``val``, in corpus order."""
    return corpus.select_split("train", "val")


def test_corpus(corpus: Corpus) -> Corpus:
    """The held-out documents models are evaluated on: ``test``, in corpus order."""
    return corpus.select_split("test")


# pytest would otherwise collect this function as a test when a test module imports it.
test_corpus.__test__ = False  # type: ignore[attr-defined]
