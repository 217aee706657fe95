"""Score dplda's public head start alone (no private document, no round) as dplda_quality.py scores a run.

    python benchmarks/public_start_score.py --dataset runs/bbc-split/private.jsonl \
        --vocabulary runs/bbc-split/public-vocabulary.txt --public runs/bbc-split/public.jsonl

The topics are the normalized initial ``lambda`` that ``dplda.public-corpus`` gives (a non-private LDA of the
public text over the vocabulary, seeded from the run's seed), scored on ``--dataset``'s held-out documents
(fold-in alpha 0.01 and 0.1, NPMI): the reference a private run must beat to have used its documents.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from dplda_quality import score

from flower_topics.run.config import parse_run_config
from flower_topics.strategies.dplda import DPLDA
from flower_topics.topic_model.model_file import TopicModel


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="the private corpus, scored on its held-out documents")
    parser.add_argument("--vocabulary", required=True, help="the public vocabulary file")
    parser.add_argument("--public", required=True, help="the public corpus (dplda.public-corpus)")
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    vocabulary = tuple(Path(args.vocabulary).read_text(encoding="utf-8").split())
    config = parse_run_config({"method": "dplda", "dataset": args.dataset, "vocabulary": args.vocabulary,
                               "federated-eval": False, "num-topics": args.topics, "seed": args.seed,
                               "dplda.public-corpus": str(Path(args.public).resolve())})
    strategy = DPLDA.from_config(config, vocabulary)
    model = TopicModel(topic_word=strategy.topic_word(strategy.initial_arrays()), vocabulary=vocabulary)
    print(json.dumps({"method": "public start alone", **score(model, args.dataset, Path(args.vocabulary))}))


if __name__ == "__main__":
    main()
