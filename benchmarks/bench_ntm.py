"""Centralized ProdLDA / CombinedTM / ZeroShotTM (flower_topics.models.ntm) on BBC News.

    python benchmarks/bench_ntm.py --epochs 100 --models prodlda combinedtm --norms batch layer \
        --out runs/bench-ntm

The reference gFedNTM is equivalent to (the paper's Sync-Opt): one model trained on the
pooled training documents (train + val of the corpus split), K=20, the CTM library's
defaults (hidden (100, 100), softplus, dropout 0.2, learned prior, Adam lr 2e-3 betas
(0.99, 0.99), batch 64, summed batch loss), one torch thread. CombinedTM / ZeroShotTM use
all-MiniLM-L6-v2 embeddings (offline, cached under ``--out``) of each document's
preprocessed text (the OCTIS BBC corpus has no raw text).

Reported per run: wall and CPU seconds per epoch, the final training loss, the model's
own ELBO perplexity on the test documents (:func:`flower_topics.models.ntm.elbo_perplexity`)
and :func:`flower_topics.metrics.evaluate_model` (document-completion perplexity, NPMI,
UMass, diversity, NMI/purity/macro-F1) of a ``TopicModel`` built from
``ntm.topic_word`` (``"decoder"``: what the decoder produces for a one-topic document)
and, for comparison with the CTM library's ``get_topic_word_distribution``, from
``softmax(beta)`` (``"softmax_beta"``). Writes ``results.jsonl``, ``results.csv`` and
``results.md`` (mean ± sd over seeds of every run in ``results.jsonl``) in ``--out``.

Side by side with the library: ``--library-python /tmp/ctmvenv/bin/python`` also trains
the ``contextualized-topic-models`` 2.5.0 CombinedTM / ZeroShotTM (installed in that
separate interpreter, never in this package's environment; it must be able to import
torch, numpy and this repository) on the same documents, embeddings and split, with
its defaults and ``num_data_loader_workers=0``, one thread, and scores it the same way
(model ``"<kind>@ctm-2.5.0"``, norm ``"batch"``).
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path

import numpy as np
import torch

from benchmark_data import DATASETS
from flower_topics.run.config import parse_run_config
from flower_topics.data.prepare import load_run_data
from flower_topics.evaluation import evaluate_model
from flower_topics.topic_model.model_file import TopicModel
from flower_topics.models import ntm

COLUMNS = ("model", "norm", "seed", "epochs", "topic_word", "sec_per_epoch", "cpu_sec_per_epoch", "train_loss",
           "elbo_perplexity", "perplexity", "npmi", "umass", "diversity", "nmi", "purity", "macro_f1")


def document_texts(corpus) -> list[str]:
    """Each document's (preprocessed) words joined by spaces."""
    return [" ".join(corpus.words(d)) for d in range(corpus.n_docs)]


def run_one(kind: str, norm: str, seed: int, epochs: int, data, embeddings: np.ndarray | None) -> list[dict]:
    corpus = data.corpus
    is_test = corpus.split == "test"
    train_idx, test_idx = np.flatnonzero(~is_test), np.flatnonzero(is_test)
    bow = corpus.doc_term_matrix().astype(np.float32)
    emb_train = embeddings[train_idx] if embeddings is not None else None
    emb_test = embeddings[test_idx] if embeddings is not None else None
    model = ntm.NeuralTopicModel(corpus.n_words, 20, kind, norm=norm, seed=seed,
                                 embedding_size=0 if embeddings is None else embeddings.shape[1])
    wall0, cpu0 = time.perf_counter(), time.process_time()
    history = ntm.fit(model, bow[train_idx], emb_train, epochs=epochs, seed=seed)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    own = ntm.elbo_perplexity(model, bow[test_idx], emb_test, seed=seed)
    base = {"model": kind, "norm": norm, "seed": seed, "epochs": epochs, "sec_per_epoch": wall / epochs,
            "cpu_sec_per_epoch": cpu / epochs, "train_loss": history[-1], "elbo_perplexity": own["perplexity"]}
    rows = []
    with torch.no_grad():
        beta = model.decoder.beta.detach().double()
        softmax_beta = torch.softmax(beta, dim=1).numpy()
    for name, phi in (("decoder", ntm.topic_word(model)), ("softmax_beta", softmax_beta)):
        scores = evaluate_model(TopicModel(phi / phi.sum(axis=1, keepdims=True), corpus.vocabulary), corpus,
                                use_labels=True, seed=seed)
        rows.append({**base, "topic_word": name, **scores,
                     "top_words": [" ".join(w) for w in TopicModel(phi / phi.sum(axis=1, keepdims=True),
                                                                   corpus.vocabulary).top_words(10)]})
    return rows


LIBRARY_SCRIPT = r"""
import json, sys, time
import numpy as np, torch
torch.set_num_threads(1)
from contextualized_topic_models.datasets.dataset import CTMDataset
from contextualized_topic_models.models.ctm import CombinedTM, ZeroShotTM
from flower_topics.run.config import parse_run_config
from flower_topics.data.prepare import load_run_data
from flower_topics.evaluation import evaluate_model
from flower_topics.topic_model.model_file import TopicModel
kind, epochs, seed, dataset, emb_file = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
torch.manual_seed(seed)
np.random.seed(seed)
corpus = load_run_data(parse_run_config({"method": "lda", "dataset": dataset, "num-topics": 20, "seed": seed})).corpus
emb = np.load(emb_file)
train = np.flatnonzero(corpus.split != "test")
bow = corpus.doc_term_matrix().astype(np.float32).tocsr()
data = CTMDataset(emb[train], bow[train], dict(enumerate(corpus.vocabulary)))
cls = CombinedTM if kind == "combinedtm" else ZeroShotTM
model = cls(bow_size=corpus.n_words, contextual_size=emb.shape[1], n_components=20, num_epochs=epochs,
            num_data_loader_workers=0)
wall0, cpu0 = time.perf_counter(), time.process_time()
model.fit(data, do_train_predictions=False)
wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
beta = model.model.beta.detach().double()
bn = model.model.beta_batchnorm
decoder = torch.softmax((beta - bn.running_mean.double()) / torch.sqrt(bn.running_var.double() + bn.eps), 1)
for name, phi in (("decoder", decoder.numpy()), ("softmax_beta", torch.softmax(beta, 1).numpy())):
    tm = TopicModel(phi / phi.sum(1, keepdims=True), corpus.vocabulary)
    scores = evaluate_model(tm, corpus, use_labels=True, seed=seed)
    print(json.dumps({"model": kind + "@ctm-2.5.0", "norm": "batch", "seed": seed, "epochs": epochs,
                      "topic_word": name, "sec_per_epoch": wall / epochs, "cpu_sec_per_epoch": cpu / epochs,
                      "train_loss": float("nan"), "elbo_perplexity": float("nan"), **scores,
                      "top_words": [" ".join(w) for w in tm.top_words(10)]}))
"""


def run_library(python: str, kind: str, seed: int, epochs: int, dataset: str, embeddings: np.ndarray,
                out: Path) -> list[dict]:
    """Train and score the CTM library's model in the interpreter ``python`` (see the module docstring)."""
    import os
    import subprocess
    import sys

    emb_file = out / f"embeddings-s{seed}.npy"
    np.save(emb_file, embeddings)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "OMP_NUM_THREADS": "1",
           "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([python, "-c", LIBRARY_SCRIPT, kind, str(epochs), str(seed), dataset, str(emb_file)],
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        raise RuntimeError(f"the library run failed ({python})")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default=str(DATASETS / "BBC_News"))
    parser.add_argument("--models", nargs="+", default=["prodlda", "combinedtm"], choices=ntm.MODEL_KINDS)
    parser.add_argument("--norms", nargs="*", default=["batch", "layer"], choices=ntm.NORMS)
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default="runs/bench-ntm")
    parser.add_argument("--library-python", default=None,
                        help="interpreter with contextualized-topic-models 2.5.0 installed, to run it side by side")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for seed in args.seeds:
        data = load_run_data(parse_run_config({"method": "lda", "dataset": args.dataset, "num-topics": 20,
                                               "seed": seed}))
        embeddings = None
        if any(m != "prodlda" for m in args.models):
            from flower_topics.models.embeddings import embed_documents

            result = embed_documents(document_texts(data.corpus), cache_dir=out / "embeddings")
            embeddings = result.embeddings
            print(f"embeddings {embeddings.shape}: {result.docs_per_second:.1f} documents/s"
                  f"{' (cached)' if result.from_cache else ''}", flush=True)
        runs = [(kind, norm) for kind in args.models for norm in args.norms]
        if args.library_python:
            runs += [(kind, "library") for kind in args.models if kind != "prodlda"]
        for kind, norm in runs:
            if norm == "library":
                new = run_library(args.library_python, kind, seed, args.epochs, args.dataset, embeddings, out)
            else:
                new = run_one(kind, norm, seed, args.epochs, data, embeddings if kind != "prodlda" else None)
            for row in new:
                print(json.dumps({k: row[k] for k in COLUMNS}), flush=True)
                with (out / "results.jsonl").open("a", encoding="utf-8") as fh:
                    fh.write(json.dumps(row) + "\n")
    write_tables(out)


def write_tables(out: Path) -> None:
    """``results.csv`` (every run in ``results.jsonl``) and ``results.md`` (mean ± sd over seeds)."""
    rows = [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines() if line]
    with (out / "results.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(COLUMNS), extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    keys = ("model", "norm", "epochs", "topic_word")
    metrics = [c for c in COLUMNS if c not in keys and c != "seed"]
    lines = ["| " + " | ".join(keys) + " | seeds | " + " | ".join(metrics) + " |",
             "|" + "---|" * (len(keys) + 1 + len(metrics))]
    for group in dict.fromkeys(tuple(r[k] for k in keys) for r in rows):
        members = [r for r in rows if tuple(r[k] for k in keys) == group]
        cells = []
        for m in metrics:
            values = np.array([float(r[m]) for r in members])
            sd = values.std(ddof=1) if values.size > 1 else 0.0
            cells.append(f"{values.mean():.4g} ± {sd:.2g}")
        lines.append("| " + " | ".join(str(g) for g in group) + f" | {len(members)} | " + " | ".join(cells) + " |")
    (out / "results.md").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
