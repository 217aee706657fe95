"""Sampler speed: collapsed Gibbs sweeps, ours vs tomotopy, alternated side by side.

    python benchmarks/bench_sampler.py --dataset $FLOWER_TOPICS_DATASETS/BBC_News \
        $FLOWER_TOPICS_DATASETS/debian_large/corpus.jsonl --topics 20 100 300 1000 \
        --sweeps 10 --repeats 3 --max-topic-tokens 1e10

Both run on one core (tomotopy ``workers=1``; ours is single-threaded) on all documents
of each corpus with alpha 0.1, beta 0.01; compilation (numba) and model set-up
(tomotopy, and its first iteration, which initializes) are excluded, and ours also
makes one untimed sweep. Each repeat times ``--sweeps`` sweeps of every contestant in
turn (ours with each ``--kernels`` entry, then tomotopy), so that a machine shared
with other work slows them alike; the best and median tokens/s over ``--repeats`` are
printed with their ratio (ours / tomotopy), by wall clock; the last column is the
ratio of the best rates by process CPU time, which time spent waiting for the
shared cores does not inflate. ``--kernels dense sparse`` measures the
crossover that ``kernel="auto"`` uses (flower_topics.models.lda.SPARSE_MIN_TOPICS).
``--baseline REV`` adds the sampler of an earlier commit (its
``flower_topics/models/lda.py``, read with ``git show``) as one more contestant, so
that before and after are timed side by side in the same process.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from benchmark_data import DATASETS
from flower_topics.data import load_corpus
from flower_topics.models.lda import CollapsedGibbs, choose_kernel


def tomotopy():
    """tomotopy, imported when a run needs it (``--help`` does not): the ``bench`` extra."""
    try:
        import tomotopy as tp
    except ModuleNotFoundError:
        raise SystemExit("this benchmark runs tomotopy: pip install -e '.[bench]'") from None
    return tp

ALPHA, BETA = 0.1, 0.01


def load_baseline(rev: str):
    """``flower_topics.models.lda`` as it was at git revision ``rev``, imported under another name."""
    root = Path(__file__).resolve().parent.parent
    source = subprocess.run(["git", "show", f"{rev}:flower_topics/models/lda.py"], cwd=root, check=True,
                            capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="bench-baseline-")) / f"lda_{rev}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(f"lda_{rev}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Ours:
    """Our sampler with one kernel, ready to time (``module``: another version's lda module)."""

    def __init__(self, corpus, k: int, kernel: str, seed: int, module=None, label: str = "ours") -> None:
        gibbs = CollapsedGibbs if module is None else module.CollapsedGibbs
        self.sampler = gibbs(corpus, k, ALPHA, BETA, seed, kernel=kernel)
        self.name = f"{label} {self.sampler.kernel}" + (" (auto)" if kernel == "auto" else "")
        self.counts = self.sampler.topic_word_counts()
        self.sampler.sweep(self.counts)  # compile

    def run(self, sweeps: int, per_call: int | None = None) -> None:
        for start in range(0, sweeps, per_call or sweeps):
            self.sampler.sweep(self.counts, n_sweeps=min(per_call or sweeps, sweeps - start))


class Tomotopy:
    """tomotopy's LDAModel on the same documents, one worker."""

    def __init__(self, corpus, k: int, seed: int) -> None:
        tp = tomotopy()
        self.name = f"tomotopy {tp.__version__}"
        self.model = tp.LDAModel(k=k, alpha=ALPHA, eta=BETA, seed=seed)
        for d in range(corpus.n_docs):
            words = corpus.words(d)
            if words:
                self.model.add_doc(words)
        self.model.train(1, workers=1)  # initialization

    def run(self, sweeps: int, per_call: int | None = None) -> None:
        self.model.train(sweeps, workers=1)


def measure(corpus, k: int, kernels: list[str], sweeps: int, repeats: int,
            seed: int, baseline=None, baseline_label: str = "",
            per_call: int | None = None) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    """Tokens/s of every contestant by wall clock and by process CPU time, one timed run of each per repeat."""
    contestants = [Ours(corpus, k, kernel, seed) for kernel in kernels]
    if baseline is not None:
        contestants += [Ours(corpus, k, kernel, seed, baseline, baseline_label) for kernel in kernels]
    contestants.append(Tomotopy(corpus, k, seed))
    wall: dict[str, list[float]] = {c.name: [] for c in contestants}
    cpu: dict[str, list[float]] = {c.name: [] for c in contestants}
    for _ in range(repeats):
        for c in contestants:
            start, start_cpu = time.perf_counter(), time.process_time()
            c.run(sweeps, per_call)
            wall[c.name].append(corpus.n_tokens * sweeps / (time.perf_counter() - start))
            cpu[c.name].append(corpus.n_tokens * sweeps / (time.process_time() - start_cpu))
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", nargs="+", default=[str(DATASETS / "BBC_News")])
    parser.add_argument("--topics", type=int, nargs="+", default=[20])
    parser.add_argument("--kernels", nargs="+", default=["auto"], choices=["auto", "dense", "sparse"])
    parser.add_argument("--sweeps", type=int, default=10)
    parser.add_argument("--max-topic-tokens", type=float, default=None,
                        help="cap sweeps so that K x tokens x sweeps stays under this (e.g. 2e10)")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--sweeps-per-call", type=int, default=None,
                        help="call our sweep() with this many sweeps at a time (1: a federated round's "
                             "set-up every sweep); tomotopy still trains --sweeps iterations in one call")
    parser.add_argument("--baseline", metavar="REV",
                        help="also time the sampler of this git revision (before / after in one run)")
    parser.add_argument("--json", help="also write the numbers to this file")
    args = parser.parse_args()
    tp = tomotopy()
    baseline = load_baseline(args.baseline) if args.baseline else None
    results = []
    print(f"tomotopy {tp.__version__} ({tp.isa}), one core; best / median Mtok/s over {args.repeats} repeats")
    print("| corpus | tokens | K | sweeps | kernel | ours best | ours median | tomotopy best | tomotopy median "
          "| ratio best | ratio median | ratio best (CPU time) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    tp_name = f"tomotopy {tp.__version__}"
    for dataset in args.dataset:
        corpus = load_corpus(dataset)
        parts = dataset.rstrip("/").split("/")
        name = parts[-2] if "." in parts[-1] and len(parts) > 1 else parts[-1]  # debian_large/corpus.jsonl
        for k in args.topics:
            sweeps = args.sweeps
            if args.max_topic_tokens:
                sweeps = max(1, min(sweeps, int(args.max_topic_tokens // (k * corpus.n_tokens))))
            rates, cpu_rates = measure(corpus, k, args.kernels, sweeps, args.repeats, args.seed,
                                       baseline, f"{args.baseline}", args.sweeps_per_call)
            theirs = rates.pop(tp_name)
            theirs_cpu = cpu_rates.pop(tp_name)
            for label, ours in rates.items():
                row = {
                    "dataset": dataset, "tokens": corpus.n_tokens, "topics": k, "sweeps": sweeps,
                    "repeats": args.repeats, "kernel": label,
                    "auto_kernel": choose_kernel(k, corpus.n_tokens / corpus.n_docs),
                    "ours": ours, "tomotopy": theirs,
                    "ours_cpu": cpu_rates[label], "tomotopy_cpu": theirs_cpu,
                    "ratio_best_cpu": max(cpu_rates[label]) / max(theirs_cpu),
                    "ours_best": max(ours), "ours_median": statistics.median(ours),
                    "tomotopy_best": max(theirs), "tomotopy_median": statistics.median(theirs),
                    "tomotopy_version": tp.__version__, "tomotopy_isa": tp.isa,
                }
                row["ratio_best"] = row["ours_best"] / row["tomotopy_best"]
                row["ratio_median"] = row["ours_median"] / row["tomotopy_median"]
                results.append(row)
                print(f"| {name} | {corpus.n_tokens:,} | {k} | {sweeps} | {label.removeprefix('ours ')} "
                      f"| {row['ours_best'] / 1e6:.2f} | {row['ours_median'] / 1e6:.2f} "
                      f"| {row['tomotopy_best'] / 1e6:.2f} | {row['tomotopy_median'] / 1e6:.2f} "
                      f"| {row['ratio_best']:.2f} | {row['ratio_median']:.2f} | {row['ratio_best_cpu']:.2f} |",
                      flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=2)


if __name__ == "__main__":
    main()
