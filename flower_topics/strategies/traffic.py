"""Bytes and participants of each round, as the strategy counts them and reports them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from flwr.app import MetricRecord


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
    model_held : bool
        Fewer than ``min_replies`` valid replies: the global model did not change.
    eval_bytes_sent : int
        Payload bytes of the round's evaluation requests (its own messages or carried in the next round's).
    eval_bytes_received : int
        Payload bytes of the evaluation sums that came back.
    started : float
        ``time.time()`` when the round was configured.
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    nodes_sampled: int = 0
    replies_applied: int = 0
    replies_failed: int = 0
    model_held: bool = False
    eval_bytes_sent: int = 0
    eval_bytes_received: int = 0
    started: float = field(default_factory=time.time)

    def metrics(self) -> MetricRecord:
        """The round's traffic as a MetricRecord."""
        return MetricRecord({
            "bytes-sent": self.bytes_sent,
            "bytes-received": self.bytes_received,
            "nodes-sampled": self.nodes_sampled,
            "replies-applied": self.replies_applied,
            "replies-failed": self.replies_failed,
            "model-held": int(self.model_held),
            "eval-bytes-sent": self.eval_bytes_sent,
            "eval-bytes-received": self.eval_bytes_received,
        })


def rounds_released(traffic: dict[int, RoundTraffic]) -> int:
    """Rounds in which parties were asked to release: every round sent to at least one node, the rounds lost to
    a crash included (:func:`record_lost_round`); a party asked counts, whether or not it replied."""
    return sum(1 for t in traffic.values() if t.nodes_sampled)


def record_lost_round(traffic: dict[int, RoundTraffic], nodes_sampled: int) -> None:
    """Count a round released to ``nodes_sampled`` nodes and lost to a crash in ``traffic``.

    The round is re-run under its own number after the resume, so the lost release is kept
    under a negative key (below every other): every report that counts the rounds with
    ``nodes_sampled`` counts it, and no round's metrics change.
    """
    key = min(0, *traffic) - 1 if traffic else -1
    traffic[key] = RoundTraffic(nodes_sampled=nodes_sampled, started=0.0)
