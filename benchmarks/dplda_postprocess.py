"""Rescore finished dplda runs with other post-processing of the same release (no privacy cost).

    python benchmarks/dplda_postprocess.py --dataset runs/public/bbc-shaped \
        --runs runs/dq/bbc-shaped/dplda-eps3-t0-r40 --thresholds 0 0.5 1 --backgrounds 0.1 0.2 0.3

A run's ``checkpoint.npz`` holds the server's raw running average and its noise variance
(everything the parties released, through the accountant); the public topics are a function of
them alone (:func:`flower_topics.models.svi.public_lambda`), so any number of
post-processing settings can be scored on one release without spending privacy. Scored on
held-out documents, this is a *choice of settings*: do it on a public corpus
(``dplda_public_corpus.py``), never on the parties' data. Prints one line per run and setting.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import numpy as np

from flower_topics.run.config import parse_run_config
from flower_topics.data.prepare import load_run_data
from flower_topics.evaluation import evaluate_model
from flower_topics.topic_model.model_file import TopicModel
from flower_topics.models.svi import public_lambda
from flower_topics.strategies.dplda import RAW_KEY, VARIANCE_KEY


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--runs", nargs="+", required=True, help="dplda run folders (output-dir) with checkpoint.npz")
    parser.add_argument("--thresholds", type=float, nargs="+", default=[0.0, 1.0, 2.0])
    parser.add_argument("--backgrounds", type=float, nargs="+", default=[0.2])
    parser.add_argument("--eta", type=float, default=0.01)
    args = parser.parse_args()
    vocabulary_file = Path(args.runs[0]) / "vocabulary.txt"
    corpus = load_run_data(parse_run_config({"dataset": args.dataset, "vocabulary": str(vocabulary_file)})).corpus
    for run in map(Path, args.runs):
        with np.load(run / "checkpoint.npz") as state:
            average = state[f"global/{RAW_KEY}"]
            variance = float(state[f"global/{VARIANCE_KEY}"][0])
        words = (run / "vocabulary.txt").read_text(encoding="utf-8").splitlines()
        for threshold, background in itertools.product(args.thresholds, args.backgrounds):
            lam = public_lambda(average, variance, eta=args.eta, threshold=threshold, background=background)
            model = TopicModel(lam / lam.sum(axis=1, keepdims=True), words)
            scores = evaluate_model(model, corpus, alpha=0.01, n_iter=100)
            standard = evaluate_model(model, corpus, alpha=0.1, n_iter=100)
            print(json.dumps({"run": run.name, "threshold": threshold, "background": background,
                              "noise_std": round(variance ** 0.5, 3), "perplexity": round(scores["perplexity"], 1),
                              "perplexity_alpha0.1": round(standard["perplexity"], 1),
                              "npmi": round(scores["npmi"], 4)}), flush=True)


if __name__ == "__main__":
    main()
