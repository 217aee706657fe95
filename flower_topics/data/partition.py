"""Split a corpus' documents among the nodes of a federation.

Every node computes the same partitions from the same corpus, scheme and seed, so no
document or index ever has to be sent. Schemes:

- ``iid``: a random, equal-ish split.
- ``label``: one label, or one group of labels, per partition (natural non-IID split).
- ``dirichlet``: label skew, each label's documents spread over the partitions with
  proportions drawn from Dirichlet(alpha) (flwr-datasets' ``DirichletPartitioner``).
- ``sizes``: random partitions of explicit sizes, document counts or ratios.
"""

from __future__ import annotations

import logging
import re
import warnings
from typing import Sequence

import numpy as np

from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError

SCHEMES = ("iid", "label", "dirichlet", "sizes")

logger = logging.getLogger("flower_topics")


def partition_documents(
    corpus: Corpus,
    num_partitions: int,
    scheme: str,
    seed: int,
    *,
    dirichlet_alpha: float = 0.5,
    sizes: Sequence[float] | None = None,
    label_groups: Sequence[Sequence[str]] | None = None,
    min_partition_size: int = 1,
) -> list[np.ndarray]:
    """Indices of the documents of each partition.

    Parameters
    ----------
    corpus : Corpus
        The documents to split (usually the training documents).
    num_partitions : int
        Number of partitions, in ``[1, corpus.n_docs]``.
    scheme : str
        ``"iid"``, ``"label"``, ``"dirichlet"`` or ``"sizes"``.
    seed : int
        Seed of every random choice; the same seed gives the same partitions.
    dirichlet_alpha : float
        Concentration of the Dirichlet label skew (``"dirichlet"``); smaller is more skewed.
    sizes : sequence of float, optional
        Partition sizes (``"sizes"``, one per partition). If every value is a whole
        number they are document counts (summing to at most ``corpus.n_docs``; the
        remaining documents belong to no partition); otherwise they are fractions of
        the documents and must sum to 1.
    label_groups : sequence of sequence of str, optional
        For ``"label"``: the labels of each partition (one group per partition, no
        label in two groups). Documents whose label is in no group belong to no
        partition. Without groups the sorted labels are dealt round-robin; when there
        are more partitions than labels, the partitions sharing a label split its
        documents evenly at random.
    min_partition_size : int
        Fewest documents a partition may have. ``"dirichlet"`` redraws the proportions
        (a bounded number of times) until it holds.

    Returns
    -------
    list of np.ndarray
        For each partition, the sorted ``int64`` indices of its documents into ``corpus``;
        partitions are disjoint.

    Raises
    ------
    UserInputError
        On a bad number of partitions, an unknown scheme, a label scheme on a corpus
        without labels, bad sizes or label groups, or a partition that would be too small.
    """
    n_docs = corpus.n_docs
    whole = isinstance(num_partitions, (int, np.integer)) and not isinstance(num_partitions, bool)
    if not whole or not 1 <= num_partitions <= n_docs:
        raise UserInputError(
            f"num-partitions {num_partitions!r} is invalid; use a whole number from 1 to the {n_docs} documents"
        )
    if scheme not in SCHEMES:
        raise UserInputError(f"partition scheme {scheme!r} is unknown; use one of {', '.join(SCHEMES)}")
    if seed < 0:
        raise UserInputError(f"seed {seed} is negative; use a seed >= 0")
    if min_partition_size < 1:
        raise UserInputError(f"min-partition-size {min_partition_size} is invalid; use a document count >= 1")
    if scheme in ("label", "dirichlet") and corpus.labels is None:
        raise UserInputError(
            f"partition scheme {scheme!r} needs document labels but the corpus has none; use 'iid' or 'sizes', "
            "or a corpus with a label column"
        )
    # iid, sizes and label are written with numpy: they are a permutation and a split.
    # flwr-datasets' IidPartitioner and SizePartitioner cut contiguous, unshuffled ranges
    # of a Hugging Face Dataset (so they would need a shuffled copy and a multi-second
    # import to do what np.split does), and none of its partitioners deals labels
    # round-robin or splits one label among several partitions.
    # A random stream of its own, so that partitions do not echo the train/test split
    # that ensure_split draws from the same seed.
    rng = np.random.default_rng([seed, 1])
    if scheme == "iid":
        parts = np.array_split(rng.permutation(n_docs), num_partitions)
    elif scheme == "sizes":
        counts = _partition_counts(sizes, num_partitions, n_docs)
        parts = np.split(rng.permutation(n_docs)[: sum(counts)], np.cumsum(counts)[:-1])
    elif scheme == "label":
        labels = np.asarray(corpus.labels)
        if label_groups is None:
            parts = _deal_labels(labels, num_partitions, rng)
        else:
            parts = _group_labels(labels, num_partitions, label_groups)
    else:
        parts = _dirichlet(np.asarray(corpus.labels), num_partitions, dirichlet_alpha, min_partition_size, seed)
    result = [np.sort(np.asarray(p, dtype=np.int64)) for p in parts]
    for p, part in enumerate(result):
        if part.size < min_partition_size:
            raise UserInputError(
                f"partition {p} of scheme {scheme!r} would get {part.size} documents, fewer than {min_partition_size}; "
                "use fewer partitions or change the partition settings"
            )
    return result


def parse_sizes(text: str) -> list[float]:
    """Parse partition sizes from a config string.

    Parameters
    ----------
    text : str
        Numbers separated by ``,`` or ``:`` (spaces allowed): counts such as
        ``"85,165,252"`` or ``"85:165:252"``, or ratios such as ``"0.2,0.3,0.5"``.

    Returns
    -------
    list of float
        The numbers, in order (see :func:`partition_documents` for their meaning).
    """
    pieces = [piece.strip() for piece in re.split(r"[,:]", text)]
    try:
        values = [float(piece) for piece in pieces]
    except ValueError:
        raise UserInputError(
            f"partition sizes {text!r} are not numbers; write counts like '85,165,252' or ratios like '0.2,0.3,0.5'"
        ) from None
    if not all(np.isfinite(v) and v > 0 for v in values):
        raise UserInputError(
            f"partition sizes {text!r} must all be positive numbers, e.g. '85,165,252' or '0.2,0.3,0.5'"
        )
    return values


def _partition_counts(sizes: Sequence[float] | None, num_partitions: int, n_docs: int) -> list[int]:
    """Document counts of the ``"sizes"`` scheme (see :func:`partition_documents`)."""
    hint = "pass document counts like '85,165,252' or ratios summing to 1 like '0.2,0.3,0.5'"
    if sizes is None or len(sizes) == 0:
        raise UserInputError(f"partition scheme 'sizes' needs partition sizes; {hint}")
    if len(sizes) != num_partitions:
        raise UserInputError(
            f"{len(sizes)} partition sizes given for {num_partitions} partitions; give one size per partition"
        )
    values = np.asarray(sizes, dtype=np.float64)
    if not np.all(np.isfinite(values)) or np.any(values <= 0):
        raise UserInputError(f"partition sizes {list(sizes)} must all be positive; {hint}")
    if np.all(values == np.round(values)):
        counts = values.astype(np.int64)
        if counts.sum() > n_docs:
            raise UserInputError(
                f"partition sizes {counts.tolist()} add up to {counts.sum()} documents but there are only {n_docs}; "
                "lower the counts or give ratios"
            )
        return counts.tolist()
    if abs(values.sum() - 1) > 1e-6:
        raise UserInputError(
            f"partition sizes {list(sizes)} are neither whole document counts nor ratios summing to 1; {hint}"
        )
    # Largest remainder: floor every share, then give the leftover documents to the
    # largest fractional parts, so the counts add up to exactly n_docs.
    shares = values / values.sum() * n_docs
    counts = np.floor(shares).astype(np.int64)
    leftover = n_docs - int(counts.sum())
    counts[np.argsort(-(shares - counts), kind="stable")[:leftover]] += 1
    return counts.tolist()


def _deal_labels(labels: np.ndarray, num_partitions: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Sorted labels dealt round-robin; a label shared by partitions is split evenly at random."""
    distinct = sorted(set(labels.tolist()))
    parts: list[np.ndarray] = [np.zeros(0, dtype=np.int64)] * num_partitions
    for i, label in enumerate(distinct):
        # partition p gets label p % len(distinct): with more partitions than labels, several share one
        owners = list(range(i % num_partitions, num_partitions, len(distinct)))
        docs = np.flatnonzero(labels == label)
        if len(owners) > 1:
            if docs.size < len(owners):
                raise UserInputError(
                    f"label {label!r} has {docs.size} documents but {len(owners)} partitions share it; "
                    f"use at most {len(distinct)} partitions or a label-rich corpus"
                )
            docs = rng.permutation(docs)
        for owner, share in zip(owners, np.array_split(docs, len(owners))):
            parts[owner] = np.concatenate([parts[owner], share])
    return parts


def _group_labels(labels: np.ndarray, num_partitions: int, label_groups: Sequence[Sequence[str]]) -> list[np.ndarray]:
    """Partition ``p`` gets the documents whose label is in ``label_groups[p]``."""
    if len(label_groups) != num_partitions:
        raise UserInputError(
            f"{len(label_groups)} label groups given for {num_partitions} partitions; give one group per partition"
        )
    known = set(labels.tolist())
    seen: set[str] = set()
    parts = []
    for p, group in enumerate(label_groups):
        group_labels = [str(label).strip() for label in group]
        if not group_labels or not all(group_labels):
            raise UserInputError(
                f"label group {p} is empty or has an empty label; give every partition at least one label"
            )
        unknown = sorted(set(group_labels) - known)
        if unknown:
            raise UserInputError(f"label group {p} names unknown labels {unknown}; the corpus has {sorted(known)}")
        shared = sorted(seen & set(group_labels))
        if shared:
            raise UserInputError(
                f"labels {shared} appear in more than one label group; give each label to one partition"
            )
        seen.update(group_labels)
        parts.append(np.flatnonzero(np.isin(labels, group_labels)))
    left_out = int(labels.size - sum(p.size for p in parts))
    if left_out:
        logger.info("label groups leave out %d documents with labels %s", left_out, sorted(known - seen))
    return parts


def _dirichlet(
    labels: np.ndarray, num_partitions: int, alpha: float, min_partition_size: int, seed: int
) -> list[np.ndarray]:
    """Dirichlet label skew through flwr-datasets' ``DirichletPartitioner``.

    The partitioner draws, for each label in sorted order, the proportions of its
    documents per partition from a generator seeded with ``seed``, and redraws up to
    10 times while a partition is below ``min_partition_size``; its result is therefore
    deterministic. Its ``self_balancing`` and ``shuffle`` options are off: the former
    would bias the proportions away from Dirichlet(alpha), the latter only reorders.
    """
    if not np.isfinite(alpha) or alpha <= 0:
        raise UserInputError(
            f"dirichlet-alpha {alpha!r} is invalid; use a positive number (small = more skewed, e.g. 0.5)"
        )
    import datasets  # deferred: importing flwr-datasets takes seconds
    from flwr_datasets.partitioner import DirichletPartitioner

    partitioner = DirichletPartitioner(
        num_partitions=num_partitions,
        partition_by="label",
        alpha=float(alpha),
        min_partition_size=min_partition_size,
        self_balancing=False,
        shuffle=False,
        seed=seed,
    )
    partitioner.dataset = datasets.Dataset.from_dict(
        {"label": [str(x) for x in labels], "index": np.arange(labels.size, dtype=np.int64)}
    )
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # one warning per redraw
            return [
                np.asarray(partitioner.load_partition(p).select_columns("index").to_dict()["index"], dtype=np.int64)
                for p in range(num_partitions)
            ]
    except ValueError:
        raise UserInputError(
            f"dirichlet partitioning could not give each of {num_partitions} partitions at least {min_partition_size} "
            f"documents with dirichlet-alpha={alpha}; raise dirichlet-alpha or use fewer partitions"
        ) from None
