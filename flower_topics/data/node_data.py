"""A party's own documents, before and after the vocabulary agreement.

A party reads only its own corpus. In a deployment its SuperNode names the file in its
node config (``flower-supernode --node-config "dataset='/srv/notes.jsonl' text-column='body'"``);
in a simulation the run config's ``dataset`` and ``partition`` give each simulated node
its share (``partition-id`` / ``num-partitions`` in the node config). From there both
take the same path:

1. :func:`load_node_documents`: the party's documents, tokenized with the reading
   options but over *its own* words (no document-frequency filter yet: that needs
   everyone's counts), each marked ``train`` or ``test`` (held out) by a seeded split of
   the party's own documents, or the split an OCTIS folder carries;
2. :meth:`NodeDocuments.candidates`: its words in at least ``min-party-df`` of its own
   documents (node config, default 2; a word of one document never leaves the party) with
   their document frequencies, what the agreement stage's ``union`` mode sends
   (:mod:`flower_topics.federation.vocabulary_agreement`); a curated list (an OCTIS ``vocabulary.txt``, the
   synthetic generator's words) is public and leaves whole, without document frequencies;
3. :meth:`NodeDocuments.on_vocabulary`: its documents over the agreed vocabulary (words
   outside it dropped, then documents shorter than ``min-doc-length``).

A simulated node's share: the whole dataset is split with the run seed (80/10/10
train/val/test, or the OCTIS split), and its training documents are partitioned by
``partition`` exactly as before; the held-out documents are dealt to the nodes at random
(seeded), so that together the nodes hold every held-out document once and federated
evaluation covers them all. The dataset is preprocessed once per machine into the corpus
cache (:mod:`flower_topics.data.corpus_cache`); each process memory-maps it and
materializes only the share it serves (with ``FLOWER_TOPICS_CACHE_DIR=off``, each process
reads the whole dataset itself, as before; the shares are the same either way). A party's
own file (node config ``dataset``) is read once per process, or with ``corpus-cache`` in its
node config prepared once into that folder of the party's and memory-mapped by every later
process (on the deployment engine, each message is a process of its own).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from flower_topics.data.corpus import Corpus
from flower_topics.data.corpus_cache import READING_KEYS, CachedCorpus, cached_corpus, preprocess_config
from flower_topics.data.partition import parse_sizes, partition_documents
from flower_topics.data.prepare import synthetic_config
from flower_topics.data.readers import DATE_COLUMN_HELP, expand_path, load_corpus, path_exists
from flower_topics.data.splits import ensure_split
from flower_topics.data.embedded import resolve_dataset
from flower_topics.data.synthetic import make_synthetic_corpus
from flower_topics.errors import UserInputError
from flower_topics.options import Option, at_least, coerce, one_of, shown

SYNTHETIC = "synthetic"
#: Node-config keys a party may set for its own data (``flower-supernode --node-config``).
NODE_OPTIONS: Mapping[str, Option] = {
    "dataset": Option("", "this party's corpus: OCTIS folder, .jsonl, .csv or folder of .txt files"),
    "text-column": Option("text", "text column of a .jsonl/.csv corpus"),
    "label-column": Option("label", "label column of a .jsonl/.csv corpus (optional in the file)"),
    "date-column": Option("", DATE_COLUMN_HELP),
    "lowercase": Option(True, "lowercase raw text before tokenizing"),
    "stopwords": Option("english", "stopword list for raw text: english or none", one_of("english", "none")),
    "secret-seed": Option(-1, "a secret seed for this party's privacy randomness, mixed with a nonce drawn from OS "
                          "entropy once per run: never the same noise in two runs (-1 = OS entropy)", at_least(-1)),
    "min-party-df": Option(2, "union vocabulary agreement: a word leaves this party only if it is in at least this "
                           "many of its own documents (set on the party: the run config cannot lower it)",
                           at_least(1)),
    "theta-out": Option("", "a CSV path on this party: its documents' topic mixtures under the global model, written "
                        "at each federated evaluation (the last is the final model) and never sent ('' = off)"),
    "prevalence-out": Option("", "a CSV path on this party: its own exact topic prevalence by period (a run with "
                             "prevalence-period), written before its table is released and never sent ('' = off)"),
    "state-dir": Option("", "a directory on this party where it keeps its state after every message, so that a "
                        "SuperNode restarted with the same identity rejoins its run (flower_topics.federation.party_state; "
                        "'' = in memory only)"),
    "corpus-cache": Option("", "a folder on this party where its prepared corpus (its file read and tokenized with "
                           "its reading options) is kept and memory-mapped by every later message's process; rebuilt "
                           "when the file's content or the options change or the cache file is damaged "
                           "(flower_topics.data.corpus_cache; '' = the file is read at every message)"),
    "partition-id": Option(0, "simulation: this node's share of the run config's dataset", at_least(0)),
    "num-partitions": Option(1, "simulation: how many shares the run config's dataset is cut into", at_least(1)),
}


@dataclass(frozen=True)
class Candidates:
    """A party's candidate words for the vocabulary agreement.

    Parameters
    ----------
    words : tuple of str
        Its words in at least ``min-party-df`` of its documents; a curated list whole.
    doc_freq : np.ndarray
        ``int64``: in how many of its documents each word occurs; zeros for a curated
        list (its words are kept as they are, so their frequencies are not sent).
    n_docs : int
        Its number of documents.
    curated : bool
        The words come from a curated list (an OCTIS ``vocabulary.txt`` or the
        synthetic generator): kept as they are, without the document-frequency filters.
    """

    words: tuple[str, ...]
    doc_freq: np.ndarray
    n_docs: int
    curated: bool


@dataclass(frozen=True)
class NodeDocuments:
    """A party's documents over its own words, each ``train`` or ``test`` (held out).

    Parameters
    ----------
    corpus : Corpus
        The documents, over the party's own vocabulary, with ``split`` set.
    curated : bool
        Whether the vocabulary is a curated list (see :class:`Candidates`).
    source : str
        Where they came from, for messages.
    """

    corpus: Corpus
    curated: bool
    source: str

    def candidates(self, min_df: int = 2) -> Candidates:
        """What the ``union`` agreement sends: its words in at least ``min_df`` of its documents with their
        document frequencies; a curated list whole, with zeros for frequencies (public words, private counts).

        Parameters
        ----------
        min_df : int, default 2
            The party's own floor (node config ``min-party-df``), applied before anything
            is sent; >= 1.
        """
        if min_df < 1:
            raise UserInputError(f"min-party-df must be >= 1, got {min_df}")
        if self.curated:
            return Candidates(tuple(self.corpus.vocabulary), np.zeros(self.corpus.n_words, dtype=np.int64),
                              self.corpus.n_docs, True)
        dtm = self.corpus.doc_term_matrix()
        doc_freq = np.asarray((dtm > 0).sum(axis=0)).ravel().astype(np.int64)
        used = np.flatnonzero(doc_freq >= min_df)
        return Candidates(tuple(self.corpus.vocabulary[i] for i in used), doc_freq[used], self.corpus.n_docs,
                          False)

    def on_vocabulary(self, vocabulary: tuple[str, ...], min_doc_length: int = 1) -> Corpus:
        """Its documents over ``vocabulary``: other words dropped, then documents shorter than ``min_doc_length``.

        Raises
        ------
        UserInputError
            When no document keeps ``min_doc_length`` words of the vocabulary.
        """
        index = {w: i for i, w in enumerate(vocabulary)}
        local = np.fromiter((index.get(w, -1) for w in self.corpus.vocabulary), dtype=np.int64,
                            count=self.corpus.n_words)
        ids = local[self.corpus.tokens]
        keep_token = ids >= 0
        doc_ids = self.corpus.doc_ids
        lengths = np.bincount(doc_ids[keep_token], minlength=self.corpus.n_docs)
        keep_doc = lengths >= min_doc_length
        if not keep_doc.any():
            raise UserInputError(
                f"{self.source}: none of its {self.corpus.n_docs} documents has {min_doc_length} or more words of the "
                f"agreed vocabulary ({len(vocabulary)} words); check the corpus and its reading options"
            )
        keep_token &= keep_doc[doc_ids]
        doc_ptr = np.zeros(int(keep_doc.sum()) + 1, dtype=np.int64)
        np.cumsum(lengths[keep_doc], out=doc_ptr[1:])
        starts = None
        if self.corpus.sentence_start is not None:
            kept = np.flatnonzero(keep_token)
            sentence = np.cumsum(self.corpus.sentence_start)[kept]
            starts = np.ones(kept.size, dtype=bool)
            starts[1:] = sentence[1:] != sentence[:-1]
            starts[doc_ptr[:-1][np.diff(doc_ptr) > 0]] = True
        return Corpus(tokens=ids[keep_token], doc_ptr=doc_ptr, vocabulary=tuple(vocabulary),
                      labels=None if self.corpus.labels is None else self.corpus.labels[keep_doc],
                      split=self.corpus.split[keep_doc], sentence_start=starts,
                      dates=None if self.corpus.dates is None else self.corpus.dates[keep_doc])


def node_options(node_config: Mapping[str, Any]) -> dict[str, Any]:
    """The node config's keys of :data:`NODE_OPTIONS`, validated (other keys are left alone)."""
    return {key: coerce(key, value, NODE_OPTIONS[key], source="node-config")
            for key, value in node_config.items() if key in NODE_OPTIONS}


def load_node_documents(node_config: Mapping[str, Any], run_config: Mapping[str, Any]) -> NodeDocuments:
    """This party's documents: its own file (node config ``dataset``) or its simulated share.

    Parameters
    ----------
    node_config : Mapping
        The SuperNode's node config.
    run_config : Mapping
        The validated run config (reading options, split seed, held-out fraction, and in
        simulation the dataset and its partitioning).

    Raises
    ------
    UserInputError
        For a missing, unreadable or empty corpus, or a node config naming neither its
        own ``dataset`` nor a ``partition-id``.
    """
    options = node_options(node_config)
    reading = {key: options.get(key, run_config[key]) for key in READING_KEYS}
    seed, heldout = int(run_config["seed"]), float(run_config["heldout-fraction"])
    if options.get("dataset"):
        path = str(expand_path(str(options["dataset"])))
        folder = str(options.get("corpus-cache", "")).strip()
        if folder:
            corpus, curated = _read_through_cache(path, tuple(sorted(reading.items())), seed, heldout,
                                                  str(expand_path(folder)))
        else:
            corpus, curated = _read(path, tuple(sorted(reading.items())), seed, heldout)
        return NodeDocuments(corpus, curated, f"this node's corpus {path}")
    if "partition-id" not in options or "num-partitions" not in options:
        raise UserInputError(
            "this node has no corpus: start it with flower-supernode --node-config \"dataset='/path/to/corpus.jsonl'\" "
            f"(or, in a simulation, partition-id and num-partitions){_misspelt(node_config)}"
        )
    partition_id, num_partitions = int(options["partition-id"]), int(options["num-partitions"])
    if not 0 <= partition_id < num_partitions:
        raise UserInputError(
            f"partition-id {partition_id} is outside [0, {num_partitions}); set the node config 'partition-id' and "
            "'num-partitions' of each SuperNode"
        )
    return simulated_share(run_config, partition_id, num_partitions)


def _misspelt(node_config: Mapping[str, Any]) -> str:
    """``"; did you mean ..."`` for node-config keys close to a known one (``datset``), else ``""``."""
    import difflib

    guesses = [f"{shown(key, 40)} -> {close[0]!r}" for key in node_config if isinstance(key, str)
               and key not in NODE_OPTIONS and len(key) < 100
               and (close := difflib.get_close_matches(key, list(NODE_OPTIONS), n=1, cutoff=0.75))]
    return f"; did you mean {', '.join(guesses[:5])}?" if guesses else ""


def simulated_share(run_config: Mapping[str, Any], partition_id: int, num_partitions: int) -> NodeDocuments:
    """Share ``partition_id`` of ``num_partitions`` of the run config's dataset (see the module docstring).

    A corpus file is preprocessed once into the corpus cache
    (:mod:`flower_topics.data.corpus_cache`) and every process, every simulated party,
    memory-maps it and materializes only this share's documents; with the cache off
    (``FLOWER_TOPICS_CACHE_DIR=off``) the process reads the whole corpus itself. Either
    way the share is the same, document for document.
    """
    keys = ("dataset", *READING_KEYS, "seed", "heldout-fraction", "partition", "dirichlet-alpha",
            "partition-sizes", "label-groups")
    items = tuple((k, run_config[k]) for k in keys) + tuple(
        sorted((k, v) for k, v in run_config.items() if str(k).startswith("synthetic-")))
    name = f"share {partition_id} of {num_partitions} of dataset {str(run_config['dataset'])!r}"
    if str(run_config["dataset"]) != SYNTHETIC:
        cached = _cached(items)
        if cached is not None:
            split, parts = _cached_shares(items, num_partitions)
            return NodeDocuments(cached.subset(parts[partition_id], split=split), cached.curated, name)
    shares, curated = _shares(items, num_partitions)
    return NodeDocuments(shares[partition_id], curated, name)


def check_dataset(run_config: Mapping[str, Any], num_partitions: int = 1) -> None:
    """Read the run config's dataset as a simulation's parties will, and refuse one they cannot read.

    The launcher calls this before it starts anything: the corpus is read with the package's own
    reader into the corpus cache (the file the parties would build and then share), its split is
    drawn and its training documents are partitioned into ``num_partitions`` shares, exactly as
    :func:`simulated_share` does for each party. A ``synthetic`` dataset is generated by each party
    and not checked here.

    Parameters
    ----------
    run_config : Mapping
        A validated run config.
    num_partitions : int, default 1
        How many simulated parties the dataset is shared among.

    Raises
    ------
    UserInputError
        For a missing, unreadable, empty or malformed corpus (e.g. no text column) or a
        partition that cannot be made; the message is one line and names the file.
    """
    dataset = str(run_config["dataset"])
    if dataset == SYNTHETIC:
        return
    path = expand_path(resolve_dataset(dataset))
    if not path_exists(path):
        where = "" if path.is_absolute() else f" (relative to {shown(str(Path.cwd()), 200)})"
        raise UserInputError(f"dataset {shown(dataset, 200)} does not exist{where}; pass dataset='embedded', "
                             "'synthetic' or the path of an OCTIS folder, .jsonl, .csv or folder of .txt files")
    simulated_share(run_config, 0, max(1, int(num_partitions)))


def share_indices(corpus: Corpus, config: Mapping[str, Any], num_partitions: int) -> list[np.ndarray]:
    """The documents of each simulated share, as sorted indices into ``corpus`` (which has its split).

    Training documents (``train`` and ``val``) are partitioned by the config's ``partition``
    scheme; held-out (``test``) documents are dealt at random (seeded), so that together the
    shares hold every held-out document once. Only the documents' number, labels and split
    are looked at.
    """
    seed = int(config["seed"])
    train_ids = np.flatnonzero(corpus.split != "test")
    test_ids = np.flatnonzero(corpus.split == "test")
    groups = str(config["label-groups"]).strip()
    sizes = str(config["partition-sizes"]).strip()
    parts = partition_documents(
        corpus.subset(train_ids), num_partitions, str(config["partition"]), seed=seed,
        dirichlet_alpha=float(config["dirichlet-alpha"]), sizes=parse_sizes(sizes) if sizes else None,
        label_groups=[g.split("+") for g in groups.split(";")] if groups else None,
    )
    heldout = np.array_split(np.random.default_rng([seed, 2]).permutation(test_ids.size), num_partitions)
    return [np.sort(np.concatenate([train_ids[p], test_ids[h]])) for p, h in zip(parts, heldout)]


@lru_cache(maxsize=4)
def _shares(items: tuple[tuple[str, Any], ...], num_partitions: int) -> tuple[tuple[Corpus, ...], bool]:
    """Every share, read in this process (a synthetic corpus, or with the corpus cache off)."""
    config = dict(items)
    seed = int(config["seed"])
    dataset = str(config["dataset"])
    if dataset == SYNTHETIC:
        synthetic = make_synthetic_corpus(synthetic_config(config), seed=seed)
        ratios = split_ratios(float(config["heldout-fraction"]))
        corpus, curated = ensure_split(synthetic.corpus, seed=seed, ratios=ratios), True
    else:
        reading = tuple((k, config[k]) for k in sorted(READING_KEYS))
        corpus, curated = _read(resolve_dataset(dataset), reading, seed, float(config["heldout-fraction"]))
    return tuple(corpus.subset(idx) for idx in share_indices(corpus, config, num_partitions)), curated


@lru_cache(maxsize=4)
def _cached(items: tuple[tuple[str, Any], ...]) -> CachedCorpus | None:
    """The run's corpus file from the corpus cache (a memory map), or None with the cache off."""
    config = dict(items)
    path = resolve_dataset(str(config["dataset"]))
    if not path_exists(path):
        raise UserInputError(f"dataset {shown(path, 200)} does not exist; pass the path of an OCTIS folder, .jsonl, "
                             ".csv or folder of .txt files")
    return cached_corpus(path, {k: config[k] for k in READING_KEYS})


@lru_cache(maxsize=8)
def _cached_shares(items: tuple[tuple[str, Any], ...], num_partitions: int
                   ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """The split of the cached corpus (its own or seeded) and every share's document indices."""
    config = dict(items)
    cached = _cached(items)
    assert cached is not None
    skeleton = ensure_split(cached.skeleton(), seed=int(config["seed"]),
                            ratios=split_ratios(float(config["heldout-fraction"])))
    return skeleton.split, tuple(share_indices(skeleton, config, num_partitions))


@lru_cache(maxsize=4)
def _read(path: str, reading: tuple[tuple[str, Any], ...], seed: int, heldout: float) -> tuple[Corpus, bool]:
    """A corpus file over its own words (no frequency filters), with its split (OCTIS) or a seeded one."""
    if not path_exists(path):
        raise UserInputError(f"dataset {shown(path, 200)} does not exist; pass the path of an OCTIS folder, .jsonl, "
                             ".csv or folder of .txt files")
    options = dict(reading)
    corpus = load_corpus(path, text_column=str(options["text-column"]), label_column=str(options["label-column"]),
                         date_column=str(options["date-column"]), preprocess_config=preprocess_config(options))
    curated = corpus.split is not None  # an OCTIS folder: its vocabulary.txt and its split
    return ensure_split(corpus, seed=seed, ratios=split_ratios(heldout)), curated


@lru_cache(maxsize=4)
def _read_through_cache(path: str, reading: tuple[tuple[str, Any], ...], seed: int, heldout: float, folder: str
                        ) -> tuple[Corpus, bool]:
    """:func:`_read`'s corpus and split, from the party's own corpus cache in ``folder``: built there at the
    first message, memory-mapped by every later process (read in memory, after one line, when the folder
    cannot be written)."""
    if not path_exists(path):
        raise UserInputError(f"dataset {shown(path, 200)} does not exist; pass the path of an OCTIS folder, .jsonl, "
                             ".csv or folder of .txt files")
    cached = cached_corpus(path, dict(reading), folder=folder)
    if cached is None:
        return _read(path, reading, seed, heldout)
    split = ensure_split(cached.skeleton(), seed=seed, ratios=split_ratios(heldout)).split
    return cached.corpus(split=split), cached.curated


def split_ratios(heldout: float) -> tuple[float, float, float]:
    """Train/val/test fractions for a held-out fraction: val (trained on, like train) is 0.1 where it fits."""
    val = min(0.1, 1.0 - heldout)
    return (1.0 - heldout - val, val, heldout)
