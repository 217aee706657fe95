"""dplda quality against whole-run epsilon, with non-private federated ``lda`` on the same vocabulary.

    python benchmarks/dplda_quality.py --dataset $FLOWER_TOPICS_DATASETS/debian_large/corpus.jsonl \
        --out runs/dplda-quality/debian
    python benchmarks/dplda_quality.py --dataset $FLOWER_TOPICS_DATASETS/BBC_News --out runs/dplda-quality/bbc

Every model is trained through the package's own ServerApp and ClientApp in this process
(:class:`~flower_topics.simulations.inprocess.InProcessGrid`), 5 parties split by label, on
one vocabulary file for every run (the ``--vocab-size`` most frequent words of the training
documents, ``max-df`` 0.5: the vocabulary is *treated as public* here, as the corpora are public;
a private corpus needs a vocabulary from a related public corpus or the ``private``
agreement, see docs/dplda.md). Federated evaluation is off in every run (dplda refuses it);
each final model is scored afterwards on the corpus' held-out documents with the package's
metrics, twice: our default (fold-in alpha 0.01) and the standard alpha 0.1. Writes
``results.csv``, ``results.md`` and ``dplda-quality.png`` into ``--out``.

    python benchmarks/dplda_quality.py --out runs/dq/debian-public \
        --curves "public start=runs/dq/debian-public/results-public*.csv" \
        --curves "embedding start=runs/dq/debian-public/results-embedding*.csv"

trains nothing: it draws the mean of the dplda rows of each labelled set of ``results*.csv`` files (comma-separated
globs) against
epsilon (and the lda row of the first) into ``--out``/``dplda-curves.png``.
"""

from __future__ import annotations

import argparse
import csv
import logging
import time
from pathlib import Path

from flower_topics.federation.client_app import make_client_app
from flower_topics.run.config import parse_run_config
from flower_topics.data.prepare import load_run_data
from flower_topics.evaluation import evaluate_model
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid

PARTIES = 5


def public_vocabulary(dataset: str, size: int, path: Path) -> Path:
    """The ``size`` words in most training documents (after the default preprocessing), one per line."""
    data = load_run_data(parse_run_config({"dataset": dataset, "max-vocab": size}))
    if len(data.corpus.vocabulary) > size:  # an OCTIS folder's curated vocabulary.txt is kept as it is
        raise SystemExit(f"{dataset} has a curated vocabulary of {len(data.corpus.vocabulary)} words: --vocab-size "
                         f"{size} cannot cut it")
    path.write_text("\n".join(data.corpus.vocabulary) + "\n", encoding="utf-8")
    return path


def train(config: dict, out: Path, parties: int = PARTIES) -> tuple[object, float]:
    """One federated run in this process; returns the model and its wall time."""
    run = {**config, "output-dir": str(out)}
    started = time.time()
    model = run_server(InProcessGrid.partitions(make_client_app(run), parties, run), run)
    return model, time.time() - started


def score(model, dataset: str, vocabulary: Path) -> dict[str, float]:
    """Held-out perplexity (fold-in alpha 0.01 and 0.1) and NPMI on the run's corpus."""
    data = load_run_data(parse_run_config({"dataset": dataset, "vocabulary": str(vocabulary)}))
    ours = evaluate_model(model, data.corpus, alpha=0.01, n_iter=100)
    standard = evaluate_model(model, data.corpus, alpha=0.1, n_iter=100)
    return {"perplexity": ours["perplexity"], "perplexity_alpha0.1": standard["perplexity"], "npmi": ours["npmi"]}


def earlier_lda_row(out: Path) -> dict[str, str]:
    """The ``lda`` row of the newest ``results*.csv`` in ``out`` that has one (``--no-lda``)."""
    for path in sorted(out.glob("results*.csv"), key=lambda p: p.stat().st_mtime, reverse=True):
        with path.open() as fh:
            row = next((row for row in csv.DictReader(fh) if row["method"] == "lda"), None)
        if row is not None:
            return row
    raise SystemExit(f"--no-lda: no results*.csv with an lda row in {out}; run once without --no-lda first")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", help="the corpus (needed unless --curves)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--vocab-size", type=int, default=5000)
    parser.add_argument("--vocabulary", default="", help="a public vocabulary file (e.g. `flower-topics vocabulary` "
                        "of a public corpus) in place of the --vocab-size words of the dataset")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[0.5, 1, 2, 4, 8])
    parser.add_argument("--delta", type=float, default=1e-5)
    parser.add_argument("--rounds", type=int, default=40, help="dplda rounds")
    parser.add_argument("--sample-rate", type=float, default=0.2)
    parser.add_argument("--lda-rounds", type=int, default=200)
    parser.add_argument("--parties", type=int, default=PARTIES,
                        help="dplda parties (1: one party holds every document, i.e. the noise of one trusted "
                        "aggregator, what secure aggregation would give 5 parties)")
    parser.add_argument("--no-lda", action="store_true", help="reuse the lda row of the newest results*.csv in --out")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra dplda run-config keys")
    parser.add_argument("--tag", default="", help="suffix of the dplda run folders and the results files, so that "
                        "runs with other --set keys in the same --out keep the earlier ones")
    parser.add_argument("--curves", action="append", default=[], metavar="LABEL=GLOB",
                        help="only plot: the dplda rows of the results*.csv files matching GLOB (or GLOB,GLOB...) as one curve")
    args = parser.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.curves:
        curves({label: sorted(f for pattern in patterns.split(",") for f in Path().glob(pattern))
                for label, patterns in (c.split("=", 1) for c in args.curves)},
               out / "dplda-curves.png")
        return
    if not args.dataset:
        raise SystemExit("--dataset is needed (unless --curves)")
    vocabulary = (Path(args.vocabulary) if args.vocabulary else
                  public_vocabulary(args.dataset, args.vocab_size, out / "vocabulary.txt"))
    base = {"dataset": args.dataset, "num-topics": args.topics, "vocabulary": str(vocabulary),
            "federated-eval": False, "seed": 0}
    rows = []
    if args.no_lda:
        lda = earlier_lda_row(out)
        rows.append({"method": "lda", "epsilon": "none", "rounds": int(lda["rounds"]), "wall_s": float(lda["wall_s"]),
                     **{k: float(lda[k]) for k in ("perplexity", "perplexity_alpha0.1", "npmi")}})
    else:
        model, wall = train({**base, "method": "lda", "num-rounds": args.lda_rounds}, out / "lda")
        rows.append({"method": "lda", "epsilon": "none", "rounds": args.lda_rounds, "wall_s": round(wall, 1),
                     **score(model, args.dataset, vocabulary)})
    print(rows[-1], flush=True)
    extra = dict(item.split("=", 1) for item in args.set)
    tag = f"-{args.tag}" if args.tag else ""
    for i, eps in enumerate(args.epsilons):
        config = {**base, "method": "dplda", "num-rounds": args.rounds, "dplda.epsilon": eps,
                  "dplda.delta": args.delta, "dplda.sample-rate": args.sample_rate, **extra}
        name = f"dplda-eps{eps:g}" + (f"-{args.parties}parties" if args.parties != PARTIES else "") + tag
        repeat = args.epsilons[:i].count(eps)  # an epsilon listed again: a repeat (its noise is fresh)
        name += f"-{repeat + 1}" if repeat else ""
        model, wall = train(config, out / name, args.parties)
        report = model.metadata["privacy"]
        rows.append({"method": "dplda", "parties": args.parties, "epsilon": round(report["epsilon"], 3),
                     "rounds": args.rounds, "settings": " ".join(args.set),
                     "wall_s": round(wall, 1), "noise_multiplier": round(report["noise_multiplier"], 3),
                     **score(model, args.dataset, vocabulary)})
        print(rows[-1], flush=True)
    reference = rows[0]
    for row in rows:
        row["perplexity_vs_lda"] = round(row["perplexity"] / reference["perplexity"] - 1, 3)
        row["npmi_vs_lda"] = round(row["npmi"] - reference["npmi"], 3)
    columns = list(dict.fromkeys(k for row in rows for k in row))
    suffix = ("" if args.parties == PARTIES else f"-{args.parties}parties") + tag
    with (out / f"results{suffix}.csv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_fmt(row.get(c)) for c in columns) + " |" for row in rows]
    (out / f"results{suffix}.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    plot(rows, out / f"dplda-quality{suffix}.png", Path(args.dataset).parent.name if Path(args.dataset).is_file() else Path(args.dataset).name, args.topics, args.parties)


def _fmt(value) -> str:
    return f"{value:.4g}" if isinstance(value, float) else ("" if value is None else str(value))


def curves(series: dict[str, list[Path]], path: Path) -> None:
    """Mean perplexity and NPMI of each labelled set of results files against epsilon, lda dashed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    lda = None
    ticks: set[float] = set()
    for i, (label, files) in enumerate(series.items()):
        rows = [row for f in files for row in csv.DictReader(f.open())]
        lda = lda or next((r for r in rows if r["method"] == "lda"), None)
        private = [r for r in rows if r["method"] == "dplda"]
        eps = sorted({round(float(r["epsilon"]), 2) for r in private})
        ticks.update(eps)
        for ax, key in ((axes[0], "perplexity"), (axes[1], "npmi")):
            runs = [[float(r[key]) for r in private if round(float(r["epsilon"]), 2) == e] for e in eps]
            ax.plot(eps, [sum(v) / len(v) for v in runs], "-o", color=f"C{i}", label=label)
            ax.plot([e for e, v in zip(eps, runs) for _ in v], [x for v in runs for x in v], ".", color=f"C{i}")
    for ax, key, label in ((axes[0], "perplexity", "held-out perplexity (fold-in alpha 0.01)"),
                           (axes[1], "npmi", "NPMI (top 10 words)")):
        if lda is not None:
            ax.axhline(float(lda[key]), color="grey", linestyle="--", label="lda, no privacy")
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(sorted(ticks), [f"{e:.2g}" for e in sorted(ticks)])
        ax.set_xlabel("whole-run epsilon per document (delta 1e-5)")
        ax.set_ylabel(label)
        ax.legend(fontsize=7, framealpha=0.6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot(rows: list[dict], path: Path, corpus: str, topics: int, parties: int) -> None:
    """Perplexity and NPMI against whole-run epsilon, lda as a horizontal reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    private = [r for r in rows if r["method"] == "dplda"]
    eps = sorted({round(float(r["epsilon"]), 2) for r in private})
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, label in ((axes[0], "perplexity", "held-out perplexity (fold-in alpha 0.01)"),
                           (axes[1], "npmi", "NPMI (top 10 words)")):
        runs = [[float(r[key]) for r in private if round(float(r["epsilon"]), 2) == e] for e in eps]
        ax.plot(eps, [sum(v) / len(v) for v in runs], "-", color="C0", label="dplda (mean of the runs)")
        ax.plot([e for e, v in zip(eps, runs) for _ in v], [x for v in runs for x in v], "o", color="C0",
                label="dplda, one run")
        ax.axhline(rows[0][key], color="grey", linestyle="--", label="lda, no privacy")
        ax.set_xscale("log")
        ax.minorticks_off()
        ax.set_xticks(eps, [f"{e:.2g}" for e in eps])
        ax.set_xlabel("whole-run epsilon per document (delta 1e-5)")
        ax.set_ylabel(label)
        ax.legend()
    fig.suptitle(f"dplda ({parties} part{'y' if parties == 1 else 'ies'}) vs non-private federated lda "
                 f"({PARTIES} parties), {corpus}, K={topics}")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
