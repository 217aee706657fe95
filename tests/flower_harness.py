"""Run a ServerApp strategy and a ClientApp in one process, without any Flower engine.

:class:`LoopbackGrid` implements Flower's :class:`~flwr.serverapp.Grid` by handing each
message straight to ``client_app(message, context)`` with a persistent per-node
:class:`~flwr.app.Context`, exactly what a SuperNode does, minus the network. Tests
can drop a node's replies to exercise what happens when a reply is lost.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Callable, Mapping

from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.supercore.run import Run
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

SERVER_NODE_ID = 0


def as_server() -> None:
    """Make messages created from now on come from the server."""
    TaskIdentity.run_id = 1
    TaskIdentity.task_id = 1
    TaskIdentity.node_id = SERVER_NODE_ID


def reply_from(node_id: int, msg: Message, content: RecordDict) -> Message:
    """A reply to ``msg`` as node ``node_id`` would send it."""
    TaskIdentity.node_id = node_id
    try:
        return Message(content=content, reply_to=msg)
    finally:
        TaskIdentity.node_id = SERVER_NODE_ID


class LoopbackGrid(Grid):
    """A Grid whose nodes are ClientApp calls in this process.

    Parameters
    ----------
    client_app : ClientApp
        The app every node runs.
    num_nodes : int
        Nodes, with node ids ``101, 102, ...`` and partition ids ``0, 1, ...``.
    run_config : Mapping
        The run config each node's context carries.
    drop : callable, optional
        ``drop(server_round, node_id) -> bool``: lose that node's reply.
    """

    def __init__(self, client_app: ClientApp, num_nodes: int, run_config: Mapping[str, Any],
                 drop: Callable[[int, int], bool] | None = None) -> None:
        as_server()
        self.client_app = client_app
        self.drop = drop or (lambda r, n: False)
        self.contexts = {
            100 + i + 1: Context(run_id=1, node_id=100 + i + 1,
                                 node_config={"partition-id": i, "num-partitions": num_nodes},
                                 state=RecordDict(), run_config=dict(run_config))
            for i in range(num_nodes)
        }
        self._run = Run.create_empty(run_id=1)
        self.rounds_seen = 0
        self._pending: list[Message] = []

    def set_run(self, run: Run) -> None:  # noqa: D102
        self._run = run

    @property
    def run(self) -> Run:  # noqa: D102
        return self._run

    def create_message(self, content, message_type, dst_node_id, group_id, ttl=None):  # noqa: D102
        return Message(content=content, message_type=message_type, dst_node_id=dst_node_id, group_id=group_id)

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102
        return list(self.contexts)

    def push_messages(self, messages):  # noqa: D102
        start = len(self._pending)
        self._pending.extend(self._deliver(messages))
        return [str(i) for i in range(start, len(self._pending))]

    def pull_messages(self, message_ids):  # noqa: D102
        return [self._pending[int(i)] for i in message_ids]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Deliver each message to its node's ClientApp and collect the replies."""
        return self._deliver(messages)

    def _deliver(self, messages: Iterable[Message]) -> list[Message]:
        replies = []
        for msg in messages:
            node_id = msg.metadata.dst_node_id
            server_round = int(msg.content["config"]["server-round"]) if "config" in msg.content else 0
            self.rounds_seen = max(self.rounds_seen, server_round)
            TaskIdentity.node_id = node_id
            try:
                reply = self.client_app(msg, self.contexts[node_id])
            finally:
                TaskIdentity.node_id = SERVER_NODE_ID
            if not self.drop(server_round, node_id):
                replies.append(reply)
        return replies
