"""Server side of FedLDA: global integration of perturbed tuples (Wang, Tong and Shi 2020, Algorithm 2).

The strategy keeps the global topic-word counts ``n_kw`` (int64, in the
:class:`~flwr.app.ArrayRecord` under :data:`~flower_topics.wire.fedlda.COUNTS_KEY`; they never leave the
server) and sends clients only phi (:data:`~flower_topics.wire.fedlda.PHI_KEY`, float32). Each reply carries
perturbed tuples ``(w, k_old, k_new)`` (:data:`~flower_topics.wire.fedlda.TUPLES_KEY`); every valid tuple is
applied as ``n[k_old, w] -= 1; n[k_new, w] += 1`` (Algorithm 2, lines 5-7), and phi is
recomputed as ``(max(n, 0) + beta) / sum_w (max(n, 0) + beta)`` (Section 4).

Guided topics (run-config ``seed-words``, :mod:`flower_topics.models.seed_words`): the prior of
that normalization becomes ``beta_kw`` (``beta`` plus ``seed-weight`` at each seed word of its
topic), so the phi every party samples against pulls the seed words into their topics; the
parties receive nothing else. The seeds are public and the privacy report says so.

Initialization. Algorithm 2 line 1 "randomly initializes z and the counters" at the
server; in a federation only the clients know their words. The counts start at zero
(phi uniform) and a document's first round enters its words as tuples
``(w, K, k)`` ("unassigned" to topic k), padded, sampled and perturbed like every
tuple. Dummy tuples are applied like real ones (see
:mod:`flower_topics.models.update_tuples` for the two kinds); a tuple that takes a
word out of a topic that holds none of it is skipped
(:func:`~flower_topics.models.update_tuples.apply_tuples`), so counts stay >= 0.

A missing party's contribution: its pending changes are not applied; it learns from
``last-applied-round`` that its reply was not applied, rolls its server view back and
sends the changes again (perturbed afresh), so no change is lost or counted twice.

Resume (:mod:`flower_topics.run.checkpoint`): the parties of a new Flower run start without their
``context.state``, and a party that kept it cannot be told apart from the perturbed tuples,
so every party restarts its server view: the strategy tells each ``last-applied-round`` 0,
the parties enter their tokens again (``(w, K, k)``) from their samplers, and the
checkpointed counts are :class:`~flower_topics.strategies.restored_counts.RestoredCounts`, retired as the
entries arrive, so that no token is counted twice. The per-party release counters are
folded into a run-wide offset (node ids may change): a resumed run reports at least what
an uninterrupted one would.

Privacy accounting is basic composition over the l tuples of a document per round
and over rounds (Section 5) of the guarantee each tuple really has on the round's phi
(:mod:`flower_topics.privacy.realized_ldp`), with the paper's claim beside it
(:meth:`FedLDA.privacy_report`).
"""

from __future__ import annotations

import dataclasses
import math
from logging import WARNING
from typing import Any, Mapping, Sequence

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.common import log

from flower_topics.strategies.restored_counts import RestoredCounts
from flower_topics.models.seed_words import SeedPrior, config_seed_prior
from flower_topics.models.update_tuples import Tuples, apply_tuples, clamped_topic_word, public_sample_size
from flower_topics.privacy import compose, zipf_fit
from flower_topics.privacy.realized_ldp import RealizedLDP, realized_ldp
from flower_topics.privacy.privacy_report import NoDocumentGuarantee, PrivacyReport
from flower_topics.privacy.word_randomizers import round_randomizer
from flower_topics.strategies.base import Reply, TopicStrategy
from flower_topics.strategies.releases import PartyReleases
from flower_topics.wire import fedlda as wire
from flower_topics.wire.protocol import ReplySpec

ZIPF_TOP_RANKS = 200


def replacement_probability(settings: wire.FedLDASettings, phi: np.ndarray) -> float:
    """eta: the probability that the mechanism replaces a tuple's word (0 without one; see each randomizer)."""
    randomizer = round_randomizer(settings, phi)
    return 0.0 if randomizer is None else float(randomizer.eta)


def claimed_delta(settings: wire.FedLDASettings) -> float:
    """The per-tuple delta the paper states: 2 delta for RRP (Theorem 1), delta for t-kRR, 0 for the others."""
    return {"rrp": 2.0 * settings.delta, "tkrr": settings.delta}.get(settings.mechanism, 0.0)


class FedLDA(TopicStrategy):
    """FedLDA: federated LDA with locally differentially private tuple updates.

    Parameters
    ----------
    vocabulary : sequence of str
        The words, in column order (V = its length).
    settings : FedLDASettings
        K, alpha, the sampler and the mechanism, sent to every party.
    beta : float
        Symmetric topic-word prior of phi.
    seeds : SeedPrior, optional
        Seed words (guided topics): phi's prior becomes :meth:`SeedPrior.matrix` of ``beta``.
    **federation : Any
        ``fraction_train``, ``min_nodes``, ``min_replies``, ``seed`` of :class:`TopicStrategy`.
    """

    method = wire.METHOD
    evaluation_with_train = True  # scoring in the training handler leaves its local step as it was

    def __init__(self, vocabulary: Sequence[str], settings: wire.FedLDASettings, beta: float,
                 seeds: SeedPrior | None = None, **federation: Any) -> None:
        super().__init__(vocabulary, **federation)
        if self.vocab_size < 2:
            raise ValueError("FedLDA needs a vocabulary of at least 2 words")
        if beta <= 0:
            raise ValueError("beta must be > 0")
        self.fedlda = settings
        self.beta = beta
        self.seeds = seeds
        self.prior: float | np.ndarray = beta if seeds is None else seeds.matrix(beta)  # of phi
        self.releases = PartyReleases()  # and, after a resume, the worst party's count before it
        self.realized_deltas: dict[int, float] = {}
        self.last_realized: RealizedLDP | None = None
        self.max_tuples_per_doc = 0
        self.last_phi: np.ndarray | None = None
        # resume (flower_topics.run.checkpoint): the realized delta before it, and the restored counts
        self.realized_delta_before = 0.0
        self.restored: RestoredCounts | None = None
        self._own: np.ndarray | None = None

    @classmethod
    def from_config(cls, config: Mapping[str, Any], vocabulary: Sequence[str]) -> "FedLDA":
        """The strategy of a validated run config."""
        return cls(vocabulary, wire.FedLDASettings.from_record(config), beta=float(config["beta"]),
                   seeds=config_seed_prior(config, vocabulary), **cls.federation_options(config))

    # ------------------------------------------------------------ model
    def initial_arrays(self) -> ArrayRecord:
        """All-zero counts (phi uniform); see the module docstring."""
        return ArrayRecord({wire.COUNTS_KEY: Array(np.zeros((self.fedlda.n_topics, self.vocab_size), dtype=np.int64))})

    def topic_word(self, arrays: ArrayRecord) -> np.ndarray:
        """phi from the counts clamped at zero."""
        return clamped_topic_word(arrays[wire.COUNTS_KEY].numpy(), self.prior)

    def train_config(self) -> dict[str, Any]:
        """K, alpha, the sampler and the mechanism."""
        return self.fedlda.to_record()

    def reply_spec(self) -> ReplySpec:
        """Integer ``(n, 3)`` tuples in range (and the two size metrics unless M is public)."""
        return wire.reply_spec(self.fedlda, self.vocab_size)

    def summary(self) -> None:
        """Log the settings, and what own-length padding reveals."""
        super().summary()
        if self.fedlda.pad_length == 0 and self.fedlda.mechanism != "none":
            log(WARNING, "fedlda.pad-length=0: each document's l tells the server its length, and every reply "
                "carries the longest document's l (the accounting's per-round l); a public pad-length near the "
                "90th percentile of document lengths hides both at little perplexity cost (README, FedLDA)")

    # ------------------------------------------------------------ rounds
    def begin_round(self, server_round: int, arrays: ArrayRecord) -> None:
        """phi of the round's counts (what the nodes are sent), and its realized guarantee."""
        self.last_phi = clamped_topic_word(arrays[wire.COUNTS_KEY].numpy(), self.prior)
        randomizer = round_randomizer(self.fedlda, self.last_phi)
        if randomizer is not None:
            self.last_realized = realized_ldp(randomizer, self.last_phi, claimed_delta(self.fedlda))

    def released(self, server_round: int, nodes: Sequence[int]) -> None:
        """One more release, and the round's realized delta, for each of ``nodes``."""
        self.releases.add(nodes)
        if self.last_realized is not None:
            for node in nodes:
                self.realized_deltas[node] = self.realized_deltas.get(node, 0.0) + self.last_realized.delta

    @property
    def rounds_accounted(self) -> int:
        """The most rounds any one party was asked to release in (the worst party's count), plus, after a
        resume, the worst party's count before it (node ids may change)."""
        return self.releases.worst

    def node_arrays(self, server_round: int, node_id: int, arrays: ArrayRecord) -> ArrayRecord:
        """phi as float32; the counts stay on the server."""
        return ArrayRecord({wire.PHI_KEY: Array(self.last_phi.astype(np.float32))})

    def aggregate(self, server_round: int, arrays: ArrayRecord, replies: list[Reply]
                  ) -> tuple[ArrayRecord, dict[str, float]]:
        """Apply every valid reply's tuples to the counts (Algorithm 2)."""
        counts = (self._own if self.restored is not None else arrays[wire.COUNTS_KEY].numpy()).astype(np.int64)
        public_l = public_sample_size(self.fedlda.pad_length, self.fedlda.sample_ratio)
        round_l, skipped = public_l or 0, 0
        for reply in replies:
            skipped += apply_tuples(counts, Tuples.from_rows(reply.arrays[wire.TUPLES_KEY].astype(np.int64)))
            if public_l is None:
                round_l = max(round_l, int(reply.metrics["max-tuples-per-document"]))
        self.max_tuples_per_doc = max(self.max_tuples_per_doc, round_l)
        n_tuples = sum(r.arrays[wire.TUPLES_KEY].shape[0] for r in replies)
        metrics = {"num-tuples": n_tuples, "tuples-skipped": skipped,
                   "num-documents": (n_tuples // public_l if public_l else
                                     sum(int(r.metrics["num-documents"]) for r in replies))}
        if self.restored is not None:  # a resume in progress: the entries re-enter the restored tokens
            self._own = counts
            self.restored.entered += sum(int(np.sum(r.arrays[wire.TUPLES_KEY][:, 1] == self.fedlda.n_topics))
                                        for r in replies)
            metrics["restored-share"] = self.restored.remaining
            counts = self.restored.mix(counts)
            if self.restored.remaining <= 0:
                self.restored, self._own = None, None
        self.last_phi = clamped_topic_word(counts, self.prior)
        return ArrayRecord({wire.COUNTS_KEY: Array(counts)}), metrics

    # ------------------------------------------------------------ checkpoint
    def checkpoint_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Releases per party, realized deltas, the largest l, the last realized guarantee, restored counts."""
        arrays: dict[str, np.ndarray] = {}
        meta: dict[str, Any] = {
            **self.releases.state(),
            "realized_deltas": {str(n): d for n, d in self.realized_deltas.items()},
            "max_tuples_per_doc": self.max_tuples_per_doc,
            "realized_delta_before": self.realized_delta_before,
            "last_realized": None if self.last_realized is None else dataclasses.asdict(self.last_realized)}
        if self.last_phi is not None:
            arrays["fedlda-last-phi"] = self.last_phi
        if self.restored is not None:
            restored_arrays, restored_meta = self.restored.state("fedlda-")
            arrays.update(restored_arrays)
            arrays["fedlda-own"] = self._own
            meta.update(restored_meta)
        return arrays, meta

    def load_checkpoint_state(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Restore :meth:`checkpoint_state`."""
        self.releases = PartyReleases.from_state(meta)
        self.realized_deltas = {int(n): float(d) for n, d in meta["realized_deltas"].items()}
        self.max_tuples_per_doc = int(meta["max_tuples_per_doc"])
        self.realized_delta_before = float(meta["realized_delta_before"])
        self.last_realized = None if meta["last_realized"] is None else RealizedLDP(**meta["last_realized"])
        self.last_phi = np.array(arrays["fedlda-last-phi"]) if "fedlda-last-phi" in arrays else None
        self.restored = RestoredCounts.from_state("fedlda-", arrays, meta)
        self._own = np.array(arrays["fedlda-own"], dtype=np.int64) if "fedlda-own" in arrays else None

    def release_details(self) -> dict[str, Any]:
        """What ``checkpoint-release.json`` records of a round besides its nodes: the round's realized delta."""
        return {"realized_delta": 0.0 if self.last_realized is None else float(self.last_realized.delta)}

    def lost_release(self, release: Mapping[str, Any]) -> None:
        """A round released and lost to a crash: one more release, and its realized delta, for every party."""
        self.releases.lost()
        self.realized_delta_before += float(release.get("realized_delta", 0.0))

    def on_resume(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Fold the per-party counters into the offsets, and keep the restored counts while every party re-enters."""
        self.releases.fold()
        self.realized_delta_before += max(self.realized_deltas.values(), default=0.0)
        self.realized_deltas = {}
        counts = np.asarray(arrays[wire.COUNTS_KEY], dtype=np.int64)
        if self.restored is not None:  # resumed again before the last resume's tokens were all back
            self.restored = RestoredCounts(counts - self._own, self.restored.total, self.restored.entered)
        else:
            self.restored = RestoredCounts(np.maximum(counts, 0), int(np.maximum(counts, 0).sum()))
        self._own = np.zeros_like(counts)
        self.last_applied.clear()  # every party restarts its server view (see the module docstring)

    # ------------------------------------------------------------ privacy
    @property
    def eta(self) -> float:
        """Probability that a tuple's word is replaced, on the current phi (0 without a mechanism)."""
        phi = self.last_phi if self.last_phi is not None else np.full((1, self.vocab_size), 1.0 / self.vocab_size)
        return replacement_probability(self.fedlda, phi)

    def privacy_report(self) -> PrivacyReport:
        """:meth:`mechanism_report`; with seed words, it also says that they are public and cost nothing."""
        report = self.mechanism_report()
        if self.seeds is None:
            return report
        return dataclasses.replace(report, details={**report.details, "seed_words": self.seeds.privacy_note()})

    def mechanism_report(self) -> PrivacyReport:
        """The realized guarantee per document, and the paper's claim beside it.

        A document is the unit of privacy (the paper's user); each round it sends l tuples
        whose word is perturbed (their topics are not). Per tuple, the realized delta at
        the configured eps is computed every round from the mechanism's exact output
        distribution on that round's phi, as the worst case over input word pairs and over
        every possible document (:func:`~flower_topics.privacy.realized_ldp.realized_ldp`);
        it is composed by basic composition over the l tuples and over every round the
        party was asked to release in (whether or not its reply then arrived), capped at 1.
        The paper's statement (Theorem 1's ``(eps, 2 delta)`` per tuple for RRP, assuming
        Zipf-distributed topic-word proportions; ``delta`` for t-kRR) composed the same way
        is reported in ``details`` as ``claimed_*``, with the fit of phi to Zipf's law.
        """
        s = self.fedlda
        if s.mechanism == "none":
            return PrivacyReport.no_mechanism(rounds=self.rounds_accounted, reason="fedlda.mechanism='none': every "
                                              "tuple's word and topics are sent as they are")
        l, rounds = self.max_tuples_per_doc, self.rounds_accounted
        realized = self.last_realized
        tuple_delta = realized.delta if realized is not None else 0.0
        delta_total = min(1.0, l * (self.realized_delta_before + max(self.realized_deltas.values(), default=0.0)))
        claimed_round = compose(s.epsilon, claimed_delta(s), l)
        claimed_total = compose(claimed_round.epsilon, claimed_round.delta, rounds)
        details: dict[str, Any] = {
            "epsilon_per_tuple": s.epsilon,
            "delta_per_tuple": tuple_delta,
            "epsilon_per_tuple_at_claimed_delta": realized.epsilon_at_target if realized is not None else s.epsilon,
            "words_meeting_claim": realized.covered_words if realized is not None else 1.0,
            "claimed_delta_per_tuple": claimed_delta(s),
            "claimed_epsilon": claimed_total.epsilon,
            "claimed_delta": min(1.0, claimed_total.delta),
            "eta": self.eta,
            "tuples_per_document": l,
            "released": "each tuple's k_old and k_new unperturbed; see the README's list of what leaves a party",
        }
        if s.mechanism == "rrp":
            details["gamma"] = s.gamma
            claim = (f"Theorem 1 claims (eps, 2 delta) per tuple assuming Zipf topic-word proportions "
                     f"(gamma {s.gamma})" if not math.isinf(s.gamma) else
                     "gamma=inf is the paper's experimental eta, the limit of Theorem 1 (no claim proven)")
            if self.last_phi is not None and rounds:
                fit = zipf_fit(self.last_phi, top=ZIPF_TOP_RANKS)
                details["zipf_exponent_mean"] = float(fit.exponent.mean())
                details["zipf_r2_min"] = float(fit.r2.min())
        elif s.mechanism == "tkrr":
            claim = "the paper's t-kRR: eps-LDP for words of the truncated vocabulary, tail words sent as they are"
        else:
            claim = f"{s.mechanism}: eps-LDP per tuple"
        guarantee = (f"realized per tuple (exact output distribution on the round's phi, worst case over word "
                     f"pairs and documents): (eps {s.epsilon:g}, delta {tuple_delta:.3g}); {claim}")
        return PrivacyReport(mechanism=s.mechanism, unit="document", accountant="basic composition",
                             rounds=rounds, epsilon_round=l * s.epsilon, delta_round=min(1.0, l * tuple_delta),
                             epsilon=rounds * l * s.epsilon, delta=delta_total, guarantee=guarantee,
                             document_guarantee=document_guarantee(l, rounds, tuple_delta, delta_total),
                             details=details)


def document_guarantee(tuples_per_document: int, rounds: int, tuple_delta: float, document_delta: float
                       ) -> NoDocumentGuarantee:
    """Why FedLDA gives no document-level bound for the whole run.

    The randomizer perturbs only a tuple's word: its old and new topics are sent as they
    are, and both depend on the document's words (the new topic is drawn from the Gibbs or
    MH conditional of the true word), so no tuple is private as a whole, whatever the
    word's guarantee. The word's own realized delta composes over the tuples and rounds to
    the report's ``delta`` (1 at the README settings: delta 0.66 per tuple at gamma 1, 0.953
    at the paper's eta, docs/fedlda.md).
    """
    words = (f"the words' realized per-tuple delta {tuple_delta:.3g} composes over {tuples_per_document} tuple(s) a "
             f"document and {rounds} round(s) to delta {document_delta:.3g} per document")
    if document_delta >= 1:
        words += " (no guarantee even for the words alone)"
    return NoDocumentGuarantee(f"{words}; and each tuple's old and new topics leave unperturbed, drawn from the "
                               "document's own words, so the tuples are not private as a whole whatever the word "
                               "randomizer gives")
