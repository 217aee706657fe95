"""Grids that collect replies as soon as they arrive.

Flower 1.41's ``HttpGrid`` (what a ServerApp gets on the deployment engine when it is started
by ``flwr run``) waits for replies by pulling them every 3 seconds, so every message exchange
of a run (each vocabulary-agreement stage, each round's training and evaluation, each
secure-sum stage) lasts a whole multiple of 3 s: on average 1.5 s lost per exchange, and
more than the local work itself in a small round. :class:`PromptGrid` wraps such a grid
and pulls every ``poll_interval`` seconds instead (a pull is one small request to the
SuperLink); everything else is the wrapped grid's. On the simulation engine the ServerApp
gets an ``InMemoryGrid``, which pulls every 0.1 s (its ``pull_interval``, a constructor
parameter): :func:`with_fast_polling` sets that to :data:`IN_MEMORY_POLL_INTERVAL`.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from typing import Any, Callable

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.run import Run

from flower_topics.strategies.base import error_reason
from flower_topics.wire.protocol import ReplyError, payload_bytes

#: Seconds between two pulls while waiting for replies.
POLL_INTERVAL = 0.2

#: Seconds between two pulls of the simulation engine's in-memory grid (Flower's default 0.1 s): a pull there is
#: a lookup in the same process, so a shorter pause costs nothing and a round ends as soon as its replies are in.
IN_MEMORY_POLL_INTERVAL = 0.01


def with_fast_polling(grid: Grid) -> Grid:
    """The grid a ServerApp should use: an ``HttpGrid`` wrapped in :class:`PromptGrid`, an ``InMemoryGrid`` with
    its ``pull_interval`` set to :data:`IN_MEMORY_POLL_INTERVAL` (the same object), any other grid as it is.

    Flower's modules are looked up among those already imported (``HttpGrid``'s import is slow), so a
    ServerApp pays for none that Flower did not load itself.
    """
    http_grid = sys.modules.get("flwr.superlink.grid.http_grid")
    if http_grid is not None and isinstance(grid, http_grid.HttpGrid):
        return PromptGrid(grid)
    in_memory = sys.modules.get("flwr.superlink.grid.inmemory_grid")
    if in_memory is not None and isinstance(grid, in_memory.InMemoryGrid):
        grid.pull_interval = min(grid.pull_interval, IN_MEMORY_POLL_INTERVAL)
    return grid


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


def collect_replies(grid: Grid, messages: list[Message], timeout: float | None, excluded: dict[int, str], what: str,
                    parse: Callable[[Message], Any]) -> tuple[dict[int, Any], int]:
    """Send ``messages`` and return each answering node's ``parse(reply)`` and the bytes received; a node whose
    reply is an error or fails ``parse`` (:class:`~flower_topics.wire.protocol.ReplyError`) goes into
    ``excluded`` with the reason (``"<what> rejected: ..."``)."""
    parsed, received = {}, 0
    for reply in grid.send_and_receive(messages, timeout=timeout):
        node = reply.metadata.src_node_id
        if reply.has_error():
            excluded[node] = error_reason(reply)
            continue
        received += payload_bytes(reply.content)
        try:
            parsed[node] = parse(reply)
        except ReplyError as exc:
            excluded[node] = f"{what} rejected: {exc}"
    return parsed, received
