"""dplda's local E-step against scikit-learn's online LDA on the same batch (issue 22 item 4).

    python benchmarks/bench_svi_estep.py --dataset $FLOWER_TOPICS_DATASETS/debian_large/corpus.jsonl \\
        --topics 20 100 --sample-rate 0.2 --repeats 3

One batch: each training document of the corpus kept with probability ``--sample-rate`` (a
dplda round's Poisson sample of one party holding every document), as ``D x V`` counts.
Side by side, one thread each (``threads=1``, ``threadpool_limits(1)``, ``n_jobs=1``), the same topics
(``lambda`` drawn once from Gamma(100, 1/100) like both libraries' initializations), alpha
and stopping rule (at most 100 gamma updates a document, stop when the mean absolute change
falls below 1e-3):

- ours: :func:`flower_topics.models.svi.e_step` without clipping (``clip=None``), the
  compiled kernel dplda runs, plus the ``K x V`` statistic;
- scikit-learn: ``LatentDirichletAllocation._e_step(X, cal_sstats=True, random_init=False)``
  on a model whose ``components_`` are the same ``lambda`` (its E-step with sufficient
  statistics; private API of scikit-learn 1.x, the step ``partial_fit`` runs before its
  M-step). Its gamma starts at 1 for every topic, ours at alpha + N_d / K: the iteration
  counts differ a little, the work per iteration is the same O(nnz x K).

Reports seconds best / median and documents per second, and the largest absolute difference
of the two statistics relative to their largest entry (both converge to the same fixed
point only within the tolerance).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
from sklearn.decomposition import LatentDirichletAllocation
from sklearn.decomposition._online_lda_fast import _dirichlet_expectation_2d
from threadpoolctl import threadpool_limits

from benchmark_data import DATASETS
from flower_topics.data import load_corpus
from flower_topics.data.splits import ensure_split, training_corpus
from flower_topics.models.svi import document_counts, e_step


def timed(function, repeats: int) -> tuple[list[float], object]:
    """Seconds of each of ``repeats`` calls and the last call's result."""
    seconds, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = function()
        seconds.append(time.perf_counter() - started)
    return seconds, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(DATASETS / "debian_large/corpus.jsonl"))
    parser.add_argument("--topics", type=int, nargs="+", default=[20, 100])
    parser.add_argument("--sample-rate", type=float, default=0.2)
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    corpus = training_corpus(ensure_split(load_corpus(args.dataset), seed=args.seed))
    rng = np.random.default_rng(args.seed)
    counts = document_counts(corpus)
    batch = counts[np.flatnonzero(rng.random(counts.shape[0]) < args.sample_rate)]
    batch = batch[np.flatnonzero(np.diff(batch.indptr))]  # documents with a word
    print(f"{args.dataset}: batch of {batch.shape[0]} documents, {int(batch.sum())} tokens, V={batch.shape[1]}")
    for k in args.topics:
        lam = rng.gamma(100.0, 0.01, size=(k, batch.shape[1]))
        ours_fn = lambda: e_step(lam, batch, alpha=args.alpha, clip=None, max_iter=100, tol=1e-3, threads=1)  # noqa: E731
        sk = LatentDirichletAllocation(n_components=k, doc_topic_prior=args.alpha, learning_method="online",
                                       max_doc_update_iter=100, mean_change_tol=1e-3, n_jobs=1,
                                       random_state=args.seed)
        sk._init_latent_vars(batch.shape[1])  # priors and random state, then our topics
        sk.components_ = lam.copy()
        sk.exp_dirichlet_component_ = np.exp(_dirichlet_expectation_2d(lam))
        sk_fn = lambda: sk._e_step(batch, cal_sstats=True, random_init=False)  # noqa: E731
        with threadpool_limits(1):
            ours_fn()  # compiles
            ours_s, ours = timed(ours_fn, args.repeats)
            sk_s, (_, sk_stats) = timed(sk_fn, args.repeats)
        difference = float(np.abs(ours.statistic - sk_stats).max() / np.abs(sk_stats).max())
        row = {"topics": k, "documents": int(batch.shape[0]),
               "ours_seconds_best": round(min(ours_s), 3), "ours_seconds_median": round(float(np.median(ours_s)), 3),
               "sklearn_seconds_best": round(min(sk_s), 3), "sklearn_seconds_median": round(float(np.median(sk_s)), 3),
               "ratio_sklearn_to_ours_best": round(min(sk_s) / min(ours_s), 2),
               "ours_documents_per_second": round(batch.shape[0] / min(ours_s)),
               "statistics_max_relative_difference": float(f"{difference:.2e}")}
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
