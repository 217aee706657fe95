"""Quality goal of plain federated LDA on BBC News, against centralized tomotopy.

    python benchmarks/bbc_quality.py --seeds 0 1 2 --out runs/bbc-quality

For each seed: federated LDA over 5 label-split clients (Flower simulation engine,
100 rounds x 10 local sweeps), our centralized LDA (1000 sweeps, pooled), and
tomotopy's centralized LDA (1000 iterations, one worker); K=20, alpha 0.1, beta
0.01, train+val to train, test to evaluate. Every model is scored by the same
``evaluate_model`` (perplexity by document completion, NPMI, UMass, diversity,
NMI/purity/macro-F1). Runs already in ``--out`` are reused, not repeated. Writes
``quality.csv`` and ``quality.md`` (mean and standard deviation over seeds).
"""

from __future__ import annotations

import argparse
import csv
import statistics
import time
from pathlib import Path

from benchmark_data import DATASETS
from flower_topics.run.config import parse_run_config
from flower_topics.data.prepare import load_run_data
from flower_topics.evaluation import evaluate_model
from flower_topics.topic_model.model_file import TopicModel, load_model, save_model
from flower_topics.run.outputs import read_metrics
from flower_topics.simulations import simulate

METRICS = ("perplexity", "npmi", "umass", "diversity", "nmi", "purity", "macro_f1", "wall_time")


def run_ours(mode: str, base: dict, seed: int, out: Path) -> dict:
    if not (out / "model.npz").exists():
        simulate({**base, "seed": seed}, mode=mode, num_clients=5, out_dir=out)
    row = dict(read_metrics(out / "metrics.jsonl")[-1])
    row["wall_time"] = load_model(out / "model.npz").metadata["wall_time"]
    return row


def run_tomotopy(base: dict, seed: int, out: Path) -> dict:
    from tomotopy_lda import train_tomotopy  # benchmarks/ is on sys.path when run as a script

    config = parse_run_config({**base, "seed": seed})
    data = load_run_data(config)
    if not (out / "model.npz").exists():
        started = time.time()
        phi = train_tomotopy(data.train, 20, 0.1, 0.01, 1000, seed)
        save_model(out / "model.npz", TopicModel(phi, data.corpus.vocabulary, metadata={
            "method": "tomotopy.LDAModel", "wall_time": time.time() - started, "seed": seed}))
    model = load_model(out / "model.npz")
    row = evaluate_model(model, data.corpus, use_labels=True, seed=seed)
    row["wall_time"] = model.metadata["wall_time"]
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(DATASETS / "BBC_News"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", default="runs/bbc-quality")
    args = parser.parse_args()
    out = Path(args.out)
    base = {"method": "lda", "dataset": args.dataset, "partition": "label", "num-topics": 20,
            "num-rounds": 100, "lda.local-sweeps": 10, "eval-every": 10, "alpha": 0.1, "beta": 0.01}
    rows = []
    for seed in args.seeds:
        rows.append({"model": "federated, 5 label clients", "seed": seed,
                     **run_ours("federated", base, seed, out / f"federated-s{seed}")})
        rows.append({"model": "centralized (ours)", "seed": seed,
                     **run_ours("centralized", base, seed, out / f"centralized-s{seed}")})
        rows.append({"model": "centralized tomotopy", "seed": seed,
                     **run_tomotopy(base, seed, out / f"tomotopy-s{seed}")})
    with (out / "quality.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=["model", "seed", *METRICS], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| model | " + " | ".join(METRICS) + " |", "|---|" + "---|" * len(METRICS)]
    for name in dict.fromkeys(r["model"] for r in rows):
        group = [r for r in rows if r["model"] == name]
        cells = []
        for m in METRICS:
            values = [float(r[m]) for r in group if r.get(m) is not None]
            if not values:  # macro-F1 is not a federated sum: runs of ours do not report it
                cells.append("-")
                continue
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.mean(values):.4g} ± {sd:.2g}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    (out / "quality.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
