"""Reproduce FedLDA's Fig. 5 (a-l) and Table 2 (Wang, Tong and Shi, AAAI 2020) on our corpora.

    python benchmarks/fedlda_figures.py --dataset $FLOWER_TOPICS_DATASETS/BBC_News --out runs/fedlda-figures/bbc
    python benchmarks/fedlda_figures.py --dataset $FLOWER_TOPICS_DATASETS/M10 --topics 10 --out runs/fedlda-figures/m10

Every document is a user (the paper's setting), so how documents are grouped into
clients does not change FedLDA's result: each round runs the client algorithm
(:func:`flower_topics.clients.fedlda.train_round`) over all training documents and
the server arithmetic of :class:`flower_topics.strategies.fedlda.FedLDA` (apply the tuples,
phi from the clamped counts), without Flower's messaging. Perplexity is the
package's held-out document-completion perplexity on the test split.

Writes, in ``--out``: ``convergence.csv/png`` (Fig. 5a-d: GS and MH, each with no
privacy, RRP, kRR, the paper's t-kRR, t-kRR with a uniform tail and HM),
``epsilon.csv/png``, ``topics.csv/png``, ``delta.csv/png``, ``ratio.csv/png`` (Fig.
5e-l), ``downstream.csv/md`` (Table 2: logistic regression on theta), and the privacy
each run really had: ``realized.csv/png`` (RRP's realized per-tuple delta at the eps
used, round by round, on the phi of that round: the worst case over word pairs and
every document, what the privacy report states, and the median over the training
documents of each one's worst pair, on the theta the clients hold) and ``summary.md``
(perplexity beside the realized and the claimed per-tuple guarantee). Runs already in
``runs.jsonl`` are reused. ``padding.md``: the cost of the less leaky options (a public
pad-length at the 90th length percentile, cancelling and noise dummies, no resend).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.metrics import f1_score, roc_auc_score  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from flower_topics.clients.fedlda import FedLDAClientState, train_round  # noqa: E402
from flower_topics.run.config import parse_run_config  # noqa: E402
from flower_topics.data.prepare import load_run_data  # noqa: E402
from flower_topics.metrics.inference import infer_theta  # noqa: E402
from flower_topics.topic_model.model_file import TopicModel  # noqa: E402
from flower_topics.models.update_tuples import Tuples, apply_tuples, clamped_topic_word  # noqa: E402
from scoring import score  # noqa: E402
from flower_topics.privacy.realized_ldp import realized_ldp, rrp_pair_deltas  # noqa: E402
from flower_topics.privacy.word_randomizers import round_randomizer  # noqa: E402
from flower_topics.strategies.fedlda import claimed_delta, replacement_probability  # noqa: E402
from flower_topics.wire.fedlda import FedLDASettings  # noqa: E402

MECHANISMS = ("none", "rrp", "krr", "tkrr", "tkrr-uniform-tail", "hm")


def realized(settings: FedLDASettings, phi: np.ndarray, state: FedLDAClientState, corpus) -> dict[str, float]:
    """The round's realized per-tuple privacy: over every document (reported) and per training document."""
    randomizer = round_randomizer(settings, phi)
    if randomizer is None:
        return {}
    figure = realized_ldp(randomizer, phi, claimed_delta(settings))
    row = {"realized_delta": figure.delta, "realized_epsilon_at_claim": figure.epsilon_at_target,
           "words_meeting_claim": figure.covered_words}
    if settings.mechanism == "rrp" and state.z is not None:
        n_dk = np.zeros((corpus.n_docs, settings.n_topics))
        np.add.at(n_dk, (corpus.doc_ids, state.z), 1)
        theta = (n_dk + settings.alpha) / (n_dk + settings.alpha).sum(axis=1, keepdims=True)
        per_doc = rrp_pair_deltas(phi, randomizer.eta, settings.delta, settings.epsilon, theta).max(axis=1)
        row["document_delta_median"] = float(np.median(per_doc))
    return row


def train(data, config: dict, settings: FedLDASettings, rounds: int, every: int, seed: int):
    """FedLDA over all training documents; returns phi, the perplexity curve and the realized privacy curve."""
    corpus = data.train
    counts = np.zeros((settings.n_topics, corpus.n_words), dtype=np.int64)
    state = FedLDAClientState()
    curve, privacy = [], []
    for r in range(1, rounds + 1):
        phi = clamped_topic_word(counts, float(config["beta"]))
        if r % every == 0 or r == rounds:
            privacy.append({"round": r, **realized(settings, phi, state, corpus)})
        update = train_round(corpus, phi, state, server_round=r, last_applied_round=r - 1, settings=settings,
                             seed=seed)
        apply_tuples(counts, Tuples.from_rows(update.tuples))
        if r % every == 0 or r == rounds:
            model = TopicModel(clamped_topic_word(counts, float(config["beta"])), data.corpus.vocabulary)
            curve.append((r, score(model, data, config)["perplexity"]))
    return clamped_topic_word(counts, float(config["beta"])), curve, privacy


def downstream(phi: np.ndarray, data, seed: int) -> dict[str, float]:
    """Table 2 analog: logistic regression on theta, documents split 4:1, 100 iterations."""
    corpus = data.corpus
    labels = np.asarray(corpus.labels)
    theta = infer_theta(phi, corpus, alpha=0.01, n_iter=100)
    x_train, x_test, y_train, y_test = train_test_split(theta, labels, test_size=0.2, random_state=seed,
                                                        stratify=labels)
    clf = LogisticRegression(max_iter=100, random_state=seed).fit(x_train, y_train)
    proba = clf.predict_proba(x_test)
    auc = (roc_auc_score(y_test, proba[:, 1]) if len(clf.classes_) == 2
           else roc_auc_score(y_test, proba, multi_class="ovr", average="macro", labels=clf.classes_))
    return {"macro_f1": f1_score(y_test, clf.predict(x_test), average="macro"), "auc": auc}


class Runs:
    """Runs keyed by their settings, cached in ``runs.jsonl``."""

    def __init__(self, out: Path, data, config: dict, rounds: int, every: int, seed: int):
        self.path = out / "runs.jsonl"
        self.data, self.config, self.rounds, self.every, self.seed = data, config, rounds, every, seed
        self.done = {}
        if self.path.exists():
            for line in self.path.read_text().splitlines():
                row = json.loads(line)
                self.done[row["key"]] = row

    def get(self, **kw) -> dict:
        settings = FedLDASettings(alpha=float(self.config["alpha"]), **kw)
        key = json.dumps({**settings.to_record(), "rounds": self.rounds, "seed": self.seed}, sort_keys=True)
        if key not in self.done:
            started = time.time()
            phi, curve, privacy = train(self.data, {**self.config, "num-topics": settings.n_topics}, settings,
                                        self.rounds, self.every, self.seed)
            row = {"key": key, **{k.removeprefix("fedlda."): (str(v) if isinstance(v, float) and math.isinf(v) else v)
                                  for k, v in settings.to_record().items()},
                   "curve": curve, "privacy": privacy, "perplexity": curve[-1][1],
                   "seconds": time.time() - started, **{k: v for k, v in privacy[-1].items() if k != "round"}}
            row["eta"] = replacement_probability(settings, phi)
            if self.data.corpus.labels is not None:
                row.update(downstream(phi, self.data, self.seed))
            with self.path.open("a") as f:
                f.write(json.dumps(row) + "\n")
            self.done[key] = row
            print(f"{row['mechanism']:>5} {row['sampler']:>5} K={row['num-topics']} eps={row['epsilon']} "
                  f"delta={row['delta']} l/M={row['sample-ratio']}: ppl {row['perplexity']:.1f} "
                  f"({row['seconds']:.0f} s)", flush=True)
        return self.done[key]


def write_csv(path: Path, rows: list[dict], fields: list[str]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def sweep_plot(out: Path, name: str, runs: list[dict], x: str, title: str) -> None:
    write_csv(out / f"{name}.csv", runs, ["mechanism", x, "perplexity", "eta", "seconds"])
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for mech in MECHANISMS:
        pts = sorted((float(r[x]), r["perplexity"]) for r in runs if r["mechanism"] == mech)
        if pts:
            ax.plot(*zip(*pts), marker="o", label=mech)
    ax.set_xlabel(x)
    ax.set_ylabel("held-out perplexity")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / f"{name}.png", dpi=120)
    plt.close(fig)


def _label(r: dict) -> str:
    return r["mechanism"] + (" (gamma=1)" if r["mechanism"] == "rrp" and r["gamma"] == 1.0 else "")


def realized_plot(out: Path, runs: list[dict], args) -> None:
    """RRP's realized per-tuple delta at the eps used, round by round (GS runs)."""
    rows = [{"mechanism": _label(r), **p} for r in runs if r["sampler"] == "gibbs" and r["mechanism"] != "none"
            for p in r["privacy"]]
    write_csv(out / "realized.csv", rows, ["mechanism", "round", "realized_delta", "document_delta_median",
                                           "realized_epsilon_at_claim", "words_meeting_claim"])
    fig, ax = plt.subplots(figsize=(6, 3.5))
    for r in runs:
        if r["sampler"] == "gibbs" and r["mechanism"] == "rrp":
            rounds = [p["round"] for p in r["privacy"]]
            ax.plot(rounds, [p["realized_delta"] for p in r["privacy"]], label=f"{_label(r)}: every document")
            ax.plot(rounds, [p.get("document_delta_median", math.nan) for p in r["privacy"]], linestyle="--",
                    label=f"{_label(r)}: median training document")
            ax.axhline(2 * args.delta, color="grey", linewidth=0.8)
    ax.set_xlabel("round")
    ax.set_ylabel(f"per-tuple delta at eps {args.epsilon}")
    ax.set_title("RRP: realized delta (grey: Theorem 1's claim 2 delta)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "realized.png", dpi=120)
    plt.close(fig)


def summary(out: Path, runs: list[dict], args) -> None:
    """Perplexity beside the realized and the claimed per-tuple guarantee (GS runs)."""
    lines = [f"| mechanism | perplexity | eta | realized delta per tuple at eps {args.epsilon} | eps at the claimed "
             "delta | claimed (eps, delta) per tuple |", "|---|---|---|---|---|---|"]
    for r in runs:
        if r["sampler"] != "gibbs":
            continue
        settings = FedLDASettings(**{"n_topics": r["num-topics"], "alpha": 0.1, "mechanism": r["mechanism"],
                                     "delta": float(r["delta"])})
        claim = "-" if r["mechanism"] == "none" else f"({r['epsilon']:g}, {claimed_delta(settings):g})"
        realized_delta = "-" if r["mechanism"] == "none" else f"{r['realized_delta']:.3g}"
        eps_at = "-" if r["mechanism"] == "none" else f"{r['realized_epsilon_at_claim']:.3g}"
        lines.append(f"| {_label(r)} | {r['perplexity']:.1f} | {r['eta']:.3g} | {realized_delta} | {eps_at} | "
                     f"{claim} |")
    (out / "summary.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def padding(out: Path, runs: "Runs", base: dict, lengths: np.ndarray) -> None:
    """What the less leaky options cost (RRP, the paper's eta): ``padding.md``.

    A public pad-length at the 90th percentile of the training documents' lengths, the two
    indistinguishable paddings, and the paper's counting of a replaced change as sent.
    """
    p90 = int(np.percentile(lengths, 90))
    variants = [("paper's padding: own length, no-op dummies", {}),
                (f"public pad-length {p90} (90th percentile)", {"pad_length": p90}),
                ("cancelling dummies (the package's default)", {"dummies": "cancelling"}),
                ("noise dummies", {"dummies": "noise"}),
                ("resend-replaced false (the paper's)", {"resend_replaced": False})]
    rows = [(name, runs.get(**{**base, **kw}, mechanism="rrp")) for name, kw in variants]
    reference = rows[0][1]["perplexity"]
    lines = ["| variant | perplexity | vs the paper's padding |", "|---|---|---|"]
    lines += [f"| {name} | {r['perplexity']:.1f} | {100 * (r['perplexity'] / reference - 1):+.1f}% |"
              for name, r in rows]
    (out / "padding.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--epsilon", type=float, default=7.5)
    parser.add_argument("--delta", type=float, default=0.1)
    parser.add_argument("--gamma", type=float, default=math.inf,
                        help="RRP's Theorem 1 constant; inf (default) is the paper's experimental eta")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    config = parse_run_config({"dataset": args.dataset, "num-topics": args.topics, "eval-labels": False,
                               "seed": args.seed})
    data = load_run_data(config)
    runs = Runs(out, data, config, args.rounds, args.every, args.seed)
    # the paper's settings (the package's default dummies are cancelling ones, see the README)
    base = dict(n_topics=args.topics, epsilon=args.epsilon, delta=args.delta, gamma=args.gamma, sample_ratio=0.7,
                dummies="noop")

    # Fig. 5a-d: convergence, GS and MH, each mechanism; plus RRP at Theorem 1's eta (gamma = 1)
    conv = [runs.get(**base, sampler=s, mechanism=m) for s in ("gibbs", "mh") for m in MECHANISMS]
    conv += [runs.get(**{**base, "gamma": 1.0}, sampler=s, mechanism="rrp") for s in ("gibbs", "mh")]
    rows = [{"sampler": r["sampler"], "mechanism": r["mechanism"], "gamma": r["gamma"], "round": rd, "perplexity": p}
            for r in conv for rd, p in r["curve"]]
    write_csv(out / "convergence.csv", rows, ["sampler", "mechanism", "gamma", "round", "perplexity"])
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.5), sharey=True)
    for ax, sampler in zip(axes, ("gibbs", "mh")):
        for r in conv:
            if r["sampler"] == sampler:
                label = r["mechanism"] + (" (gamma=1)" if r["gamma"] == 1.0 and r["mechanism"] == "rrp" else "")
                ax.plot(*zip(*r["curve"]), label=label)
        ax.set_title(f"{'GS' if sampler == 'gibbs' else 'MH'}, K={args.topics}, eps={args.epsilon}")
        ax.set_xlabel("round")
    axes[0].set_ylabel("held-out perplexity")
    axes[1].legend()
    fig.tight_layout()
    fig.savefig(out / "convergence.png", dpi=120)
    plt.close(fig)

    realized_plot(out, conv, args)
    summary(out, conv, args)

    private = ("rrp", "krr", "tkrr", "tkrr-uniform-tail", "hm")
    sweep_plot(out, "epsilon", [runs.get(**{**base, "epsilon": e}, mechanism=m) for e in (3.0, 5.0, 7.5, 10.0)
                                for m in private], "epsilon", "Fig. 5e/g: varying eps")
    sweep_plot(out, "topics", [runs.get(**{**base, "n_topics": k}, mechanism=m) for k in (10, 20, 50)
                               for m in MECHANISMS], "num-topics", "Fig. 5f/h: varying K")
    sweep_plot(out, "delta", [runs.get(**{**base, "delta": d}, mechanism=m) for d in (0.05, 0.1, 0.2)
                              for m in ("rrp", "tkrr", "tkrr-uniform-tail")], "delta", "Fig. 5i/k: varying delta")
    sweep_plot(out, "ratio", [runs.get(**{**base, "sample_ratio": q}, mechanism="rrp")
                                for q in (0.0, 0.3, 0.7, 1.0)],
               "sample-ratio", "Fig. 5j/l: varying l/M")

    padding(out, runs, base, np.diff(data.train.doc_ptr))

    # Table 2 analog: non-private vs RRP eps 7.5 vs eps 5
    table = [("LDA (no privacy)", runs.get(**base, mechanism="none")),
             ("FedLDA eps 7.5", runs.get(**{**base, "epsilon": 7.5}, mechanism="rrp")),
             ("FedLDA eps 5.0", runs.get(**{**base, "epsilon": 5.0}, mechanism="rrp"))]
    if "macro_f1" in table[0][1]:
        lines = ["| | " + " | ".join(name for name, _ in table) + " |", "|---|---|---|---|"]
        for metric in ("macro_f1", "auc"):
            lines.append(f"| {metric} | " + " | ".join(f"{r[metric]:.3f}" for _, r in table) + " |")
        (out / "downstream.md").write_text("\n".join(lines) + "\n")
        write_csv(out / "downstream.csv", [{"model": n, **r} for n, r in table], ["model", "macro_f1", "auc",
                                                                                  "perplexity"])
        print("\n".join(lines))


if __name__ == "__main__":
    main()
