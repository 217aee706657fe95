"""Messages whose round ended without their reply, and the replies that come after.

Flower's ``Grid.send_and_receive`` stops waiting at the round's timeout and returns the
replies it has; a reply that reaches the SuperLink later is never pulled and never seen.
The strategy records the messages of each round that went unanswered
(:meth:`OutstandingMessages.round_ended`), and at the start and the end of the next rounds
pulls whatever has arrived for them since (:meth:`OutstandingMessages.collect_late`): such a
reply is ignored (its round is closed; the party learns from ``last-applied-round`` that
it was not applied) and said in the log, with the node and the round it belonged to.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from logging import DEBUG, WARNING

from flwr.app import Message
from flwr.common import log
from flwr.serverapp import Grid


@dataclass
class OutstandingMessages:
    """Unanswered messages of the last ``keep_rounds`` rounds, by message id.

    Parameters
    ----------
    keep_rounds : int (default: 3)
        How many rounds back a late reply is still looked for (and logged).
    """

    keep_rounds: int = 3
    sent: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # message id -> (round, node, kind)
    late: list[tuple[int, int, str]] = field(default_factory=list)  # (round, node, kind) of every late reply

    def round_ended(self, server_round: int, kind: str, messages: Iterable[Message], replied: set[str]) -> None:
        """Record the messages of a round (``kind``: ``train`` or ``evaluate``) that got no reply."""
        for msg in messages:
            message_id = msg.metadata.message_id
            if message_id and message_id not in replied:
                self.sent[message_id] = (server_round, msg.metadata.dst_node_id, kind)
        self.sent = {mid: where for mid, where in self.sent.items() if where[0] > server_round - self.keep_rounds}

    def collect_late(self, grid: Grid | None, server_round: int) -> list[Message]:
        """Pull the replies that came after their round; log and return them (they are not used)."""
        if not self.sent or grid is None:
            return []
        try:
            arrived = list(grid.pull_messages(list(self.sent)))
        except Exception as exc:  # noqa: BLE001 - looking for late replies must never stop a run
            log(DEBUG, "round %d: could not look for late replies: %s", server_round, exc)
            return []
        for msg in arrived:
            where = self.sent.pop(msg.metadata.reply_to_message_id, None)
            if where is None:
                continue
            old_round, node_id, kind = where
            if msg.has_error():
                log(WARNING, "round %d: node %d never answered its %s message of round %d: %s", server_round,
                    node_id, kind, old_round, msg.error.reason)
                continue
            self.late.append(where)
            log(WARNING, "round %d: node %d's %s reply to round %d arrived after that round ended "
                "(round-timeout): ignored", server_round, node_id, kind, old_round)
        return arrived
