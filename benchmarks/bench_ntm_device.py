"""Seconds per epoch of ProdLDA / CombinedTM on a CPU and on a GPU, ours beside the CTM library (issue 22 item 4).

Two steps, because the GPU machine has no Flower and no corpora (only torch, numpy, scipy, numba):

    # here: BBC News' training documents and their all-MiniLM-L6-v2 embeddings in one file
    python benchmarks/bench_ntm_device.py prepare --out runs/ntm-device/bbc.npz
    # on the GPU machine (the `device` tool), ours and, with --library, the contextualized-topic-models library
    python benchmarks/bench_ntm_device.py time --data runs/ntm-device/bbc.npz --devices cpu cuda --epochs 20
    # a larger corpus, counts only (ProdLDA): --dataset $FLOWER_TOPICS_DATASETS/debian_large/corpus.jsonl --no-embeddings

``time`` trains each model (K=20, the CTM library's defaults: hidden (100, 100), softplus, dropout 0.2, batch
64, Adam lr 2e-3) for one untimed epoch, then ``--epochs`` timed epochs, on each device, and prints one JSON
line per run: seconds per epoch (wall, with the GPU synchronized by the per-batch loss read that both
implementations make), the last epoch's mean loss per document, and torch's thread count. Ours is
:func:`flower_topics.models.ntm.fit` on ``model.to(device)``; the library's is ``CombinedTM.fit`` (it takes the
GPU whenever torch sees one, so it runs on the GPU machine's GPU only) with ``num_data_loader_workers=0``.
Quality is not measured here: ``benchmarks/bench_ntm.py`` scores both on the CPU.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
import torch
from benchmark_data import DATASETS


def prepare(out: Path, dataset: str, embeddings: bool) -> None:
    """A corpus' training documents (train + val of its split) as counts, and their embeddings (or none)."""
    from flower_topics.run.config import parse_run_config
    from flower_topics.data.prepare import load_run_data
    from flower_topics.models.embeddings import embed_documents

    corpus = load_run_data(parse_run_config({"method": "lda", "dataset": dataset, "num-topics": 20, "seed": 0})).corpus
    train = np.flatnonzero(corpus.split != "test")
    bow = corpus.doc_term_matrix().astype(np.float32).tocsr()[train]
    vectors = np.zeros((bow.shape[0], 0), dtype=np.float32)
    if embeddings:
        texts = [" ".join(corpus.words(d)) for d in train]
        vectors = embed_documents(texts, cache_dir=out.parent / "embeddings").embeddings.astype(np.float32)
    out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(out, data=bow.data, indices=bow.indices, indptr=bow.indptr, shape=np.array(bow.shape),
                        embeddings=vectors, vocabulary=np.array(corpus.vocabulary))
    print(f"{out}: {bow.shape[0]} documents, {bow.shape[1]} words, embeddings {vectors.shape}")


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def time_ours(kind: str, device: str, bow: sp.csr_matrix, emb: np.ndarray, epochs: int) -> dict:
    from flower_topics.models import ntm

    model = ntm.NeuralTopicModel(bow.shape[1], 20, kind, norm="batch", seed=0,
                                 embedding_size=emb.shape[1] if kind != "prodlda" else 0).to(device)
    emb = emb if kind != "prodlda" else None
    ntm.fit(model, bow, emb, epochs=1, seed=0)  # warm-up: kernels, allocator
    _sync(device)
    started = time.perf_counter()
    history = ntm.fit(model, bow, emb, epochs=epochs, seed=1)
    _sync(device)
    return {"model": kind, "implementation": "ours", "device": device, "epochs": epochs,
            "sec_per_epoch": (time.perf_counter() - started) / epochs, "last_loss": history[-1]}


def time_library(kind: str, bow: sp.csr_matrix, emb: np.ndarray, vocabulary: list[str], epochs: int) -> dict:
    from contextualized_topic_models.datasets.dataset import CTMDataset
    from contextualized_topic_models.models.ctm import CombinedTM, ZeroShotTM

    data = CTMDataset(emb, bow, dict(enumerate(vocabulary)))
    cls = CombinedTM if kind == "combinedtm" else ZeroShotTM
    device = "cuda" if torch.cuda.is_available() else "cpu"
    warm = cls(bow_size=bow.shape[1], contextual_size=emb.shape[1], n_components=20, num_epochs=1,
               num_data_loader_workers=0)
    warm.fit(data, do_train_predictions=False)
    model = cls(bow_size=bow.shape[1], contextual_size=emb.shape[1], n_components=20, num_epochs=epochs,
                num_data_loader_workers=0)
    _sync(device)
    started = time.perf_counter()
    model.fit(data, do_train_predictions=False)
    _sync(device)
    return {"model": kind, "implementation": "ctm-2.5.0", "device": device, "epochs": epochs,
            "sec_per_epoch": (time.perf_counter() - started) / epochs, "last_loss": float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="step", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--dataset", default=str(DATASETS / "BBC_News"))
    p.add_argument("--no-embeddings", action="store_true", help="counts only (ProdLDA)")
    t = sub.add_parser("time")
    t.add_argument("--data", type=Path, required=True)
    t.add_argument("--devices", nargs="+", default=["cpu", "cuda"])
    t.add_argument("--models", nargs="+", default=["prodlda", "combinedtm"])
    t.add_argument("--epochs", type=int, default=20)
    t.add_argument("--library", action="store_true", help="also the contextualized-topic-models library")
    args = parser.parse_args()
    if args.step == "prepare":
        prepare(args.out, args.dataset, not args.no_embeddings)
        return
    with np.load(args.data) as f:
        bow = sp.csr_matrix((f["data"], f["indices"], f["indptr"]), shape=tuple(f["shape"]))
        emb, vocabulary = f["embeddings"], [str(w) for w in f["vocabulary"]]
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    print(json.dumps({"torch": torch.__version__, "gpu": gpu, "threads": torch.get_num_threads(),
                      "documents": bow.shape[0], "words": bow.shape[1]}), flush=True)
    for kind in args.models:
        if kind != "prodlda" and emb.shape[1] == 0:
            print(json.dumps({"model": kind, "skipped": "no embeddings in --data"}), flush=True)
            continue
        for device in args.devices:
            if device.startswith("cuda") and gpu is None:
                print(json.dumps({"model": kind, "device": device, "skipped": "no GPU"}), flush=True)
                continue
            print(json.dumps(time_ours(kind, device, bow, emb, args.epochs)), flush=True)
        if args.library and kind != "prodlda":
            print(json.dumps(time_library(kind, bow, emb, vocabulary, args.epochs)), flush=True)


if __name__ == "__main__":
    main()
