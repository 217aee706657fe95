"""Who takes part in a round: the seeded sample of the nodes that can, and the nodes excluded for good.

A node whose error reply says it can never take part (:data:`~flower_topics.wire.protocol.BAD_INPUT`,
or a ClientApp without the method's handler) is no longer sampled, and the run stops with one line
(:class:`FederationError`) when fewer than ``min_nodes`` nodes remain.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from logging import INFO, WARNING
from typing import Mapping

import numpy as np
from flwr.app import Message
from flwr.common import log
from flwr.serverapp import Grid

from flower_topics.errors import UserInputError
from flower_topics.wire.protocol import BAD_INPUT

#: Part of the error of a ClientApp that has no handler for the message type.
NO_HANDLER = "function registered with name"


def exclusion_reasons(excluded: Mapping[int, str]) -> str:
    """Why each excluded node could not take part, in one line (``"no replies"`` when none is named)."""
    return "; ".join(f"node {n}: {why}" for n, why in sorted(excluded.items())) or "no replies"


class FederationError(UserInputError):
    """Too few nodes can take part: the run cannot go on."""

    @classmethod
    def too_few(cls, stage: str, able: int, min_nodes: int, excluded: Mapping[int, str]) -> "FederationError":
        """One line: the stage, how many nodes can take part, and why the others cannot."""
        return cls(f"{stage}: {able} node(s) can take part, min-nodes is {min_nodes} ({exclusion_reasons(excluded)})")


def wait_for_nodes(grid: Grid, min_nodes: int, excluded: Iterable[int] = ()) -> set[int]:
    """The connected nodes, once at least ``min_nodes`` of them are not ``excluded`` (polls every second)."""
    excluded = set(excluded)
    while len((connected := set(grid.get_node_ids())) - excluded) < min_nodes:
        log(INFO, "Waiting for nodes: %d can take part, %d required", len(connected - excluded), min_nodes)
        time.sleep(1.0)
    return connected


def error_reason(msg: Message) -> str:
    """The last line of an error reply's reason (Flower puts the exception there)."""
    reason = msg.error.reason.strip()
    return reason.splitlines()[-1] if reason else f"no reason given (error code {msg.error.code})"


class Participants:
    """The nodes of each round, and those that can no longer take part.

    Parameters
    ----------
    fraction_train : float
        Fraction of the nodes that can take part sampled each round (at least ``min_nodes``).
    min_nodes : int
        Nodes to wait for before a round starts; the run stops when fewer can take part.
    seed : int
        Seeds each round's sample (with the round number).
    """

    def __init__(self, fraction_train: float, min_nodes: int, seed: int) -> None:
        if not 0.0 < fraction_train <= 1.0:
            raise ValueError("fraction_train must be in (0, 1]")
        if min_nodes < 1:
            raise ValueError("min_nodes must be >= 1")
        self.fraction_train, self.min_nodes, self.seed = fraction_train, min_nodes, seed
        #: node id -> why it can no longer take part (the run's checkpoint keeps it)
        self.excluded: dict[int, str] = {}
        self.connected: set[int] = set()

    def sample(self, grid: Grid, server_round: int) -> list[int]:
        """Wait for ``min_nodes`` nodes that can take part, then sample the round's nodes with the seed."""
        self.connected = wait_for_nodes(grid, self.min_nodes, self.excluded)
        nodes = sorted(self.connected - set(self.excluded))
        size = max(self.min_nodes, int(round(len(nodes) * self.fraction_train)))
        rng = np.random.default_rng([self.seed, server_round])
        # choose positions, not ids: node ids are uint64 and would not survive a numpy round trip
        chosen = rng.choice(len(nodes), size=min(size, len(nodes)), replace=False)
        return sorted(nodes[i] for i in chosen)

    def able(self, grid: Grid) -> list[int]:
        """Every connected node that can take part (an evaluation's recipients), in order."""
        return sorted(set(grid.get_node_ids()) - set(self.excluded))

    def error_reply(self, server_round: int, msg: Message) -> None:
        """Log an error reply; exclude its node when the error says it can never take part."""
        node_id, reason = msg.metadata.src_node_id, msg.error.reason
        if msg.error.code == BAD_INPUT or NO_HANDLER in reason:
            self.excluded[node_id] = error_reason(msg)
            log(WARNING, "round %d: node %d cannot take part and is no longer sampled: %s",
                server_round, node_id, self.excluded[node_id])
        else:
            log(WARNING, "round %d: node %d replied with an error: %s", server_round, node_id, reason)

    def stop_if_too_few(self, server_round: int) -> None:
        """Raise :class:`FederationError` when nodes were excluded and fewer than ``min_nodes`` can take part."""
        able = self.connected - set(self.excluded)
        if self.excluded and len(able) < self.min_nodes:
            raise FederationError.too_few(f"round {server_round}", len(able), self.min_nodes, self.excluded)
