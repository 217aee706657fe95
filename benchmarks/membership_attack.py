"""Membership-inference audit of our own trained topic models (threshold attack and LiRA).

    nice -n 10 python benchmarks/membership_attack.py --dataset $FLOWER_TOPICS_DATASETS/BBC_News \\
        --out runs/mia-bbc --shadows 16 --methods lda dplda:eps=1,8

A pool of documents is drawn from the corpus (all of it, or ``--pool`` documents). Each of
``--shadows`` models is trained on a random half of the pool: every document is IN in
exactly half of the models (Carlini et al. 2022's balanced assignment), so each is a member
with probability 1/2. Every model is trained by the package's own federated code path (the
ServerApp's ``run_server`` and the ClientApp, in process, 5 parties split by label), on an
OCTIS copy of the pool whose split column says ``train`` for IN and ``test`` for OUT
documents; every run of a comparison uses the same vocabulary file. Each model is then
attacked with the others as its shadow models:

- ``threshold``: the document's per-token log-likelihood under the model (theta folded in);
- ``lira-online``: per document, Gaussians fitted to its score under the other models that
  trained on it (IN) and did not (OUT), one pooled variance per side; the log likelihood ratio;
- ``lira-offline``: the one-sided test against the OUT Gaussian only.

Trials are (model, document) pairs. The table gives the ROC AUC with a 95% bootstrap interval
(documents resampled), TPR at 0.1% and 1% FPR, the empirical epsilon lower bound at 95%
Clopper-Pearson confidence (test chosen on half of the trials, bound computed on the other
half; ``membership_audit.epsilon_lower_bound``) and the epsilon the model's own
privacy report accounts. Writes ``attack.csv`` and ``attack.md`` to ``--out``; trained
models are kept under ``--out/models`` and reused by a rerun.

``--methods`` takes ``method[:key=v1,v2,...]...``: ``dplda:eps=1,2,4,8`` runs four settings
(``eps`` stands for ``<method>.epsilon``; a key that is an option of the method gets its
prefix, others are global run-config keys, e.g. ``lda:num-rounds=50``).

``--public-docs N`` (with ``--pool``) writes ``N`` documents drawn at random from *outside* the pool to
``--out``/``public.jsonl`` and gives every ``dplda`` model it as ``dplda.public-corpus``: the public head start.
Its documents are public, never in the pool, so never counted as members or non-members.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import logging
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import scipy.sparse as sp

from benchmark_data import DATASETS
from flower_topics.run.config import OPTIONS, parse_run_config
from flower_topics.data.corpus import Corpus
from flower_topics.data.prepare import load_run_data
from flower_topics.errors import UserInputError
from flower_topics.topic_model.model_file import TopicModel, load_model
from membership_audit import (auc_interval, epsilon_lower_bound, lira_scores, log_likelihood_scores,
                                         tpr_at_fpr)

#: Per-method settings of the attacked models (README/docs settings), overridable from ``--methods``.
METHOD_DEFAULTS: dict[str, dict[str, Any]] = {
    "lda": {"num-rounds": 100, "lda.local-sweeps": 10},
    "dplda": {"num-rounds": 40},
}
#: Settings shared by every model of every comparison.
BASE = {"partition": "label", "num-topics": 20, "alpha": 0.1, "beta": 0.01, "federated-eval": False,
        "min-df": 1, "max-df": 1.0, "stopwords": "none"}
ALIASES = {"eps": "epsilon"}
ATTACKS = ("threshold", "lira-online", "lira-offline")
AUDIT_DELTA = 1e-5  # the delta a bound is stated for when the model reports none
COLUMNS = ("dataset", "method", "setting", "attack", "models", "pool", "trials", "auc", "auc_low", "auc_high",
           "tpr_at_0.1%", "tpr_at_1%", "eps_lower_bound", "eps_estimate", "eps_estimate_high", "eps_test",
           "delta", "accounted_epsilon", "accounted_delta", "train_seconds")


@dataclass(frozen=True)
class Pool:
    """The documents every model's IN/OUT half is drawn from.

    Parameters
    ----------
    corpus : Corpus
        The pool's documents over ``vocabulary`` (labels kept).
    vocabulary : tuple of str
        The vocabulary file every run uses.
    note : str
        How the pool and its vocabulary were made.
    """

    corpus: Corpus
    vocabulary: tuple[str, ...]
    note: str
    outside: np.ndarray | None = None  # the indices of the corpus' documents not in the pool (None: whole corpus)
    source: Corpus | None = None  # the whole corpus the pool was drawn from

    @property
    def counts(self) -> sp.csr_matrix:
        """``(N, V)`` document-term counts."""
        return self.corpus.doc_term_matrix()


def make_pool(dataset: str, *, size: int = 0, vocab_size: int = 5000, min_tokens: int = 5, seed: int = 0) -> Pool:
    """Draw the pool from a corpus the package reads (preprocessed with the run-config defaults).

    With ``size`` 0 (or not smaller than the corpus) the pool is the whole corpus over its
    own vocabulary. Otherwise ``size`` documents are drawn at random and the vocabulary is
    the ``vocab_size`` words of largest document frequency (at least 2) among the documents
    *outside* the pool: public with respect to every document the attack is about.
    Documents with fewer than ``min_tokens`` tokens over the vocabulary are left out.
    """
    corpus = load_run_data(parse_run_config({"dataset": dataset, "seed": seed})).corpus
    rng = np.random.default_rng(seed)
    if 0 < size < corpus.n_docs:
        chosen = np.sort(rng.permutation(corpus.n_docs)[:size])
        outside = np.setdiff1d(np.arange(corpus.n_docs), chosen)
        df = np.asarray((corpus.doc_term_matrix()[outside] > 0).sum(axis=0)).ravel()
        order = np.argsort(-df, kind="stable")
        keep = np.sort(order[: vocab_size][df[order[: vocab_size]] >= 2])
        note = (f"{size} of {corpus.n_docs} documents drawn at random (seed {seed}); vocabulary: the {keep.size} "
                f"words of largest document frequency (>= 2) in the other {outside.size} documents")
    else:
        chosen = np.arange(corpus.n_docs)
        keep = np.arange(corpus.n_words)
        note = (f"all {corpus.n_docs} documents; vocabulary: the corpus's own ({keep.size} words, derived from "
                "the same documents: not public, but the same file for every model, IN or OUT)")
    sub = corpus.subset(chosen)
    lookup = np.full(corpus.n_words, -1, dtype=np.int64)
    lookup[keep] = np.arange(keep.size)
    mapped = lookup[sub.tokens]
    kept = np.zeros(sub.n_tokens + 1, dtype=np.int64)
    np.cumsum(mapped >= 0, out=kept[1:])
    vocabulary = tuple(corpus.vocabulary[j] for j in keep)
    pooled = Corpus(tokens=mapped[mapped >= 0].astype(np.int32), doc_ptr=kept[sub.doc_ptr], vocabulary=vocabulary,
                    labels=sub.labels, split=None)
    long_enough = np.flatnonzero(pooled.doc_lengths >= min_tokens)
    if long_enough.size < pooled.n_docs:
        note += f"; {pooled.n_docs - long_enough.size} documents with < {min_tokens} tokens left out"
        pooled = pooled.subset(long_enough)
    if pooled.labels is None:
        raise UserInputError(f"{dataset}: the pool needs labels (the parties are split by label)")
    outside_docs = outside if 0 < size < corpus.n_docs else None
    return Pool(pooled, vocabulary, note, outside_docs, corpus)


def public_documents(pool: Pool, n_docs: int, seed: int) -> np.ndarray:
    """The source-corpus indices of ``n_docs`` documents drawn with ``seed`` from outside the pool (sorted)."""
    if pool.outside is None or not 0 < n_docs <= pool.outside.size:
        raise UserInputError(f"--public-docs {n_docs}: needs --pool and at most the documents outside the pool")
    return np.sort(np.random.default_rng(seed + 1).permutation(pool.outside)[:n_docs])


def write_public(pool: Pool, n_docs: int, path: Path, seed: int) -> Path:
    """:func:`public_documents` as ``{"text": ...}`` lines (their words); returns the file's absolute path."""
    chosen = public_documents(pool, n_docs, seed)
    assert pool.source is not None
    with path.open("w", encoding="utf-8") as fh:
        for d in chosen:
            fh.write(json.dumps({"text": " ".join(pool.source.words(int(d)))}) + "\n")
    return path.resolve()


def balanced_membership(n_models: int, n_docs: int, seed: int) -> np.ndarray:
    """``(M, N)`` bool: each document IN in exactly ``M // 2`` models, chosen at random."""
    rng = np.random.default_rng(seed)
    ranks = np.argsort(rng.random((n_models, n_docs)), axis=0)
    return ranks < n_models // 2


def write_octis(folder: Path, pool: Pool, members: np.ndarray) -> Path:
    """An OCTIS folder of the whole pool: split ``train`` for members, ``test`` for the others."""
    folder.mkdir(parents=True, exist_ok=True)
    words = np.asarray(pool.vocabulary, dtype=object)
    lines = []
    for d in range(pool.corpus.n_docs):
        text = " ".join(words[pool.corpus.document(d)])
        lines.append(f"{text}\t{'train' if members[d] else 'test'}\t{pool.corpus.labels[d]}")
    (folder / "corpus.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (folder / "vocabulary.txt").write_text("\n".join(pool.vocabulary) + "\n", encoding="utf-8")
    return folder


def _memoize_word_embeddings() -> None:
    """Embed a vocabulary once per process: every model of a comparison has the same vocabulary, and the
    embedding (a public, deterministic function of the words; ``dplda``'s initial topics) costs tens of seconds."""
    from flower_topics.models import word_similarity

    embed = word_similarity.embed_vocabulary
    if getattr(embed, "memoized", False):
        return
    memo: dict[tuple, np.ndarray] = {}

    def memoized(vocabulary, *args, **kwargs):
        key = (tuple(vocabulary), args, tuple(sorted(kwargs.items())))
        if key not in memo:
            memo[key] = embed(vocabulary, *args, **kwargs)
        return memo[key].copy()

    memoized.memoized = True  # type: ignore[attr-defined]
    word_similarity.embed_vocabulary = memoized


def train_federated(run_config: dict[str, Any], out_dir: Path, num_parties: int = 5) -> TopicModel:
    """Train one model by the federated code path (ServerApp + ClientApp in process), ``num_parties`` parties."""
    _memoize_word_embeddings()
    from flower_topics.federation.client_app import make_client_app
    from flower_topics.federation.server_app import run_server
    from flower_topics.simulations.inprocess import InProcessGrid

    config = {**run_config, "output-dir": str(out_dir)}
    return run_server(InProcessGrid.partitions(make_client_app(config), num_parties, config), config)


def model_scores(model: TopicModel, pool: Pool, counts: sp.csr_matrix) -> np.ndarray:
    """Threshold-attack score of every pool document under ``model`` (columns aligned by word)."""
    column = {word: j for j, word in enumerate(model.vocabulary)}
    missing = [w for w in pool.vocabulary if w not in column]
    if missing:
        raise RuntimeError(f"the model lacks {len(missing)} pool words, e.g. {missing[0]!r}")
    phi = model.topic_word[:, [column[w] for w in pool.vocabulary]]
    phi = phi / phi.sum(axis=1, keepdims=True)
    return log_likelihood_scores(phi, counts)


def shadow_experiment(pool: Pool, run_config: dict[str, Any], members: np.ndarray, out: Path,
                      vocabulary_file: Path, num_parties: int = 5) -> tuple[np.ndarray, dict[str, Any], float]:
    """Train (or reuse) one model per row of ``members``; ``(scores (M, N), privacy report, seconds)``."""
    counts = pool.counts
    scores = np.empty(members.shape)
    report: dict[str, Any] = {}
    seconds = 0.0
    for i, row in enumerate(members):
        model_dir = out / f"model-{i:03d}"
        if not (model_dir / "model.npz").exists():
            shutil.rmtree(model_dir, ignore_errors=True)
            data = write_octis(out / f"corpus-{i:03d}", pool, row)
            started = time.time()
            train_federated({**run_config, "dataset": str(data), "vocabulary": str(vocabulary_file), "seed": i},
                            model_dir, num_parties)
            (model_dir / "train_seconds.txt").write_text(f"{time.time() - started:.2f}\n")
            shutil.rmtree(data)
        model = load_model(model_dir / "model.npz")
        seconds += float((model_dir / "train_seconds.txt").read_text())
        report = model.metadata.get("privacy") or {}
        scores[i] = model_scores(model, pool, counts)
        print(f"  model {i + 1}/{len(members)}: {seconds:.0f} s of training so far", file=sys.stderr, flush=True)
    return scores, report, seconds


def attack_rows(scores: np.ndarray, members: np.ndarray, delta: float, seed: int = 0) -> list[dict[str, Any]]:
    """One row per attack: AUC [CI], TPR at 0.1% / 1% FPR, the epsilon lower bound [CI]."""
    documents = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    by_attack = {"threshold": scores, "lira-online": lira_scores(scores, members, online=True),
                 "lira-offline": lira_scores(scores, members, online=False)}
    rows = []
    for name, value in by_attack.items():
        ok = np.isfinite(value)
        s, m, g = value[ok], members[ok], documents[ok]
        auc, low, high = auc_interval(s, m, groups=g, seed=seed)
        bound = epsilon_lower_bound(s, m, delta=delta, seed=seed)
        rows.append({"attack": name, "trials": int(ok.sum()), "auc": auc, "auc_low": low, "auc_high": high,
                     "tpr_at_0.1%": tpr_at_fpr(s, m, 0.001), "tpr_at_1%": tpr_at_fpr(s, m, 0.01),
                     "eps_lower_bound": bound.lower, "eps_estimate": bound.estimate,
                     "eps_estimate_high": bound.upper, "eps_test": bound.direction, "delta": delta})
    return rows


def parse_methods(specs: list[str]) -> list[tuple[str, str, dict[str, Any]]]:
    """``method[:key=v1,v2...]...`` -> ``(method, setting label, run-config overrides)`` per setting."""
    settings = []
    for spec in specs:
        method, *parts = spec.split(":")
        axes = []
        for part in parts:
            key, sep, values = part.partition("=")
            if not sep or not values:
                raise UserInputError(f"--methods {spec!r}: write key=value[,value...] after the method")
            key = ALIASES.get(key, key)
            full = f"{method}.{key}" if f"{method}.{key}" in OPTIONS else key
            if full not in OPTIONS:
                raise UserInputError(f"--methods {spec!r}: {key!r} is neither a {method} option nor a run-config key")
            axes.append([(full, v) for v in values.split(",")])
        for combo in itertools.product(*axes) if axes else [()]:
            label = ",".join(f"{k.split('.')[-1]}={v}" for k, v in combo) or "default"
            settings.append((method, label, dict(combo)))
    return settings


def fmt(value: Any) -> str:
    if value is None:
        return "none"
    if isinstance(value, float):
        return f"{value:.3g}"
    return str(value)


def write_tables(out: Path, rows: list[dict[str, Any]]) -> str:
    with (out / "attack.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| method | setting | attack | AUC [95% CI] | TPR@0.1% FPR | TPR@1% FPR | eps lower bound (95%) "
             "[estimate, high] (test) | accounted eps (delta) |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        accounted = "none" if r["accounted_epsilon"] is None else \
            f"{r['accounted_epsilon']:.3g} ({r['accounted_delta']:.0e})"
        lines.append(f"| {r['method']} | {r['setting']} | {r['attack']} | {r['auc']:.3f} [{r['auc_low']:.3f}, "
                     f"{r['auc_high']:.3f}] | {100 * r['tpr_at_0.1%']:.2f}% | {100 * r['tpr_at_1%']:.2f}% | "
                     f"{r['eps_lower_bound']:.2f} [{r['eps_estimate']:.2f}, {r['eps_estimate_high']:.2f}] "
                     f"({r['eps_test']}) | "
                     f"{accounted} |")
    table = "\n".join(lines) + "\n"
    (out / "attack.md").write_text(table, encoding="utf-8")
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(DATASETS / "BBC_News"))
    parser.add_argument("--out", default="runs/mia-bbc")
    parser.add_argument("--shadows", type=int, default=16, help="models per setting (each attacked with the others)")
    parser.add_argument("--methods", nargs="+", default=["lda"], help="method[:key=v1,v2...] (see the docstring)")
    parser.add_argument("--pool", type=int, default=0, help="documents in the pool (0 = the whole corpus)")
    parser.add_argument("--vocab-size", type=int, default=5000, help="vocabulary size when --pool subsamples")
    parser.add_argument("--parties", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--public-docs", type=int, default=0, help="dplda's public start: this many documents "
                        "from outside the pool (0 = none)")
    args = parser.parse_args(argv)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    logging.getLogger("flower_topics").setLevel(logging.WARNING)
    try:
        if args.shadows < 4 or args.shadows % 2:
            raise UserInputError("--shadows must be an even number >= 4")
        settings = parse_methods(args.methods)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        pool = make_pool(args.dataset, size=args.pool, vocab_size=args.vocab_size, seed=args.seed)
        vocabulary_file = (out / "vocabulary.txt").resolve()
        vocabulary_file.write_text("\n".join(pool.vocabulary) + "\n", encoding="utf-8")
        public = ({"dplda.public-corpus": str(write_public(pool, args.public_docs, out / "public.jsonl", args.seed))}
                  if args.public_docs else {})
        settings = [(m, f"{label}-public" if public and m == "dplda" else label, {**o, **public} if m == "dplda" else o)
                    for m, label, o in settings]
        for method, _, overrides in settings:  # validate every setting before any training
            parse_run_config({**BASE, **METHOD_DEFAULTS.get(method, {}), "method": method, **overrides,
                              "vocabulary": str(vocabulary_file)})
    except UserInputError as exc:
        sys.exit(f"error: {exc}")
    members = balanced_membership(args.shadows, pool.corpus.n_docs, args.seed)
    (out / "pool.json").write_text(json.dumps({"dataset": args.dataset, "documents": pool.corpus.n_docs,
                                               "vocabulary": len(pool.vocabulary), "note": pool.note}, indent=1))
    print(f"pool: {pool.note}", file=sys.stderr)
    rows = []
    for method, label, overrides in settings:
        config = {**BASE, **METHOD_DEFAULTS.get(method, {}), "method": method, **overrides}
        slug = f"{method}-{label}".replace("=", "").replace(",", "-")
        print(f"{method} {label}: {args.shadows} models", file=sys.stderr)
        scores, report, seconds = shadow_experiment(pool, config, members, out / "models" / slug,
                                                    vocabulary_file, args.parties)
        epsilon, delta = report.get("epsilon"), report.get("delta")
        for row in attack_rows(scores, members, delta if delta else AUDIT_DELTA, seed=args.seed):
            rows.append({"dataset": Path(args.dataset).name, "method": method, "setting": label,
                         "models": args.shadows, "pool": pool.corpus.n_docs, "accounted_epsilon": epsilon,
                         "accounted_delta": delta, "train_seconds": round(seconds, 1), **row})
        print(write_tables(out, rows))


if __name__ == "__main__":
    main()
