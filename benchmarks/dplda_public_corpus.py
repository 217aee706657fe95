"""A public tuning corpus for dplda: public topics, the private corpus' coarse shape.

    python benchmarks/dplda_public_corpus.py --public $FLOWER_TOPICS_DATASETS/BBC_News \
        --train-docs 47300 --test-docs 5260 --mean-length 38 --out runs/dplda-public/bbc-shaped

dplda's settings (post-processing threshold, rounds) must not be tuned on the parties'
held-out results (docs/dplda.md, "Settings chosen on a public corpus"). Their effect depends
on the signal per cell of the ``K x V`` statistic against the noise, and with every document
clipped to the same norm that signal is set by the number of documents, ``K`` and ``V``,
not by the words. So this script makes a corpus with the private corpus' *size* (training
and held-out documents, mean length after the vocabulary; numbers a data team knows, no
held-out result) whose *content* is public: LDA (tomotopy, ``K`` topics) is fitted on a
public corpus restricted to its ``V`` words in most documents; every synthetic document
copies the topic proportions and label of a random public document, takes that document's
length scaled to ``--mean-length`` (stochastic rounding, at least 1 token), and draws its
tokens from the fitted topics. With ``--real`` the documents are the public corpus' own text
instead, which an LDA-drawn corpus is not (its held-out words always come from the topics, so
it under-rewards smoothing): every training document is a random public *training* document
(drawn with replacement) whose tokens are thinned at random to the scaled length, and every
held-out document a random public *held-out* document thinned the same way, so that held-out
text is real text the model never saw. Writes an OCTIS folder (``corpus.tsv`` with a train/test
partition and the public label, ``vocabulary.txt``, ``metadata.json``) that
``benchmarks/dplda_quality.py --dataset`` reads; its 5 parties are split by the public labels.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from flower_topics.run.config import parse_run_config
from flower_topics.data.prepare import load_run_data
from flower_topics.data.synthetic import _draw_rows


def restricted_documents(dataset: str, vocab_size: int, split: str = "train"
                         ) -> tuple[list[np.ndarray], list[str], list[str]]:
    """The public training (or held-out: ``split='test'``) documents over the ``vocab_size`` words in most
    training documents."""
    data = load_run_data(parse_run_config({"dataset": dataset}))
    train = data.train
    df = np.diff(train.doc_term_matrix().tocsc().indptr)  # documents per word (duplicates are summed)
    keep = np.sort(np.argsort(-df, kind="stable")[:vocab_size])
    new_id = np.full(len(train.vocabulary), -1)
    new_id[keep] = np.arange(keep.size)
    source = train if split == "train" else data.corpus.select_split(split)
    docs = [new_id[source.tokens[a:b]] for a, b in zip(source.doc_ptr[:-1], source.doc_ptr[1:])]
    docs = [d[d >= 0] for d in docs]
    labels = [str(x) for x in source.labels]
    return docs, [train.vocabulary[i] for i in keep], labels


def thinned(docs: list[np.ndarray], count: int, mean_length: float, scale_from: float,
            rng: np.random.Generator) -> tuple[list[np.ndarray], np.ndarray]:
    """``count`` documents, each a random non-empty one of ``docs`` with a random subset of its tokens of its
    length times ``mean_length / scale_from`` (stochastic rounding, at least 1 token); and the sources."""
    kept = np.asarray([i for i, d in enumerate(docs) if d.size])
    source = rng.choice(kept, size=count)
    out = []
    for i in source:
        tokens = docs[i]
        length = max(1, int(np.floor(tokens.size * mean_length / scale_from + rng.random())))
        out.append(tokens[np.sort(rng.permutation(tokens.size)[:length])])
    return out, source


def fit_topics(docs: list[np.ndarray], vocabulary: list[str], topics: int,
               seed: int) -> tuple[np.ndarray, np.ndarray, list[str], list[int]]:
    """tomotopy LDA on the public documents: topic-word ``(K, V')``, proportions ``(D, K)``, its V' words, the non-empty documents."""
    import tomotopy as tp

    model = tp.LDAModel(k=topics, alpha=0.1, eta=0.01, seed=seed)
    kept = [i for i, d in enumerate(docs) if d.size]
    for i in kept:
        model.add_doc([vocabulary[w] for w in docs[i]])
    model.train(1000, workers=1)
    index = {w: j for j, w in enumerate(model.used_vocabs)}
    order = np.asarray([index[w] for w in vocabulary if w in index])
    words = [w for w in vocabulary if w in index]
    topic_word = np.stack([model.get_topic_word_dist(k) for k in range(topics)])[:, order]
    topic_word /= topic_word.sum(axis=1, keepdims=True)
    theta = np.zeros((len(docs), topics))
    theta[kept] = np.stack([d.get_topic_dist() for d in model.docs])
    return topic_word, theta, words, kept


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--public", required=True, help="public corpus whose topics and labels are used")
    parser.add_argument("--out", required=True, help="OCTIS folder to write")
    parser.add_argument("--train-docs", type=int, required=True)
    parser.add_argument("--test-docs", type=int, required=True)
    parser.add_argument("--mean-length", type=float, required=True, help="mean tokens per document over the V words")
    parser.add_argument("--vocab-size", type=int, default=2000)
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--real", action="store_true",
                        help="thinned copies of the public corpus' own documents (held-out from its test split) "
                             "instead of documents drawn from fitted topics")
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    docs, vocabulary, labels = restricted_documents(args.public, args.vocab_size)
    if args.real:
        write_real(args, docs, vocabulary, labels, rng)
        return
    topic_word, theta, words, kept = fit_topics(docs, vocabulary, args.topics, args.seed)
    lengths_public = np.asarray([docs[i].size for i in kept], dtype=float)
    n = args.train_docs + args.test_docs
    source = rng.choice(np.asarray(kept), size=n)
    scaled = lengths_public[np.searchsorted(kept, source)] * args.mean_length / lengths_public.mean()
    lengths = np.maximum(1, np.floor(scaled + rng.random(n))).astype(np.int64)
    doc_ids = np.repeat(np.arange(n), lengths)
    topic_of_token = _draw_rows(theta[source], doc_ids, rng)
    tokens = _draw_rows(topic_word, topic_of_token, rng)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    ptr = np.concatenate([[0], np.cumsum(lengths)])
    split = ["train"] * args.train_docs + ["test"] * args.test_docs
    with (out / "corpus.tsv").open("w", encoding="utf-8") as fh:
        for d in range(n):
            text = " ".join(words[w] for w in tokens[ptr[d]:ptr[d + 1]])
            fh.write(f"{text}\t{split[d]}\t{labels[source[d]]}\n")
    (out / "vocabulary.txt").write_text("\n".join(words) + "\n", encoding="utf-8")
    meta = {"public": args.public, "train_docs": args.train_docs, "test_docs": args.test_docs,
            "mean_length": float(lengths.mean()), "vocabulary_length": len(words), "topics": args.topics,
            "seed": args.seed, "public_documents": len(kept), "public_mean_length": float(lengths_public.mean())}
    (out / "metadata.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(meta)


def write_real(args: argparse.Namespace, docs: list[np.ndarray], vocabulary: list[str], labels: list[str],
               rng: np.random.Generator) -> None:
    """``--real``: the OCTIS folder of thinned public documents (see the module docstring)."""
    test_docs, _, test_labels = restricted_documents(args.public, args.vocab_size, split="test")
    scale_from = float(np.mean([d.size for d in docs if d.size]))
    train, train_source = thinned(docs, args.train_docs, args.mean_length, scale_from, rng)
    test, test_source = thinned(test_docs, args.test_docs, args.mean_length, scale_from, rng)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = [(d, "train", labels[i]) for d, i in zip(train, train_source)]
    rows += [(d, "test", test_labels[i]) for d, i in zip(test, test_source)]
    with (out / "corpus.tsv").open("w", encoding="utf-8") as fh:
        for tokens, split, label in rows:
            fh.write(" ".join(vocabulary[w] for w in tokens) + f"\t{split}\t{label}\n")
    (out / "vocabulary.txt").write_text("\n".join(vocabulary) + "\n", encoding="utf-8")
    meta = {"public": args.public, "real": True, "train_docs": args.train_docs, "test_docs": args.test_docs,
            "mean_length": float(np.mean([d.size for d in train])), "vocabulary_length": len(vocabulary),
            "seed": args.seed, "public_training_documents": int(np.unique(train_source).size),
            "public_test_documents": int(np.unique(test_source).size), "public_mean_length": scale_from}
    (out / "metadata.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(meta)


if __name__ == "__main__":
    main()
