"""PC-TD local EM iteration (Algorithm 1, lines 4-10): seconds per iteration and peak memory.

    python benchmarks/bench_pctd_em.py --dataset $FLOWER_TOPICS_DATASETS/BBC_News --topics 20 --n 3

Training documents of the corpus as one party, non-overlapping n-gram units, noise
N(0, sigma^2) on all U x V unit counts (the exact fast draw of
:func:`flower_topics.models.pctd.local_em_step`). Side by side: the noiseless step, the
noisy step, the naive full U x V draw (timed on a prefix of the units that fits in
memory, scaled linearly to all units), and the server's eq. (11) + eq. (13) with a sparse
R of ``--neighbours`` entries per word, and, as a well-known reference, one iteration of
scikit-learn's batch variational EM for LDA on the same documents. Peak memory: tracemalloc's peak of one noisy step
(numpy allocations) and the process's maximum resident set size. BLAS is limited to
``--threads`` threads (default 1: tall-skinny products gain little from more, and an
oversubscribed machine makes multi-threaded OpenBLAS erratic).
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc

import numpy as np
import scipy.sparse as sp
from sklearn.decomposition import LatentDirichletAllocation
from threadpoolctl import threadpool_limits

from benchmark_data import DATASETS
from flower_topics.run.config import parse_run_config
from flower_topics.data.prepare import load_run_data
from flower_topics.models.pctd import (
    SemanticUnits,
    local_em_step,
    naive_local_em_step,
    ngram_units,
    random_doc_topic,
    random_topic_word,
)
from flower_topics.models.pctd_server import aggregate_topic_word, semantic_consistency


def best_of(repeats: int, fn) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(DATASETS / "BBC_News"))
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--n", type=int, default=3)
    parser.add_argument("--sigma", type=float, default=0.25)
    parser.add_argument("--neighbours", type=int, default=10)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="BLAS threads (default one core)")
    args = parser.parse_args()
    with threadpool_limits(limits=args.threads):
        run(args)


def run(args: argparse.Namespace) -> None:

    corpus = load_run_data(parse_run_config({"dataset": args.dataset})).train
    start = time.perf_counter()
    units = ngram_units(corpus, args.n)
    build = time.perf_counter() - start
    rng = np.random.default_rng(0)
    k, v = args.topics, units.n_words
    phi = random_topic_word(k, v, rng)
    theta = random_doc_topic(units.n_docs, k, rng)
    print(f"{corpus.n_docs} docs, {corpus.n_tokens} tokens, V={v}, {units.n_units} units (n={args.n}), K={k}, "
          f"sigma={args.sigma}; unit build {build:.3f} s; best of {args.repeats}; {args.threads} BLAS thread(s)")

    local_em_step(units, phi, theta, args.sigma, rng)  # warm-up
    noiseless = best_of(args.repeats, lambda: local_em_step(units, phi, theta, 0.0))
    noisy = best_of(args.repeats, lambda: local_em_step(units, phi, theta, args.sigma, rng))

    prefix = max(1, min(units.n_units, 20_000_000 // v // 4))
    sub = SemanticUnits(units.counts[:prefix], units.unit_doc[:prefix], units.n_docs)
    naive_prefix = best_of(2, lambda: naive_local_em_step(sub, phi, theta, args.sigma, rng))
    naive = naive_prefix * units.n_units / prefix

    stats = [local_em_step(units, phi, theta, args.sigma, rng).statistic for _ in range(3)]
    r = sp.random(v, v, density=min(1.0, args.neighbours / v), random_state=1, format="csr")
    server = best_of(args.repeats, lambda: semantic_consistency(aggregate_topic_word(stats), r, 0.3))

    # a well-known library side by side: scikit-learn's batch variational EM for LDA, one iteration
    # (E-step over all documents + M-step) on the same documents' term counts, same K, one thread
    dtm = corpus.doc_term_matrix().astype(np.float64)
    sklearn_lda = LatentDirichletAllocation(n_components=k, learning_method="batch", max_iter=1, n_jobs=1,
                                            random_state=0)
    reference = best_of(args.repeats, lambda: sklearn_lda.fit(dtm))

    tracemalloc.start()
    local_em_step(units, phi, theta, args.sigma, rng)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux

    print(f"{'step':<44s}{'s / iteration':>14s}")
    print(f"{'local EM, noiseless (sigma = 0)':<44s}{noiseless:14.3f}")
    print(f"{'local EM, noise on all U x V counts (fast)':<44s}{noisy:14.3f}")
    print(f"{f'local EM, naive U x V draw (from {prefix} units)':<44s}{naive:14.3f}")
    print(f"{'server: eq. 11 (3 parties) + eq. 13':<44s}{server:14.3f}")
    print(f"{'scikit-learn LDA, one batch variational EM':<44s}{reference:14.3f}")
    print(f"fast/naive speed-up {naive / noisy:.0f}x; peak traced memory of a noisy step "
          f"{peak / 2**20:.1f} MiB; process max RSS {maxrss:.0f} MiB")


if __name__ == "__main__":
    main()
