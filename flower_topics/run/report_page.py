"""``flower-topics report RUN``: one self-contained HTML page about a run.

The page needs nothing at view time (no script, no stylesheet or font from a network:
its plots are inline SVG drawn by matplotlib, text kept as text). It shows:

- each topic's top words with their weights (the model's ``topic_word``); wherever a topic is
  named (tables, the topic map) it is labelled by its number and top words
  (:meth:`~flower_topics.topic_model.model_file.TopicModel.labels`: ``3 · engine, car, race``);
- topic sizes, and where they come from (:func:`topic_sizes`): the share of training
  tokens assigned to each topic when the run kept global topic-word counts (``lda``,
  ``fedlda``: ``state.npz``), or the expected share of a corpus' tokens when one is given
  (``--corpus``, on the machine that holds it); else none, and the page says so;
- a 2-D map of the topics as LDAvis draws it (:func:`topic_map`): Jensen-Shannon
  distances between the topics' word distributions, placed by classical multidimensional
  scaling (principal coordinates);
- the metrics and the privacy spent per round (``metrics.jsonl``), one plot each for a metric
  with values at two or more rounds; a metric evaluated once (e.g. NMI at the last round) is a
  number in the table of final values;
- the privacy report of ``model.npz``'s metadata in words
  (:meth:`~flower_topics.privacy.privacy_report.PrivacyReport.statements`: the whole run's
  eps and delta per document and whom they protect, or ``none: <reason>``);
- the run config: the generic options and those of the run's own method
  (:func:`shown_config`), not every registered method's.
"""

from __future__ import annotations

import html
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from flower_topics.data.prepare import SYNTHETIC
from flower_topics.errors import UserInputError
from flower_topics.methods import METHODS
from flower_topics.topic_model.model_file import TopicModel, load_model
from flower_topics.privacy.privacy_report import PrivacyReport
from flower_topics.run.outputs import (
    METRIC_LABELS,
    METRICS_FILE,
    MODEL_FILE,
    PLOTTED,
    STATE_FILE,
    _is_number,
    metric_figures,
    read_metrics,
)

REPORT_FILE = "report.html"
N_WORDS = 10


@dataclass(frozen=True)
class TopicSizes:
    """Each topic's share and what the share measures.

    Parameters
    ----------
    share : np.ndarray
        ``(K,)``, summing to 1.
    source : str
        One sentence: what the share is and where it comes from.
    """

    share: np.ndarray
    source: str


def run_paths(run: str | os.PathLike[str]) -> tuple[Path, Path]:
    """The run directory and its ``model.npz``, from either of them.

    Raises
    ------
    UserInputError
        When there is no model file.
    """
    path = Path(run).expanduser()
    directory, model = (path.parent, path) if path.is_file() else (path, path / MODEL_FILE)
    if not model.is_file():
        raise UserInputError(f"{model} does not exist; pass a run's output directory (it holds {MODEL_FILE}) "
                             "or a model.npz")
    return directory, model


def shown_config(config: Mapping[str, Any], method: str | None) -> tuple[dict[str, Any], int]:
    """The run config's keys a reader of this run needs, and how many were left out.

    Kept: the generic options (and any key no registered method owns) and ``method``'s own
    ``<method>.*`` options. Left out: the other methods' options, and the synthetic generator's
    ``synthetic-*`` options when the run's dataset is not ``synthetic``: this run used none of them.
    """
    others = {spec.key(name) for spec in METHODS.values() if spec.name != method for name in spec.options}
    synthetic = str(config.get("dataset")) == SYNTHETIC
    kept = {key: value for key, value in config.items()
            if key not in others and (synthetic or not str(key).startswith("synthetic-"))}
    return kept, len(config) - len(kept)


def privacy_statements(privacy: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The privacy report of a model's metadata in words (:meth:`PrivacyReport.statements`); a record this
    version cannot read as a report is shown field by field, values as text."""
    if not privacy:
        return [("privacy report", "none in the model file")]
    try:
        return PrivacyReport.from_dict(privacy).statements()
    except (ValueError, TypeError):
        return [(str(key), _text(value)) for key, value in privacy.items()]


def _text(value: Any) -> str:
    """A config or report value as a person reads it: numbers to 4 significant digits, text without quotes."""
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, str):
        return value if value else '""'
    return str(value)


def topic_distances(topic_word: np.ndarray) -> np.ndarray:
    """``(K, K)`` Jensen-Shannon distances (base 2, in [0, 1]) between the topics' word distributions."""
    from scipy.spatial.distance import pdist, squareform  # here: the ServerApp imports this module for topic_labels

    phi = np.asarray(topic_word, dtype=np.float64)
    if phi.shape[0] < 2:
        return np.zeros((phi.shape[0], phi.shape[0]))
    natural = np.nan_to_num(pdist(phi, metric="jensenshannon"))  # natural log: divide by sqrt(ln 2) for base 2
    return squareform(np.clip(natural / np.sqrt(np.log(2.0)), 0.0, 1.0))


def topic_map(topic_word: np.ndarray) -> np.ndarray:
    """``(K, 2)`` coordinates of the topics: classical MDS (PCoA) of :func:`topic_distances`, as LDAvis does.

    The double-centred squared distances are eigendecomposed; the two largest eigenvalues'
    eigenvectors, scaled by the roots of the eigenvalues, are the coordinates (a missing or
    negative one gives a zero axis). Signs are fixed so that each axis' largest absolute
    coordinate is positive, so the map does not flip between runs of the eigensolver.
    """
    distances = topic_distances(topic_word)
    n = distances.shape[0]
    centring = np.eye(n) - 1.0 / n
    gram = -0.5 * centring @ (distances ** 2) @ centring
    values, vectors = np.linalg.eigh(gram)
    order = np.argsort(values)[::-1][:2]
    coords = np.zeros((n, 2))
    for axis, i in enumerate(order):
        if values[i] > 1e-12:
            column = vectors[:, i] * np.sqrt(values[i])
            coords[:, axis] = column * np.sign(column[np.argmax(np.abs(column))])
    return coords


def topic_sizes(model: TopicModel, directory: Path | None, corpus: str | None = None,
                reading: Mapping[str, Any] | None = None) -> TopicSizes | None:
    """Topic sizes that the run or a given corpus can honestly give (see the module docstring).

    Parameters
    ----------
    model : TopicModel
        The model.
    directory : Path, optional
        The run directory (its ``state.npz`` is looked at).
    corpus : str, optional
        A corpus path: sizes are the expected share of its in-vocabulary tokens,
        ``sum_d n_d theta_d / sum_d n_d``, theta folded in as ``flower-topics infer`` does.
    reading : Mapping, optional
        Reading options for ``corpus`` (``text_column``, ``lowercase``, ``stopwords``...).
    """
    if corpus is not None:
        topics = model.read_documents(corpus, **dict(reading or {}))
        tokens = topics.n_words.astype(np.float64)
        if tokens.sum() == 0:
            raise UserInputError(f"no document of {corpus} has a word of the model's vocabulary")
        share = tokens @ topics.theta / tokens.sum()
        return TopicSizes(share, f"expected share of the {int(tokens.sum())} in-vocabulary tokens of {corpus} "
                                 f"({len(topics.ids)} documents), theta folded in against the model")
    method = model.metadata.get("method") if isinstance(model.metadata, Mapping) else None
    key = METHODS[method].topic_counts if method in METHODS else None  # the method says where its counts are
    state = directory / STATE_FILE if directory is not None else None
    if key is not None and state is not None and state.is_file():
        with np.load(state, allow_pickle=False) as data:
            counts = data[key] if key in data.files else None
        if counts is not None and counts.shape == model.topic_word.shape and counts.sum() > 0:
            share = np.clip(counts.sum(axis=1).astype(np.float64), 0, None)
            return TopicSizes(share / share.sum(), f"share of the training tokens assigned to each topic in "
                              f"the run's final global topic-word counts ({STATE_FILE}: {key})")
    return None


def _svg(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]


def _plots(rows: Sequence[Mapping[str, Any]], label: str) -> list[str]:
    """Inline SVG plots of the metrics with values at two or more rounds (one value is no curve)."""
    import matplotlib.pyplot as plt

    with plt.rc_context({"svg.fonttype": "none"}):
        return [_svg(fig) for _, fig in metric_figures(rows, label, size=(5.2, 3.4), min_points=2)]


def _prevalence_section(directory: Path, metadata: Mapping[str, Any]) -> str:
    """The run's topic prevalence (``prevalence.csv``) as a plot with the topics' labels; empty without it."""
    from flower_topics.run.prevalence_outputs import PREVALENCE_FILE, prevalence_figure, read_prevalence

    path = directory / PREVALENCE_FILE
    if not path.is_file():
        return ""
    table, labels = read_prevalence(path)
    if not table.periods:
        return ""
    import matplotlib.pyplot as plt

    stage = metadata.get("prevalence") if isinstance(metadata.get("prevalence"), Mapping) else {}
    noise = float(stage.get("noise_std", 0.0) or 0.0)
    with plt.rc_context({"svg.fonttype": "none"}):
        svg = _svg(prevalence_figure(table, labels, noise))
    left_out = ", ".join(f"{int(stage[key])} {what}" for key, what in (
        ("undated", "without a date"), ("outside", "outside the periods"), ("empty", "without a word of the "
                                                                                     "vocabulary")) if key in stage)
    note = (f"{len(table.periods)} periods from {table.periods[0]} to {table.periods[-1]}, "
            f"{float(np.sum(table.documents)):.0f} documents"
            + (f" ({left_out} left out)" if left_out else "")
            + (f"; each cell carries noise of standard deviation {noise:.3g} (shaded: one standard deviation of "
               "each share)" if noise else "") + f". The table: {PREVALENCE_FILE}.")
    return (f'<h2>Topic prevalence over time</h2>\n<p>Each topic\'s share of each period\'s documents, summed over '
            f'the parties on their hosts; the {min(8, table.n_topics)} most prevalent topics. {html.escape(note)}</p>'
            f'\n<div class="plot" id="prevalence">{svg}</div>')


def final_values(rows: Sequence[Mapping[str, Any]]) -> list[tuple[str, float, list[int]]]:
    """``(metric, last value, rounds it was evaluated at)`` for each metric of :data:`PLOTTED` in ``rows``."""
    found = []
    for key in PLOTTED:
        points = [(int(row["round"]), float(row[key])) for row in rows if _is_number(row.get(key))]
        if points:
            found.append((key, points[-1][1], [r for r, _ in points]))
    return found


#: Up to this many topics the map has a legend of the topics' labels; beyond it, numbers only (the table has them).
MAP_LEGEND_TOPICS = 20


def _map_svg(coords: np.ndarray, sizes: TopicSizes | None, label: str, labels: Sequence[str]) -> str:
    """The topic map: a circle per topic with its number, in a colour of its own, and up to
    :data:`MAP_LEGEND_TOPICS` topics a legend of their labels beside it (labels written on the map overlap)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = coords.shape[0]
    legend = n <= MAP_LEGEND_TOPICS
    with plt.rc_context({"svg.fonttype": "none"}):
        fig, ax = plt.subplots(figsize=(8.4 if legend else 5.2, 5.0))
        area = 2500 * sizes.share if sizes is not None else np.full(n, 2500 / max(n, 1))
        for k, (x, y) in enumerate(coords):
            ax.scatter([x], [y], s=max(float(area[k]), 30.0), alpha=0.45, edgecolors="k",
                       color=plt.get_cmap("tab20")(k % 20), label=labels[k])
            ax.annotate(str(k), (x, y), ha="center", va="center", fontsize=8)
        ax.set_xlabel("PC1 (Jensen-Shannon distance)")
        ax.set_ylabel("PC2 (Jensen-Shannon distance)")
        ax.set_title(f"Topic map: distances between topics (classical MDS)\n{label}", fontsize=9)
        ax.margins(0.25)  # room for the circles at the edges
        ax.set_aspect("equal", adjustable="datalim")
        ax.grid(alpha=0.3)
        if legend:
            ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8, markerscale=0.4, frameon=False,
                      title="topic (number · top words)", title_fontsize=8)
        fig.tight_layout()
        return _svg(fig)


def build_report(run: str | os.PathLike[str], corpus: str | None = None,
                 reading: Mapping[str, Any] | None = None, n_words: int = N_WORDS) -> str:
    """The HTML text of the report of ``run`` (a run directory or a ``model.npz``); see the module docstring."""
    directory, model_path = run_paths(run)
    model = load_model(model_path)
    metadata = model.metadata if isinstance(model.metadata, Mapping) else {}
    config = metadata.get("run_config", {}) or {}
    method, dataset = metadata.get("method", "unknown"), config.get("dataset", "unknown")
    label = f"run {directory.name}, method {method}, corpus {Path(str(dataset)).name or dataset}"
    metrics_path = directory / METRICS_FILE
    rows = read_metrics(metrics_path) if metrics_path.is_file() else []
    sizes = topic_sizes(model, directory, corpus, reading)
    coords = topic_map(model.topic_word)
    e = html.escape

    labels = model.labels()
    topic_rows = []
    order = np.argsort(-sizes.share, kind="stable") if sizes is not None else np.arange(model.n_topics)
    for k in order:
        terms = model.topic_terms(int(k), n_words)
        top = terms[0][1] if terms else 1.0
        words = "".join(
            f'<span class="w"><span class="bar" style="width:{60 * weight / top:.0f}px"></span>{e(word)} '
            f'<small>{weight:.3f}</small></span>' for word, weight in terms)
        size = f"{100 * sizes.share[k]:.1f}%" if sizes is not None else "n/a"
        topic_rows.append(f'<tr><td class="label">{e(labels[k])}</td><td>{size}</td><td>{words}</td></tr>')
    size_note = (f"Topic size: {e(sizes.source)}." if sizes is not None else
                 "Topic size: not available. The model file holds normalized topics only and this run kept no "
                 "global topic-word counts; pass --corpus with documents you hold to measure each topic's expected "
                 "share of them.")

    privacy_items = "".join(f"<tr><th>{e(what)}</th><td>{e(statement)}</td></tr>"
                            for what, statement in privacy_statements(metadata.get("privacy") or {}))
    shown, left_out = shown_config(config, metadata.get("method"))
    config_items = "".join(f"<tr><th>{e(str(k))}</th><td>{e(_text(v))}</td></tr>" for k, v in sorted(shown.items()))
    config_note = (f"<p>The generic options and those of method {e(str(method))}; {left_out} options this run did "
                   "not use (other methods', and the synthetic corpus generator's unless the dataset is synthetic) "
                   "are left out.</p>" if left_out else "")
    final = "".join(
        f"<tr><th>{e(METRIC_LABELS.get(k, (k, k))[0])}</th><td>{value:.4g}</td><td>"
        + (f"round {rounds[0]} only (one value: no plot)" if len(rounds) == 1 else
           f"round {rounds[-1]} (evaluated at {len(rounds)} rounds: plot below)") + "</td></tr>"
        for k, value, rounds in final_values(rows))
    final_table = (f'<table id="final"><tr><th>metric</th><th>final value</th><th>when</th></tr>{final}</table>'
                   if final else "")
    plots = _plots(rows, label)
    plots_html = "".join(f'<div class="plot">{svg}</div>' for svg in plots) or (
        "<p>No metric has values at two or more rounds to plot.</p>" if rows else
        f"<p>No per-round metrics ({METRICS_FILE} is missing or empty).</p>")
    prevalence_html = _prevalence_section(directory, metadata)
    wall = metadata.get("wall_time")
    facts = (f"{model.n_topics} topics, {len(model.vocabulary)} words, {metadata.get('rounds', len(rows))} rounds"
             + (f", {wall:.1f} s" if _is_number(wall) else ""))

    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>flower-topics report: {e(label)}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; color: #222; max-width: 1200px; }}
table {{ border-collapse: collapse; margin-bottom: 1em; }}
td, th {{ border: 1px solid #ccc; padding: 3px 6px; text-align: left; vertical-align: top; font-size: 13px; }}
.w {{ display: inline-block; margin: 1px 8px 1px 0; position: relative; }}
.bar {{ display: inline-block; height: 8px; background: #7aa6d6; margin-right: 3px; }}
.plot {{ display: inline-block; margin: 4px; }}
.plot svg {{ width: 520px; height: auto; }}
#map svg {{ width: 840px; }}
small {{ color: #666; }}
td.label {{ white-space: nowrap; font-weight: bold; }}
#privacy td {{ max-width: 900px; }}
</style></head>
<body>
<h1>flower-topics report</h1>
<p><b>{e(label)}</b>: {e(facts)}.</p>
<h2>Topics</h2>
<p>{size_note} Words: the {n_words} most probable of each topic, with p(word | topic).</p>
<table id="topics"><tr><th>topic (number · top words)</th><th>size</th><th>top words (weight)</th></tr>
{''.join(topic_rows)}</table>
<h2>Topic map</h2>
<p>Each topic placed so that distances on the map approximate the Jensen-Shannon distances between the topics'
word distributions (classical multidimensional scaling, as LDAvis); circle area: topic size
{'(' + e(sizes.source) + ')' if sizes is not None else '(equal: sizes not available)'}.</p>
<div class="plot" id="map">{_map_svg(coords, sizes, label, labels)}</div>
{prevalence_html}
<h2>Metrics and privacy per round</h2>
{final_table}
{plots_html}
<h2>Privacy report</h2>
<table id="privacy">{privacy_items}</table>
<h2>Run config</h2>
{config_note}
<table id="config">{config_items or '<tr><td>no run config in the model file</td></tr>'}</table>
</body></html>
"""


def write_report(run: str | os.PathLike[str], out: str | os.PathLike[str] | None = None, corpus: str | None = None,
                 reading: Mapping[str, Any] | None = None) -> Path:
    """Write the report of ``run`` to ``out`` (default: ``RUN/report.html``); returns the path."""
    directory, _ = run_paths(run)
    path = Path(out).expanduser() if out is not None else directory / REPORT_FILE
    text = build_report(run, corpus, reading)
    from flower_topics.topic_model.document_topics import _write_atomic

    return _write_atomic(path, text)
