"""Reference model: centralized LDA with tomotopy, saved in our model-file format.

Trains tomotopy's collapsed Gibbs LDA on the training documents (train + val) of a
corpus and writes ``model.npz``, so that ``flower-topics evaluate`` scores it with
exactly the metrics our own runs get::

    python benchmarks/tomotopy_lda.py --dataset $FLOWER_TOPICS_DATASETS/BBC_News --topics 20 \\
        --iterations 1000 --seed 0 --out runs/tomotopy-bbc-s0
    flower-topics evaluate --model runs/tomotopy-bbc-s0/model.npz --corpus $FLOWER_TOPICS_DATASETS/BBC_News --labels
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from flower_topics.data import load_corpus
from flower_topics.data.splits import ensure_split, training_corpus
from flower_topics.topic_model.model_file import TopicModel, save_model


def tomotopy():
    """tomotopy, imported when a run needs it (``--help`` does not): the ``bench`` extra."""
    try:
        import tomotopy as tp
    except ModuleNotFoundError:
        raise SystemExit("this benchmark runs tomotopy: pip install -e '.[bench]'") from None
    return tp


def train_tomotopy(corpus, n_topics: int, alpha: float, beta: float, iterations: int, seed: int) -> np.ndarray:
    """Train tomotopy LDA (one worker) and return its K x V topic-word matrix in corpus column order."""
    tp = tomotopy()
    model = tp.LDAModel(k=n_topics, alpha=alpha, eta=beta, seed=seed)
    for d in range(corpus.n_docs):
        words = corpus.words(d)
        if words:
            model.add_doc(words)
    model.train(iterations, workers=1)
    index = {w: i for i, w in enumerate(model.used_vocabs)}
    phi = np.zeros((n_topics, corpus.n_words))
    columns = np.array([index.get(w, -1) for w in corpus.vocabulary])
    for k in range(n_topics):
        dist = np.asarray(model.get_topic_word_dist(k))
        phi[k, columns >= 0] = dist[columns[columns >= 0]]
    # words that never occur in training get tomotopy's smoothing mass: beta / (n_k + V beta)
    phi[:, columns < 0] = phi[:, columns >= 0].min(axis=1, keepdims=True)
    return phi / phi.sum(axis=1, keepdims=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--alpha", type=float, default=0.1)
    parser.add_argument("--beta", type=float, default=0.01)
    parser.add_argument("--iterations", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    corpus = ensure_split(load_corpus(args.dataset), seed=args.seed)
    train = training_corpus(corpus)
    started = time.time()
    phi = train_tomotopy(train, args.topics, args.alpha, args.beta, args.iterations, args.seed)
    wall = time.time() - started
    out = Path(args.out)
    save_model(out / "model.npz", TopicModel(phi, corpus.vocabulary, metadata={
        "method": "tomotopy.LDAModel", "run_config": vars(args), "rounds": args.iterations,
        "privacy": {"epsilon": None, "delta": None, "accountant": "none"}, "wall_time": wall,
        "engine": f"tomotopy {tomotopy().__version__}, 1 worker",
    }))
    print(json.dumps({"out": str(out / "model.npz"), "wall_time": round(wall, 2)}))


if __name__ == "__main__":
    main()
