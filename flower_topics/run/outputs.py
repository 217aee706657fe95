"""The run-output contract: model.npz, state.npz, topics.txt, metrics.jsonl and plots.

A run writes into its own directory. ``metrics.jsonl`` grows by one line per
round as the run goes; ``model.npz``, ``state.npz`` and ``topics.txt`` are written
only when the run completes (atomically), so a failed run never leaves a model that
looks like a result.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from flower_topics.errors import UserInputError
from flower_topics.topic_model.model_file import MODEL_FILE, STATE_FILE, TopicModel, _json_default, save_model, save_npz

TOPICS_FILE = "topics.txt"
METRICS_FILE = "metrics.jsonl"
RESULT_FILES = (MODEL_FILE, STATE_FILE, TOPICS_FILE, METRICS_FILE)
PLOTTED = ("perplexity", "npmi", "umass", "diversity", "tss_normalized", "nmi", "purity", "macro_f1",
           "bytes_sent", "bytes_received")


def check_output_dir(directory: str | os.PathLike[str], resume_from: str | os.PathLike[str] | None = None) -> Path:
    """Refuse an output directory that already holds a run's outputs, unless it is the run being resumed.

    :class:`RunOutputs` checks this when the ServerApp starts; a launcher checks it before it
    starts anything. Nothing is created or written.

    Parameters
    ----------
    directory : str or os.PathLike
        The run's ``output-dir`` (relative paths: to the working directory).
    resume_from : str or os.PathLike, optional
        The run config's ``resume``: that directory may hold a run (the resumed one).

    Returns
    -------
    Path
        ``directory``, absolute.

    Raises
    ------
    UserInputError
        When ``directory`` holds one of :data:`RESULT_FILES` and is not ``resume_from``.
    """
    directory = Path(directory).expanduser().resolve()
    source = None if not resume_from else Path(resume_from).expanduser().resolve()
    existing = [name for name in RESULT_FILES if (directory / name).exists()]
    if existing and directory != source:
        raise UserInputError(
            f"output directory {directory} already holds a run's outputs ({', '.join(existing)}); "
            "choose another output-dir or remove it"
        )
    return directory


class RunOutputs:
    """Writer of one run's output directory.

    Parameters
    ----------
    directory : str or os.PathLike
        Where the outputs go; created if missing. It must not already hold a
        run's outputs (nothing is overwritten), unless it is ``resume_from``.
    resume_from : str or os.PathLike, optional
        The output directory of the interrupted run this run resumes
        (:mod:`flower_topics.run.checkpoint`).
    resume_round : int (default: 0)
        The round the run resumes after: ``metrics.jsonl`` keeps (or, into a new
        directory, copies) the lines of rounds up to it, and drops a line written after
        the checkpoint by the crashed run.
    """

    def __init__(self, directory: str | os.PathLike[str], resume_from: str | os.PathLike[str] | None = None,
                 resume_round: int = 0) -> None:
        self.directory = check_output_dir(directory, resume_from)
        source = None if resume_from is None else Path(resume_from).expanduser().resolve()
        self.directory.mkdir(parents=True, exist_ok=True)
        if source is not None:
            self._copy_metrics(source / METRICS_FILE, resume_round)

    def _copy_metrics(self, source: Path, resume_round: int) -> None:
        """``metrics.jsonl`` with the interrupted run's lines of rounds 1 .. ``resume_round`` (written atomically)."""
        rows = [row for row in read_metrics(source) if int(row.get("round", 0)) <= resume_round] \
            if source.is_file() else []
        tmp = self.metrics_path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
        os.replace(tmp, self.metrics_path)

    @property
    def metrics_path(self) -> Path:
        """Path of ``metrics.jsonl``."""
        return self.directory / METRICS_FILE

    def append_metrics(self, row: Mapping[str, Any]) -> None:
        """Append one round's metrics as a JSON line (flushed at once)."""
        with self.metrics_path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps(_finite(row), default=_json_default) + "\n")

    def write_vocabulary(self, vocabulary: tuple[str, ...]) -> Path:
        """Write ``vocabulary.txt``: the agreed words, one per line, in column order."""
        path = self.directory / "vocabulary.txt"
        path.write_text("".join(f"{w}\n" for w in vocabulary), encoding="utf-8")
        return path

    def write_model(self, model: TopicModel, n_top_words: int = 10) -> Path:
        """Write ``topics.txt`` and then ``model.npz`` (the run's result)."""
        write_topics(self.directory / TOPICS_FILE, model, n_top_words)
        return save_model(self.directory / MODEL_FILE, model)

    def write_state(self, arrays: Mapping[str, np.ndarray]) -> Path:
        """Write ``state.npz``: the strategy's final global arrays (e.g. ``ntm``'s network weights), atomically."""
        return save_npz(self.directory / STATE_FILE, **{key: np.asarray(value) for key, value in arrays.items()})

    def plot(self) -> list[Path]:
        """Plot the metrics of ``metrics.jsonl`` against the round."""
        return plot_metrics(self.metrics_path, self.directory)


def write_topics(path: str | os.PathLike[str], model: TopicModel, n_top_words: int = 10) -> Path:
    """Write one line per topic: its index, then its top words (most probable first)."""
    path = Path(path)
    lines = [f"topic {k:3d}: {' '.join(words)}" for k, words in enumerate(model.top_words(n_top_words))]
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path


def read_metrics(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Read a ``metrics.jsonl`` file."""
    with Path(path).open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


#: Title and y-axis label (with its unit) of each plotted metric.
METRIC_LABELS: Mapping[str, tuple[str, str]] = {
    "perplexity": ("Held-out perplexity (document completion)", "perplexity (lower is better)"),
    "npmi": ("NPMI coherence of the top 10 words", "NPMI, mean over topics (-1 to 1)"),
    "umass": ("UMass coherence of the top 10 words", "UMass, mean over topics"),
    "diversity": ("Topic diversity (unique words among the top 25)", "share of unique words (0 to 1)"),
    "tss_normalized": ("Similarity to the true topics (synthetic corpus)", "TSS / K (0 to 1)"),
    "nmi": ("NMI of the top topic against the labels", "NMI (0 to 1)"),
    "purity": ("Purity of the top topic against the labels", "purity (0 to 1)"),
    "macro_f1": ("Macro-F1 of a classifier on theta", "macro-F1 (0 to 1)"),
    "bytes_sent": ("Bytes the server sent per round", "bytes per round"),
    "bytes_received": ("Bytes the server received per round", "bytes per round"),
}
PRIVACY_PLOT = "privacy"


def run_label(directory: str | os.PathLike[str]) -> str:
    """``run <name>, method <m>, corpus <c>``: the run a plot belongs to (from ``model.npz``'s metadata when written)."""
    directory = Path(directory)
    label = f"run {directory.name}"
    try:
        with np.load(directory / MODEL_FILE, allow_pickle=False) as data:
            metadata = json.loads(str(data["metadata"])) if "metadata" in data.files else {}
    except (OSError, ValueError, KeyError):
        return label
    config = metadata.get("run_config", {}) if isinstance(metadata, Mapping) else {}
    if metadata.get("method"):
        label += f", method {metadata['method']}"
    if config.get("dataset"):
        label += f", corpus {Path(str(config['dataset'])).name or config['dataset']}"
    return label


def privacy_points(rows: list[Mapping[str, Any]]) -> tuple[list[int], list[float], list[float], str]:
    """Rounds, epsilon spent so far, epsilon spent in the round, and the privacy unit, from metrics rows.

    Rounds without a finite epsilon (no mechanism, or an infinite bound) are left out.
    """
    rounds, total, per_round, unit = [], [], [], ""
    for row in rows:
        privacy = row.get("privacy")
        if isinstance(privacy, Mapping) and _is_number(privacy.get("epsilon")):
            rounds.append(int(row["round"]))
            total.append(float(privacy["epsilon"]))
            per_round.append(float(privacy["epsilon_round"]) if _is_number(privacy.get("epsilon_round"))
                             else float("nan"))
            unit = str(privacy.get("unit", ""))
    return rounds, total, per_round, unit


def metric_figures(rows: Sequence[Mapping[str, Any]], label: str, size: tuple[float, float] = (5.5, 3.6),
                   min_points: int = 1) -> Iterator[tuple[str, Any]]:
    """``(name, figure)`` for each metric of :data:`PLOTTED` in ``rows`` (value against round), then
    ``privacy`` (epsilon spent so far and per round) when the run has a privacy mechanism.

    Each figure's title names the metric and ``label`` (the run); rounds are whole numbers on
    the x axis. A metric with values at fewer than ``min_points`` rounds gets no figure (the
    report shows a metric evaluated once as a number). The figure is a matplotlib `Figure` outside
    pyplot, and the same one is redrawn for every metric (its axes, ticks and grid are made once):
    the caller saves or renders it before taking the next.
    """
    from matplotlib.figure import Figure  # not pyplot: no backend, no global figure list, a lighter import
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=size)
    ax = fig.subplots()
    ax.set_xlabel("round")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    fig.subplots_adjust(left=0.16, right=0.97, bottom=0.14, top=0.85)  # fixed margins: tight_layout measures every text each time

    def draw(title: str, ylabel: str, series: Sequence[tuple[Sequence[float], Sequence[float], dict[str, Any]]]
             ) -> Any:
        for line in list(ax.lines):
            line.remove()
        if ax.get_legend() is not None:
            ax.get_legend().remove()
        for n, (x, y, style) in enumerate(series):
            ax.plot(x, y, color=f"C{n}", **style)
        ax.relim()
        ax.autoscale_view()
        ax.set_title(f"{title}\n{label}", fontsize=9)
        ax.set_ylabel(ylabel)
        if len(series) > 1:
            ax.legend(fontsize=8)
        return fig

    for key in PLOTTED:
        points = [(row["round"], row[key]) for row in rows if _is_number(row.get(key))]
        if len(points) < max(1, min_points):
            continue
        rounds, values = zip(*points)
        title, ylabel = METRIC_LABELS.get(key, (key, key))
        yield key, draw(title, ylabel, [(rounds, values, {"marker": "o" if len(points) < 30 else None})])
    rounds, total, per_round, unit = privacy_points(list(rows))
    if rounds and len(rounds) >= min_points:
        yield PRIVACY_PLOT, draw("Privacy spent (epsilon)", f"epsilon per {unit}" if unit and unit != "none" else
                                 "epsilon", [(rounds, total, {"marker": "o" if len(rounds) < 30 else None,
                                                              "label": "spent so far"}),
                                             (rounds, per_round, {"linestyle": "--", "label": "spent in the round"})])


def plot_metrics(metrics_path: str | os.PathLike[str], directory: str | os.PathLike[str]) -> list[Path]:
    """One PNG per figure of :func:`metric_figures` (``<metric>.png``, ``privacy.png``), titled with the
    run (its directory name, and the method and corpus of ``model.npz`` when it is there).

    Returns
    -------
    list of Path
        The PNG files written.
    """
    written = []
    for name, fig in metric_figures(read_metrics(metrics_path), run_label(directory)):
        out = Path(directory) / f"{name}.png"
        fig.savefig(out, dpi=100, pil_kwargs={"compress_level": 1})  # a plot compresses well at any level
        written.append(out)
    return written


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _finite(row: Mapping[str, Any]) -> dict[str, Any]:
    """JSON has no inf/nan: write them as null."""
    clean: dict[str, Any] = {}
    for key, value in row.items():
        if isinstance(value, (float, np.floating)) and not math.isfinite(float(value)):
            clean[key] = None
        elif isinstance(value, Mapping):
            clean[key] = _finite(value)
        else:
            clean[key] = value
    return clean
