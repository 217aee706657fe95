"""From a validated run config to the corpus of a run and the partition of a node.

The server and every client call the same functions with the same config, so they
agree on the vocabulary, the train/val/test split and the partitions without
exchanging any data. Loaded corpora are cached per process: a simulation worker that
serves many rounds reads its corpus once.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Mapping

import numpy as np

from flower_topics.data.corpus import Corpus
from flower_topics.data.partition import parse_sizes, partition_documents
from flower_topics.data.preprocessing import PreprocessConfig
from flower_topics.data.readers import expand_path, load_corpus, path_exists
from flower_topics.data.splits import ensure_split, training_corpus
from flower_topics.data.synthetic import SyntheticConfig, SyntheticCorpus, make_synthetic_corpus, parse_years
from flower_topics.data.embedded import resolve_dataset
from flower_topics.errors import UserInputError
from flower_topics.options import shown

SYNTHETIC = "synthetic"


@dataclass(frozen=True)
class RunData:
    """The corpus of a run.

    Parameters
    ----------
    corpus : Corpus
        All documents, with a train/val/test split.
    synthetic : SyntheticCorpus or None
        The generator's output (true topics) when the corpus is synthetic.
    """

    corpus: Corpus
    synthetic: SyntheticCorpus | None = None

    @property
    def truth(self) -> np.ndarray | None:
        """The true topic-word matrix of a synthetic corpus, else None."""
        return None if self.synthetic is None else self.synthetic.topic_word

    @cached_property
    def train(self) -> Corpus:
        """Training documents (train + val)."""
        return training_corpus(self.corpus)


def synthetic_config(config: Mapping[str, object]) -> SyntheticConfig:
    """The synthetic-corpus parameters of a run config."""
    return SyntheticConfig(
        n_nodes=int(config["synthetic-nodes"]),
        n_topics=int(config["synthetic-topics"]),
        n_shared_topics=int(config["synthetic-shared-topics"]),
        vocab_size=int(config["synthetic-vocab-size"]),
        eta=float(config["synthetic-eta"]),
        alpha=float(config["synthetic-alpha"]),
        doc_length=(int(config["synthetic-doc-min-length"]), int(config["synthetic-doc-max-length"])),
        docs_per_node=int(config["synthetic-docs-per-node"]),
        dates=parse_years(str(config.get("synthetic-dates", ""))),
    )


def preprocess_config(config: Mapping[str, object]) -> PreprocessConfig:
    """The preprocessing options of a run config."""
    min_df = float(config["min-df"])  # type: ignore[arg-type]
    max_df = float(config["max-df"])  # type: ignore[arg-type]
    return PreprocessConfig(
        lowercase=bool(config["lowercase"]),
        stopwords=None if config["stopwords"] == "none" else str(config["stopwords"]),
        min_df=int(min_df) if min_df >= 1 else min_df,
        max_df=int(max_df) if max_df > 1 else max_df,
        max_vocab=int(config["max-vocab"]) or None,  # type: ignore[call-overload]
        min_doc_length=int(config["min-doc-length"]),  # type: ignore[call-overload]
    )


def load_run_data(config: Mapping[str, object]) -> RunData:
    """Load (or generate) the corpus a run config names, with its split."""
    return _load_cached(tuple(sorted((k, v) for k, v in config.items() if is_data_key(k))))


def is_data_key(key: str) -> bool:
    """Whether a run-config key changes the corpus (its documents, vocabulary or split)."""
    return key in {
        "dataset", "text-column", "label-column", "date-column", "lowercase", "stopwords", "min-df", "max-df",
        "max-vocab", "min-doc-length", "seed", "heldout-fraction",
    } or key.startswith("synthetic-")


@lru_cache(maxsize=4)
def _load_cached(items: tuple[tuple[str, object], ...]) -> RunData:
    config = dict(items)
    seed = int(config["seed"])  # type: ignore[call-overload]
    dataset = str(config["dataset"])
    if dataset == SYNTHETIC:
        synthetic = make_synthetic_corpus(synthetic_config(config), seed=seed)
        return RunData(corpus=ensure_split(synthetic.corpus, seed=seed), synthetic=synthetic)
    path = expand_path(resolve_dataset(dataset))
    if not path_exists(path):
        raise UserInputError(
            f"dataset {shown(dataset, 200)} does not exist; pass dataset='embedded', 'synthetic' or the path of an OCTIS folder, "
            ".jsonl, .csv or folder of .txt files"
        )
    corpus = load_corpus(
        path,
        text_column=str(config["text-column"]),
        label_column=str(config["label-column"]),
        date_column=str(config.get("date-column", "")),
        preprocess_config=preprocess_config(config),
    )
    return RunData(corpus=ensure_split(corpus, seed=seed))


def node_partition(config: Mapping[str, object], partition_id: int, num_partitions: int) -> Corpus:
    """The training documents of one node.

    Parameters
    ----------
    config : Mapping
        A validated run config.
    partition_id : int
        This node's partition, in ``[0, num_partitions)``.
    num_partitions : int
        Number of nodes the training documents are split among.
    """
    if not 0 <= partition_id < num_partitions:
        raise UserInputError(
            f"partition-id {partition_id} is outside [0, {num_partitions}); set the node config "
            "'partition-id' and 'num-partitions' of each SuperNode"
        )
    return all_partitions(config, num_partitions)[partition_id]


def all_partitions(config: Mapping[str, object], num_partitions: int) -> list[Corpus]:
    """The training documents of every node, in partition-id order (cached per process)."""
    keys = tuple(sorted((k, v) for k, v in config.items() if is_data_key(k) or _is_partition_key(k)))
    return list(_partitions_cached(keys, num_partitions))


def _is_partition_key(key: str) -> bool:
    return key in {"partition", "dirichlet-alpha", "partition-sizes", "label-groups"}


@lru_cache(maxsize=4)
def _partitions_cached(items: tuple[tuple[str, object], ...], num_partitions: int) -> tuple[Corpus, ...]:
    config = dict(items)
    train = load_run_data(config).train
    groups = str(config["label-groups"]).strip()
    sizes = str(config["partition-sizes"]).strip()
    parts = partition_documents(
        train,
        num_partitions,
        str(config["partition"]),
        seed=int(config["seed"]),  # type: ignore[call-overload]
        dirichlet_alpha=float(config["dirichlet-alpha"]),  # type: ignore[arg-type]
        sizes=parse_sizes(sizes) if sizes else None,
        label_groups=[g.split("+") for g in groups.split(";")] if groups else None,
    )
    return tuple(train.subset(idx) for idx in parts)
