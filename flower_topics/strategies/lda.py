"""Server side of plain federated LDA: sum the clients' count updates.

The global model is the ``K x V`` topic-word count matrix ``n_kw``, sent to clients
in an :class:`~flwr.app.ArrayRecord` under :data:`COUNTS_KEY`. Each client replies
with the change of its own counts (:data:`DELTA_KEY`); the strategy checks every
reply (shape, integer dtype, counts that stay non-negative) and adds the valid ones:

    n_kw <- n_kw + sum_c delta_c

phi = (n_kw + beta) / (n_k + V beta) is derived on demand
(:func:`flower_topics.models.lda.topic_word_distribution`).
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid

from flower_topics.models.lda import topic_word_distribution
from flower_topics.strategies.base import TopicStrategy

COUNTS_KEY = "topic-word-counts"
DELTA_KEY = "topic-word-delta"
ARRAYS = "arrays"
CONFIG = "config"
UPDATE = "update"
METRICS = "metrics"


def counts_record(counts: np.ndarray) -> ArrayRecord:
    """Wrap a ``K x V`` count matrix as the ArrayRecord the strategy exchanges."""
    return ArrayRecord({COUNTS_KEY: Array(np.ascontiguousarray(counts, dtype=np.int32))})


class FederatedLDA(TopicStrategy):
    """Plain federated LDA (AD-LDA without privacy).

    Parameters
    ----------
    n_topics : int
        Number of topics K.
    vocab_size : int
        Vocabulary size V.
    alpha : float
        Symmetric document-topic prior, sent to clients.
    beta : float
        Symmetric topic-word prior, sent to clients.
    local_sweeps : int (default: 1)
        Gibbs sweeps each client runs per round.
    fraction_train : float (default: 1.0)
        Fraction of connected nodes sampled each round.
    min_nodes : int (default: 1)
        Nodes to wait for before a round starts.
    seed : int (default: 0)
        Seeds node sampling.
    """

    def __init__(
        self,
        n_topics: int,
        vocab_size: int,
        alpha: float,
        beta: float,
        local_sweeps: int = 1,
        fraction_train: float = 1.0,
        min_nodes: int = 1,
        seed: int = 0,
    ) -> None:
        super().__init__(fraction_train=fraction_train, min_nodes=min_nodes, seed=seed)
        if n_topics < 1 or vocab_size < 1:
            raise ValueError("n_topics and vocab_size must be >= 1")
        if alpha <= 0 or beta <= 0:
            raise ValueError("alpha and beta must be > 0")
        if local_sweeps < 1:
            raise ValueError("local_sweeps must be >= 1")
        self.n_topics = n_topics
        self.vocab_size = vocab_size
        self.alpha = alpha
        self.beta = beta
        self.local_sweeps = local_sweeps
        self.last_applied: dict[int, int] = {}
        self._counts: np.ndarray | None = None

    def initial_arrays(self) -> ArrayRecord:
        """All-zero global counts: clients add their own on their first update."""
        return counts_record(np.zeros((self.n_topics, self.vocab_size), dtype=np.int32))

    def topic_word(self, arrays: ArrayRecord) -> np.ndarray:
        """phi = (n_kw + beta) / (n_k + V beta) of the global counts."""
        return topic_word_distribution(arrays[COUNTS_KEY].numpy(), self.beta)

    def summary(self) -> None:
        """Log the strategy's settings."""
        super().summary()
        log(INFO, "\t└──> K=%d, V=%d, alpha=%g, beta=%g, %d local sweep(s) per round",
            self.n_topics, self.vocab_size, self.alpha, self.beta, self.local_sweeps)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """Keep the global counts the round starts from, then message the sampled nodes."""
        self._counts = arrays[COUNTS_KEY].numpy()
        return super().configure_train(server_round, arrays, config, grid)

    def node_content(
        self, server_round: int, node_id: int, arrays: ArrayRecord, config: ConfigRecord
    ) -> RecordDict:
        """Global counts plus the settings and this node's last applied round."""
        node_config = ConfigRecord({
            **dict(config),
            "server-round": server_round,
            "last-applied-round": self.last_applied.get(node_id, 0),
            "num-topics": self.n_topics,
            "alpha": self.alpha,
            "beta": self.beta,
            "local-sweeps": self.local_sweeps,
        })
        return RecordDict({ARRAYS: arrays, CONFIG: node_config})

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Add every valid reply's count change to the global counts."""
        replies = self.screen_replies(server_round, replies)
        if self._counts is None:
            raise RuntimeError("aggregate_train called before configure_train")
        counts = self._counts.astype(np.int64)
        n_tokens = 0
        for msg in replies:
            delta = self._valid_delta(server_round, msg, counts)
            if delta is None:
                continue
            counts += delta
            n_tokens += int(msg.content[METRICS]["num-tokens"])
            self.last_applied[msg.metadata.src_node_id] = server_round
            self.traffic[server_round].replies_applied += 1
        metrics = self.traffic_metrics(server_round)
        metrics["num-tokens"] = n_tokens
        if self.traffic[server_round].replies_applied == 0:
            return None, metrics
        return counts_record(counts), metrics

    def _valid_delta(self, server_round: int, msg: Message, counts: np.ndarray) -> np.ndarray | None:
        content = msg.content
        if UPDATE not in content.array_records or DELTA_KEY not in content[UPDATE]:
            self.reject(server_round, msg, f"no '{UPDATE}/{DELTA_KEY}' array")
            return None
        if METRICS not in content.metric_records or "num-tokens" not in content[METRICS]:
            self.reject(server_round, msg, f"no '{METRICS}/num-tokens'")
            return None
        delta = content[UPDATE][DELTA_KEY].numpy()
        if delta.shape != counts.shape or not np.issubdtype(delta.dtype, np.integer):
            self.reject(server_round, msg, f"delta {delta.dtype}{delta.shape}, expected integer {counts.shape}")
            return None
        if np.any(counts + delta < 0):
            self.reject(server_round, msg, "update would make global counts negative")
            return None
        return delta
