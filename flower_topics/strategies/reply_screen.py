"""A round's replies screened: error replies logged (and their nodes excluded where they can never take
part), every other reply validated against the method's protocol, and the round's min-replies."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from logging import WARNING

import numpy as np
from flwr.app import Message, RecordDict
from flwr.common import log

from flower_topics.strategies.participants import Participants
from flower_topics.strategies.traffic import RoundTraffic
from flower_topics.wire.protocol import ReplyError, ReplySpec, payload_bytes, validate_reply


@dataclass(frozen=True)
class Reply:
    """A reply that passed validation.

    Parameters
    ----------
    node_id : int
        The node that sent it.
    arrays : dict
        The update's arrays, by key.
    metrics : dict
        The reply's metrics, by key.
    parties : int (default: 1)
        How many parties' updates it is: 1, or the survivors of a secure sum (node id 0).
    """

    node_id: int
    arrays: dict[str, np.ndarray]
    metrics: dict[str, float]
    parties: int = 1


@dataclass
class ScreenedReplies:
    """What a round's screening kept.

    Parameters
    ----------
    valid : list of Reply
        The replies that passed validation, in the order they came.
    replied : set of str
        The ids of the messages that were answered (with an error or not).
    """

    valid: list[Reply] = field(default_factory=list)
    replied: set[str] = field(default_factory=set)


def replies_needed(min_replies: float, nodes_sampled: int) -> int:
    """Valid replies a round of ``nodes_sampled`` nodes needs: ``min_replies`` as a count (a fraction in (0, 1)
    of the nodes sampled, rounded up, at least 1)."""
    if min_replies >= 1:
        return int(min_replies)
    return max(1, math.ceil(min_replies * nodes_sampled))


class ReplyScreen:
    """Screens each round's training replies and says whether enough of them are valid.

    Parameters
    ----------
    participants : Participants
        Where a node whose error says it can never take part is excluded.
    min_replies : float
        Valid replies a round needs to change the global model (:func:`replies_needed`).
    """

    def __init__(self, participants: Participants, min_replies: float) -> None:
        if not (0 < min_replies < 1 or (min_replies >= 1 and float(min_replies).is_integer())):
            raise ValueError("min_replies must be a fraction in (0, 1) or a whole count >= 1")
        self.participants, self.min_replies = participants, min_replies

    def screen(self, server_round: int, replies: Iterable[Message], spec: ReplySpec, traffic: RoundTraffic,
               check: Callable[[Reply], None] | None = None,
               training_part: Callable[[int, RecordDict], RecordDict] | None = None) -> ScreenedReplies:
        """Log and count the error replies, validate the others against ``spec`` and ``check`` (None: no
        check; it raises :class:`~flower_topics.wire.protocol.ReplyError`) and keep those that pass.

        ``training_part`` takes a reply's content apart before validation (the evaluation it carries) and
        returns its training reply.
        """
        screened = ScreenedReplies()
        for msg in replies:
            node_id = msg.metadata.src_node_id
            screened.replied.add(msg.metadata.reply_to_message_id)
            if msg.has_error():
                traffic.replies_failed += 1
                self.participants.error_reply(server_round, msg)
                continue
            content = msg.content if training_part is None else training_part(node_id, msg.content)
            traffic.bytes_received += payload_bytes(content)
            try:
                reply = Reply(node_id, *validate_reply(content, spec))
                if check is not None:
                    check(reply)
            except ReplyError as exc:
                traffic.replies_failed += 1
                log(WARNING, "round %d: reply of node %d rejected: %s", server_round, node_id, exc)
                continue
            screened.valid.append(reply)
        return screened

    def enough(self, server_round: int, valid: int, traffic: RoundTraffic) -> bool:
        """Whether ``valid`` replies may change the global model; if not, the round is marked held (logged)."""
        needed = replies_needed(self.min_replies, traffic.nodes_sampled)
        if valid >= needed and valid:
            return True
        traffic.model_held = True
        log(WARNING, "round %d: %d valid repl%s, %d needed (min-replies): the global model stays as it was",
            server_round, valid, "y" if valid == 1 else "ies", needed)
        return False
