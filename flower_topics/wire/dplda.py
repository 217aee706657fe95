"""Wire protocol of ``dplda``: differentially private stochastic variational LDA.

The method of Park, Foulds, Chaudhuri and Welling 2016 ("Private topic modeling", arXiv
1609.04120; DP-SVI for LDA) on the federation: online LDA (Hoffman, Blei and Bach 2010)
whose every release is a sum of per-document expected sufficient statistics over a Poisson
sample of a party's documents, each clipped to L2 norm ``C``, plus Gaussian noise.

Server to party: the global topic parameters ``lambda`` (``K x V`` float32,
:data:`LAMBDA_KEY`) and :class:`DPLDASettings` (K, alpha, the sampling rate, the clip norm,
the noise multiplier and the whole-run target it was derived from). Party to server: its
noisy statistic (``K x V`` float32, :data:`STATISTIC_KEY`) and nothing else: no document
count, no batch size, no metric.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from flower_topics.errors import UserInputError
from flower_topics.options import Option, shown, at_least, in_range, one_of, positive
from flower_topics.wire.protocol import ArraySpec, ReplySpec

if TYPE_CHECKING:
    from flower_topics.privacy.accountants import Accountant, Budget
    from flower_topics.privacy.ledger import Release

METHOD = "dplda"
#: The prevalence request's noise multiplier (:func:`prevalence_noise`).
PREVALENCE_NOISE = "dplda.prevalence-noise"
#: Its reply is a sum (of clipped per-document statistics plus noise): it can go through secure aggregation,
#: which makes the noise a shared Skellam noise (:mod:`flower_topics.privacy.skellam_mechanism`).
SECURE_SUM = True
LAMBDA_KEY = "topic-parameters"
STATISTIC_KEY = "noisy-statistic"

#: Node-config keys a party of ``dplda`` may set for itself (its local step finds each in ``party.policy.options``).
NODE_OPTIONS: Mapping[str, Option] = {
    "max-epsilon": Option(0.0, "dplda: this party's own cap on its whole-run epsilon per document; it refuses a "
                          "release over it whatever the server says (0 = the run's dplda.epsilon)", at_least(0)),
}

#: The options of ``dplda`` (run-config keys ``dplda.<name>``).
OPTIONS: Mapping[str, Option] = {
    "epsilon": Option(3.0, "whole-run epsilon per document (vocabulary agreement and every round composed)",
                      positive),
    "delta": Option(1e-5, "whole-run delta per document", in_range(0, 1, low_open=True, high_open=True)),
    "sample-rate": Option(0.2, "q: each round a party includes each of its documents with this probability "
                          "(Poisson sampling)", in_range(0, 1, low_open=True)),
    "clip": Option(2.0, "C: each document's expected-count statistic is scaled to L2 norm at most C", positive),
    "tau0": Option(0.0, "step size rho_t = (tau0 + t)^-kappa: delay tau0 (0 = 1, or with dplda.public-corpus the "
                   "delay at which the public start keeps half its weight after num-rounds)", at_least(0)),
    "kappa": Option(0.7, "step size rho_t = (tau0 + t)^-kappa: forgetting rate kappa", in_range(0.5, 1)),
    "threshold": Option(0.0, "post-processing: cells of the topics' running average below this many noise "
                        "standard deviations are set to 0 (0 = only negative cells)", at_least(0)),
    "background": Option(0.2, "post-processing: share of each topic's mass spread over the words as the private "
                         "word-frequency background (column sums of the average)", in_range(0, 1, high_open=True)),
    "init": Option("embedding", "public initial topics: embedding (k-means clusters of the vocabulary's word "
                   "embeddings, offline MiniLM; no document) or random", one_of("embedding", "random")),
    "public-corpus": Option("", "path of public text of the domain the server may read (any corpus format, read "
                            "with the run's reading options): the initial topics are a non-private LDA of it over "
                            "the agreed vocabulary, in place of dplda.init; no privacy cost ('' = none)"),
    "public-weight": Option(0.0, "pseudo-counts per topic of the public start (0 = the public corpus' evidence: its "
                            "documents' expected counts against its topics, clipped to dplda.clip as a party's)",
                            at_least(0)),
    "prevalence-share": Option(0.1, "topic prevalence (prevalence-period): the share of dplda.epsilon its one "
                               "Gaussian release is calibrated to on its own; the rounds' noise is then the least "
                               "whose composition with it meets the whole-run target", in_range(0, 1, low_open=True,
                                                                                                 high_open=True)),
    "e-step-iterations": Option(50, "most gamma iterations of a party's E-step", at_least(1)),
    "quantum": Option(256.0, "secure aggregation: integer units per expected count (each document's clipped "
                      "statistic is scaled by it and randomly rounded down or up, keeping its norm within C)",
                      at_least(1)),
}


@dataclass(frozen=True)
class DPLDASettings:
    """What the server tells every party about a ``dplda`` round.

    Parameters
    ----------
    n_topics : int
        K.
    alpha : float
        Symmetric document-topic Dirichlet prior of the E-step.
    sample_rate : float
        ``q``: each document's inclusion probability in a round.
    clip : float
        ``C``: L2 bound of one document's statistic.
    noise_multiplier : float
        ``sigma``: the party adds ``N(0, (sigma C)^2)`` to every cell.
    epsilon, delta : float
        The whole-run target per document that ``sigma`` was derived from.
    e_step_iterations : int
        Most gamma iterations of the E-step.
    secure : bool
        Secure aggregation: the party sends integers (each document's statistic scaled by
        ``quantum`` and rounded) plus its share of Skellam noise of variance ``(sigma C quantum)^2``.
    quantum : float
        Integer units per expected count under secure aggregation.
    """

    n_topics: int
    alpha: float
    sample_rate: float
    clip: float
    noise_multiplier: float
    epsilon: float
    delta: float
    e_step_iterations: int = 50
    secure: bool = False
    quantum: float = 256.0

    @property
    def sensitivity_units(self) -> float:
        """Under secure aggregation, the L2 sensitivity in integer units: ``C x quantum``."""
        return self.clip * self.quantum

    def __post_init__(self) -> None:
        if self.n_topics < 1 or not self.alpha > 0:
            raise ValueError("n_topics must be >= 1 and alpha > 0")
        if not 0 < self.sample_rate <= 1 or not self.clip > 0 or not self.noise_multiplier > 0:
            raise ValueError("need 0 < sample_rate <= 1, clip > 0 and noise_multiplier > 0")
        if not self.epsilon > 0 or not 0 < self.delta < 1 or self.e_step_iterations < 1:
            raise ValueError("need epsilon > 0, 0 < delta < 1 and e_step_iterations >= 1")

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "DPLDASettings":
        """Settings from a round's ConfigRecord (or a run config with ``dplda.noise-multiplier`` filled in)."""
        return cls(n_topics=int(record["num-topics"]), alpha=float(record["alpha"]),
                   sample_rate=float(record["dplda.sample-rate"]), clip=float(record["dplda.clip"]),
                   noise_multiplier=float(record["dplda.noise-multiplier"]),
                   epsilon=float(record["dplda.epsilon"]), delta=float(record["dplda.delta"]),
                   e_step_iterations=int(record["dplda.e-step-iterations"]),
                   secure=bool(record.get("secure-aggregation", False)),
                   quantum=float(record.get("dplda.quantum", 256.0)))

    def to_record(self) -> dict[str, Any]:
        """The settings as ConfigRecord entries (inverse of :meth:`from_record`)."""
        return {"num-topics": self.n_topics, "alpha": self.alpha, "dplda.sample-rate": self.sample_rate,
                "dplda.clip": self.clip, "dplda.noise-multiplier": self.noise_multiplier,
                "dplda.epsilon": self.epsilon, "dplda.delta": self.delta,
                "dplda.e-step-iterations": self.e_step_iterations, "secure-aggregation": self.secure,
                "dplda.quantum": self.quantum}


#: The settings class (what every party of a round receives).
SETTINGS = DPLDASettings


def reply_spec(settings: DPLDASettings, vocab_size: int) -> ReplySpec:
    """A valid reply: one finite ``K x V`` float statistic, no metrics."""
    shape = (settings.n_topics, vocab_size)
    return ReplySpec(METHOD, {STATISTIC_KEY: ArraySpec("floating", shape, what="noisy expected-count statistic")},
                     metrics=(), max_bytes=8 * shape[0] * shape[1] + (1 << 16))


def check_config(config: Mapping[str, Any]) -> None:
    """What a ``dplda`` run needs before round 1 that no accountant is needed to tell (one line each; whether its
    target can be reached is :func:`check_noise`).

    Raises
    ------
    UserInputError
        With ``vocabulary='union'`` (it publishes every party's words and their exact
        document frequencies, outside any accountant), with ``federated-eval=true`` (the
        parties' evaluation sums are not accounted), when ``dplda.public-corpus`` names no file or folder,
        or when a ``private`` vocabulary spends the whole target.
    """
    if str(config["vocabulary"]) == "union":
        raise UserInputError("dplda needs an accounted vocabulary: vocabulary='private' (accounted) or the path of "
                             "a public vocabulary file; 'union' publishes every party's words with their document "
                             "frequencies")
    if bool(config["federated-eval"]):
        raise UserInputError("dplda: federated-eval=true would release the parties' evaluation sums outside the "
                             "accountant; set federated-eval=false and score the final model with "
                             "`flower-topics evaluate` on documents you may use")
    if str(config.get("prevalence-period", "")) and not str(config["prevalence-from"]).strip():
        raise UserInputError("dplda: prevalence adds noise to every period's cell, so the periods must be public: "
                             "set prevalence-from and prevalence-to (e.g. '2015-01' and '2024-12')")
    from flower_topics.data.readers import FORMATS_HINT, expand_path, path_exists

    public = str(config["dplda.public-corpus"])
    if public and not path_exists(expand_path(public)):
        raise UserInputError(f"dplda.public-corpus {shown(public, 200)} does not exist; pass {FORMATS_HINT} of public "
                             "text the server may read, or '' for none")
    budget(config).for_rounds()


def check_noise(config: Mapping[str, Any]) -> None:
    """That the whole-run target can be reached: the noise multiplier is calibrated (:func:`noise_multiplier`, once
    per process for the same question), which imports the accountant.

    Raises
    ------
    UserInputError
        When no noise in the accountant's range reaches the target (one line).
    """
    noise_multiplier(config)


def budget(config: Mapping[str, Any]) -> "Budget":
    """The run's whole-run target, with what the vocabulary agreement spends on the same documents.

    The ``private`` agreement's (eps, delta) per document follows from the run config alone
    (``vocabulary-epsilon``, ``vocabulary-delta``); a public vocabulary file spends nothing.
    """
    from flower_topics.privacy.accountants import Budget

    private = str(config["vocabulary"]) == "private"
    return Budget(float(config["dplda.epsilon"]), float(config["dplda.delta"]),
                  float(config["vocabulary-epsilon"]) if private else 0.0,
                  float(config["vocabulary-delta"]) if private else 0.0)


def noise_multiplier(config: Mapping[str, Any]) -> float:
    """``sigma`` that spends what the vocabulary leaves of the target over ``num-rounds`` rounds, composed with the
    prevalence release (:func:`prevalence_noise`) when the run asks for one.

    Raises
    ------
    UserInputError
        When the target cannot be reached (one line).
    """
    return _calibrate(*budget(config).for_rounds(), float(config["dplda.sample-rate"]), int(config["num-rounds"]),
                      _units(config), prevalence_noise(config))


def prevalence_noise(config: Mapping[str, Any]) -> float:
    """The noise multiplier of the prevalence release (0 without ``prevalence-period``): one Gaussian (Skellam under
    secure aggregation) of a table to which a document adds its topic shares (L2 norm at most 1, in one period),
    calibrated to ``dplda.prevalence-share`` of what the vocabulary leaves of the target, on its own."""
    if not str(config.get("prevalence-period", "")):
        return 0.0
    epsilon, delta = budget(config).for_rounds()
    return _calibrate(epsilon * float(config["dplda.prevalence-share"]), delta, 1.0, 1, _units(config), 0.0)


def _units(config: Mapping[str, Any]) -> float:
    """The sensitivity in integer units under secure aggregation (``C x quantum``), else 0."""
    return float(config["dplda.clip"]) * float(config["dplda.quantum"]) if bool(config["secure-aggregation"]) else 0.0


def _backend(units: float) -> tuple[str, dict[str, float]]:
    """The registered accountant of the releases and its options: PLD of the subsampled Gaussian, or under secure
    aggregation (``units``: the sensitivity in integer units) RDP of the subsampled Skellam."""
    return ("skellam", {"sensitivity": units}) if units else ("pld", {})


def accountant(settings: DPLDASettings) -> "Accountant":
    """A new accountant of this run's releases (:mod:`flower_topics.privacy.accountants`)."""
    from flower_topics.privacy.accountants import create_accountant

    name, options = _backend(settings.sensitivity_units if settings.secure else 0.0)
    return create_accountant(name, **options)


@functools.lru_cache(maxsize=32)
def _calibrate(epsilon: float, delta: float, sample_rate: float, rounds: int, units: float,
               prevalence: float) -> float:
    from flower_topics.privacy.accountants import get_noise_multiplier

    name, options = _backend(units)
    also = ((prevalence, 1.0, 1),) if prevalence else ()
    return get_noise_multiplier(name, target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate,
                                steps=rounds, also=also, **options)


def rounds_epsilon(settings: DPLDASettings, rounds: int, delta: float, prevalence: float = 0.0) -> float:
    """Epsilon at ``delta`` of ``rounds`` releases with these settings (:func:`accountant`), and of the prevalence
    release at noise multiplier ``prevalence`` when it is > 0."""
    spent = accountant(settings)
    spent.step(noise_multiplier=settings.noise_multiplier, sample_rate=settings.sample_rate, steps=rounds)
    if prevalence:
        spent.step(noise_multiplier=prevalence, sample_rate=1.0)
    return spent.get_epsilon(delta)


def calibrated_settings(config: Mapping[str, Any]) -> DPLDASettings:
    """The settings every party receives, from a validated run config (sigma calibrated)."""
    return DPLDASettings.from_record({**config, "dplda.noise-multiplier": noise_multiplier(config)})


def planned_releases(config: Mapping[str, Any]) -> tuple[Release, ...]:
    """What one whole run of this run config releases of a party's documents: ``num-rounds`` rounds at the
    calibrated ``sigma`` (Gaussian, or Skellam under secure aggregation) and a ``private`` vocabulary's
    ``(eps, delta)`` (what a party's privacy ledger checks its lifetime cap against before round 1)."""
    from flower_topics.privacy.ledger import APPROX_DP, Release

    run = calibrated_settings(config)
    rounds = int(config["num-rounds"])
    mechanism = "skellam" if run.secure else "gaussian"
    planned = [Release(mechanism, run.noise_multiplier, run.sample_rate, steps=rounds,
                       sensitivity=run.sensitivity_units if run.secure else 0.0)]
    prevalence = prevalence_noise(config)
    if prevalence:
        planned.append(Release(mechanism, prevalence, 1.0, sensitivity=run.sensitivity_units if run.secure else 0.0))
    if str(config["vocabulary"]) == "private":
        planned.append(Release(APPROX_DP, epsilon=float(config["vocabulary-epsilon"]),
                               delta=float(config["vocabulary-delta"])))
    return tuple(planned)


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
