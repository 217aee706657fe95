"""FedLDA local samplers: tokens/s of alias MH vs Gibbs against a fixed phi, side by side.

    python benchmarks/bench_fixed_phi.py --dataset $FLOWER_TOPICS_DATASETS/BBC_News --topics 20 100

One core; phi is a smoothed random topic-word matrix (the speed does not depend on its
values); compilation and alias-table construction excluded from the sweep timings
(the table build time is printed separately: it is paid once per round).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmark_data import DATASETS
from flower_topics.data import load_corpus
from flower_topics.models.fixed_phi import FixedPhiSampler, build_alias_tables


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(DATASETS / "BBC_News"))
    parser.add_argument("--topics", type=int, nargs="+", default=[20, 100])
    parser.add_argument("--sweeps", type=int, default=5)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    corpus = load_corpus(args.dataset)
    print(f"{corpus.n_tokens} tokens; best of {args.repeats} x {args.sweeps} sweeps, one core")
    print(f"{'K':>5s}{'gibbs Mtok/s':>14s}{'mh Mtok/s':>12s}{'mh/gibbs':>10s}{'alias build s':>15s}")
    for k in args.topics:
        rng = np.random.default_rng(0)
        phi = rng.dirichlet(np.full(corpus.n_words, 0.05), size=k) + 1e-6
        phi /= phi.sum(axis=1, keepdims=True)
        rates = {}
        for method in ("gibbs", "mh"):
            sampler = FixedPhiSampler(corpus, k, 0.1, seed=0)
            sampler.sweep(phi, method)  # compile
            best = 0.0
            for _ in range(args.repeats):
                start = time.perf_counter()
                sampler.sweep(phi, method, n_sweeps=args.sweeps)
                best = max(best, corpus.n_tokens * args.sweeps / (time.perf_counter() - start))
            rates[method] = best
        start = time.perf_counter()
        build_alias_tables(np.ascontiguousarray(phi.T))
        build = time.perf_counter() - start
        print(f"{k:5d}{rates['gibbs'] / 1e6:14.2f}{rates['mh'] / 1e6:12.2f}{rates['mh'] / rates['gibbs']:10.2f}{build:15.4f}")


if __name__ == "__main__":
    main()
