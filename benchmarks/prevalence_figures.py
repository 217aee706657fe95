"""Topic prevalence over time on a dated corpus: the curves, the stage's seconds and dplda's noise on them.

Runs ``lda`` and ``dplda`` (at each ``--epsilons``) in one process on ``--parties`` iid shares of a dated
``.jsonl`` corpus (default: pypi_summaries, one-line package summaries with the month of their latest
release), with ``prevalence-period``; every party also keeps its exact table (``prevalence-out``), so that
dplda's released shares can be set against the exact shares of the same model. Prints one table row per run:
the prevalence stage's seconds, the periods, and for dplda the mean absolute error of the released shares
over the periods holding at least ``--min-documents`` documents. Each run's ``prevalence.csv`` and
``prevalence.png`` are under ``--out``.

    python benchmarks/prevalence_figures.py --out runs/prevalence

``--fold-in`` also times one party's fold-in pass (the kernel of the stage) on another corpus' share.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark_data import DATASETS  # noqa: E402


def run(config: dict, parties: int, out: Path) -> dict:
    """One in-process run with every party keeping its exact table; the released and the exact tables."""
    from flower_topics.federation.client_app import make_client_app
    from flower_topics.federation.server_app import run_server
    from flower_topics.run.prevalence_outputs import read_prevalence
    from flower_topics.simulations.inprocess import InProcessGrid

    out.mkdir(parents=True, exist_ok=True)
    nodes = [{"partition-id": i, "num-partitions": parties, "prevalence-out": str(out / f"party{i}.csv")}
             for i in range(parties)]
    started = time.time()
    model = run_server(InProcessGrid(make_client_app(config), nodes, config), {**config, "output-dir": str(out)})
    released, _ = read_prevalence(out / "prevalence.csv")
    exact = None
    for i in range(parties):
        own, _ = read_prevalence(out / f"party{i}.csv")
        own = own.on_periods(released.periods) if released.periods else own
        exact = own if exact is None else exact.plus(own)
    return {"model": model, "released": released, "exact": exact, "seconds": time.time() - started}


def fold_in_seconds(corpus: str, parties: int, topics: int) -> tuple[int, float]:
    """One party's share of ``corpus`` folded in against random topics: documents, seconds."""
    from flower_topics.data.readers import load_corpus
    from flower_topics.topic_model.document_topics import count_corpus, document_topics

    full = load_corpus(corpus)
    share = full.subset(np.arange(0, full.n_docs, parties))
    topic_word = np.random.default_rng(0).dirichlet(np.full(share.n_words, 0.1), size=topics)
    counts = count_corpus(share, share.vocabulary)
    started = time.perf_counter()
    document_topics(topic_word, counts, alpha=0.01, n_iter=100)
    return share.n_docs, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", default=str(DATASETS / "pypi_summaries" / "corpus.jsonl"))
    parser.add_argument("--parties", type=int, default=5)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--period", default="year", choices=("year", "quarter", "month"))
    parser.add_argument("--from", dest="start", default="2005")
    parser.add_argument("--to", dest="end", default="2026")
    parser.add_argument("--epsilons", default="1,3")
    parser.add_argument("--min-documents", type=float, default=100.0)
    parser.add_argument("--secure", action="store_true", help="dplda also with secure aggregation")
    parser.add_argument("--methods", default="lda,dplda")
    parser.add_argument("--fold-in", default="", help="also time one party's fold-in pass on this corpus")
    parser.add_argument("--out", default="runs/prevalence")
    args = parser.parse_args()

    base = {"dataset": args.corpus, "date-column": "date", "num-topics": args.topics, "num-rounds": args.rounds,
            "prevalence-period": args.period, "prevalence-from": args.start, "prevalence-to": args.end,
            "federated-eval": False, "verbose": False}
    methods = args.methods.split(",")
    runs = [("lda", {**base, "method": "lda"})] if "lda" in methods else []
    if "dplda" in methods:  # a quarter of the target for the words
        runs += [(f"dplda eps {eps}", {**base, "method": "dplda", "vocabulary": "private",
                                       "dplda.epsilon": float(eps), "vocabulary-epsilon": float(eps) / 4})
                 for eps in args.epsilons.split(",") if eps]
    if args.secure:
        runs += [(f"{name} secure", {**config, "secure-aggregation": True}) for name, config in runs
                 if config["method"] == "dplda"]
    print("| run | periods | stage s | run s | noise sd a cell | mean abs share error (periods >= "
          f"{args.min_documents:g} docs) |")
    print("|---|---|---|---|---|---|")
    for name, config in runs:
        result = run(config, args.parties, Path(args.out) / name.replace(" ", "-"))
        summary = result["model"].metadata["prevalence"]
        released, exact = result["released"], result["exact"]
        busy = exact.documents >= args.min_documents
        error = float(np.nanmean(np.abs(released.shares()[:, busy] - exact.shares()[:, busy]))) if busy.any() else 0
        print(f"| {name} | {len(released.periods)} ({int(busy.sum())} >= {args.min_documents:g} docs) | "
              f"{summary['seconds']:.2f} | {result['seconds']:.1f} | {summary['noise_std']:.3g} | {error:.4f} |",
              flush=True)
    if args.fold_in:
        documents, seconds = fold_in_seconds(args.fold_in, args.parties, args.topics)
        print(f"fold-in pass of one party ({documents} documents of {args.fold_in}, K={args.topics}): {seconds:.2f} s")


if __name__ == "__main__":
    main()
