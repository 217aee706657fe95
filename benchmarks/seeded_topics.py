"""Guided topics: federated ``lda`` (or ``--method``) with and without seed words, side by side, and the sweep's speed.

    python benchmarks/seeded_topics.py --dataset $FLOWER_TOPICS_DATASETS/BBC_News \
        --seeds benchmarks/seeds/bbc_news.txt --labels business entertainment politics sport tech \
        --out runs/seeded/bbc
    python benchmarks/seeded_topics.py --dataset $FLOWER_TOPICS_DATASETS/debian_large/corpus.jsonl \
        --seeds benchmarks/seeds/debian_large.txt --labels games sound science fonts mail --topics 50 \
        --set max-vocab=5000 --speed-topics 50 --repeats 5 --out runs/seeded/debian
    python benchmarks/seeded_topics.py --dataset $FLOWER_TOPICS_DATASETS/BBC_News \
        --seeds benchmarks/seeds/bbc_news.txt --speed-only --speed-topics 20 1000
    python benchmarks/seeded_topics.py --method dplda --dataset $FLOWER_TOPICS_DATASETS/BBC_News \
        --seeds benchmarks/seeds/bbc_news.txt --labels business entertainment politics sport tech --rounds 40 \
        --set vocabulary=$FLOWER_TOPICS_DATASETS/BBC_News/vocabulary.txt --set federated-eval=false \
        --set dplda.epsilon=3 --speed-topics --out runs/seeded/bbc-dplda

Quality: two federated runs of ``--method`` (default ``lda``; any method that takes seed words) through the package's ServerApp and ClientApp in this
process (:class:`~flower_topics.simulations.inprocess.InProcessGrid`), ``--parties`` parties
split by label, the same seed, one without ``seed-words`` and one with the file ``--seeds``
(line i seeds topic i; ``--labels`` names the corpus label each line is about). Each final
model is scored on the corpus' held-out documents with the package's metrics
(``benchmarks/scoring.py``: perplexity, NPMI, and NMI and purity of argmax theta against the
labels). Per seeded topic: how many of its seeds are among its top 10 words, and the share of
the held-out documents of its label whose top topic it is; for the run without seeds, the
same share for the topic that most of the label's documents have on top (the best any
unseeded topic does for that label) and that topic's seeds in its top 10.

Speed (``--speed-topics``): collapsed Gibbs sweeps of the pooled training documents with and
without the seed prior, from the same start, alternated ``--repeats`` times so that a
shared machine slows both alike; best and median tokens/s and their ratio (seeded /
unseeded). Writes ``results.md`` into ``--out`` and prints it.
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from scoring import score

from flower_topics.data.prepare import load_run_data, training_corpus
from flower_topics.federation.client_app import make_client_app
from flower_topics.federation.server_app import run_server
from flower_topics.models.lda import CollapsedGibbs
from flower_topics.models.seed_words import (
    SEED_WEIGHT,
    load_seed_prior,
    read_seed_lines,
)
from flower_topics.run.config import parse_assignments, parse_run_config
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.topic_model.document_topics import count_corpus, document_topics


def train(config: dict, out: Path, parties: int) -> tuple[object, float]:
    """One federated run in this process; returns the model and its wall time."""
    run = {**config, "output-dir": str(out)}
    started = time.time()
    model = run_server(InProcessGrid.partitions(make_client_app(run), parties, run), run)
    return model, time.time() - started


def top_topics(model, corpus) -> np.ndarray:
    """argmax theta of each document of ``corpus`` under ``model`` (the evaluation's fold-in)."""
    return document_topics(model.topic_word, count_corpus(corpus, model.vocabulary)).top_topic


def seeds_in_top(model, topic: int, seeds: list[str], n: int = 10) -> int:
    """How many of ``seeds`` are among the ``n`` most probable words of ``topic``."""
    return len(set(seeds) & set(model.top_words(n)[topic]))


def quality(args: argparse.Namespace, base: dict, lines: list[list[str]], out: Path) -> list[str]:
    """The two runs and their table (Markdown lines)."""
    data = load_run_data(parse_run_config(base))
    heldout = data.corpus.select_split("test")
    labels = np.asarray(heldout.labels, dtype=object)
    rows, models = {}, {}
    for name, extra in (("without seeds", {}), ("with seeds", {"seed-words": str(Path(args.seeds).resolve()),
                                                                 "seed-weight": args.weight})):
        config = {**base, **extra}
        model, seconds = train(config, out / name.replace(" ", "-"), args.parties)
        metrics = score(model, data, parse_run_config(config))
        privacy = model.metadata.get("privacy") or {}
        rows[name] = {**metrics, "wall_time": seconds, "epsilon": privacy.get("epsilon"),
                      "sigma": privacy.get("noise_multiplier")}
        models[name] = (model, top_topics(model, heldout))
    table = [("| seed line | label | held-out docs | seeded topic: seeds in top 10 | seeded topic: share of the "
              "label's docs on top | without seeds: best topic's share | its seeds in top 10 |"),
             "|---|---|---|---|---|---|---|"]
    seeded, plain = models["with seeds"], models["without seeds"]
    for i, (words, label) in enumerate(zip(lines, args.labels)):
        docs = labels == label
        kept = [w for w in words if w in seeded[0].vocabulary]
        share = float(np.mean(seeded[1][docs] == i)) if docs.any() else float("nan")
        best = int(np.bincount(plain[1][docs], minlength=plain[0].n_topics).argmax()) if docs.any() else 0
        best_share = float(np.mean(plain[1][docs] == best)) if docs.any() else float("nan")
        table.append(f"| {i} ({' '.join(words[:3])} ...) | {label} | {int(docs.sum())} | "
                     f"{seeds_in_top(seeded[0], i, kept)} of {len(kept)} | {share:.2f} | {best_share:.2f} "
                     f"(topic {best}) | {seeds_in_top(plain[0], best, kept)} of {len(kept)} |")
    table += ["", "| run | perplexity | NPMI | NMI | purity | epsilon | noise multiplier | wall time (s) |",
              "|---|---|---|---|---|---|---|---|"]
    for name, row in rows.items():
        eps, sigma = (f"{row[key]:.4g}" if row[key] is not None else "-" for key in ("epsilon", "sigma"))
        table.append(f"| {name} | {row['perplexity']:.1f} | {row['npmi']:.4f} | {row.get('nmi', float('nan')):.4f} "
                     f"| {row.get('purity', float('nan')):.4f} | {eps} | {sigma} | {row['wall_time']:.0f} |")
    table += ["", "Top words of the seeded topics (with seeds):", ""]
    table += [f"- topic {i}: {' '.join(seeded[0].top_words(10)[i])}" for i in range(len(lines))]
    return table


def speed(args: argparse.Namespace, base: dict) -> list[str]:
    """Seeded and unseeded sweeps of the pooled training documents, alternated (Markdown lines)."""
    corpus = training_corpus(load_run_data(parse_run_config(base)).corpus)
    table = [("| K | kernel | tokens | sweeps | unseeded best | seeded best | ratio best | unseeded median | "
              "seeded median | ratio median | ratio best (CPU time) |"), "|---|---|---|---|---|---|---|---|---|---|---|"]
    for k in args.speed_topics:
        prior, _ = load_seed_prior(args.seeds, corpus.vocabulary, k, args.weight)
        start = np.random.default_rng(args.seed).integers(0, k, corpus.n_tokens, dtype=np.int32)
        samplers = {name: CollapsedGibbs(corpus, k, 0.1, 0.01, args.seed, z=start.copy(), seeds=seeds)
                    for name, seeds in (("unseeded", None), ("seeded", prior))}
        counts = {name: s.topic_word_counts() for name, s in samplers.items()}
        for name, sampler in samplers.items():  # compile and warm up, untimed
            sampler.sweep(counts[name])
        rates: dict[str, list[float]] = {name: [] for name in samplers}
        cpu: dict[str, list[float]] = {name: [] for name in samplers}
        for _ in range(args.repeats):
            for name, sampler in samplers.items():
                began, began_cpu = time.perf_counter(), time.process_time()
                sampler.sweep(counts[name], n_sweeps=args.sweeps)
                rates[name].append(corpus.n_tokens * args.sweeps / (time.perf_counter() - began) / 1e6)
                cpu[name].append(corpus.n_tokens * args.sweeps / (time.process_time() - began_cpu) / 1e6)
        best = {name: max(r) for name, r in rates.items()}
        median = {name: statistics.median(r) for name, r in rates.items()}
        table.append(f"| {k} | {samplers['seeded'].kernel} | {corpus.n_tokens:,} | {args.sweeps} | "
                     f"{best['unseeded']:.2f} | {best['seeded']:.2f} | {best['seeded'] / best['unseeded']:.3f} | "
                     f"{median['unseeded']:.2f} | {median['seeded']:.2f} | "
                     f"{median['seeded'] / median['unseeded']:.3f} | {max(cpu['seeded']) / max(cpu['unseeded']):.3f} |")
    return [("Sweep speed, Mtok/s by wall clock (one core; alternated repeats); the last column by process CPU "
             "time, which waiting for a shared core does not inflate:"), "", *table]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--seeds", required=True, help="the seed-words file (one topic per line)")
    parser.add_argument("--labels", nargs="+", default=[], help="the corpus label each seed line is about")
    parser.add_argument("--out", default="runs/seeded")
    parser.add_argument("--method", default="lda", help="a method that takes seed words (lda, fedlda, pctd, dplda)")
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--parties", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--local-sweeps", type=int, default=1, help="lda.local-sweeps (lda only)")
    parser.add_argument("--weight", type=float, default=SEED_WEIGHT, help="seed-weight")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra run-config keys")
    parser.add_argument("--speed-only", action="store_true", help="only the sweep speed")
    parser.add_argument("--speed-topics", type=int, nargs="*", default=[20])
    parser.add_argument("--sweeps", type=int, default=10, help="sweeps per timed repeat")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    logging.getLogger("flwr").setLevel(logging.WARNING)
    lines = read_seed_lines(args.seeds)
    if not args.speed_only and len(args.labels) != len(lines):
        raise SystemExit(f"--labels: give one label per seed line ({len(lines)})")
    base = {"method": args.method, "dataset": args.dataset, "num-topics": args.topics, "num-rounds": args.rounds,
            "seed": args.seed, "partition": "label", "federated-eval": False,
            **({"lda.local-sweeps": args.local_sweeps} if args.method == "lda" else {}), **parse_assignments(args.set)}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = [f"`{' '.join(['python benchmarks/seeded_topics.py', *sys.argv[1:]])}`", ""]
    if not args.speed_only:
        report += quality(args, base, lines, out) + [""]
    if args.speed_topics:
        report += speed(args, base)
    text = "\n".join(report) + "\n"
    (out / "results.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
