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
from typing import Any, Mapping

import numpy as np

from flower_topics.errors import UserInputError
from flower_topics.model_file import TopicModel, _json_default, save_model, save_npz

MODEL_FILE = "model.npz"
TOPICS_FILE = "topics.txt"
METRICS_FILE = "metrics.jsonl"
STATE_FILE = "state.npz"
RESULT_FILES = (MODEL_FILE, STATE_FILE, TOPICS_FILE, METRICS_FILE)
PLOTTED = ("perplexity", "npmi", "umass", "diversity", "tss_normalized", "nmi", "purity", "macro_f1",
           "bytes_sent", "bytes_received")


class RunOutputs:
    """Writer of one run's output directory.

    Parameters
    ----------
    directory : str or os.PathLike
        Where the outputs go; created if missing. It must not already hold a
        run's outputs (nothing is overwritten).
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.directory = Path(directory).expanduser().resolve()
        existing = [name for name in RESULT_FILES if (self.directory / name).exists()]
        if existing:
            raise UserInputError(
                f"output directory {self.directory} already holds a run's outputs ({', '.join(existing)}); "
                "choose another output-dir or remove it"
            )
        self.directory.mkdir(parents=True, exist_ok=True)

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


def plot_metrics(metrics_path: str | os.PathLike[str], directory: str | os.PathLike[str]) -> list[Path]:
    """One PNG per metric of :data:`PLOTTED` present in the file (``<metric>.png``), value against round.

    Returns
    -------
    list of Path
        The PNG files written.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics_path)
    written = []
    for key in PLOTTED:
        points = [(row["round"], row[key]) for row in rows if _is_number(row.get(key))]
        if not points:
            continue
        rounds, values = zip(*points)
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ax.plot(rounds, values, marker="o" if len(points) < 30 else None)
        ax.set_xlabel("round")
        ax.set_ylabel(key)
        ax.grid(alpha=0.3)
        fig.tight_layout()
        out = Path(directory) / f"{key}.png"
        fig.savefig(out, dpi=100)
        plt.close(fig)
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
