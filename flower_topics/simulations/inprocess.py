"""Run a strategy against ClientApp nodes in this process, without any Flower engine.

:class:`InProcessGrid` implements Flower's :class:`~flwr.serverapp.Grid` by handing each
message straight to ``client_app(message, context)`` with a persistent per-node
:class:`~flwr.app.Context`, exactly what a SuperNode does, minus the network (an
exception in the ClientApp becomes an error reply, as a SuperNode sends it). The
``centralized`` and ``local`` modes of :func:`~flower_topics.simulations.simulate` run
each method through it with a single node, so a single-party baseline is the method
itself on the same code path as the federation. Tests use it too, and can drop a
node's replies to exercise lost replies, or hold them back to exercise late ones.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any, Callable, Mapping, Sequence

from flwr.app import Context, Error, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.serverapp import Grid
from flwr.supercore.run import Run
from flwr.supercore.task_identity import TaskIdentity

from flower_topics.simulations.node_configs import told_tolerance
from flower_topics.wire.protocol import CONFIG

SERVER_NODE_ID = 0
FIRST_NODE_ID = 101


def as_server() -> None:
    """Make messages created from now on come from the server."""
    TaskIdentity.run_id = 1
    TaskIdentity.task_id = 1
    TaskIdentity.node_id = SERVER_NODE_ID


class InProcessGrid(Grid):
    """A Grid whose nodes are ClientApp calls in this process.

    Parameters
    ----------
    client_app : ClientApp or callable
        What every node runs: ``client_app(message, context) -> reply``.
    node_configs : sequence of Mapping
        One node config per node (e.g. ``{"partition-id": 0, "num-partitions": 3}``); the
        nodes get ids ``101, 102, ...`` in this order. A node that sets no ``secure-tolerance``
        gets the run config's tolerance
        (:func:`~flower_topics.simulations.node_configs.told_tolerance`).
    run_config : Mapping
        The run config each node's context carries.
    drop : callable, optional
        ``drop(server_round, node_id) -> bool``: lose that node's reply.
    late : callable, optional
        ``late(server_round, node_id) -> bool``: that node's reply misses its round and
        is handed out by a later :meth:`pull_messages` of its message id, as a SuperLink
        holds a reply that came after ``send_and_receive`` stopped waiting.
    """

    def __init__(self, client_app: ClientApp | Callable[[Message, Context], Message],
                 node_configs: Sequence[Mapping[str, Any]], run_config: Mapping[str, Any],
                 drop: Callable[[int, int], bool] | None = None,
                 late: Callable[[int, int], bool] | None = None) -> None:
        as_server()
        self.client_app = client_app
        self.drop = drop or (lambda r, n: False)
        self.late = late or (lambda r, n: False)
        self.contexts = {
            FIRST_NODE_ID + i: Context(run_id=1, node_id=FIRST_NODE_ID + i, node_config=told_tolerance(node_config, run_config),
                                       state=RecordDict(), run_config=dict(run_config))
            for i, node_config in enumerate(node_configs)
        }
        self._run = Run.create_empty(run_id=1)
        self._held: dict[str, Message] = {}  # replies by the id of the message they answer

    @classmethod
    def partitions(cls, client_app: ClientApp | Callable[[Message, Context], Message], num_nodes: int,
                   run_config: Mapping[str, Any], drop: Callable[[int, int], bool] | None = None) -> "InProcessGrid":
        """``num_nodes`` nodes holding partitions ``0 .. num_nodes - 1`` of the run's training documents."""
        configs = [{"partition-id": i, "num-partitions": num_nodes} for i in range(num_nodes)]
        return cls(client_app, configs, run_config, drop)

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
        messages = list(messages)
        for reply in self._deliver(messages):
            self._held[reply.metadata.reply_to_message_id] = reply
        return [msg.metadata.message_id for msg in messages]

    def pull_messages(self, message_ids):  # noqa: D102
        return [self._held.pop(i) for i in message_ids if i in self._held]

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Deliver each message to its node's ClientApp and collect the replies (less the late ones)."""
        return self._deliver(messages)

    def _deliver(self, messages: Iterable[Message]) -> list[Message]:
        replies = []
        for msg in messages:
            msg.metadata.__dict__["_message_id"] = str(uuid.uuid4())  # as Flower's grids do when they push
            node_id = msg.metadata.dst_node_id
            server_round = int(msg.content[CONFIG].get("server-round", 0)) if CONFIG in msg.content else 0
            TaskIdentity.node_id = node_id
            try:
                reply = self.client_app(msg, self.contexts[node_id])
            except Exception as exc:  # noqa: BLE001 - as a SuperNode does: the server gets an error reply
                reason = str(type(exc)) + ":<'" + str(exc) + "'>"
                reply = Message(Error(code=ErrorCode.CLIENT_APP_RAISED_EXCEPTION, reason=reason), reply_to=msg)
            finally:
                TaskIdentity.node_id = SERVER_NODE_ID
            if self.late(server_round, node_id):
                self._held[msg.metadata.message_id] = reply
            elif not self.drop(server_round, node_id):
                replies.append(reply)
        return replies
