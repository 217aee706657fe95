"""Helpers for tests that play the server's side by hand (the in-process grid is in the package)."""

from __future__ import annotations

import numpy as np
from flwr.app import Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from flower_topics.simulations.inprocess import SERVER_NODE_ID, InProcessGrid, as_server


def reply_from(node_id: int, msg: Message, content: RecordDict) -> Message:
    """A reply to ``msg`` as node ``node_id`` would send it."""
    TaskIdentity.node_id = node_id
    try:
        return Message(content=content, reply_to=msg)
    finally:
        TaskIdentity.node_id = SERVER_NODE_ID


def LoopbackGrid(client_app, num_nodes, run_config, drop=None) -> InProcessGrid:  # noqa: N802 (the tests' old name)
    """``num_nodes`` in-process nodes holding the run's partitions."""
    return InProcessGrid.partitions(client_app, num_nodes, run_config, drop)




def reply_content(method: str, update: dict, metrics: dict | None = None) -> RecordDict:
    """A reply's content as ``method``'s client builds it: update arrays, metrics, sender."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord

    return RecordDict({
        "update": ArrayRecord({k: Array(np.asarray(v)) for k, v in update.items()}),
        "metrics": MetricRecord(metrics or {}),
        "sender": ConfigRecord({"method": method}),
    })


class FixedNodesGrid:
    """Just enough of a Grid for configure_train: a fixed set of node ids."""

    def __init__(self, node_ids):
        self.node_ids = node_ids

    def get_node_ids(self):
        return list(self.node_ids)


def vocabulary(size: int) -> tuple[str, ...]:
    """``size`` made-up words."""
    return tuple(f"w{i}" for i in range(size))


def dplda_round(strategy, server_round, arrays, statistics):
    """One ``dplda`` round played by hand: the strategy's messages and its aggregate of one reply per statistic."""
    from flwr.app import ConfigRecord

    from flower_topics.wire.dplda import STATISTIC_KEY

    nodes = list(range(7, 7 + len(statistics)))
    msgs = list(strategy.configure_train(server_round, arrays, ConfigRecord(), FixedNodesGrid(nodes)))
    by_node = {m.metadata.dst_node_id: m for m in msgs}
    replies = [reply_from(n, by_node[n], reply_content("dplda", {STATISTIC_KEY: np.asarray(s, np.float32)}))
               for n, s in zip(nodes, statistics)]
    return msgs, strategy.aggregate_train(server_round, replies)
