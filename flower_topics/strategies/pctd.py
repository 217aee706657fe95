"""Server side of PC-TD (Shi et al., IEEE Intelligent Systems 2020, Algorithm 1, lines 11-13).

Each round the strategy sends the global ``p(w|z)`` (:data:`PHI_KEY`, float32) to the
sampled parties; each replies with its noisy statistic ``M_t(w, z_k)`` of eq. (10)
(:data:`STATISTIC_KEY`). The strategy checks every reply (shape, floating dtype, finite)
and then, on the valid ones:

1. sums them, ``S = sum_t M_t`` (eq. 11's numerator);
2. normalizes with the negative noisy mass clamped and a pseudo-count ``beta`` added,
   ``p(w|z_k) = (max(S_kw, 0) + beta) / sum_w' (max(S_kw', 0) + beta)``
   (:func:`flower_topics.models.pctd_server.normalize_topic_word`: clamping is the
   projection onto the non-negative counts the noiseless statistic has, post-processing
   that costs no privacy; ``beta > 0`` keeps ``p(w|z)`` strictly positive, which the
   parties' log-space E-step needs, and plays the role of LDA's topic-word prior);
3. with ``tau > 0``, applies the global semantic consistency of eq. (13) with a sparse
   word-similarity matrix ``R`` (eq. 12) and renormalizes;

and pushes the result to the parties in the next round. The first round's ``p(w|z)`` is
drawn from the strategy's seed (Algorithm 1, line 2, shared so that topic ``k`` means the
same for every party).

Privacy. Each party's data enter only its own releases, one Gaussian mechanism per round
it took part in (noise multiplier ``sigma``, sensitivity ``Delta N = 1``). The report
gives epsilon at ``delta`` by Renyi-DP accounting (Opacus) for the party asked to release
in the most rounds so far, next to the explicit form of the
paper's Theorem 1 and whether its premise holds.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO
from typing import Any

import numpy as np
import scipy.sparse as sp
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid

from flower_topics.clients.pctd import PCTDSettings
from flower_topics.models.pctd import random_topic_word
from flower_topics.models.pctd_server import (
    clamped_mass,
    normalize_topic_word,
    semantic_consistency,
    sum_statistics,
)
from flower_topics.privacy.gaussian import ACCOUNTANT, gaussian_epsilon_and_order, theorem1_epsilon, theorem1_valid
from flower_topics.strategies.base import TopicStrategy

PHI_KEY = "topic-word"
STATISTIC_KEY = "topic-word-statistic"
ARRAYS = "arrays"
CONFIG = "config"
UPDATE = "update"


class PCTD(TopicStrategy):
    """PC-TD: federated EM over semantic units with Gaussian noise and global semantic consistency.

    Parameters
    ----------
    vocab_size : int
        Vocabulary size V.
    settings : PCTDSettings
        K, sigma and the semantic units, sent to every party.
    delta : float (default: 1e-5)
        The delta at which epsilon is reported.
    beta : float (default: 0.01)
        Pseudo-count added to every clamped summed statistic before normalizing (> 0).
    tau : float (default: 0.0)
        Tradeoff of the global semantic consistency, eq. (13); 0 turns it off.
    similarity : scipy.sparse matrix, optional
        ``(V, V)`` non-negative word similarities ``R`` (eq. 12), required when ``tau > 0``
        (e.g. :func:`flower_topics.models.word_similarity.word_similarity_matrix`).
    fraction_train : float (default: 1.0)
        Fraction of connected nodes sampled each round.
    min_nodes : int (default: 1)
        Nodes to wait for before a round starts.
    seed : int (default: 0)
        Seeds the initial ``p(w|z)`` and node sampling.
    """

    def __init__(
        self,
        vocab_size: int,
        settings: PCTDSettings,
        delta: float = 1e-5,
        beta: float = 0.01,
        tau: float = 0.0,
        similarity: sp.spmatrix | None = None,
        fraction_train: float = 1.0,
        min_nodes: int = 1,
        seed: int = 0,
    ) -> None:
        super().__init__(fraction_train=fraction_train, min_nodes=min_nodes, seed=seed)
        if vocab_size < 1:
            raise ValueError("vocab_size must be >= 1")
        if not 0 < delta < 1:
            raise ValueError("delta must be in (0, 1)")
        if not beta > 0:
            raise ValueError("beta must be > 0 (p(w|z) must stay strictly positive)")
        if not tau >= 0:
            raise ValueError("tau must be >= 0")
        if tau > 0:
            if similarity is None:
                raise ValueError("tau > 0 needs the word-similarity matrix R (similarity=...)")
            similarity = sp.csr_matrix(similarity, dtype=np.float64)
            if similarity.shape != (vocab_size, vocab_size):
                raise ValueError(f"similarity is {similarity.shape}, expected ({vocab_size}, {vocab_size})")
        self.vocab_size = vocab_size
        self.settings = settings
        self.delta = delta
        self.beta = beta
        self.tau = tau
        self.similarity = similarity if tau > 0 else None
        self.releases: dict[int, int] = {}

    def initial_arrays(self) -> ArrayRecord:
        """A random ``p(w|z)`` (flat Dirichlet rows) from the strategy's seed."""
        phi = random_topic_word(self.settings.n_topics, self.vocab_size, np.random.default_rng([self.seed, 0]))
        return ArrayRecord({PHI_KEY: Array(phi.astype(np.float32))})

    def topic_word(self, arrays: ArrayRecord) -> np.ndarray:
        """The global ``p(w|z)`` as float64, rows renormalized after the float32 transport."""
        phi = arrays[PHI_KEY].numpy().astype(np.float64)
        return phi / phi.sum(axis=1, keepdims=True)

    def summary(self) -> None:
        """Log the strategy's settings."""
        super().summary()
        s = self.settings
        log(INFO, "\t└──> K=%d, V=%d, sigma=%g, %s units (n=%d), beta=%g, tau=%g, delta=%g",
            s.n_topics, self.vocab_size, s.sigma, s.unit, s.ngram, self.beta, self.tau, self.delta)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Send ``p(w|z)`` and the settings to the sampled parties; count the release for privacy."""
        messages = list(super().configure_train(server_round, arrays, config, grid))
        for msg in messages:
            node = msg.metadata.dst_node_id
            self.releases[node] = self.releases.get(node, 0) + 1
        return messages

    @property
    def rounds_released(self) -> int:
        """The most rounds any one party was asked to release in (the worst party's T)."""
        return max(self.releases.values(), default=0)

    def node_content(
        self, server_round: int, node_id: int, arrays: ArrayRecord, config: ConfigRecord
    ) -> RecordDict:
        """The global ``p(w|z)`` and the round's settings."""
        node_config = ConfigRecord({**dict(config), **self.settings.to_record(), "server-round": server_round})
        return RecordDict({ARRAYS: arrays, CONFIG: node_config})

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Eq. (11) on the summed valid statistics, then eq. (13) when ``tau > 0``."""
        replies = self.screen_replies(server_round, replies)
        valid = [m for m in (self._valid_statistic(server_round, msg) for msg in replies) if m is not None]
        self.traffic[server_round].replies_applied += len(valid)
        metrics = self.traffic_metrics(server_round)
        if not valid:
            return None, metrics
        total = sum_statistics(valid)
        phi = self.merge(total)
        metrics["statistic-mass"] = float(total.sum())
        metrics["clamped-mass"] = float(clamped_mass(total).sum())
        return ArrayRecord({PHI_KEY: Array(phi.astype(np.float32))}), metrics

    def merge(self, total: np.ndarray) -> np.ndarray:
        """``p(w|z)`` from the summed statistic: clamped eq. (11), then eq. (13) when ``tau > 0``."""
        phi = normalize_topic_word(total, self.beta)
        if self.tau > 0:
            phi = semantic_consistency(phi, self.similarity, self.tau)
        return phi

    def _valid_statistic(self, server_round: int, msg: Message) -> np.ndarray | None:
        content = msg.content
        if UPDATE not in content.array_records or STATISTIC_KEY not in content[UPDATE]:
            self.reject(server_round, msg, f"no '{UPDATE}/{STATISTIC_KEY}' array")
            return None
        statistic = content[UPDATE][STATISTIC_KEY].numpy()
        expected = (self.settings.n_topics, self.vocab_size)
        if statistic.shape != expected or not np.issubdtype(statistic.dtype, np.floating):
            self.reject(server_round, msg, f"statistic {statistic.dtype}{statistic.shape}, expected float {expected}")
            return None
        if not np.all(np.isfinite(statistic)):
            self.reject(server_round, msg, "statistic has non-finite entries")
            return None
        return statistic.astype(np.float64)

    # ------------------------------------------------------------ privacy
    def privacy_spent(self) -> dict[str, Any]:
        """epsilon at ``delta`` of the party asked most often so far (RDP, Opacus), and Theorem 1's form.

        ``rounds`` counts the training messages a party received, whether or not its reply
        arrived (it released when it computed ``M_t``); the unit of privacy is the paper's:
        one word of one document (sensitivity 1 on the unit counts).
        """
        sigma, rounds = self.settings.sigma, self.rounds_released
        if sigma == 0:
            return {"mechanism": "none", "sigma": 0.0, "rounds": rounds, "epsilon": None, "delta": None,
                    "accountant": "none (sigma = 0: no noise)"}
        epsilon, order = gaussian_epsilon_and_order(sigma, rounds, self.delta)
        report: dict[str, Any] = {
            "mechanism": "gaussian",
            "sigma": sigma,
            "sensitivity": 1.0,
            "rounds": rounds,
            "epsilon": epsilon,
            "delta": self.delta,
            "rdp_order": None if rounds == 0 else order,
            "accountant": ACCOUNTANT,
        }
        if rounds:
            report["theorem1_epsilon"] = theorem1_epsilon(sigma, rounds, self.delta)
            report["theorem1_valid"] = theorem1_valid(sigma, rounds, self.delta)
        return report
