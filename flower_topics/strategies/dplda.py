"""Server side of ``dplda``: DP stochastic variational inference for LDA, one whole-run accountant.

Park, Foulds, Chaudhuri and Welling 2016 ("Private topic modeling", arXiv 1609.04120),
Algorithm 1, on the federation; the variational updates are online LDA's (Hoffman, Blei and
Bach, NIPS 2010, Algorithm 2). The global model is ``lambda`` (``K x V``, the topics'
Dirichlet parameters). Each round every sampled party sends the noisy, clipped sum of the
expected sufficient statistics of a Poisson sample of its documents
(:mod:`flower_topics.clients.dplda`); the strategy

1. sums them, ``S = sum_p S_p`` (each party's noise ``N(0, (sigma C)^2)`` per cell, so the sum
   carries ``n_replies (sigma C)^2``);
2. post-processes ``S`` (no privacy cost): cells below ``threshold`` standard deviations of
   that summed noise are set to 0, which also removes every negative cell;
3. scales to the full corpus, ``lambda_tilde = eta + S / q`` (each document was included with
   probability ``q``, so ``S / q`` estimates the full-corpus statistic), and takes the
   natural-gradient step ``lambda <- (1 - rho_t) lambda + rho_t lambda_tilde``,
   ``rho_t = (tau0 + t)^-kappa`` (Hoffman et al. 2010, eq. 7 and Section 2.2).

The topics are ``E[beta_k] = lambda_k / sum_w lambda_kw``. The initial ``lambda`` is public,
drawn from the run seed (Gamma(100, 1/100), as Hoffman et al.).

Privacy (:mod:`flower_topics.privacy.accountant`). The user sets the whole run's target
``dplda.epsilon`` and ``dplda.delta`` per document; the ``private`` vocabulary agreement's
spending is subtracted (basic composition) and the noise multiplier ``sigma`` is the
smallest whose ``num-rounds`` Poisson-subsampled Gaussian releases spend the rest (RDP,
dp-accounting). The report counts the rounds the parties were asked to release in, so a
shorter run spends less and a run can never spend more than its target; every party also
keeps its own accountant and refuses a release over it.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from flwr.app import Array, ArrayRecord

from flower_topics.models import svi
from flower_topics.privacy.accountant import ACCOUNTANT, Budget, rounds_epsilon
from flower_topics.privacy.report import PrivacyReport
from flower_topics.strategies.base import Reply, TopicStrategy
from flower_topics.wire import dplda as wire
from flower_topics.wire.protocol import ReplySpec

TRUST_MODEL = ("every party adds the full noise to its own release: the guarantee holds against the server and "
               "every other party, trusting none of them (no secure aggregation)")


def lambda_record(lam: np.ndarray, dtype: type = np.float64) -> ArrayRecord:
    """Wrap the ``K x V`` topic parameters as the ArrayRecord the strategy exchanges."""
    return ArrayRecord({wire.LAMBDA_KEY: Array(np.ascontiguousarray(lam, dtype=dtype))})


def denoise(statistic: np.ndarray, noise_std: float, threshold: float) -> np.ndarray:
    """Cells of a noisy statistic below ``threshold`` noise standard deviations (and all negative cells) set to 0."""
    return np.where(statistic > threshold * noise_std, statistic, 0.0)


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
    threshold : float (default: 2.0)
        Post-processing threshold in standard deviations of the round's summed noise.
    **federation : Any
        ``fraction_train``, ``min_nodes``, ``min_replies``, ``seed``, ``evaluation`` of
        :class:`TopicStrategy`; the seed also draws the initial ``lambda``.
    """

    method = wire.METHOD

    def __init__(self, vocabulary: Sequence[str], settings: wire.DPLDASettings, *, budget: Budget,
                 eta: float = 0.01, tau0: float = 1.0, kappa: float = 0.7, threshold: float = 2.0,
                 **federation: Any) -> None:
        super().__init__(vocabulary, **federation)
        self.dplda = settings
        self.budget = budget
        self.eta, self.tau0, self.kappa, self.threshold = eta, tau0, kappa, threshold
        self.updates = 0

    @classmethod
    def from_config(cls, config: Mapping[str, Any], vocabulary: Sequence[str]) -> "DPLDA":
        """The strategy of a validated run config (the noise multiplier calibrated to the whole-run target)."""
        wire.check_config(config)
        return cls(vocabulary, wire.settings(config), budget=wire.budget(config), eta=float(config["beta"]),
                   tau0=float(config["dplda.tau0"]), kappa=float(config["dplda.kappa"]),
                   threshold=float(config["dplda.threshold"]), **cls.federation_options(config))

    def initial_arrays(self) -> ArrayRecord:
        """Public initial ``lambda`` from the run seed."""
        return lambda_record(svi.initial_lambda(self.dplda.n_topics, self.vocab_size, self.seed))

    def node_arrays(self, server_round: int, node_id: int, arrays: ArrayRecord) -> ArrayRecord:
        """``lambda`` as float32 (half the bytes; the parties' E-step needs no more)."""
        return lambda_record(arrays[wire.LAMBDA_KEY].numpy(), np.float32)

    def topic_word(self, arrays: ArrayRecord) -> np.ndarray:
        """``E[beta_k] = lambda_k / sum_w lambda_kw``."""
        lam = arrays[wire.LAMBDA_KEY].numpy()
        return lam / lam.sum(axis=1, keepdims=True)

    def settings(self) -> dict[str, Any]:
        """K, alpha, q, C, sigma, the target and the E-step iterations."""
        return self.dplda.to_record()

    def reply_spec(self) -> ReplySpec:
        """One finite ``K x V`` float statistic, no metrics."""
        return wire.reply_spec(self.dplda, self.vocab_size)

    def aggregate(self, server_round: int, arrays: ArrayRecord, replies: list[Reply]
                  ) -> tuple[ArrayRecord, dict[str, float]]:
        """Sum, threshold, scale by ``1 / q`` and take the natural-gradient step."""
        total = np.sum([r.arrays[wire.STATISTIC_KEY].astype(np.float64) for r in replies], axis=0)
        noise_std = self.dplda.noise_multiplier * self.dplda.clip * np.sqrt(len(replies))
        estimate = self.eta + denoise(total, noise_std, self.threshold) / self.dplda.sample_rate
        rho = svi.step_size(self.updates, self.tau0, self.kappa)
        lam = svi.natural_gradient_step(arrays[wire.LAMBDA_KEY].numpy(), estimate, rho)
        self.updates += 1
        return lambda_record(lam), {"step-size": rho, "noise-std": noise_std}

    def rounds_released(self) -> int:
        """Rounds in which parties were asked to release (a party asked counts, whether or not it replied)."""
        return sum(1 for t in self.traffic.values() if t.nodes_sampled)

    def privacy_report(self) -> PrivacyReport:
        """The training rounds' (eps, delta) per document so far; the ServerApp composes the vocabulary's."""
        eps_rounds, delta_rounds = self.budget.for_rounds()
        sigma, q = self.dplda.noise_multiplier, self.dplda.sample_rate
        rounds = self.rounds_released()
        epsilon = rounds_epsilon(sigma, q, rounds, delta_rounds)
        evaluation = self.unaccounted_evaluation()  # refused by the run config; a strategy built by hand may have it
        document: dict[str, Any] = (
            dict(document_epsilon=epsilon, document_delta=delta_rounds,
                 document_guarantee=f"every training round (RDP) and, composed in by the ServerApp, the vocabulary "
                                    f"agreement when it is 'private'; {TRUST_MODEL}") if evaluation is None else
            dict(document_guarantee=f"none: {evaluation} is not accounted (training alone: eps {epsilon:.4g}, "
                                    f"delta {delta_rounds:g} per document)"))
        return PrivacyReport(
            mechanism=f"Poisson-subsampled Gaussian on clipped expected counts (DP-SVI, Park et al. 2016), "
                      f"sigma {sigma:.4g}, q {q:g}, C {self.dplda.clip:g}",
            unit="document",
            accountant=ACCOUNTANT,
            rounds=rounds,
            epsilon_round=rounds_epsilon(sigma, q, 1, delta_rounds),
            delta_round=delta_rounds,
            epsilon=epsilon,
            delta=delta_rounds,
            **document,
            guarantee=(f"(eps, delta)-DP for adding or removing one document of any party, over everything the "
                       f"server receives in training; {TRUST_MODEL}"),
            details={"noise_multiplier": sigma, "sample_rate": q, "clip": self.dplda.clip,
                     "target_epsilon": self.budget.epsilon, "target_delta": self.budget.delta,
                     "training_epsilon_budget": eps_rounds, "trust_model": TRUST_MODEL,
                     "composed": "vocabulary agreement (basic composition) + training rounds (RDP); "
                                 "no federated evaluation"},
        )
