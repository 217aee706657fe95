"""Wire protocol of ``lda``: AD-LDA (approximate distributed LDA, Newman et al. 2009), no privacy.

Server to party: the global topic-word counts ``n_kw`` (``K x V``, entries in ``[0, 2^31)``)
under :data:`COUNTS_KEY`, and :class:`LDASettings` plus ``last-applied-round``. Party to server:
the change of its own counts (``K x V``, entries of magnitude below ``2^31``) under
:data:`DELTA_KEY`, and ``num-tokens``.

Both matrices travel in the form of :mod:`flower_topics.wire.counts`: the arrays
``<key>.gaps`` and ``<key>.values``, dense in the smallest integer dtype that holds the matrix
(uint8/uint16/uint32 for counts, int8/int16/int32 for a change) or sparse (the nonzero cells
only, gap-coded), whichever is smaller. On debian_large (5 parties, K=100) that takes a
round's traffic from 12.7 MB per party each way (dense int32) to what docs/lda.md reports.

Under secure aggregation (``secure-aggregation=true``) the reply is the dense ``K x V`` change
under :data:`DELTA_KEY`, masked as one uint32 vector (:mod:`flower_topics.secure_sum`): a
sparse masked reply would show which cells changed. The server's counts are the same for
every party and travel in the smaller form either way.

Guided topics (run-config ``seed-words``, :mod:`flower_topics.models.seed_words`): the server
reads the public file and sends the seed pairs with the settings, as :data:`SEED_TOPICS_KEY`
and :data:`SEED_WORDS_KEY` (the topic and the column of each pair) and ``seed-weight``; every
party samples with that prior. A run without seeds sends neither.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
from flwr.app import ArrayRecord

from flower_topics.models.seed_words import SeedPrior
from flower_topics.options import Option, at_least
from flower_topics.wire import counts as wire_counts
from flower_topics.wire.protocol import ArraySpec, ReplySpec

METHOD = "lda"
#: Its reply is an integer count change that the server only adds: it can go through secure aggregation exactly.
SECURE_SUM = True
COUNTS_KEY = "topic-word-counts"
DELTA_KEY = "topic-word-delta"
#: Largest global count and largest magnitude of a change entry (the samplers count in int32).
COUNT_LIMIT = int(np.iinfo(np.int32).max)
#: Settings keys of the seed pairs (guided topics): the topic and the vocabulary column of each.
SEED_TOPICS_KEY = "seed-topic-ids"
SEED_WORDS_KEY = "seed-word-ids"

#: The options of ``lda`` (run-config keys ``lda.<name>``).
OPTIONS: Mapping[str, Option] = {
    "local-sweeps": Option(1, "collapsed Gibbs sweeps over its tokens a party runs per round", at_least(1)),
}


@dataclass(frozen=True)
class LDASettings:
    """What the server tells every party about an ``lda`` round.

    Parameters
    ----------
    n_topics : int
        K.
    alpha, beta : float
        Symmetric document-topic and topic-word Dirichlet priors.
    local_sweeps : int
        Gibbs sweeps per round.
    secure : bool
        Secure aggregation: a party's reply is its dense change, masked (no sparse form).
    seed_topics, seed_words : tuple of int
        The seed pairs of guided topics (topic, vocabulary column); empty without seeds.
    seed_weight : float
        What a seed word adds to ``beta`` in its topic (used only with seed pairs).
    """

    n_topics: int
    alpha: float
    beta: float
    local_sweeps: int = 1
    secure: bool = False
    seed_topics: tuple[int, ...] = ()
    seed_words: tuple[int, ...] = ()
    seed_weight: float = 0.0

    def __post_init__(self) -> None:
        if self.n_topics < 1:
            raise ValueError("n_topics must be >= 1")
        if self.alpha <= 0 or self.beta <= 0:
            raise ValueError("alpha and beta must be > 0")
        if self.local_sweeps < 1:
            raise ValueError("local_sweeps must be >= 1")
        if len(self.seed_topics) != len(self.seed_words):
            raise ValueError("seed_topics and seed_words must have one entry per seed pair")
        if self.seed_topics and not 0 < self.seed_weight < float("inf"):
            raise ValueError("seed_weight must be > 0 and finite")

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "LDASettings":
        """Settings from a run config (no seed pairs: :meth:`with_seeds` adds them) or a round's ConfigRecord."""
        seeded = SEED_TOPICS_KEY in record
        return cls(n_topics=int(record["num-topics"]), alpha=float(record["alpha"]), beta=float(record["beta"]),
                   local_sweeps=int(record["lda.local-sweeps"]),
                   secure=bool(record.get("secure-aggregation", False)),
                   seed_topics=tuple(int(k) for k in record[SEED_TOPICS_KEY]) if seeded else (),
                   seed_words=tuple(int(w) for w in record[SEED_WORDS_KEY]) if seeded else (),
                   seed_weight=float(record["seed-weight"]) if seeded else 0.0)

    def to_record(self) -> dict[str, Any]:
        """The settings as ConfigRecord entries (inverse of :meth:`from_record`)."""
        record = {"num-topics": self.n_topics, "alpha": self.alpha, "beta": self.beta,
                  "lda.local-sweeps": self.local_sweeps, "secure-aggregation": self.secure}
        if self.seed_topics:
            record.update({SEED_TOPICS_KEY: list(self.seed_topics), SEED_WORDS_KEY: list(self.seed_words),
                           "seed-weight": self.seed_weight})
        return record

    def with_seeds(self, seeds: SeedPrior | None) -> "LDASettings":
        """These settings with the seed pairs of ``seeds`` (None: without any)."""
        if seeds is None:
            return dataclasses.replace(self, seed_topics=(), seed_words=(), seed_weight=0.0)
        return dataclasses.replace(self, seed_topics=tuple(seeds.topics.tolist()),
                                   seed_words=tuple(seeds.words.tolist()), seed_weight=seeds.weight)

    def seed_prior(self, vocab_size: int) -> SeedPrior | None:
        """The seed prior over ``vocab_size`` words, or None without seed pairs.

        Raises
        ------
        ValueError
            When a pair lies outside K topics and ``vocab_size`` words, or is listed twice.
        """
        if not self.seed_topics:
            return None
        return SeedPrior(np.array(self.seed_topics, dtype=np.int32), np.array(self.seed_words, dtype=np.int32),
                         self.seed_weight, self.n_topics, vocab_size)


#: The settings class (what every party of a round receives).
SETTINGS = LDASettings


def reply_spec(settings: LDASettings, vocab_size: int) -> ReplySpec:
    """A valid reply: a ``K x V`` integer count change in a form of :mod:`~flower_topics.wire.counts` (under
    secure aggregation: dense, under :data:`DELTA_KEY`, to be masked) and the party's token count.

    The spec checks what it can (keys, integer 1-D arrays, the size of the largest int32 dense
    form); :func:`decode_delta` checks the rest.
    """
    shape = (settings.n_topics, vocab_size)
    if settings.secure:
        return ReplySpec(METHOD, {DELTA_KEY: ArraySpec("integer", shape, what="topic-word count change")},
                         metrics=("num-tokens",), max_bytes=8 * shape[0] * shape[1] + (1 << 16))
    return ReplySpec(METHOD, wire_counts.array_specs(DELTA_KEY, "topic-word count change"), metrics=("num-tokens",),
                     max_bytes=wire_counts.max_bytes(shape, np.dtype(np.int32).itemsize) + (1 << 16))


def counts_arrays(counts: np.ndarray) -> ArrayRecord:
    """The global counts as the server sends them (:mod:`~flower_topics.wire.counts`, under :data:`COUNTS_KEY`)."""
    return wire_counts.encode_record(counts, COUNTS_KEY)


def decode_counts(record: ArrayRecord, settings: LDASettings, vocab_size: int, *, out: np.ndarray | None = None,
                  word_major: bool = False) -> np.ndarray:
    """The ``K x V`` int32 global counts of a server message (a party's side), or with ``word_major`` their
    ``V x K`` transpose (what the sampler sweeps), written into ``out`` when given
    (:func:`~flower_topics.wire.counts.decode`); a malformed or out-of-range matrix raises
    :class:`~flower_topics.wire.protocol.ReplyError`."""
    return wire_counts.decode_record(record, COUNTS_KEY, (settings.n_topics, vocab_size), dtype=np.int32,
                                     minimum=0, maximum=COUNT_LIMIT, what="global topic-word counts", out=out,
                                     transposed=word_major)


def delta_arrays(delta: np.ndarray, settings: LDASettings) -> dict[str, np.ndarray]:
    """A party's count change as it sends it: dense under :data:`DELTA_KEY` under secure aggregation,
    otherwise the smaller form of :mod:`~flower_topics.wire.counts`."""
    if settings.secure:
        return {DELTA_KEY: delta}
    return wire_counts.encode_arrays(delta, DELTA_KEY)


#: What a party's count change may hold (both decoders of a change check it).
_DELTA_BOUNDS = dict(dtype=np.int64, minimum=-COUNT_LIMIT, maximum=COUNT_LIMIT, what="topic-word count change")


def decode_delta_entries(arrays: dict[str, np.ndarray], settings: LDASettings, vocab_size: int
                         ) -> tuple[np.ndarray, np.ndarray]:
    """The changed cells of a validated reply without secure aggregation: flat row-major indices into the
    ``K x V`` counts and int64 changes (:func:`~flower_topics.wire.counts.decode_entries`; the checks and errors of
    :func:`decode_delta`)."""
    if settings.secure:
        raise ValueError("a secure sum's change is dense: use decode_delta")
    return wire_counts.decode_arrays_entries(arrays, DELTA_KEY, (settings.n_topics, vocab_size), **_DELTA_BOUNDS)


def decode_delta(arrays: dict[str, np.ndarray], settings: LDASettings, vocab_size: int) -> np.ndarray:
    """The ``K x V`` int64 count change of a validated reply (the server's side; dense under secure
    aggregation, where it is the unmasked sum); a malformed one raises
    :class:`~flower_topics.wire.protocol.ReplyError`."""
    shape = (settings.n_topics, vocab_size)
    if settings.secure:
        return np.asarray(arrays[DELTA_KEY], dtype=np.int64)
    return wire_counts.decode_arrays(arrays, DELTA_KEY, shape, **_DELTA_BOUNDS)
