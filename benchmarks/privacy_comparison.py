"""Every method on the document unit: the whole run's guarantee from its own report, quality, and an attack.

    python benchmarks/privacy_comparison.py --dataset $FLOWER_TOPICS_DATASETS/BBC_News --out runs/privacy-comparison

Trains every registered method with its README settings (docs/<method>.md) through the
package's own ServerApp and ClientApp in this process
(:class:`~flower_topics.simulations.inprocess.InProcessGrid`), 5 parties split by label, K=20,
seed 0, on one vocabulary for every run: the corpus' own ``vocabulary.txt`` (an OCTIS folder)
given as a file, i.e. *treated as public* (it was made from the same corpus, so this is a
benchmark convention; a private corpus needs a vocabulary from a related public corpus or
the ``private`` agreement). Federated evaluation is off in every run (its sums are outside
every accountant, and ``dplda`` refuses it), so each report covers the training rounds and
the vocabulary; the final models are scored afterwards with the package's metrics on the
corpus' held-out documents (perplexity by document completion, NPMI of the top 10 words
on the training documents).

The membership attack (when benchmarks/membership_audit.py is present) is the
likelihood-threshold attack: each document's per-token log-likelihood with theta folded
in; members are the training documents, non-members the test documents; the AUC with its
95% bootstrap interval. Runs already in ``--out`` are reused, not repeated. Writes
``results.json`` and ``results.md`` (the table) into ``--out``.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmark_data import DATASETS
from flower_topics.federation.client_app import make_client_app
from flower_topics.run.config import parse_run_config
from flower_topics.data.prepare import load_run_data
from flower_topics.data.splits import test_corpus
from flower_topics.evaluation import evaluate_model
from flower_topics.evaluation.centralized import align_corpus
from flower_topics.topic_model.model_file import load_model
from flower_topics.privacy.document_level import (
    gaussian_document_epsilon,
    laplace_document_epsilon,
    unit_count_sensitivity,
)
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid

PARTIES = 5

#: (name, settings as the table shows them, run config): the README settings of each method.
RUNS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("lda", "100 rounds x 10 sweeps", {"method": "lda", "num-rounds": 100, "lda.local-sweeps": 10}),
    ("fedlda", "RRP eps 7.5, delta 0.1, gamma 1, Gibbs, 100 rounds",
     {"method": "fedlda", "num-rounds": 100, "fedlda.mechanism": "rrp", "fedlda.epsilon": 7.5, "fedlda.delta": 0.1,
      "fedlda.gamma": 1.0, "fedlda.sampler": "gibbs"}),
    ("pctd", "sigma 0.25, 3-word units, no consistency, 50 rounds",
     {"method": "pctd", "num-rounds": 50, "pctd.sigma": 0.25, "pctd.unit": "ngram", "pctd.ngram": 3,
      "pctd.consistency": 0.0}),
    ("ftm", "eps 11, tau 0.2, 50 MH iterations, 5 rounds",
     {"method": "ftm", "num-rounds": 5, "ftm.epsilon": 11.0, "ftm.tau": 0.2, "ftm.local-iterations": 50}),
    # the README's 300 steps take about 13 s each on one shared core (over an hour): shortened to 40
    ("ntm", "ProdLDA, DP-SGD noise multiplier 1, 40 steps (README: 300)",
     {"method": "ntm", "num-rounds": 40, "ntm.dp": True}),
    ("dplda", "target eps 3, delta 1e-5, q 0.2, 40 rounds",
     {"method": "dplda", "num-rounds": 40, "dplda.epsilon": 3.0, "dplda.delta": 1e-5, "dplda.sample-rate": 0.2}),
)


def train(config: dict[str, Any], out: Path) -> tuple[Any, float]:
    """One federated run in this process (reused when ``out`` holds its model); the model and its wall time."""
    if (out / "model.npz").exists():
        model = load_model(out / "model.npz")
        return model, float(model.metadata.get("wall_time", float("nan")))
    run = {**config, "output-dir": str(out)}
    started = time.time()
    model = run_server(InProcessGrid.partitions(make_client_app(run), PARTIES, run), run)
    return load_model(out / "model.npz"), time.time() - started


def attack(model: Any, data: Any) -> tuple[float, float, float] | None:
    """Likelihood-threshold membership attack: AUC and its 95% bootstrap interval (None without the audit)."""
    try:
        from membership_audit import auc_interval, log_likelihood_scores
    except ImportError:
        return None
    members, _ = align_corpus(data.train, model.vocabulary)
    others, _ = align_corpus(test_corpus(data.corpus), model.vocabulary)
    counts = [c.doc_term_matrix() for c in (members, others)]
    keep = [np.asarray(m.sum(axis=1)).ravel() > 0 for m in counts]  # documents with a known word
    scores = np.concatenate([log_likelihood_scores(model.topic_word, m[k]) for m, k in zip(counts, keep)])
    truth = np.concatenate([np.ones(int(keep[0].sum()), bool), np.zeros(int(keep[1].sum()), bool)])
    return tuple(float(x) for x in auc_interval(scores, truth, n_boot=1000, seed=0))  # type: ignore[return-value]


def document_cell(report: dict[str, Any], median_length: int) -> str:
    """The whole run's document-level guarantee as the report states it, with the median document's figure."""
    if report.get("document_epsilon") is not None:
        return f"eps {report['document_epsilon']:.3g}, delta {report['document_delta']:.2g} ({_clause(report)})"
    text = "none: " + _clause(report)
    if "document_epsilon_at_length_distinct_words" in report:  # pctd
        lengths = report["document_epsilon_at_length_distinct_words"]
        sigma, rounds, delta = report["sigma"], report["rounds"], report["delta"]
        median = gaussian_document_epsilon(sigma, rounds, delta, unit_count_sensitivity(median_length, "ngram",
                                                                                        distinct_words=True))
        worst = gaussian_document_epsilon(sigma, rounds, delta, unit_count_sensitivity(median_length, "ngram", 3))
        text += (f"; a document of 10 / 100 / 1000 tokens: eps {' / '.join(f'{v:,.0f}' for v in lengths.values())} "
                 f"(no word repeated in a unit); the median document ({median_length} tokens): eps {median:,.0f} "
                 f"(up to {worst:,.0f} with repeats), delta {delta:g}")
    elif "document_epsilon_at_length" in report and report.get("epsilon") is not None:  # ftm
        text += (f"; {report['epsilon']:g} x L: the median document ({median_length} tokens) eps "
                 f"{laplace_document_epsilon(report['epsilon'], median_length):,.0f}, pure")
    elif report.get("delta_per_tuple") is not None:  # fedlda: the clause already holds the composed delta
        text += "; each tuple's topics leave unperturbed"
    elif report.get("training_document_epsilon") is not None:
        text += f" (training alone: eps {report['training_document_epsilon']:.3g})"
    return text


def _clause(report: dict[str, Any]) -> str:
    """The first clause of ``document_guarantee`` (without ``none:``)."""
    text = str(report.get("document_guarantee", "")).removeprefix("none: ")
    return text.split(";")[0].split(" (")[0].split(", and ")[0].split(":")[0]


def paper_cell(report: dict[str, Any]) -> str:
    """The guarantee on the paper's own unit."""
    if report.get("epsilon") is None:
        return "none (no mechanism)"
    text = f"eps {report['epsilon']:.4g}, delta {report['delta']:.3g} per {report['unit']}"
    if report.get("claimed_delta_per_tuple") is not None:
        text += (f" (realized); the paper claims (eps {report['epsilon_per_tuple']:g}, delta "
                 f"{report['claimed_delta_per_tuple']:g}) per tuple")
    return text


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(DATASETS / "BBC_News"))
    parser.add_argument("--out", default="runs/privacy-comparison")
    parser.add_argument("--methods", nargs="+", default=[name for name, _, _ in RUNS])
    args = parser.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    vocabulary = Path(args.dataset) / "vocabulary.txt"
    if not vocabulary.is_file():
        raise SystemExit(f"{args.dataset} has no vocabulary.txt (an OCTIS folder is expected)")
    base = {"dataset": args.dataset, "num-topics": 20, "partition": "label", "vocabulary": str(vocabulary.resolve()),
            "federated-eval": False, "seed": 0}
    data = load_run_data(parse_run_config(base))
    lengths = np.diff(data.train.doc_ptr)
    median_length = int(np.median(lengths))
    rows = []
    for name, settings, config in RUNS:
        if name not in args.methods:
            continue
        model, wall = train({**base, **config}, out / name)
        report = model.metadata["privacy"]
        scores = evaluate_model(model, data.corpus, alpha=0.01, n_iter=100)
        auc = attack(model, data)
        rows.append({"method": name, "settings": settings, "wall_s": round(wall, 1), "privacy": report,
                     "perplexity": scores["perplexity"], "npmi": scores["npmi"], "attack_auc": auc,
                     "document": document_cell(report, median_length), "paper": paper_cell(report)})
        print(f"{name}: ppl {scores['perplexity']:.1f}, npmi {scores['npmi']:.3f}, auc {auc}, {wall:.0f} s",
              flush=True)
    (out / "results.json").write_text(json.dumps(rows, indent=1, default=str) + "\n")
    lines = [f"BBC_News-style corpus `{args.dataset}`: {PARTIES} parties split by label, K=20, seed 0, the corpus' "
             f"vocabulary.txt ({len(data.corpus.vocabulary)} words) as a public file, federated evaluation off; "
             f"{data.train.n_docs} training documents (median length {median_length} tokens), "
             f"{test_corpus(data.corpus).n_docs} test documents.", "",
             "| method (settings) | document-level guarantee, whole run (its report) | the paper's unit and figure "
             "| perplexity / NPMI | attack AUC [95% CI] | wall s |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        auc = row["attack_auc"]
        auc_text = "-" if auc is None else f"{auc[0]:.3f} [{auc[1]:.3f}, {auc[2]:.3f}]"
        lines.append(f"| `{row['method']}` ({row['settings']}) | {row['document']} | {row['paper']} | "
                     f"{row['perplexity']:.0f} / {row['npmi']:.3f} | {auc_text} | {row['wall_s']:.0f} |")
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
