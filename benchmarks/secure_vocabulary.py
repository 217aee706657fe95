"""The ``private`` vocabulary agreement with and without secure aggregation: words kept, held-out tokens covered.

    python benchmarks/secure_vocabulary.py --out runs/secure-vocabulary

5 parties split by label, through the package's ServerApp agreement stage and ClientApp in
this process (the secure sum's real protocol); ``vocabulary-delta`` 1e-6,
``vocabulary-max-words`` 20, default ``min-df``. Without secure aggregation each party
thresholds its own noisy counts (DP set union); with it, the parties' counts over the public
candidates (the MiniLM tokenizer's 21,719 words) are summed under masks with one shared
Skellam noise and cut once. Coverage: the share of the corpus' held-out tokens (its own
test split, over the corpus' default vocabulary) whose word is in the agreed vocabulary.
Writes ``results.md`` into ``--out``.
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path

import numpy as np

from benchmark_data import DATASETS
from flower_topics.federation.vocabulary_agreement import agree_vocabulary
from flower_topics.federation.client_app import make_client_app
from flower_topics.run.config import parse_run_config
from flower_topics.data.prepare import load_run_data
from flower_topics.errors import UserInputError
from flower_topics.simulations.inprocess import InProcessGrid

CORPORA = {"BBC_News": str(DATASETS / "BBC_News"),
           "debian_large": str(DATASETS / "debian_large/corpus.jsonl")}


def coverage(dataset: str, words: set[str]) -> float:
    """Share of the held-out tokens whose word is in ``words``."""
    test = load_run_data(parse_run_config({"dataset": dataset})).corpus.select_split("test")
    counts = np.bincount(test.tokens, minlength=len(test.vocabulary))
    return float(sum(c for w, c in zip(test.vocabulary, counts) if w in words) / counts.sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--epsilons", type=float, nargs="+", default=[1.0, 4.0, 8.0])
    parser.add_argument("--corpora", nargs="+", default=list(CORPORA))
    args = parser.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    lines = ["| corpus | vocabulary-epsilon | secure aggregation | words kept | held-out tokens covered | seconds |",
             "|---|---|---|---|---|---|"]
    for name in args.corpora:
        dataset = CORPORA[name]
        for eps in args.epsilons:
            for secure in (False, True):
                config = {"dataset": dataset, "vocabulary": "private", "vocabulary-epsilon": eps,
                          "vocabulary-delta": 1e-6, "secure-aggregation": secure, "partition": "label", "seed": 0,
                          "method": "dplda", "federated-eval": False, "dplda.epsilon": eps + 1.0}
                started = time.time()
                try:
                    agreement = agree_vocabulary(InProcessGrid.partitions(make_client_app(config), 5, config), config)
                    words: tuple[str, ...] = agreement.vocabulary
                except UserInputError as exc:  # fewer than 2 words released
                    print(f"{name} eps {eps:g} secure {secure}: {exc}", flush=True)
                    words = ()
                seconds = time.time() - started
                lines.append(f"| {name} | {eps:g} | {'yes' if secure else 'no'} | {len(words)} | "
                             f"{coverage(dataset, set(words)):.1%} | {seconds:.1f} |")
                print(lines[-1], flush=True)
    (out / "results.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
