"""Server side of PC-TD (Shi et al., IEEE Intelligent Systems 2020, Algorithm 1, lines 11-13).

Each round the strategy sends the global ``p(w|z)`` (:data:`~flower_topics.wire.pctd.PHI_KEY`, float32) to the
sampled parties; each replies with its noisy statistic ``M_t(w, z_k)`` of eq. (10)
(:data:`~flower_topics.wire.pctd.STATISTIC_KEY`). The strategy checks every reply (shape, floating dtype, finite)
and then, on the valid ones:

1. sums them, ``S = sum_t M_t`` (eq. 11's numerator);
2. normalizes with the negative noisy mass clamped and a pseudo-count ``b`` added,
   ``p(w|z_k) = (max(S_kw, 0) + b) / sum_w' (max(S_kw', 0) + b)``
   (:func:`flower_topics.models.pctd_server.normalize_topic_word`: clamping is the
   projection onto the non-negative counts the noiseless statistic has, post-processing
   that costs no privacy; ``b > 0`` keeps ``p(w|z)`` strictly positive, which the
   parties' log-space E-step needs, and plays the role of LDA's topic-word prior);
   (with ``seed-words``, guided topics: ``b`` becomes ``b_kw``, ``pctd.pseudo-count`` plus
   ``seed-weight`` at each seed word of its topic, :mod:`flower_topics.models.seed_words`; the
   seeds are public and cost no privacy);
3. with ``tau > 0``, applies the global semantic consistency of eq. (13) with a sparse
   word-similarity matrix ``R`` (eq. 12) and renormalizes;

and pushes the result to the parties in the next round. The first round's ``p(w|z)`` is
drawn from the strategy's seed (Algorithm 1, line 2, shared so that topic ``k`` means the
same for every party).

A missing party's contribution: each round's statistic is a fresh E-step over all of a
party's units, not a change, so a party whose reply is missing is absent from that
round's ``p(w|z)`` only; nothing of it is kept for a later round or counted twice.

Privacy. Each party's data enter only its own releases, one Gaussian mechanism per round
it took part in (noise multiplier ``sigma``, sensitivity ``Delta N = 1``). The report
gives epsilon at ``delta`` by Renyi-DP accounting (Opacus) for the party asked to release
in the most rounds so far, next to the explicit form of the
paper's Theorem 1 and whether its premise holds.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

import numpy as np
import scipy.sparse as sp
from flwr.app import Array, ArrayRecord

from flower_topics.models.pctd import random_topic_word
from flower_topics.models.seed_words import SeedPrior, config_seed_prior
from flower_topics.models.pctd_server import clamped_mass, normalize_topic_word, semantic_consistency, sum_statistics
from flower_topics.models.topic_word import normalize_rows
from flower_topics.privacy.gaussian import (
    ACCOUNTANT,
    gaussian_epsilon,
    gaussian_epsilon_and_order,
    theorem1_epsilon,
    theorem1_valid,
)
from flower_topics.privacy.document_level import EXAMPLE_LENGTHS, gaussian_document_epsilon, unit_count_sensitivity
from flower_topics.privacy.privacy_report import NoDocumentGuarantee, PrivacyReport
from flower_topics.strategies.base import Reply, TopicStrategy
from flower_topics.strategies.releases import PartyReleases
from flower_topics.wire import pctd as wire
from flower_topics.wire.protocol import ReplySpec


class PCTD(TopicStrategy):
    """PC-TD: federated EM over semantic units with Gaussian noise and global semantic consistency.

    Parameters
    ----------
    vocabulary : sequence of str
        The words, in column order (V = its length).
    settings : PCTDSettings
        K, sigma and the semantic units, sent to every party.
    delta : float (default: 1e-5)
        The delta at which epsilon is reported.
    pseudo_count : float (default: 0.01)
        Added to every clamped summed statistic before normalizing (> 0).
    tau : float (default: 0.0)
        Tradeoff of the global semantic consistency, eq. (13); 0 turns it off.
    similarity : scipy.sparse matrix, optional
        ``(V, V)`` non-negative word similarities ``R`` (eq. 12), required when ``tau > 0``
        (e.g. :func:`flower_topics.models.word_similarity.word_similarity_matrix`).
    seeds : SeedPrior, optional
        Seed words (guided topics): the pseudo-count becomes :meth:`SeedPrior.matrix` of ``pseudo_count``.
    **federation : Any
        ``fraction_train``, ``min_nodes``, ``min_replies``, ``seed`` of :class:`TopicStrategy`;
        the seed also draws the initial ``p(w|z)``.
    """

    method = wire.METHOD
    evaluation_with_train = True  # scoring in the training handler leaves its local step as it was

    def __init__(
        self,
        vocabulary: Sequence[str],
        settings: wire.PCTDSettings,
        delta: float = 1e-5,
        pseudo_count: float = 0.01,
        tau: float = 0.0,
        similarity: sp.spmatrix | None = None,
        seeds: SeedPrior | None = None,
        **federation: Any,
    ) -> None:
        super().__init__(vocabulary, **federation)
        if not 0 < delta < 1:
            raise ValueError("delta must be in (0, 1)")
        if not pseudo_count > 0:
            raise ValueError("pseudo_count must be > 0 (p(w|z) must stay strictly positive)")
        if not tau >= 0:
            raise ValueError("tau must be >= 0")
        if tau > 0:
            if similarity is None:
                raise ValueError("tau > 0 needs the word-similarity matrix R (similarity=...)")
            similarity = sp.csr_matrix(similarity, dtype=np.float64)
            if similarity.shape != (self.vocab_size, self.vocab_size):
                raise ValueError(f"similarity is {similarity.shape}, expected ({self.vocab_size}, {self.vocab_size})")
        self.pctd = settings
        self.delta = delta
        self.pseudo_count = pseudo_count
        self.seeds = seeds
        self.prior: float | np.ndarray = pseudo_count if seeds is None else seeds.matrix(pseudo_count)
        self.tau = tau
        self.similarity = similarity if tau > 0 else None
        self.releases = PartyReleases()  # and the worst party's before a resume (flower_topics.run.checkpoint)

    @classmethod
    def from_config(cls, config: Mapping[str, Any], vocabulary: Sequence[str]) -> "PCTD":
        """The strategy of a validated run config; R from the offline embeddings when consistency is on."""
        from flower_topics.models.word_similarity import similarity_for_run

        tau = float(config["pctd.consistency"])
        similarity = similarity_for_run(vocabulary, model=str(config["pctd.embedding-model"]),
                                        top_n=int(config["pctd.similar-words"])) if tau > 0 else None
        return cls(vocabulary, wire.PCTDSettings.from_record(config), delta=float(config["pctd.delta"]),
                   pseudo_count=float(config["pctd.pseudo-count"]), tau=tau, similarity=similarity,
                   seeds=config_seed_prior(config, vocabulary), **cls.federation_options(config))

    def initial_arrays(self) -> ArrayRecord:
        """A random ``p(w|z)`` (flat Dirichlet rows) from the strategy's seed."""
        phi = random_topic_word(self.pctd.n_topics, self.vocab_size, np.random.default_rng([self.seed, 0]))
        return ArrayRecord({wire.PHI_KEY: Array(phi.astype(np.float32))})

    def topic_word(self, arrays: ArrayRecord) -> np.ndarray:
        """The global ``p(w|z)`` as float64, rows renormalized after the float32 transport."""
        return normalize_rows(arrays[wire.PHI_KEY].numpy())

    def train_config(self) -> dict[str, Any]:
        """K, sigma and the semantic units."""
        return self.pctd.to_record()

    def reply_spec(self) -> ReplySpec:
        """One finite ``K x V`` float statistic."""
        return wire.reply_spec(self.pctd, self.vocab_size)

    def released(self, server_round: int, nodes: Sequence[int]) -> None:
        """One more release for each of ``nodes`` (its statistic of the round)."""
        self.releases.add(nodes)

    @property
    def party_rounds(self) -> int:
        """The most rounds any one party was asked to release in (the worst party's T), plus, after a resume,
        the worst party's count before it (node ids may change, so the two are added: never fewer)."""
        return self.releases.worst

    # ------------------------------------------------------------ checkpoint
    def checkpoint_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The releases per party (p(w|z) is the global array; a party's p(z|d) is recomputed by its E-step)."""
        return {}, self.releases.state()

    def load_checkpoint_state(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Restore :meth:`checkpoint_state`."""
        self.releases = PartyReleases.from_state(meta)

    def lost_release(self, release: Mapping[str, Any]) -> None:
        """A round released and lost to a crash: one more release for every party."""
        self.releases.lost()

    def on_resume(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Fold the per-party counts into the offset (the parties of a new Flower run may get new node ids)."""
        self.releases.fold()

    def decode_sum(self, server_round: int, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The secure sum in counts: its integers divided by the quantum."""
        return {key: value.astype(np.float64) / self.pctd.quantum for key, value in arrays.items()}

    def aggregate(self, server_round: int, arrays: ArrayRecord, replies: list[Reply]
                  ) -> tuple[ArrayRecord, dict[str, float]]:
        """Eq. (11) on the summed valid statistics, then eq. (13) when ``tau > 0``."""
        total = sum_statistics([r.arrays[wire.STATISTIC_KEY].astype(np.float64) for r in replies])
        metrics = {"statistic-mass": float(total.sum()), "clamped-mass": float(clamped_mass(total).sum())}
        return ArrayRecord({wire.PHI_KEY: Array(self.merge(total).astype(np.float32))}), metrics

    def merge(self, total: np.ndarray) -> np.ndarray:
        """``p(w|z)`` from the summed statistic: clamped eq. (11), then eq. (13) when ``tau > 0``."""
        phi = normalize_topic_word(total, self.prior)
        if self.tau > 0:
            phi = semantic_consistency(phi, self.similarity, self.tau)
        return phi

    # ------------------------------------------------------------ privacy
    def privacy_report(self) -> PrivacyReport:
        """:meth:`mechanism_report`; with seed words, it also says that they are public and cost nothing."""
        report = self.mechanism_report()
        if self.seeds is None:
            return report
        return dataclasses.replace(report, details={**report.details, "seed_words": self.seeds.privacy_note()})

    def mechanism_report(self) -> PrivacyReport:
        """epsilon at ``delta`` of the party asked most often so far (RDP, Opacus), and Theorem 1's form.

        ``rounds`` counts the training messages a party received, whether or not its reply
        arrived (it released when it computed ``M_t``); the unit of privacy is the paper's:
        one word occurrence of one document (sensitivity 1 on the unit counts).
        """
        sigma, rounds = self.pctd.sigma, self.party_rounds
        if sigma == 0:
            return PrivacyReport.no_mechanism(rounds=rounds, reason="pctd.sigma=0: each party's statistic M_t is "
                                              "sent without noise", sigma=0.0)
        epsilon, order = gaussian_epsilon_and_order(sigma, rounds, self.delta)
        details: dict[str, Any] = {"sigma": sigma, "sensitivity": 1.0, "rdp_order": None if rounds == 0 else order}
        if self.secure is not None:
            details["secure_aggregation"] = (
                f"the server sees only each round's sum of the parties' statistics, each quantized to 1/"
                f"{self.pctd.quantum:g} count; every party still adds the full noise, so the guarantee is the same "
                f"and does not rely on the secure sum")
        if rounds:
            details["theorem1_epsilon"] = theorem1_epsilon(sigma, rounds, self.delta)
            details["theorem1_valid"] = theorem1_valid(sigma, rounds, self.delta)
        if rounds:
            details.update(self.document_figures(rounds))
        return PrivacyReport(mechanism="gaussian", unit="token", accountant=ACCOUNTANT, rounds=rounds,
                             epsilon_round=gaussian_epsilon(sigma, 1, self.delta).epsilon, delta_round=self.delta,
                             epsilon=epsilon, delta=self.delta,
                             guarantee="Theorem 1: (eps, delta)-DP per word occurrence (Gaussian mechanism, "
                             "sensitivity 1 on the unit counts), composed over rounds",
                             document_guarantee=NoDocumentGuarantee(
                                 "the guarantee is per token and a document may hold any number of tokens (nothing "
                                 "bounds its length, and the server never sees it); a document of L tokens gets the "
                                 "Gaussian at sensitivity ||its unit counts||_2, sqrt(L) when no word repeats inside "
                                 "a unit and at most "
                                 + ("L" if self.pctd.unit == "sentence" else f"about sqrt({self.pctd.ngram} L)")
                                 + " (document_epsilon_at_length*)"),
                             details=details)

    def document_figures(self, rounds: int) -> dict[str, Any]:
        """eps at ``delta`` of a document of a few lengths L after ``rounds`` (:mod:`~flower_topics.privacy.document_level`).

        ``document_epsilon_at_length``: the worst document of L tokens for the run's units;
        ``document_epsilon_at_length_distinct_words``: one in which no word repeats inside a unit
        (sensitivity ``sqrt(L)``). Keys are the lengths, as strings (JSON).
        """
        def at(distinct: bool) -> dict[str, float]:
            return {str(n): gaussian_document_epsilon(
                self.pctd.sigma, rounds, self.delta,
                unit_count_sensitivity(n, self.pctd.unit, self.pctd.ngram, distinct_words=distinct))
                for n in EXAMPLE_LENGTHS}

        return {"document_epsilon_at_length": at(False), "document_epsilon_at_length_distinct_words": at(True)}


def quality_notes(config: Mapping[str, Any]) -> list[str]:
    """Why a run with this config gives noise topics, and the option that changes it (the console says it)."""
    sigma = float(config["pctd.sigma"])
    if sigma < 0.1:
        return []
    return [f"pctd.sigma={sigma:g}: noise of this size dominates the topics (at the paper's 0.25, perplexity above a "
            "unigram model and negative NPMI on BBC and debian: docs/pctd.md); pctd.sigma=0.01 gives readable topics, "
            "at an epsilon in the hundreds of thousands"]
