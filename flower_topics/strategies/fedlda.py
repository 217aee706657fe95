"""Server side of FedLDA: global integration of perturbed tuples (Wang, Tong and Shi 2020, Algorithm 2).

The strategy keeps the global topic-word counts ``n_kw`` (int64, in the
:class:`~flwr.app.ArrayRecord` under :data:`COUNTS_KEY`; they never leave the
server) and sends clients only phi (:data:`PHI_KEY`, float32). Each reply carries
perturbed tuples ``(w, k_old, k_new)`` (:data:`TUPLES_KEY`); every valid tuple is
applied as ``n[k_old, w] -= 1; n[k_new, w] += 1`` (Algorithm 2, lines 5-7), and phi is
recomputed as ``(max(n, 0) + beta) / sum_w (max(n, 0) + beta)`` (Section 4).

Initialization. Algorithm 2 line 1 "randomly initializes z and the counters" at the
server; in a federation only the clients know their words. The counts start at zero
(phi uniform) and a document's first round enters its words as tuples
``(w, K, k)`` ("unassigned" to topic k), padded, sampled and perturbed like every
tuple. Dummy tuples are applied like real ones (see
:mod:`flower_topics.models.update_tuples` for the two kinds); counts that go
negative are clamped at zero in phi.

Privacy accounting is basic composition over the l tuples of a document per round
and over rounds (Section 5); the report includes the eta actually used and the fit
of phi to Zipf's law, the assumption of Theorem 1.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from logging import INFO
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid

from flower_topics.clients.fedlda import FedLDASettings, tuples_of
from flower_topics.models.update_tuples import apply_tuples, clamped_topic_word
from flower_topics.privacy import KRR, RRP, TruncatedKRR, compose, zipf_fit
from flower_topics.strategies.base import TopicStrategy

COUNTS_KEY = "topic-word-counts"
PHI_KEY = "topic-word"
TUPLES_KEY = "tuples"
ARRAYS = "arrays"
CONFIG = "config"
UPDATE = "update"
METRICS = "metrics"
ZIPF_TOP_RANKS = 200


class FedLDA(TopicStrategy):
    """FedLDA: federated LDA with locally differentially private tuple updates.

    Parameters
    ----------
    vocab_size : int
        Vocabulary size V.
    settings : FedLDASettings
        K, alpha, the sampler and the mechanism, sent to every client.
    beta : float
        Symmetric topic-word prior of phi.
    fraction_train : float (default: 1.0)
        Fraction of connected nodes sampled each round.
    min_nodes : int (default: 1)
        Nodes to wait for before a round starts.
    seed : int (default: 0)
        Seeds node sampling.
    """

    def __init__(
        self,
        vocab_size: int,
        settings: FedLDASettings,
        beta: float,
        fraction_train: float = 1.0,
        min_nodes: int = 1,
        seed: int = 0,
    ) -> None:
        super().__init__(fraction_train=fraction_train, min_nodes=min_nodes, seed=seed)
        if vocab_size < 2:
            raise ValueError("vocab_size must be >= 2")
        if beta <= 0:
            raise ValueError("beta must be > 0")
        self.vocab_size = vocab_size
        self.settings = settings
        self.beta = beta
        self.last_applied: dict[int, int] = {}
        self.rounds_accounted = 0
        self.max_tuples_per_doc = 0
        self.last_phi: np.ndarray | None = None
        self._counts: np.ndarray | None = None

    # ------------------------------------------------------------ model
    def initial_arrays(self) -> ArrayRecord:
        """All-zero counts (phi uniform); see the module docstring."""
        return ArrayRecord({COUNTS_KEY: Array(np.zeros((self.settings.n_topics, self.vocab_size), dtype=np.int64))})

    def topic_word(self, arrays: ArrayRecord) -> np.ndarray:
        """phi from the counts clamped at zero."""
        return clamped_topic_word(arrays[COUNTS_KEY].numpy(), self.beta)

    def summary(self) -> None:
        """Log the strategy's settings."""
        super().summary()
        s = self.settings
        log(INFO, "\t└──> FedLDA K=%d, V=%d, %s sampler, mechanism %s (eps %g per tuple, eta %.4g), l/M %.2f",
            s.n_topics, self.vocab_size, s.sampler, s.mechanism, s.epsilon, self.eta, s.sample_ratio)

    # ------------------------------------------------------------ rounds
    def configure_train(self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
                        ) -> Iterable[Message]:
        """Keep the counts the round starts from and phi, then message the sampled nodes."""
        self._counts = arrays[COUNTS_KEY].numpy().astype(np.int64)
        self.last_phi = clamped_topic_word(self._counts, self.beta)
        return super().configure_train(server_round, arrays, config, grid)

    def node_content(self, server_round: int, node_id: int, arrays: ArrayRecord, config: ConfigRecord) -> RecordDict:
        """phi (float32) and the round's settings; the counts stay on the server."""
        node_config = ConfigRecord({
            **dict(config),
            **self.settings.to_record(),
            "server-round": server_round,
            "last-applied-round": self.last_applied.get(node_id, 0),
        })
        phi = ArrayRecord({PHI_KEY: Array(self.last_phi.astype(np.float32))})
        return RecordDict({ARRAYS: phi, CONFIG: node_config})

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Apply every valid reply's tuples to the counts (Algorithm 2)."""
        replies = self.screen_replies(server_round, replies)
        if self._counts is None:
            raise RuntimeError("aggregate_train called before configure_train")
        counts = self._counts.copy()
        n_tuples = n_docs = 0
        round_l = 0
        for msg in replies:
            rows = self._valid_tuples(server_round, msg)
            if rows is None:
                continue
            apply_tuples(counts, tuples_of(rows))
            n_tuples += rows.shape[0]
            n_docs += int(msg.content[METRICS]["num-documents"])
            round_l = max(round_l, int(msg.content[METRICS]["max-tuples-per-document"]))
            self.last_applied[msg.metadata.src_node_id] = server_round
            self.traffic[server_round].replies_applied += 1
        metrics = self.traffic_metrics(server_round)
        metrics["num-tuples"] = n_tuples
        metrics["num-documents"] = n_docs
        if self.traffic[server_round].replies_applied == 0:
            return None, metrics
        self.rounds_accounted += 1
        self.max_tuples_per_doc = max(self.max_tuples_per_doc, round_l)
        self.last_phi = clamped_topic_word(counts, self.beta)
        return ArrayRecord({COUNTS_KEY: Array(counts)}), metrics

    def _valid_tuples(self, server_round: int, msg: Message) -> np.ndarray | None:
        content = msg.content
        if UPDATE not in content.array_records or TUPLES_KEY not in content[UPDATE]:
            self.reject(server_round, msg, f"no '{UPDATE}/{TUPLES_KEY}' array")
            return None
        needed = ("num-documents", "max-tuples-per-document")
        if METRICS not in content.metric_records or any(k not in content[METRICS] for k in needed):
            self.reject(server_round, msg, f"'{METRICS}' lacks {', '.join(needed)}")
            return None
        rows = content[UPDATE][TUPLES_KEY].numpy()
        if rows.ndim != 2 or rows.shape[1] != 3 or not np.issubdtype(rows.dtype, np.integer):
            self.reject(server_round, msg, f"tuples {rows.dtype}{rows.shape}, expected integer (n, 3)")
            return None
        k = self.settings.n_topics
        if rows.size and (rows[:, 0].min() < 0 or rows[:, 0].max() >= self.vocab_size
                          or rows[:, 1].min() < 0 or rows[:, 1].max() > k
                          or rows[:, 2].min() < 0 or rows[:, 2].max() >= k):
            self.reject(server_round, msg, f"tuple outside the vocabulary ({self.vocab_size}) or topics ({k})")
            return None
        return rows.astype(np.int64)

    # ------------------------------------------------------------ privacy
    @property
    def eta(self) -> float:
        """Probability that a tuple's word is replaced (0 without a mechanism)."""
        s = self.settings
        if s.mechanism == "rrp":
            return RRP(s.epsilon, s.delta, s.gamma).eta
        if s.mechanism == "krr":
            return KRR(s.epsilon, self.vocab_size).eta
        if s.mechanism == "tkrr":
            phi = self.last_phi if self.last_phi is not None else np.full((1, self.vocab_size), 1.0 / self.vocab_size)
            return TruncatedKRR(s.epsilon, s.delta, phi.mean(axis=0)).eta
        return 0.0

    def privacy_spent(self) -> dict[str, Any]:
        """Per tuple, per document and round, and in total by basic composition.

        A document is the unit of privacy (the paper's user); the totals assume it
        took part in every round that applied updates, the worst case. RRP's
        guarantee is Theorem 1's ``(eps, 2 delta)`` per tuple, which assumes
        Zipf-distributed topic-word proportions; the Zipf fit of the current phi
        (top ranks) is reported alongside.
        """
        s = self.settings
        if s.mechanism == "none":
            return {"mechanism": "none", "epsilon": None, "delta": None, "accountant": "none (no privacy mechanism)"}
        tuple_delta = 2.0 * s.delta if s.mechanism == "rrp" else 0.0
        per_round = compose(s.epsilon, tuple_delta, self.max_tuples_per_doc)
        total = compose(per_round.epsilon, per_round.delta, self.rounds_accounted)
        report: dict[str, Any] = {
            "mechanism": s.mechanism,
            "epsilon_per_tuple": s.epsilon,
            "delta_per_tuple": tuple_delta,
            "eta": self.eta,
            "gamma": (str(s.gamma) if math.isinf(s.gamma) else s.gamma) if s.mechanism == "rrp" else None,
            "tuples_per_document": self.max_tuples_per_doc,
            "epsilon_per_document_round": per_round.epsilon,
            "delta_per_document_round": per_round.delta,
            "rounds": self.rounds_accounted,
            "epsilon": total.epsilon,
            "delta": total.delta,
            "accountant": total.accountant,
        }
        if s.mechanism == "rrp":
            report["guarantee"] = ("Theorem 1 (Zipf assumption)" if not math.isinf(s.gamma)
                                   else "none proven: gamma=inf is the paper's experimental eta, the limit of Theorem 1")
            if self.last_phi is not None and self.rounds_accounted:
                fit = zipf_fit(self.last_phi, top=ZIPF_TOP_RANKS)
                report["zipf_exponent_mean"] = float(fit.exponent.mean())
                report["zipf_r2_min"] = float(fit.r2.min())
        return report
