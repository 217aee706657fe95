"""Split a corpus into a seeded public share and a private rest, as two ``.jsonl`` files.

    python benchmarks/public_split.py --dataset BBC_News --fraction 0.1 --seed 0 --out runs/bbc-split

writes ``public.jsonl`` (``--fraction`` of the documents, drawn with ``--seed``) and ``private.jsonl``
(the rest) into ``--out``, one ``{"text": ..., "label": ...}`` per line: the setting of
``dplda.public-corpus`` (docs/dplda.md, "A public head start"), where the public share stands for
public text of the parties' domain. ``--dataset`` is a path (a relative one from the working directory),
or a corpus name under ``FLOWER_TOPICS_DATASETS`` (:mod:`benchmark_data`); the documents are read with
the package's readers and written as their words.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchmark_data import dataset_path

from flower_topics.data.readers import load_corpus
from flower_topics.errors import UserInputError


def write(path: Path, texts: list[str], labels: list[str] | None) -> None:
    """One JSON object per document: its text, and its label when the corpus has labels."""
    with path.open("w", encoding="utf-8") as fh:
        for i, text in enumerate(texts):
            row = {"text": text} if labels is None else {"text": text, "label": labels[i]}
            fh.write(json.dumps(row) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True,
                        help="a corpus path (relative: from the working directory), or a corpus name under "
                             "FLOWER_TOPICS_DATASETS")
    parser.add_argument("--fraction", type=float, default=0.1, help="share of the documents made public")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    if not 0 < args.fraction < 1:
        raise SystemExit("--fraction must be in (0, 1)")
    try:
        corpus = load_corpus(dataset_path(args.dataset))
    except UserInputError as exc:
        raise SystemExit(str(exc)) from None
    texts = [" ".join(corpus.words(d)) for d in range(corpus.n_docs)]
    labels = None if corpus.labels is None else [str(x) for x in corpus.labels]
    order = np.random.default_rng(args.seed).permutation(corpus.n_docs)
    n_public = max(1, round(args.fraction * corpus.n_docs))
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, chosen in (("public", np.sort(order[:n_public])), ("private", np.sort(order[n_public:]))):
        write(out / f"{name}.jsonl", [texts[i] for i in chosen], None if labels is None else [labels[i] for i in chosen])
        print(f"wrote {len(chosen)} documents to {out / f'{name}.jsonl'}")


if __name__ == "__main__":
    main()
