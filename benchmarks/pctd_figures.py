"""Reproduce PC-TD's Figs. 2-4 and its tau study (Shi et al., IEEE Intelligent Systems 2020) on our corpora.

    python benchmarks/pctd_figures.py --dataset $FLOWER_TOPICS_DATASETS/BBC_News --out runs/pctd-figures/bbc
    python benchmarks/pctd_figures.py --dataset $FLOWER_TOPICS_DATASETS/debian_descriptions/corpus.jsonl --out runs/pctd-figures/debian

The training documents are split into 3 parties in the paper's ratio 85:165:252 (seeded,
scaled to the corpus). Each round runs the party code (:func:`flower_topics.clients.pctd.train_round`)
for every party and the server arithmetic of :class:`flower_topics.strategies.pctd.PCTD`
(sum, clamped eq. 11, eq. 13, float32 transport), without Flower's messaging. Scores
are the package's metrics: held-out document-completion perplexity on the test split,
UMass and NPMI on train+val. LDA is the foundation's collapsed Gibbs sampler on the
pooled training documents (alpha = K / 50 and beta = 0.01, the paper's LDA settings),
one sweep per round.

Writes, in ``--out``: ``convergence.csv/png`` (Fig. 2: perplexity per round for several
sigma, and LDA), ``parties.csv/png`` (Fig. 3: each party alone vs federated),
``coherence.csv/png`` (Fig. 4: UMass vs K for PC-TD without and with noise, and LDA),
``tau.csv/png`` (tau in 0, 0.1, 0.3, 0.5: perplexity and NPMI) and ``privacy.csv`` (eps
at delta 1e-5 after the rounds run, for every sigma). Runs already in ``runs.jsonl``
are reused.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from fedlda_figures import write_csv  # noqa: E402
from flwr.app import Array, ArrayRecord  # noqa: E402

from flower_topics.federation.client_app import client_seed  # noqa: E402
from flower_topics.clients.pctd import PCTDClientState, train_round  # noqa: E402
from flower_topics.run.config import parse_run_config  # noqa: E402
from flower_topics.data.prepare import all_partitions, load_run_data  # noqa: E402
from flower_topics.topic_model.model_file import TopicModel  # noqa: E402
from flower_topics.models.lda import CollapsedGibbs, topic_word_distribution  # noqa: E402
from flower_topics.models.pctd_server import sum_statistics  # noqa: E402
from flower_topics.privacy.gaussian import gaussian_epsilon, gaussian_sigma_for_epsilon  # noqa: E402
from scoring import score  # noqa: E402
from flower_topics.models.word_similarity import similarity_for_run  # noqa: E402
from flower_topics.strategies.pctd import PCTD  # noqa: E402
from flower_topics.wire.pctd import PHI_KEY, UNITS, PCTDSettings  # noqa: E402

PAPER_SPLIT = (85, 165, 252)
SCORES = ("perplexity", "npmi", "umass")


class Experiment:
    """The corpus, its three parties and a cache of finished runs (``runs.jsonl``)."""

    def __init__(self, out: Path, config: dict, rounds: int, every: int):
        self.config, self.rounds, self.every = config, rounds, every
        self.data = load_run_data(config)
        self.parties = all_partitions(config, len(PAPER_SPLIT))
        self._similarity = None
        self.path = out / "runs.jsonl"
        self.done = {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                row = json.loads(line)
                self.done[row["key"]] = row

    @property
    def similarity(self):
        if self._similarity is None:
            self._similarity = similarity_for_run(self.data.corpus.vocabulary, str(self.config["pctd.embedding-model"]),
                                                  int(self.config["pctd.similar-words"]))
        return self._similarity

    def scores(self, phi: np.ndarray, k: int) -> dict:
        metrics = score(TopicModel(phi, self.data.corpus.vocabulary), self.data, {**self.config, "num-topics": k})
        return {name: metrics[name] for name in SCORES}

    def run(self, method: str, k: int, sigma: float = 0.0, tau: float = 0.0, parties: tuple[int, ...] = (0, 1, 2)):
        """A finished run (trained now unless cached): its curve and final scores."""
        key = json.dumps({"method": method, "k": k, "sigma": sigma, "tau": tau, "parties": list(parties),
                          "rounds": self.rounds, "unit": self.config["pctd.unit"], "seed": self.config["seed"]},
                         sort_keys=True)
        if key not in self.done:
            started = time.time()
            if method == "lda":
                curve, iteration = self._lda(k), float("nan")
            else:
                curve, iteration = self._pctd(k, sigma, tau, parties)
            row = {"key": key, "method": method, "k": k, "sigma": sigma, "tau": tau, "parties": list(parties),
                   "curve": curve, **curve[-1][1], "seconds": time.time() - started,
                   "seconds_per_round": iteration}
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            self.done[key] = row
            print(f"{method} K={k} sigma={sigma} tau={tau} parties={list(parties)}: ppl {row['perplexity']:.1f} "
                  f"npmi {row['npmi']:.3f} umass {row['umass']:.2f} ({row['seconds']:.0f} s)", flush=True)
        return self.done[key]

    def _pctd(self, k, sigma, tau, parties):
        settings = PCTDSettings(n_topics=k, sigma=sigma, unit=str(self.config["pctd.unit"]),
                                ngram=int(self.config["pctd.ngram"]))
        strategy = PCTD(self.data.corpus.vocabulary, settings, pseudo_count=float(self.config["pctd.pseudo-count"]),
                        tau=tau, similarity=self.similarity if tau > 0 else None, seed=int(self.config["seed"]))
        arrays = strategy.initial_arrays()
        states = {p: PCTDClientState() for p in parties}
        curve, local = [], 0.0
        for r in range(1, self.rounds + 1):
            phi = strategy.topic_word(arrays)
            started = time.perf_counter()
            uploads = [train_round(self.parties[p], phi, states[p], server_round=r, settings=settings,
                                   seed=client_seed(self.config, p)) for p in parties]
            local += (time.perf_counter() - started) / len(parties)
            arrays = ArrayRecord({PHI_KEY: Array(strategy.merge(sum_statistics(uploads)).astype(np.float32))})
            if r % self.every == 0 or r == self.rounds:
                curve.append((r, self.scores(strategy.topic_word(arrays), k)))
        return curve, local / self.rounds

    def _lda(self, k):
        beta = 0.01
        pooled = self.data.train
        sampler = CollapsedGibbs(pooled, k, k / 50.0, beta, seed=int(self.config["seed"]))
        counts = sampler.topic_word_counts()
        curve = []
        for r in range(1, self.rounds + 1):
            sampler.sweep(counts)
            if r % self.every == 0 or r == self.rounds:
                curve.append((r, self.scores(topic_word_distribution(counts, beta), k)))
        return curve


def line_plot(path: Path, series: dict[str, list[tuple[float, float]]], xlabel: str, ylabel: str, title: str) -> None:
    fig, ax = plt.subplots(figsize=(7.5, 3.8))
    for label, pts in series.items():
        ax.plot(*zip(*pts), marker="o", markersize=3, label=label)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--sigmas", default="0,0.1,0.25,0.5,1.0", help="noise levels of Fig. 2")
    parser.add_argument("--sigma", type=float, default=0.25, help="the noisy PC-TD of Figs. 3-4 (the paper's)")
    parser.add_argument("--tau", type=float, default=0.3, help="tau of Figs. 2-4 (the paper's default)")
    parser.add_argument("--unit", default="ngram", choices=UNITS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ratios = ",".join(f"{n / sum(PAPER_SPLIT):.6f}" for n in PAPER_SPLIT)
    config = parse_run_config({"dataset": args.dataset, "method": "pctd", "num-topics": args.topics,
                               "partition": "sizes", "partition-sizes": ratios, "pctd.unit": args.unit,
                               "eval-labels": False, "seed": args.seed})
    exp = Experiment(out, config, args.rounds, args.every)
    k, tau = args.topics, args.tau
    sizes = [p.n_docs for p in exp.parties]
    print(f"{args.dataset}: {exp.data.train.n_docs} training documents, parties {sizes}, V={exp.data.corpus.n_words}",
          flush=True)

    # Fig. 2: convergence for several sigma, LDA alongside
    sigmas = [float(s) for s in args.sigmas.split(",")]
    conv = {f"PC-TD sigma={s:g}": exp.run("pctd", k, s, tau) for s in sigmas}
    conv["LDA (Gibbs, pooled)"] = exp.run("lda", k)
    write_csv(out / "convergence.csv",
              [{"model": name, "round": r, **m} for name, run in conv.items() for r, m in run["curve"]],
              ["model", "round", *SCORES])
    line_plot(out / "convergence.png", {n: [(r, m["perplexity"]) for r, m in run["curve"]] for n, run in conv.items()},
              "round (EM iteration)", "held-out perplexity", f"Fig. 2: K={k}, tau={tau:g}, parties {sizes}")
    write_csv(out / "privacy.csv",
              [{"sigma": s, "rounds": args.rounds, "delta": 1e-5,
                "epsilon": gaussian_epsilon(s, args.rounds, 1e-5).epsilon} for s in sigmas if s > 0]
              + [{"sigma": gaussian_sigma_for_epsilon(e, args.rounds, 1e-5), "rounds": args.rounds, "delta": 1e-5,
                  "epsilon": e} for e in (1.0, 8.0)],
              ["sigma", "rounds", "delta", "epsilon"])

    # Fig. 3: each party alone vs the federation, without and with noise
    rows = []
    for s in (0.0, args.sigma):
        for p in range(len(PAPER_SPLIT)):
            rows.append({"sigma": s, "model": f"party {p + 1} ({sizes[p]} docs)", **exp.run("pctd", k, s, tau, (p,))})
        rows.append({"sigma": s, "model": "federated", **exp.run("pctd", k, s, tau)})
    write_csv(out / "parties.csv", rows, ["sigma", "model", *SCORES])
    fig, ax = plt.subplots(figsize=(6, 3.8))
    names = [r["model"] for r in rows if r["sigma"] == 0.0]
    for i, s in enumerate((0.0, args.sigma)):
        ax.bar(np.arange(len(names)) + 0.4 * i, [r["perplexity"] for r in rows if r["sigma"] == s], 0.4,
               label=f"sigma={s:g}")
    ax.set_xticks(np.arange(len(names)) + 0.2, names, fontsize=7)
    ax.set_ylabel("held-out perplexity")
    ax.set_title(f"Fig. 3: single parties vs federated, K={k}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "parties.png", dpi=120)
    plt.close(fig)

    # Fig. 4: average UMass coherence vs K
    ks = (10, 20, 30, 40, 50)
    models = {"PC-TD no noise": ("pctd", 0.0), f"PC-TD sigma={args.sigma:g}": ("pctd", args.sigma), "LDA": ("lda", 0.0)}
    rows = [{"model": name, "k": kk, **exp.run(m, kk, s, tau if m == "pctd" else 0.0)}
            for name, (m, s) in models.items() for kk in ks]
    write_csv(out / "coherence.csv", rows, ["model", "k", *SCORES])
    line_plot(out / "coherence.png", {n: [(r["k"], r["umass"]) for r in rows if r["model"] == n] for n in models},
              "number of topics K", "average UMass coherence", "Fig. 4: coherence vs K")

    # tau: held-out likelihood and NPMI
    taus = (0.0, 0.1, 0.3, 0.5)
    rows = [{"sigma": s, "tau": t, **exp.run("pctd", k, s, t)} for s in (0.0, args.sigma) for t in taus]
    write_csv(out / "tau.csv", rows, ["sigma", "tau", *SCORES])
    fig, axes = plt.subplots(1, 2, figsize=(9, 3.5))
    for s in (0.0, args.sigma):
        sel = [r for r in rows if r["sigma"] == s]
        axes[0].plot(taus, [r["perplexity"] for r in sel], marker="o", label=f"sigma={s:g}")
        axes[1].plot(taus, [r["npmi"] for r in sel], marker="o", label=f"sigma={s:g}")
    axes[0].set_ylabel("held-out perplexity")
    axes[1].set_ylabel("NPMI")
    for ax in axes:
        ax.set_xlabel("tau")
        ax.legend()
    fig.suptitle(f"Global semantic consistency, K={k}")
    fig.tight_layout()
    fig.savefig(out / "tau.png", dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    main()
