"""Topic prevalence by period: each period's summed topic shares and its number of documents.

A party folds its documents in against the final topics (one ``theta`` row per document, its
topic shares, summing to 1) and adds the rows of each period: a ``K x T`` table of summed
shares and ``T`` document counts. Tables add across parties (:meth:`PrevalenceTable.plus`);
a topic's prevalence in a period is its summed share over the period's documents
(:meth:`PrevalenceTable.shares`), so every period's shares sum to 1 over the topics.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

#: The columns of ``prevalence.csv``.
CSV_COLUMNS = ("period", "topic", "label", "share", "documents")


def period_totals(theta: np.ndarray, index: np.ndarray, n_periods: int) -> tuple[np.ndarray, np.ndarray]:
    """Summed topic shares and document counts per period.

    Parameters
    ----------
    theta : np.ndarray
        ``D x K`` topic shares of the documents (rows sum to 1).
    index : np.ndarray
        ``D`` period positions in ``[0, n_periods)``, or -1 for a document without a date
        (left out of both totals).
    n_periods : int
        ``T``.

    Returns
    -------
    sums : np.ndarray
        ``K x T`` float64: column ``t`` is the sum of the theta rows of period ``t``.
    documents : np.ndarray
        ``T`` int64: the documents of each period.
    """
    theta = np.asarray(theta, dtype=np.float64)
    index = np.asarray(index, dtype=np.int64)
    if theta.ndim != 2 or index.shape != (theta.shape[0],):
        raise ValueError(f"theta must be D x K and index D long, got {theta.shape} and {index.shape}")
    if index.size and (index.max() >= n_periods or index.min() < -1):
        raise ValueError(f"period positions must lie in [-1, {n_periods})")
    dated = index >= 0
    sums = np.zeros((n_periods, theta.shape[1]), dtype=np.float64)
    np.add.at(sums, index[dated], theta[dated])
    return sums.T.copy(), np.bincount(index[dated], minlength=n_periods).astype(np.int64)


@dataclass(frozen=True)
class PrevalenceTable:
    """Summed topic shares per period.

    Parameters
    ----------
    periods : tuple of str
        Period labels in time order (:func:`flower_topics.data.periods.period_label`).
    sums : np.ndarray
        ``K x T`` summed topic shares.
    documents : np.ndarray
        ``T`` documents per period (float when it carries privacy noise).
    undated : int
        Documents left out because they have no date.
    """

    periods: tuple[str, ...]
    sums: np.ndarray
    documents: np.ndarray
    undated: int = 0

    def __post_init__(self) -> None:
        sums, documents = np.asarray(self.sums, dtype=np.float64), np.asarray(self.documents)
        if sums.ndim != 2 or sums.shape[1] != len(self.periods) or documents.shape != (len(self.periods),):
            raise ValueError(f"{len(self.periods)} periods need K x {len(self.periods)} sums and as many counts, got "
                             f"{sums.shape} and {documents.shape}")
        if len(set(self.periods)) != len(self.periods):
            raise ValueError("periods must be distinct")
        object.__setattr__(self, "sums", sums)
        object.__setattr__(self, "documents", documents)

    @property
    def n_topics(self) -> int:
        """``K``."""
        return int(self.sums.shape[0])

    def on_periods(self, periods: Sequence[str]) -> PrevalenceTable:
        """This table over ``periods`` (a superset of its own): zero where it has no document."""
        position = {label: i for i, label in enumerate(periods)}
        missing = [p for p in self.periods if p not in position]
        if missing:
            raise ValueError(f"periods {missing} are not in the target periods")
        columns = np.array([position[p] for p in self.periods], dtype=np.int64)
        sums = np.zeros((self.n_topics, len(periods)))
        documents = np.zeros(len(periods), dtype=self.documents.dtype)
        sums[:, columns] = self.sums
        documents[columns] = self.documents
        return PrevalenceTable(tuple(periods), sums, documents, self.undated)

    def plus(self, other: PrevalenceTable) -> PrevalenceTable:
        """The sum of two parties' tables over the union of their periods."""
        if other.n_topics != self.n_topics:
            raise ValueError(f"tables of {self.n_topics} and {other.n_topics} topics do not add")
        periods = tuple(sorted(set(self.periods) | set(other.periods)))
        mine, theirs = self.on_periods(periods), other.on_periods(periods)
        return PrevalenceTable(periods, mine.sums + theirs.sums, mine.documents + theirs.documents,
                               self.undated + other.undated)

    def shares(self) -> np.ndarray:
        """``K x T`` prevalence: each period's summed shares over its documents (NaN for a period without any).

        A noisy table's negative sums count as 0 and each period's shares are taken over its non-negative sums
        (post-processing: it costs no privacy); an exact table's shares are its sums over its documents."""
        positive = np.maximum(self.sums, 0.0)
        total = positive.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where((self.documents > 0) & (total > 0), positive / np.where(total > 0, total, 1), np.nan)

    def csv_rows(self, labels: Sequence[str] | None = None) -> Iterator[list[str | int]]:
        """The rows of ``prevalence.csv`` (:data:`CSV_COLUMNS`), one per period and topic, topics numbered from 0."""
        labels = list(labels) if labels is not None else [""] * self.n_topics
        shares = self.shares()
        for t, period in enumerate(self.periods):
            for k in range(self.n_topics):
                share = "" if np.isnan(shares[k, t]) else f"{shares[k, t]:.6g}"
                yield [period, k, labels[k], share, f"{self.documents[t]:.6g}"]

    def write_csv(self, path: str | Path, labels: Sequence[str] | None = None) -> Path:
        """``prevalence.csv``: :meth:`csv_rows` under the :data:`CSV_COLUMNS` header."""
        path = Path(path)
        with path.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(CSV_COLUMNS)
            writer.writerows(self.csv_rows(labels))
        return path
