"""A run's topic prevalence on disk: ``prevalence.csv``, ``prevalence.png`` and ``prevalence-by-party.csv``.

``prevalence.csv`` has one row per period and topic (:data:`~flower_topics.metrics.prevalence.CSV_COLUMNS`:
period, topic, label, share, documents); ``share`` is the topic's share of the period's
documents (its summed topic shares over the period's documents), empty for a period without
any. With noise (``dplda``) the documents of a period are the noisy table's column sums, so a
share carries the noise of both. ``prevalence-by-party.csv`` (``prevalence-by-party``) adds a
``party`` column. ``prevalence.png`` draws the most prevalent topics' shares over the periods.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from flower_topics.metrics.prevalence import CSV_COLUMNS, PrevalenceTable

PREVALENCE_FILE = "prevalence.csv"
BY_PARTY_FILE = "prevalence-by-party.csv"
PREVALENCE_PLOT = "prevalence.png"
#: Topics drawn in the plot (the most prevalent over the run's periods).
PLOTTED_TOPICS = 8


def write_prevalence(directory: str | Path, prevalence: Any, labels: Sequence[str]) -> list[Path]:
    """Write a prevalence stage's outputs (:class:`~flower_topics.federation.prevalence_stage.Prevalence`:
    its ``table``, ``by_party`` and ``noise_std``) with each topic's label; returns the files written."""
    directory = Path(directory)
    written = [prevalence.table.write_csv(directory / PREVALENCE_FILE, labels)]
    if prevalence.by_party:
        written.append(write_by_party(directory / BY_PARTY_FILE, prevalence.by_party, labels))
    if prevalence.table.periods:
        written.append(plot_prevalence(prevalence.table, labels, directory / PREVALENCE_PLOT,
                                       noise_std=prevalence.noise_std))
    return written


def write_by_party(path: Path, tables: Mapping[int, PrevalenceTable], labels: Sequence[str]) -> Path:
    """One CSV of every party's table: ``party`` (its node id), then :data:`CSV_COLUMNS`."""
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(("party", *CSV_COLUMNS))
        for party, table in sorted(tables.items()):
            writer.writerows([party, *row] for row in table.csv_rows(labels))
    return path


def most_prevalent(table: PrevalenceTable, n: int = PLOTTED_TOPICS) -> np.ndarray:
    """The ``n`` topics with the largest summed share over all periods, largest first."""
    return np.argsort(-table.sums.sum(axis=1), kind="stable")[:n]


def prevalence_figure(table: PrevalenceTable, labels: Sequence[str], noise_std: float = 0.0) -> Any:
    """The most prevalent topics' shares against the period (a matplotlib ``Figure`` outside pyplot), with one
    noise standard deviation of each share shaded when the table carries noise."""
    from matplotlib.figure import Figure

    shares = table.shares()
    x = np.arange(len(table.periods))
    fig = Figure(figsize=(8.0, 4.2))
    ax = fig.subplots()
    documents = np.where(np.asarray(table.documents, dtype=float) > 0, table.documents, np.nan)
    for n, k in enumerate(most_prevalent(table)):
        ax.plot(x, shares[k], color=f"C{n}", marker="o" if len(x) < 30 else None, label=labels[k][:48])
        if noise_std:
            spread = noise_std / documents
            ax.fill_between(x, np.maximum(shares[k] - spread, 0), np.minimum(shares[k] + spread, 1), color=f"C{n}",
                            alpha=0.15, linewidth=0)
    step = max(1, len(x) // 12)
    ax.set_xticks(x[::step], [table.periods[i] for i in x[::step]], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("share of the period's documents")
    ax.set_ylim(bottom=0)
    ax.set_title("Topic prevalence over time" + (f" (noise sd {noise_std:.3g} a cell)" if noise_std else ""),
                 fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.subplots_adjust(left=0.08, right=0.68, bottom=0.22, top=0.92)
    return fig


def plot_prevalence(table: PrevalenceTable, labels: Sequence[str], path: str | Path, noise_std: float = 0.0) -> Path:
    """``prevalence.png``: :func:`prevalence_figure` saved."""
    prevalence_figure(table, labels, noise_std).savefig(path, dpi=100)
    return Path(path)


def read_prevalence(path: str | Path) -> tuple[PrevalenceTable, list[str]]:
    """``prevalence.csv`` back as a table (documents per period as written) and the topics' labels."""
    with Path(path).open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    periods = tuple(dict.fromkeys(row["period"] for row in rows))
    k = max((int(row["topic"]) for row in rows), default=-1) + 1
    labels, shares = [""] * k, np.full((k, len(periods)), np.nan)
    documents = np.zeros(len(periods))
    position = {p: i for i, p in enumerate(periods)}
    for row in rows:
        t, topic = position[row["period"]], int(row["topic"])
        labels[topic] = row["label"]
        documents[t] = float(row["documents"])
        if row["share"]:
            shares[topic, t] = float(row["share"])
    sums = np.nan_to_num(shares) * documents
    return PrevalenceTable(periods, sums, documents), labels
