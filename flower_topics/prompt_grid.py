"""A Grid that collects replies as soon as they arrive.

Flower 1.41's ``HttpGrid`` (what a ServerApp gets on both engines when it is started by
``flwr run``) waits for replies by pulling them every 3 seconds, so every message exchange
of a run (each vocabulary-agreement stage, each round's training and evaluation, each
secure-sum stage) lasts a whole multiple of 3 s: on average 1.5 s lost per exchange, and
more than the local work itself in a small round. :class:`PromptGrid` wraps such a grid
and pulls every ``poll_interval`` seconds instead (a pull is one small request to the
SuperLink); everything else is the wrapped grid's.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.run import Run

#: Seconds between two pulls while waiting for replies.
POLL_INTERVAL = 0.2


class PromptGrid(Grid):
    """``grid``, with :meth:`send_and_receive` pulling every ``poll_interval`` seconds.

    Parameters
    ----------
    grid : Grid
        The grid Flower gave the ServerApp.
    poll_interval : float (default: :data:`POLL_INTERVAL`)
        Seconds between two pulls while replies are missing.
    """

    def __init__(self, grid: Grid, poll_interval: float = POLL_INTERVAL) -> None:
        if poll_interval <= 0:
            raise ValueError("poll_interval must be > 0")
        self.grid = grid
        self.poll_interval = poll_interval

    def set_run(self, run: Run) -> None:  # noqa: D102
        self.grid.set_run(run)

    @property
    def run(self) -> Run:  # noqa: D102
        return self.grid.run

    def create_message(self, content: RecordDict, message_type: str, dst_node_id: int, group_id: str,
                       ttl: float | None = None) -> Message:  # noqa: D102
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:  # noqa: D102
        return self.grid.get_node_ids()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:  # noqa: D102
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:  # noqa: D102
        return self.grid.pull_messages(message_ids)

    def send_and_receive(self, messages: Iterable[Message], *, timeout: float | None = None) -> Iterable[Message]:
        """Push ``messages`` and pull their replies until all arrived or ``timeout`` seconds passed
        (``None``: no limit), as Flower's grids do, but every ``poll_interval`` seconds."""
        waiting = {message_id for message_id in self.push_messages(messages) if message_id}
        deadline = None if timeout is None else time.monotonic() + timeout
        replies: list[Message] = []
        while waiting:
            arrived = list(self.pull_messages(waiting))
            replies.extend(arrived)
            waiting.difference_update(msg.metadata.reply_to_message_id for msg in arrived)
            if not waiting or (deadline is not None and time.monotonic() >= deadline):
                break
            pause = self.poll_interval if deadline is None else min(self.poll_interval, deadline - time.monotonic())
            time.sleep(max(pause, 0.0))
        return replies
