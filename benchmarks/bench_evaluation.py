"""Seconds of one party's federated evaluation, and of the theta fold-in inside it.

    python benchmarks/bench_evaluation.py --dataset $FLOWER_TOPICS_DATASETS/debian_large/corpus.jsonl --parties 5 --topics 100

One party's share of a corpus (``partition-id=0`` of ``--parties``, the run's split) is
scored as an ``evaluate`` message asks (:class:`flower_topics.evaluation.federated.PartyScorer`, at a party's
first evaluation and at a later one:
held-out document completion, co-document counts of the model's top words, and, when the
corpus has labels, the theta of every held-out document), against a random model of
``--topics`` topics (the time does not depend on the model's values). The fold-in EM is
also timed alone, compiled (:func:`flower_topics.metrics.inference.fold_in`) against the
same EM written with vectorized numpy (what the package ran before; the thetas agree to
1e-12), alternating the two; best and median of ``--repeats``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmark_data import DATASETS  # noqa: E402
from flower_topics.evaluation import federated as evaluation  # noqa: E402
from flower_topics.run.config import parse_run_config  # noqa: E402
from flower_topics.data.node_data import load_node_documents  # noqa: E402
from flower_topics.metrics.inference import fold_in  # noqa: E402


def numpy_fold_in(phi: np.ndarray, counts: sp.csr_matrix, *, alpha: float, n_iter: int) -> np.ndarray:
    """The fold-in EM with vectorized numpy over all tokens at once (the baseline)."""
    n_topics = phi.shape[0]
    counts = sp.csr_matrix(counts, dtype=np.float64, copy=True)
    counts.sum_duplicates()
    rows = np.repeat(np.arange(counts.shape[0]), np.diff(counts.indptr))
    phi_at_tokens = np.ascontiguousarray(phi.T[counts.indices])
    n_dw = counts.data.copy()
    phi_t = np.ascontiguousarray(phi.T)
    theta = np.full((counts.shape[0], n_topics), 1.0 / n_topics)
    for _ in range(n_iter):
        p_dw = np.einsum("nk,nk->n", np.take(theta, rows, axis=0), phi_at_tokens)
        np.divide(n_dw, p_dw, out=counts.data, where=p_dw > 0)
        counts.data[p_dw <= 0] = 0.0
        theta = alpha + theta * (counts @ phi_t)
        totals = theta.sum(axis=1, keepdims=True)
        theta = np.divide(theta, totals, out=np.full_like(theta, 1.0 / n_topics), where=totals > 0)
    return theta


def timed(function, *args, **kwargs) -> tuple[float, object]:
    started = time.perf_counter()
    result = function(*args, **kwargs)
    return time.perf_counter() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(DATASETS / "debian_large" / "corpus.jsonl"))
    parser.add_argument("--parties", type=int, default=5)
    parser.add_argument("--topics", type=int, default=100)
    parser.add_argument("--iterations", type=int, default=100, help="eval-iterations")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    config = parse_run_config({"dataset": args.dataset, "num-topics": args.topics})
    documents = load_node_documents({"partition-id": 0, "num-partitions": args.parties}, config)
    corpus = documents.on_vocabulary(documents.corpus.vocabulary, int(config["min-doc-length"]))
    training, heldout = corpus.select_split("train", "val"), corpus.select_split("test")
    rng = np.random.default_rng(0)
    phi = rng.dirichlet(np.full(corpus.n_words, 0.05), size=args.topics)
    print(f"party 0 of {args.parties}: {training.n_docs} training and {heldout.n_docs} held-out documents "
          f"({heldout.n_tokens} tokens), V={corpus.n_words}, K={args.topics}, {args.iterations} iterations")

    counts = heldout.doc_term_matrix()
    fold_in(phi, counts[:2], alpha=0.01, n_iter=1)  # compile once, outside the timing
    compiled, vectorized = [], []
    for _ in range(args.repeats):
        seconds, theta_c = timed(fold_in, phi, counts, alpha=0.01, n_iter=args.iterations)
        compiled.append(seconds)
        seconds, theta_v = timed(numpy_fold_in, phi, counts, alpha=0.01, n_iter=args.iterations)
        vectorized.append(seconds)
    assert np.allclose(theta_c, theta_v, rtol=0, atol=1e-12)
    print(f"fold-in of the held-out documents: compiled {min(compiled):.2f} / {np.median(compiled):.2f} s, "
          f"numpy {min(vectorized):.2f} / {np.median(vectorized):.2f} s (best / median), "
          f"speed-up {min(vectorized) / min(compiled):.1f}x")

    settings = evaluation.EvaluationSettings.from_config({**config, "num-rounds": 2})
    for server_round, what in ((1, "a round's evaluation"), (2, "the final evaluation (with label theta)")):
        request = evaluation.request(phi, settings, "bench", server_round)
        first = [timed(evaluation.PartyScorer(training, heldout).scores, request)[0] for _ in range(args.repeats)]
        scorer = evaluation.PartyScorer(training, heldout)
        scorer.scores(request)
        later = [timed(scorer.scores, request)[0] for _ in range(args.repeats)]
        print(f"one party's {what}: first {min(first):.3f} / {np.median(first):.3f} s, later (the party's "
              f"documents prepared at its first) {min(later):.3f} / {np.median(later):.3f} s (best / median)")


if __name__ == "__main__":
    main()
