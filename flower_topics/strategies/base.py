"""What every topic-modeling strategy shares: seeded node sampling, per-node
messages, reply screening and byte accounting.

A method's strategy subclasses :class:`TopicStrategy` and implements
``node_content`` (what one node receives) and ``aggregate_train``; the base keeps
Flower's :meth:`~flwr.serverapp.strategy.Strategy.start` loop untouched, so that any
ServerApp can run the strategy.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from logging import INFO, WARNING

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy


def payload_bytes(content: RecordDict) -> int:
    """Serialized size in bytes of a message's records (arrays, configs, metrics)."""
    total = 0
    for record in content.values():
        total += record.count_bytes() if isinstance(record, ArrayRecord) else len(record.deflate())
    return total


@dataclass
class RoundTraffic:
    """Bytes and participants of one round.

    Parameters
    ----------
    bytes_sent : int
        Payload bytes the server sent, over all nodes.
    bytes_received : int
        Payload bytes of the replies received.
    nodes_sampled : int
        Nodes the round was sent to.
    replies_applied : int
        Replies that passed validation and were aggregated.
    replies_failed : int
        Replies that carried an error or failed validation.
    started : float
        ``time.time()`` when the round was configured.
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    nodes_sampled: int = 0
    replies_applied: int = 0
    replies_failed: int = 0
    started: float = field(default_factory=time.time)


class TopicStrategy(Strategy):
    """Base of the package's strategies.

    Parameters
    ----------
    fraction_train : float (default: 1.0)
        Fraction of connected nodes sampled each round (at least ``min_nodes``).
    min_nodes : int (default: 1)
        Nodes to wait for before a round starts.
    seed : int (default: 0)
        Seeds the node sampling of every round.
    """

    def __init__(self, fraction_train: float = 1.0, min_nodes: int = 1, seed: int = 0) -> None:
        if not 0.0 < fraction_train <= 1.0:
            raise ValueError("fraction_train must be in (0, 1]")
        if min_nodes < 1:
            raise ValueError("min_nodes must be >= 1")
        self.fraction_train = fraction_train
        self.min_nodes = min_nodes
        self.seed = seed
        self.traffic: dict[int, RoundTraffic] = {}

    # ------------------------------------------------------------ hooks
    @abstractmethod
    def node_content(
        self, server_round: int, node_id: int, arrays: ArrayRecord, config: ConfigRecord
    ) -> RecordDict:
        """The content of the training message for one node."""

    @abstractmethod
    def initial_arrays(self) -> ArrayRecord:
        """The global model the first round starts from."""

    @abstractmethod
    def topic_word(self, arrays: ArrayRecord) -> np.ndarray:
        """The ``K x V`` topic-word distribution of a global model."""

    def privacy_spent(self) -> dict[str, float | str | None]:
        """Privacy spent so far: epsilon, delta and the accounting used (none here)."""
        return {"epsilon": None, "delta": None, "accountant": "none (no privacy mechanism)"}

    # ------------------------------------------------------------ Strategy API
    def summary(self) -> None:
        """Log the strategy's settings."""
        log(INFO, "\t├──> %s", type(self).__name__)
        log(INFO, "\t├──> Sampling: fraction %.2f, at least %d node(s), seed %d",
            self.fraction_train, self.min_nodes, self.seed)

    def sample_nodes(self, grid: Grid, server_round: int) -> list[int]:
        """Wait for ``min_nodes`` nodes, then sample the round's nodes with the seed."""
        while len(nodes := sorted(grid.get_node_ids())) < self.min_nodes:
            log(INFO, "Waiting for nodes: %d connected, %d required", len(nodes), self.min_nodes)
            time.sleep(1.0)
        size = max(self.min_nodes, int(round(len(nodes) * self.fraction_train)))
        rng = np.random.default_rng([self.seed, server_round])
        # choose positions, not ids: node ids are uint64 and would not survive a numpy round trip
        chosen = rng.choice(len(nodes), size=min(size, len(nodes)), replace=False)
        return sorted(nodes[i] for i in chosen)

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One training message per sampled node, each built by :meth:`node_content`."""
        traffic = self.traffic[server_round] = RoundTraffic()
        messages = []
        for node_id in self.sample_nodes(grid, server_round):
            content = self.node_content(server_round, node_id, arrays, config)
            traffic.bytes_sent += payload_bytes(content)
            messages.append(Message(content=content, message_type=MessageType.TRAIN, dst_node_id=node_id))
        traffic.nodes_sampled = len(messages)
        log(INFO, "configure_train: round %d sent to %d node(s)", server_round, len(messages))
        return messages

    def screen_replies(self, server_round: int, replies: Iterable[Message]) -> list[Message]:
        """Replies without error, with their bytes counted; errors are logged and counted."""
        traffic = self.traffic.setdefault(server_round, RoundTraffic())
        good = []
        for msg in replies:
            if msg.has_error():
                traffic.replies_failed += 1
                log(WARNING, "round %d: node %d replied with an error: %s",
                    server_round, msg.metadata.src_node_id, msg.error.reason)
                continue
            traffic.bytes_received += payload_bytes(msg.content)
            good.append(msg)
        return good

    def reject(self, server_round: int, msg: Message, reason: str) -> None:
        """Count and log a reply that failed validation (it is not aggregated)."""
        self.traffic[server_round].replies_failed += 1
        log(WARNING, "round %d: reply of node %d rejected: %s", server_round, msg.metadata.src_node_id, reason)

    def traffic_metrics(self, server_round: int) -> MetricRecord:
        """The round's traffic as a MetricRecord."""
        t = self.traffic.get(server_round, RoundTraffic())
        return MetricRecord({
            "bytes-sent": t.bytes_sent,
            "bytes-received": t.bytes_received,
            "nodes-sampled": t.nodes_sampled,
            "replies-applied": t.replies_applied,
            "replies-failed": t.replies_failed,
        })

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """No federated evaluation: the global topic-word matrix is scored by the ServerApp."""
        return []

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """Nothing to aggregate (see :meth:`configure_evaluate`)."""
        return None
