"""FTM private Metropolis-Hastings: tokens/s of a local iteration and memory of the noisy statistics.

    python benchmarks/bench_ftm_sampler.py --dataset $FLOWER_TOPICS_DATASETS/BBC_News --topics 20 \
        --settings 11:0.2 inf:0.2

One core. For each (eps, tau) setting: the time to privatize every token once (eq. 9-10 plus the
threshold), the surviving entries per token, the memory of the statistics (measured and the
expected value of :func:`expected_noisy_nbytes`), and the speed of :meth:`PrivateMHSampler.run`
(one local iteration of Algorithm 1: Phi draw, alias tables, one MH sweep, C^KW recount; numba
compilation excluded). ``inf`` is the noiseless one-hot baseline. The corpus's whole token list
(train and held-out documents) is used, as in bench_fixed_phi.py.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from benchmark_data import DATASETS
from flower_topics.data import load_corpus
from flower_topics.models.ftm import PrivateMHSampler, expected_noisy_nbytes, privatize_tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(DATASETS / "BBC_News"))
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--settings", nargs="+", default=["11:0.2", "inf:0.2"], help="eps:tau pairs")
    parser.add_argument("--iterations", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    corpus = load_corpus(args.dataset)
    print(f"{corpus.n_tokens} tokens, {corpus.n_docs} docs, V = {corpus.n_words}, K = {args.topics}; "
          f"best of {args.repeats} x {args.iterations} local iterations, one core")
    print(f"{'eps':>6s}{'tau':>6s}{'privatize s':>13s}{'nnz/token':>11s}{'MiB':>9s}{'expected MiB':>14s}"
          f"{'ktok/s':>10s}{'s/iteration':>13s}")
    for setting in args.settings:
        eps_text, tau_text = setting.split(":")
        epsilon, tau = float(eps_text), float(tau_text)
        rng = np.random.default_rng()  # benchmark only; a party seeds from OS entropy or a node secret
        privatize_tokens(corpus.tokens[:100], corpus.n_words, epsilon, tau, rng)  # compile
        start = time.perf_counter()
        stats = privatize_tokens(corpus.tokens, corpus.n_words, epsilon, tau, rng)
        privatize_s = time.perf_counter() - start
        sampler = PrivateMHSampler(stats, corpus.doc_ptr, args.topics, 0.1, 0.01, np.random.default_rng(0))
        sampler.run(1)  # compile
        best = 0.0
        for _ in range(args.repeats):
            start = time.perf_counter()
            sampler.run(args.iterations)
            best = max(best, corpus.n_tokens * args.iterations / (time.perf_counter() - start))
        expected = expected_noisy_nbytes(corpus.n_tokens, corpus.n_words, epsilon, tau)
        print(f"{'inf' if math.isinf(epsilon) else f'{epsilon:g}':>6s}{tau:6.2f}{privatize_s:13.2f}"
              f"{stats.nnz / corpus.n_tokens:11.1f}{stats.nbytes / 2**20:9.1f}{expected / 2**20:14.1f}"
              f"{best / 1e3:10.1f}{corpus.n_tokens / best:13.2f}")


if __name__ == "__main__":
    main()
