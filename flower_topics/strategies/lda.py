"""Server side of ``lda``: AD-LDA (Newman, Asuncion, Smyth and Welling, JMLR 2009), no privacy.

The global model is the ``K x V`` topic-word count matrix ``n_kw``
(:data:`~flower_topics.wire.lda.COUNTS_KEY`). Each party replies with the change of its
own counts (:data:`~flower_topics.wire.lda.DELTA_KEY`); the strategy adds the valid ones:

    n_kw <- n_kw + sum_c delta_c

and rejects a change that would make a global count negative (or above int32's range). phi =
(n_kw + beta) / (n_k + V beta) is derived on demand.

Guided topics (run-config ``seed-words``): the strategy reads the public file, drops the seed
words outside the agreed vocabulary (one log line names them) and sends the seed pairs with the
settings; parties sample with the prior ``beta_kw`` and phi = (n_kw + beta_kw) / (n_k + B_k)
(:mod:`flower_topics.models.seed_words`).

On the wire (:mod:`flower_topics.wire.lda`, :mod:`flower_topics.wire.counts`) both the counts the
server sends and each party's change travel dense in the smallest integer dtype or sparse,
whichever is smaller; the strategy keeps the global counts dense (int32) in its ArrayRecord
and encodes them once a round (:meth:`ADLDA.node_arrays`).

Secure aggregation (``secure-aggregation=true``, :mod:`flower_topics.secure_sum`): each party's
change is masked and the server adds only their sum, which must keep every count
non-negative (otherwise the round is held; it cannot be traced to a party). The changes are
integers, so the sum is exact; an entry's magnitude is at most the party's count of its word,
which the party checks against the range before it sends (:mod:`flower_topics.clients.lda`).

A missing party's contribution: its last applied counts stay in ``n_kw``; the party
learns from ``last-applied-round`` that its reply was not applied, rolls its topic
assignments back to the applied ones and sends the change again, so its tokens are
neither lost nor counted twice. A party whose SuperNode restarted rejoins with the state
it kept in its ``state-dir`` (:mod:`flower_topics.federation.party_state`) under the same node id; one
that lost its state and sends its whole counts again, while the server holds its earlier
ones, is rejected (its earlier tokens stay in ``n_kw``, counted once).

Resume (:mod:`flower_topics.run.checkpoint`). Parties that kept their ``context.state`` send
changes that sum to zero, and the run continues exactly. A party that restarted without it
(every party of a new Flower run) sends its whole counts again (a change summing to its
``num-tokens``); the first such reply after a resume turns the checkpointed counts into
:class:`~flower_topics.strategies.restored_counts.RestoredCounts`, retired as the parties re-enter their
tokens, so that none is counted twice.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
from flwr.app import Array, ArrayRecord

from flower_topics.strategies.restored_counts import RestoredCounts
from flower_topics.errors import UserInputError
from flower_topics.models.lda import topic_word_distribution
from flower_topics.models.seed_words import config_seed_prior
from flower_topics.privacy.privacy_report import PrivacyReport
from flower_topics.strategies.base import Reply, TopicStrategy
from flower_topics.wire import lda as wire
from flower_topics.wire.protocol import ReplyError, ReplySpec


def counts_record(counts: np.ndarray) -> ArrayRecord:
    """Wrap a ``K x V`` count matrix as the ArrayRecord the strategy exchanges."""
    return ArrayRecord({wire.COUNTS_KEY: Array(np.ascontiguousarray(counts, dtype=np.int32))})


def _check_counts(counts: np.ndarray) -> None:
    """Global counts after a change must stay in ``[0, 2^31)`` (the parties sample with int32 counts)."""
    if counts.min() < 0:
        raise ReplyError("the count change would make global counts negative")
    if counts.max() > wire.COUNT_LIMIT:
        raise ReplyError(f"the count change would take a global count above {wire.COUNT_LIMIT}")



class ReplyKind(enum.Enum):
    """After a resume, what a reply's change is summed into (:meth:`ADLDA.check_reply`)."""

    #: A party that re-entered its tokens since the resume: the change moves its own counts.
    OWN = "own"
    #: A party that restarted without its state, sending its whole counts again: they enter its own counts.
    ENTRY = "entry"
    #: A party that kept its state: the change moves tokens of the restored (checkpointed) counts.
    KEPT = "kept"


@dataclass
class ResumedRound:
    """One round's sums after a resume, kept while its replies pass and applied by :meth:`ADLDA.aggregate`.

    Parameters
    ----------
    restored : np.ndarray
        The restored counts with every ``kept`` change so far.
    own : np.ndarray or None
        The counts entered since the resume with every ``own`` and ``entry`` change so far (None: none yet).
    entries : list of int
        The nodes that sent their whole counts again this round.
    entered : int
        The tokens they entered.
    """

    restored: np.ndarray
    own: np.ndarray | None = None
    entries: list[int] = field(default_factory=list)
    entered: int = 0

    def own_or_zero(self) -> np.ndarray:
        """The own counts, all zero when nothing was entered yet."""
        return self.own if self.own is not None else np.zeros_like(self.restored)

class ADLDA(TopicStrategy):
    """AD-LDA: federated collapsed Gibbs sampling that sums the parties' count changes.

    Parameters
    ----------
    vocabulary : sequence of str
        The words, in column order (V = its length).
    settings : LDASettings
        K, alpha, beta, the local sweeps and the seed pairs of guided topics (if any), sent to every party.
    **federation : Any
        ``fraction_train``, ``min_nodes``, ``min_replies``, ``seed`` of :class:`TopicStrategy`.
    """

    method = wire.METHOD
    evaluation_with_train = True  # scoring in the training handler leaves its local step as it was

    def __init__(self, vocabulary: Sequence[str], settings: wire.LDASettings, **federation: Any) -> None:
        super().__init__(vocabulary, **federation)
        self.lda = dataclasses.replace(settings, secure=self.secure is not None)  # what the parties send follows it
        self.seeds = settings.seed_prior(self.vocab_size)
        self._sent_counts: tuple[int, ArrayRecord, ArrayRecord] | None = None
        self._round_sum: tuple[int, np.ndarray] | None = None
        # resume (flower_topics.run.checkpoint): restored counts while restarted parties re-enter their tokens
        self.restored: RestoredCounts | None = None
        self.entered_nodes: set[int] = set()
        self._own: np.ndarray | None = None
        self._resumed = False
        self._known_nodes: set[int] = set()
        self._round_parts: ResumedRound | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any], vocabulary: Sequence[str]) -> "ADLDA":
        """The strategy of a validated run config; with ``seed-words``, its seeds over ``vocabulary``.

        Raises
        ------
        UserInputError
            One line when the seed-words file is missing, unreadable or empty, seeds more topics than
            ``num-topics``, or holds no word of the vocabulary.
        """
        settings = wire.LDASettings.from_record(config).with_seeds(config_seed_prior(config, vocabulary))
        return cls(vocabulary, settings, **cls.federation_options(config))

    def initial_arrays(self) -> ArrayRecord:
        """All-zero global counts: parties add their own on their first update."""
        return counts_record(np.zeros((self.lda.n_topics, self.vocab_size), dtype=np.int32))

    def topic_word(self, arrays: ArrayRecord) -> np.ndarray:
        """phi = (n_kw + beta_kw) / (n_k + B_k) of the global counts (``beta_kw = beta`` without seed words)."""
        return topic_word_distribution(arrays[wire.COUNTS_KEY].numpy(), self.lda.beta, self.seeds)

    def evaluation_counts(self, arrays: ArrayRecord) -> tuple[np.ndarray, float] | None:
        """The global counts and beta: :meth:`topic_word` is computed from them, so evaluation sends them (the
        nonzero cells, not ``8 K V`` bytes). With seed words the prior is not one number: None (the matrix)."""
        if self.seeds is not None:
            return None
        return arrays[wire.COUNTS_KEY].numpy(), self.lda.beta

    def privacy_report(self) -> PrivacyReport:
        """No mechanism (the base's report); with seed words, it says that they are public and cost nothing."""
        report = super().privacy_report()
        if self.seeds is None:
            return report
        return dataclasses.replace(report, details={**report.details, "seed_words": self.seeds.privacy_note()})

    def train_config(self) -> dict[str, Any]:
        """K, alpha, beta and the local sweeps."""
        return self.lda.to_record()

    def reply_spec(self) -> ReplySpec:
        """An integer ``K x V`` count change (dense or sparse; dense under secure aggregation) and ``num-tokens``."""
        return wire.reply_spec(self.lda, self.vocab_size)

    def node_arrays(self, server_round: int, node_id: int, arrays: ArrayRecord) -> ArrayRecord:
        """The global counts in their smaller wire form (:func:`~flower_topics.wire.lda.counts_arrays`), encoded
        once a round."""
        if self._sent_counts is None or self._sent_counts[0] != server_round or self._sent_counts[1] is not arrays:
            self._sent_counts = (server_round, arrays, wire.counts_arrays(arrays[wire.COUNTS_KEY].numpy()))
        return ArrayRecord(dict(self._sent_counts[2].items()))

    def _delta(self, reply: Reply) -> np.ndarray:
        """The reply's ``K x V`` int64 change, decoded from its wire form (ReplyError when malformed)."""
        return wire.decode_delta(reply.arrays, self.lda, self.vocab_size)

    def check_reply(self, server_round: int, reply: Reply) -> None:
        """A change may not make a global count negative; valid changes are summed as they pass.

        After a resume the change is summed into the counts it belongs to (:meth:`_kind`).
        """
        if self._round_sum is None or self._round_sum[0] != server_round:
            self._round_sum = (server_round, self._current[wire.COUNTS_KEY].numpy().astype(np.int64))
            if self._resumed:
                self._round_parts = ResumedRound(
                    restored=(self._round_sum[1].copy() if self.restored is None
                              else self.restored.restored.astype(np.int64)),
                    own=self._own.copy() if self._own is not None else None)
        if not self._resumed and self.secure is None:  # the common case: add the changed cells only
            index, change = wire.decode_delta_entries(reply.arrays, self.lda, self.vocab_size)
            self._refuse_a_restart(reply, int(change.sum()))
            flat = self._round_sum[1].reshape(-1)
            updated = flat[index] + change
            if updated.size:
                _check_counts(updated)  # the other cells keep their valid counts
            flat[index] = updated  # only once the whole change is valid
            return
        delta = self._delta(reply)
        if not self._resumed:
            self._refuse_a_restart(reply, int(delta.sum()))
            counts = self._round_sum[1] + delta
            _check_counts(counts)
            self._round_sum = (server_round, counts)
            return
        kind = self._kind(reply, delta)
        parts = self._round_parts
        counts = (parts.restored if kind is ReplyKind.KEPT else parts.own_or_zero()) + delta
        _check_counts(counts)
        if kind is ReplyKind.KEPT:
            parts.restored = counts
        else:
            parts.own = counts
            if kind is ReplyKind.ENTRY:
                parts.entries.append(reply.node_id)
                parts.entered += int(reply.metrics["num-tokens"])

    def _refuse_a_restart(self, reply: Reply, total_change: int) -> None:
        """A party that the server applied before and whose change adds exactly its token count sent its whole
        counts again (it restarted without its state): refused, so that no token is counted twice."""
        tokens = int(reply.metrics.get("num-tokens", 0))
        if self.last_applied.get(reply.node_id, 0) > 0 and tokens > 0 and total_change == tokens:
            raise ReplyError("the party sent its whole counts again, which the global counts already hold (it "
                             "restarted without its state): rejected, so that no token is counted twice")

    def _kind(self, reply: Reply, delta: np.ndarray) -> ReplyKind:
        """After a resume, what the reply's change is summed into (:class:`ReplyKind`)."""
        if reply.node_id in self.entered_nodes:
            return ReplyKind.OWN
        tokens = int(reply.metrics["num-tokens"])
        restarted = tokens > 0 and int(delta.sum()) == tokens and (
            self.restored is not None or reply.node_id not in self._known_nodes
            or self.last_applied.get(reply.node_id, 0) > 0)
        return ReplyKind.ENTRY if restarted else ReplyKind.KEPT

    def aggregate(self, server_round: int, arrays: ArrayRecord, replies: list[Reply]
                  ) -> tuple[ArrayRecord, dict[str, float]]:
        """The round's counts plus every valid change (summed by :meth:`check_reply`, in reply order)."""
        if self.secure is not None:  # one summed reply, no metrics: the counts' total is every applied token
            return counts_record(self._round_sum[1]), {"num-tokens": int(self._round_sum[1].sum())}
        metrics = {"num-tokens": sum(int(r.metrics["num-tokens"]) for r in replies)}
        if not self._resumed:
            return counts_record(self._round_sum[1]), metrics
        parts = self._round_parts
        if self.restored is None and not parts.entries:  # every party kept its state: exact continuation
            self._resumed = False
            return counts_record(parts.restored), metrics
        if self.restored is None:
            self.restored = RestoredCounts(parts.restored, int(self._current[wire.COUNTS_KEY].numpy().sum()))
        else:
            self.restored.restored = parts.restored
        self.restored.entered += parts.entered
        self.entered_nodes.update(parts.entries)
        self._own = parts.own_or_zero()
        counts = self.restored.mix(self._own)
        metrics["restored-share"] = self.restored.remaining
        if self.restored.remaining <= 0:  # every restored token is back: plain AD-LDA from here
            self.restored, self._own, self._resumed = None, None, False
            self.entered_nodes.clear()
        return counts_record(counts), metrics

    # ------------------------------------------------------------ checkpoint
    def checkpoint_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The restored counts of a resume in progress (nothing otherwise: the counts are the global arrays)."""
        arrays: dict[str, np.ndarray] = {}
        meta: dict[str, Any] = {"resumed": self._resumed, "entered_nodes": sorted(self.entered_nodes),
                                "known_nodes": sorted(self._known_nodes)}
        if self.restored is not None:
            restored_arrays, restored_meta = self.restored.state("lda-")
            arrays.update(restored_arrays, **{"lda-own": self._own})
            meta.update(restored_meta)
        return arrays, meta

    def load_checkpoint_state(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Restore :meth:`checkpoint_state`."""
        self._resumed = bool(meta.get("resumed", False))
        self.entered_nodes = {int(n) for n in meta.get("entered_nodes", [])}
        self._known_nodes = {int(n) for n in meta.get("known_nodes", [])}
        self.restored = RestoredCounts.from_state("lda-", arrays, meta)
        self._own = np.array(arrays["lda-own"], dtype=np.int64) if "lda-own" in arrays else None

    def on_resume(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Watch the first replies: parties that kept their state continue exactly, restarted ones re-enter.

        Refused under secure aggregation: telling a restarted party's whole counts from a kept
        party's change needs each party's reply, and the server sees only their sum.
        """
        if self.secure is not None:
            raise UserInputError("lda: a run with secure-aggregation=true cannot be resumed (the restored counts are "
                                 "retired party by party, and the server sees only the sum); start a new run")
        self._resumed = True
        self._known_nodes = set(self.last_applied) | self._known_nodes
