"""Sampler speed: one collapsed Gibbs sweep, ours vs tomotopy, side by side.

    python benchmarks/bench_sampler.py --dataset ../shared/datasets/BBC_News --topics 20

Both run on one core on all documents of the corpus with alpha 0.1, beta 0.01;
compilation (numba) and model set-up (tomotopy) are excluded; each repeat times
``--sweeps`` sweeps and the best and median tokens/s over ``--repeats`` are printed
with their ratio (ours / tomotopy).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import tomotopy as tp

from flower_topics.data import load_corpus
from flower_topics.models.lda import CollapsedGibbs


def time_ours(corpus, k: int, sweeps: int, repeats: int, seed: int) -> list[float]:
    sampler = CollapsedGibbs(corpus, k, 0.1, 0.01, seed)
    counts = sampler.topic_word_counts()
    sampler.sweep(counts)  # compile
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        sampler.sweep(counts, n_sweeps=sweeps)
        rates.append(corpus.n_tokens * sweeps / (time.perf_counter() - start))
    return rates


def time_tomotopy(corpus, k: int, sweeps: int, repeats: int, seed: int) -> list[float]:
    model = tp.LDAModel(k=k, alpha=0.1, eta=0.01, seed=seed)
    for d in range(corpus.n_docs):
        words = corpus.words(d)
        if words:
            model.add_doc(words)
    model.train(1, workers=1)  # initialization
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        model.train(sweeps, workers=1)
        rates.append(corpus.n_tokens * sweeps / (time.perf_counter() - start))
    return rates


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="../shared/datasets/BBC_News")
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--sweeps", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args()
    corpus = load_corpus(args.dataset)
    ours = time_ours(corpus, args.topics, args.sweeps, args.repeats, args.seed)
    theirs = time_tomotopy(corpus, args.topics, args.sweeps, args.repeats, args.seed)
    result = {
        "dataset": args.dataset, "tokens": corpus.n_tokens, "topics": args.topics,
        "ours_best": max(ours), "ours_median": statistics.median(ours),
        "tomotopy_best": max(theirs), "tomotopy_median": statistics.median(theirs),
        "tomotopy_version": tp.__version__, "tomotopy_isa": tp.isa,
    }
    result["ratio_best"] = result["ours_best"] / result["tomotopy_best"]
    result["ratio_median"] = result["ours_median"] / result["tomotopy_median"]
    print(f"{corpus.n_tokens} tokens, K={args.topics}, {args.sweeps} sweeps x {args.repeats} repeats, one core")
    print(f"{'':18s}{'best Mtok/s':>12s}{'median Mtok/s':>15s}")
    print(f"{'flower-topics':18s}{result['ours_best'] / 1e6:12.2f}{result['ours_median'] / 1e6:15.2f}")
    print(f"{'tomotopy ' + tp.__version__:18s}{result['tomotopy_best'] / 1e6:12.2f}{result['tomotopy_median'] / 1e6:15.2f}")
    print(f"{'ratio':18s}{result['ratio_best']:12.2f}{result['ratio_median']:15.2f}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)


if __name__ == "__main__":
    main()
