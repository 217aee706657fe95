"""Server side of ``dplda``: DP stochastic variational inference for LDA, one whole-run accountant.

Park, Foulds, Chaudhuri and Welling 2016 ("Private topic modeling", arXiv 1609.04120),
Algorithm 1, on the federation; the variational updates are online LDA's (Hoffman, Blei and
Bach, NIPS 2010, Algorithm 2). The server keeps the running average ``lambda`` of online LDA (``K x V``, raw: the noise
may leave cells negative) and the variance of the noise it carries. Each round every
sampled party sends the noisy, clipped sum of the expected sufficient statistics of a
Poisson sample of its documents (:mod:`flower_topics.clients.dplda`); the strategy

1. sums them, ``S = sum_p S_p`` (each party adds ``N(0, (sigma C)^2)`` per cell, so the sum
   carries variance ``n_replies (sigma C)^2``);
2. scales to the full corpus, ``lambda_tilde = eta + S / q`` (each document was included with
   probability ``q``), and takes the natural-gradient step
   ``lambda <- (1 - rho_t) lambda + rho_t lambda_tilde``, ``rho_t = (tau0 + t)^-kappa``
   (Hoffman et al. 2010, eq. 7 and Section 2.2), tracking the noise variance of every cell,
   ``v <- (1 - rho_t)^2 v + rho_t^2 n_replies (sigma C / q)^2``.

What the parties get and the run's topics are the *public* ``lambda``, post-processing of
the average that costs no privacy (:func:`~flower_topics.models.svi.public_lambda`): cells below ``threshold`` noise
standard deviations set to 0, and a background of the corpus' word frequencies (the
thresholded-out mass is not lost: ``background`` of each topic's mass is spread over the
words in proportion to the column sums of the average, a private unigram estimate that
carries ``K`` times the signal of one cell). The initial ``lambda`` is public: one topic
per k-means cluster of the vocabulary's word embeddings (``init='embedding'``, the offline
all-MiniLM-L6-v2; no document enters it) or random (``init='random'``, Gamma(100, 1/100) as
Hoffman et al.), both from the run seed. With ``public-corpus`` set, it is instead a non-private
collapsed Gibbs LDA of that public text over the agreed vocabulary
(:func:`~flower_topics.models.svi_public.public_start`; the server reads it: it is public, not a party's
document), weighted by the public corpus' own evidence and forgotten at the delay that leaves it half its weight after the run's rounds, unless the run
config sets ``public-weight`` or ``tau0`` (:mod:`flower_topics.models.svi_public`).

Guided topics (run-config ``seed-words``, :mod:`flower_topics.models.seed_words`): ``eta`` becomes the
matrix ``eta_kw`` (``beta`` plus ``seed-weight`` at each seed word of its topic) in the step and in
:func:`~flower_topics.models.svi.public_lambda`; the public LDA of a public corpus runs with that prior, and the
other starts put the seeded topics first and add the seeds' weight (:mod:`flower_topics.models.svi_seeds`). The
parties receive the public ``lambda`` as before (the wire does not change); the seeds are a public
file and cost no privacy.

Privacy (:mod:`flower_topics.privacy.accountants`: the ``"pld"`` or ``"skellam"`` accountant). The user sets the whole run's target
``dplda.epsilon`` and ``dplda.delta`` per document; the ``private`` vocabulary agreement's
spending is subtracted (basic composition) and the noise multiplier ``sigma`` is the
smallest whose ``num-rounds`` Poisson-subsampled Gaussian releases spend the rest (PLD,
dp-accounting; under secure aggregation the Skellam releases' RDP, Zhu-Wang's general subsampling bound). The report counts the rounds the parties were asked to release in, so a
shorter run spends less and a run can never spend more than its target; every party also
keeps its own accountant and refuses a release over it.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

import numpy as np
from flwr.app import Array, ArrayRecord

from flower_topics.data.corpus import Corpus
from flower_topics.data.public_corpus import public_corpus
from flower_topics.models import svi, svi_public
from flower_topics.models.seed_words import SeedPrior, config_seed_prior
from flower_topics.models.svi import public_lambda
from flower_topics.models.svi_public import public_start
from flower_topics.models.svi_seeds import seeded_start
from flower_topics.privacy import dplda_calibration as calibration
from flower_topics.privacy.accountants import Budget, PLDAccountant, SkellamAccountant
from flower_topics.privacy.privacy_report import PrivacyReport
from flower_topics.strategies.base import Reply, TopicStrategy
from flower_topics.wire import dplda as wire
from flower_topics.wire.prevalence import UNITS as PREVALENCE_UNITS
from flower_topics.wire.protocol import ReplySpec

TRUST_MODEL = ("every party adds the full noise to its own release: the guarantee holds against the server and "
               "every other party, trusting none of them (no secure aggregation)")
SECURE_TRUST_MODEL = ("secure aggregation: the server sees only each round's sum, and each of the n parties of a round "
                      "adds 1/(n - T) of the Skellam noise, with n at most the federation size the party was told "
                      "(node config federation-size, or num-partitions in a simulation; told none, it adds the full "
                      "noise), never the server's participant list; the guarantee holds against a server that follows "
                      "the protocol (it may try to learn from everything it receives) together with up to T parties, "
                      "or with up to T parties dropping out (secure-aggregation-tolerance); when T parties collude "
                      "and T others drop out of one round, the honest survivors' shares carry (n - 2T)/(n - T) of the "
                      "noise, and that round is protected only at that lower noise")


RAW_KEY = "lambda-average"
VARIANCE_KEY = "noise-variance"


def calibrated_settings(config: Mapping[str, Any]) -> wire.DPLDASettings:
    """The settings every party receives, from a validated run config, with ``sigma`` calibrated to its target
    (:func:`~flower_topics.privacy.dplda_calibration.noise_multiplier`)."""
    return wire.DPLDASettings.from_record({**config, "dplda.noise-multiplier": calibration.noise_multiplier(config)})


def step_delay(config: Mapping[str, Any]) -> float:
    """The run's ``tau0``: ``dplda.tau0`` when set (> 0); else, with a public corpus, the delay at which the start
    keeps half its weight after ``num-rounds`` steps (:func:`~flower_topics.models.svi_public.half_weight_delay`),
    and 1 without one."""
    tau0 = float(config["dplda.tau0"])
    if tau0 > 0:
        return tau0
    if not str(config["dplda.public-corpus"]):
        return 1.0
    return svi_public.half_weight_delay(int(config["num-rounds"]), float(config["dplda.kappa"]))


def model_record(average: np.ndarray, noise_variance: float) -> ArrayRecord:
    """The strategy's global state: the raw running average and its noise variance."""
    return ArrayRecord({RAW_KEY: Array(np.ascontiguousarray(average, dtype=np.float64)),
                        VARIANCE_KEY: Array(np.array([noise_variance], dtype=np.float64))})


class DPLDA(TopicStrategy):
    """DP-SVI for LDA: natural-gradient steps on the parties' noisy, clipped expected counts.

    Parameters
    ----------
    vocabulary : sequence of str
        The words, in column order (V = its length).
    settings : DPLDASettings
        K, alpha, ``q``, ``C``, ``sigma`` and the target, sent to every party.
    budget : Budget
        The whole-run target and what the vocabulary agreement spent of it.
    eta : float (default: 0.01)
        Topic-word Dirichlet prior (the run config's ``beta``).
    tau0, kappa : float (default: 1.0, 0.7)
        Step size ``rho_t = (tau0 + t)^-kappa``.
    threshold : float (default: 0.0)
        Post-processing threshold in standard deviations of the average's noise.
    background : float (default: 0.2)
        Share of each public topic's mass spread as the word-frequency background, in [0, 1).
    init : {"embedding", "random"} (default: "embedding")
        The public initial ``lambda`` when there is no public corpus.
    public_corpus : Corpus or callable, optional
        Public text of the domain, or a function that reads it (called by :meth:`initial_arrays`
        only, so a resumed run reads nothing): the initial ``lambda`` is :func:`public_start` of it
        (in place of ``init``).
    public_source : str (default: "")
        What the refusals and the privacy report call the public corpus (its path).
    public_weight : float or None (default: None)
        Pseudo-counts per topic of the public start; None: the public corpus' evidence
        (:func:`public_start` with ``mass=None``).
    prevalence_noise : float (default: 0.0)
        The noise multiplier of the prevalence release after the last round (0: the run has none;
        :func:`flower_topics.privacy.dplda_calibration.prevalence_noise`); ``sigma`` of ``settings`` was calibrated with it.
    seeds : SeedPrior, optional
        Seed words (guided topics): the prior becomes :meth:`SeedPrior.matrix` of ``eta`` and the start is seeded
        (:mod:`flower_topics.models.svi_seeds`).
    **federation : Any
        ``fraction_train``, ``min_nodes``, ``min_replies``, ``seed``, ``evaluation`` of
        :class:`TopicStrategy`; the seed also draws the initial ``lambda``.
    """

    method = wire.METHOD

    def __init__(self, vocabulary: Sequence[str], settings: wire.DPLDASettings, *, budget: Budget,
                 eta: float = 0.01, tau0: float = 1.0, kappa: float = 0.7, threshold: float = 0.0,
                 background: float = 0.2, init: str = "embedding",
                 public_corpus: Corpus | Callable[[], Corpus] | None = None,
                 public_source: str = "", public_weight: float | None = None, prevalence_noise: float = 0.0,
                 seeds: SeedPrior | None = None,
                 **federation: Any) -> None:
        super().__init__(vocabulary, **federation)
        if not 0 <= background < 1:
            raise ValueError("background must be in [0, 1)")
        self.dplda = settings
        self.budget = budget
        self.eta, self.tau0, self.kappa, self.threshold, self.background = eta, tau0, kappa, threshold, background
        self.init = init
        self.public_corpus, self.public_source = public_corpus, public_source or "dplda.public-corpus"
        self.public_weight = public_weight
        self.prevalence_noise = prevalence_noise
        self.seeds = seeds
        self.prior: float | np.ndarray = eta if seeds is None else seeds.matrix(eta)  # eta_kw of the step
        self.updates = 0
        self._lambda_sent: tuple[ArrayRecord, ArrayRecord] | None = None  # a global state, what nodes receive of it

    @classmethod
    def from_config(cls, config: Mapping[str, Any], vocabulary: Sequence[str]) -> "DPLDA":
        """The strategy of a validated run config (the noise multiplier calibrated to the whole-run target)."""
        calibration.check_config(config)
        return cls(vocabulary, calibrated_settings(config), budget=calibration.budget(config), eta=float(config["beta"]),
                   tau0=step_delay(config), kappa=float(config["dplda.kappa"]),
                   threshold=float(config["dplda.threshold"]), background=float(config["dplda.background"]),
                   init=str(config["dplda.init"]), public_corpus=public_corpus(config),
                   public_source=str(config["dplda.public-corpus"]),
                   public_weight=float(config["dplda.public-weight"]) or None,
                   prevalence_noise=calibration.prevalence_noise(config), seeds=config_seed_prior(config, vocabulary),
                   **cls.federation_options(config))

    def initial_arrays(self) -> ArrayRecord:
        """The public initial ``lambda`` (no noise yet), from the vocabulary (and the public corpus) and the run
        seed."""
        k = self.dplda.n_topics
        if self.public_corpus is not None:
            corpus = self.public_corpus if isinstance(self.public_corpus, Corpus) else self.public_corpus()
            return model_record(public_start(corpus, self.vocabulary, k, alpha=self.dplda.alpha,
                                             eta=self.eta, seed=self.seed, source=self.public_source,
                                             mass=self.public_weight, clip=self.dplda.clip,
                                             e_step_iterations=self.dplda.e_step_iterations, seeds=self.seeds), 0.0)
        if self.init == "embedding":
            from flower_topics.models.word_similarity import embed_vocabulary

            start = svi.embedding_lambda(embed_vocabulary(self.vocabulary), k, self.seed)
        else:
            start = svi.initial_lambda(k, self.vocab_size, self.seed)
        return model_record(start if self.seeds is None else seeded_start(start, self.seeds), 0.0)

    def public(self, arrays: ArrayRecord) -> np.ndarray:
        """The public ``lambda`` of the global state (:func:`public_lambda`)."""
        variance = float(arrays[VARIANCE_KEY].numpy()[0])
        return public_lambda(arrays[RAW_KEY].numpy(), variance, eta=self.prior, threshold=self.threshold,
                             background=self.background if variance > 0 else 0.0)

    def node_arrays(self, server_round: int, node_id: int, arrays: ArrayRecord) -> ArrayRecord:
        """The public ``lambda`` as float32 (half the bytes; the parties' E-step needs no more), computed once for
        all the nodes of a round (the same global state)."""
        if self._lambda_sent is None or self._lambda_sent[0] is not arrays:
            self._lambda_sent = (arrays, ArrayRecord({wire.LAMBDA_KEY: Array(self.public(arrays).astype(np.float32))}))
        return self._lambda_sent[1]

    def topic_word(self, arrays: ArrayRecord) -> np.ndarray:
        """``E[beta_k]`` of the public ``lambda``: its rows normalized."""
        lam = self.public(arrays)
        return lam / lam.sum(axis=1, keepdims=True)

    def train_config(self) -> dict[str, Any]:
        """K, alpha, q, C, sigma, the target and the E-step iterations."""
        return self.dplda.to_record()

    def reply_spec(self) -> ReplySpec:
        """One finite ``K x V`` float statistic, no metrics."""
        return wire.reply_spec(self.dplda, self.vocab_size)

    def decode_sum(self, server_round: int, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The secure sum in expected counts: its integers divided by the quantum."""
        return {key: value.astype(np.float64) / self.dplda.quantum for key, value in arrays.items()}

    def party_noise_variance(self, server_round: int) -> float:
        """The noise variance per cell one party adds, in expected counts: ``(sigma C)^2``, or under secure
        aggregation its share ``(sigma C)^2 / (n - T)`` for the round's ``n`` sampled parties."""
        variance = (self.dplda.noise_multiplier * self.dplda.clip) ** 2
        if self.secure is None:
            return variance
        return variance / self.secure.threshold(self.traffic[server_round].nodes_sampled)

    def aggregate(self, server_round: int, arrays: ArrayRecord, replies: list[Reply]
                  ) -> tuple[ArrayRecord, dict[str, float]]:
        """Sum, scale by ``1 / q``, take the natural-gradient step and track the noise variance."""
        total = np.sum([r.arrays[wire.STATISTIC_KEY].astype(np.float64) for r in replies], axis=0)
        parties = sum(r.parties for r in replies)
        round_variance = parties * self.party_noise_variance(server_round) / self.dplda.sample_rate ** 2
        rho = svi.step_size(self.updates, self.tau0, self.kappa)
        average = svi.natural_gradient_step(arrays[RAW_KEY].numpy(), self.prior + total / self.dplda.sample_rate, rho)
        variance = (1 - rho) ** 2 * float(arrays[VARIANCE_KEY].numpy()[0]) + rho ** 2 * round_variance
        self.updates += 1
        return model_record(average, variance), {"step-size": rho, "noise-std": float(np.sqrt(variance))}

    def prevalence_config(self) -> dict[str, Any]:
        """The round settings and the prevalence release's noise multiplier (and, under secure aggregation, its
        integer units: the rounds' ``C x quantum``, so that one accountant composes both)."""
        units = {PREVALENCE_UNITS: self.dplda.sensitivity_units} if self.secure is not None else {}
        return {**self.dplda.to_record(), wire.PREVALENCE_NOISE: self.prevalence_noise, **units}

    def prevalence_noise_variance(self, parties: int) -> float:
        """Each party adds ``N(0, sigma_p^2)`` to every cell (a document's shares have L2 norm at most 1), or under
        secure aggregation its share ``1 / (n - T)`` of it, in topic shares."""
        if self.secure is None:
            return parties * self.prevalence_noise ** 2
        return parties * self.prevalence_noise ** 2 / self.secure.threshold(max(self.prevalence_parties, parties))

    def checkpoint_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """The number of natural-gradient steps taken (the step size of the next one depends on it)."""
        return {}, {"updates": self.updates}

    def load_checkpoint_state(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Restore :meth:`checkpoint_state`."""
        self.updates = int(meta.get("updates", 0))

    def privacy_report(self) -> PrivacyReport:
        """The training rounds' (eps, delta) per document so far; the ServerApp composes the vocabulary's."""
        eps_rounds, delta_rounds = self.budget.for_rounds()
        sigma, q = self.dplda.noise_multiplier, self.dplda.sample_rate
        rounds = self.rounds_released()
        prevalence = self.prevalence_noise if self.prevalence_parties else 0.0
        epsilon = calibration.rounds_epsilon(self.dplda, rounds, delta_rounds, prevalence)
        trust = TRUST_MODEL if self.secure is None else SECURE_TRUST_MODEL
        mechanism = ("Poisson-subsampled Gaussian on clipped expected counts (DP-SVI, Park et al. 2016)"
                     if self.secure is None else
                     f"Poisson-subsampled distributed Skellam on clipped expected counts in units of 1/"
                     f"{self.dplda.quantum:g} (DP-SVI, Park et al. 2016; Agarwal et al. 2021), summed by secure "
                     f"aggregation")
        weight = ("its documents' clipped expected counts" if self.public_weight is None else
                  f"{self.public_weight:g} pseudo-counts a topic")
        start = (f"a non-private LDA of the public corpus {self.public_source} (public text the server read; no "
                 f"party's document enters it: it costs no privacy), weighted by {weight}, tau0 {self.tau0:.4g}"
                 if self.public_corpus is not None else
                 f"public ({self.init}: no document enters it; it costs no privacy)")
        evaluation = self.unaccounted_evaluation()  # refused by the run config; a strategy built by hand may have it
        document = PrivacyReport.document_fields(
            epsilon, delta_rounds, f"every training round ({'PLD' if self.secure is None else 'RDP'})"
                                   f"{', the topic-prevalence release' if prevalence else ''} and, composed in by the "
                                   f"ServerApp, the vocabulary agreement when it is 'private'; {trust}", evaluation)
        return PrivacyReport(
            mechanism=f"{mechanism}, sigma {sigma:.4g}, q {q:g}, C {self.dplda.clip:g}",
            unit="document",
            accountant=PLDAccountant.description if self.secure is None else SkellamAccountant.description,
            rounds=rounds,
            epsilon_round=calibration.rounds_epsilon(self.dplda, 1, delta_rounds),
            delta_round=delta_rounds,
            epsilon=epsilon,
            delta=delta_rounds,
            **document,
            guarantee=(f"(eps, delta)-DP for adding or removing one document of any party, over everything the "
                       f"server receives in training; {trust}"),
            details={"noise_multiplier": sigma, "sample_rate": q, "clip": self.dplda.clip,
                     "initial_topics": start,
                     **({} if self.seeds is None else {"seed_words": self.seeds.privacy_note()}),
                     "target_epsilon": self.budget.epsilon, "target_delta": self.budget.delta,
                     "training_epsilon_budget": eps_rounds, "trust_model": trust,
                     "composed": "vocabulary agreement (basic composition) + training rounds "
                                 f"{'+ the topic-prevalence release ' if prevalence else ''}"
                                 f"({'PLD' if self.secure is None else 'RDP'}); no federated evaluation",
                     **({"prevalence_noise_multiplier": prevalence} if prevalence else {})},
        )


def quality_notes(config: Mapping[str, Any]) -> list[str]:
    """What a run's topics can be expected to give, and the options that change it (the console says it).

    The server does not know the parties' corpus sizes, which decide it, so the note gives the measured scale.
    """
    eps = float(config["dplda.epsilon"])
    return [f"dplda at eps {eps:g}: its topics are readable only with tens of thousands of training documents "
            "(debian_large, 47k, 5,000 words: NPMI 0.104 at eps 4 against 0.128 without privacy); on a few "
            "thousand they are mostly noise (docs/dplda.md). A larger dplda.epsilon or a smaller public vocabulary "
            "helps" + ("" if bool(config.get("secure-aggregation", False)) else
                       ", and so does secure-aggregation=true (one shared noise; with 2,000 words NPMI 0.119 at eps 3 "
                       "against 0.149, docs/dplda.md)")]
