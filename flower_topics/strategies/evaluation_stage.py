"""Federated evaluation of the global model, both ways: an ``evaluate`` message of its own after a scored
round, or the request carried inside the next round's training messages and the parties' sums inside
their training replies (:mod:`flower_topics.evaluation.federated`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from logging import WARNING

import numpy as np
from flwr.app import ArrayRecord, Message, RecordDict
from flwr.common import log

from flower_topics.evaluation import federated as evaluation
from flower_topics.evaluation.federated import EvaluationSettings
from flower_topics.strategies.traffic import RoundTraffic
from flower_topics.wire.protocol import ReplyError, payload_bytes

#: Pooled metrics of one scored round (:func:`~flower_topics.evaluation.federated.combine`).
Scores = dict[str, float | int]


@dataclass(frozen=True)
class PendingEvaluation:
    """An evaluation request sent to the parties, and what their sums are checked and pooled against.

    Parameters
    ----------
    server_round : int
        The round scored.
    phi : np.ndarray
        The model the parties were sent (as they hold it).
    top : tuple
        Its top words (:func:`~flower_topics.evaluation.federated.coherence_word_ids`, 10 a topic).
    pairs : np.ndarray
        Their :func:`~flower_topics.evaluation.federated.topic_pairs`.
    """

    server_round: int
    phi: np.ndarray
    top: tuple[np.ndarray, np.ndarray]
    pairs: np.ndarray


class EvaluationStage:
    """The requests of the scored rounds and the pooling of the parties' sums.

    Parameters
    ----------
    settings : EvaluationSettings
        Which rounds are scored, and how.
    fingerprint : str
        The vocabulary's fingerprint, sent with every request.
    topic_word : callable
        The ``K x V`` topic-word matrix of a global model (the strategy's).
    evaluation_counts : callable
        The integer counts and prior that stand for it, or None (the strategy's).
    may_carry : bool (default: False)
        Whether a scored round's request may travel with the next round's training messages: the method
        opts in, every node that can take part is sent a training message and there is no secure
        aggregation (:meth:`carries`).
    """

    def __init__(self, settings: EvaluationSettings, fingerprint: str, topic_word: Callable[[ArrayRecord], np.ndarray],
                 evaluation_counts: Callable[[ArrayRecord], tuple[np.ndarray, float] | None],
                 may_carry: bool = False) -> None:
        self.settings, self.fingerprint = settings, fingerprint
        self.may_carry = may_carry and settings.with_train
        self.topic_word, self.evaluation_counts = topic_word, evaluation_counts
        #: the request of the last ``evaluate`` message
        self.sent: PendingEvaluation | None = None
        #: the request the current round's training messages carry, and the sums that came back with them
        self.carried: PendingEvaluation | None = None
        self._carried_sums: list[evaluation.PartyScores] = []

    def carries(self, server_round: int) -> bool:
        """Whether round ``server_round``'s request travels with the next round's training messages: it may
        (``may_carry`` and the run config's ``eval-with-train``), the round is scored and is not the last (the
        last has no next round: its ``evaluate`` message stays)."""
        return (self.may_carry and 1 <= server_round < self.settings.num_rounds
                and self.settings.due(server_round))

    def request(self, server_round: int, arrays: ArrayRecord) -> tuple[RecordDict, PendingEvaluation]:
        """An ``evaluate`` request of the global model ``arrays`` scored as round ``server_round``, and what
        its replies are pooled against (the model as the parties hold it, its top words and their pairs)."""
        counts = self.evaluation_counts(arrays)
        if counts is None:
            phi = evaluation.model_phi(self.topic_word(arrays))  # what the parties are sent
            content = evaluation.request(phi, self.settings, self.fingerprint, server_round)
        else:  # the counts stand for the same float64 matrix, computed the same way on both sides
            phi = evaluation.counts_phi(*counts)
            content = evaluation.counts_request(*counts, self.settings, self.fingerprint, server_round)
        top = evaluation.coherence_word_ids(phi, 10)  # the top words the parties count
        return content, PendingEvaluation(server_round, phi, top, evaluation.topic_pairs(*top))

    # ------------------------------------------------------------ an evaluate message of its own
    def messages(self, server_round: int, arrays: ArrayRecord, nodes: list[int], traffic: RoundTraffic
                 ) -> list[Message]:
        """One ``evaluate`` message of ``arrays`` to each of ``nodes``."""
        content, self.sent = self.request(server_round, arrays)
        traffic.eval_bytes_sent = payload_bytes(content) * len(nodes)
        return [Message(content=content, message_type=evaluation.MESSAGE_TYPE, dst_node_id=n) for n in nodes]

    def pool(self, server_round: int, replies: Iterable[Message], traffic: RoundTraffic) -> Scores | None:
        """The pooled metrics of the ``evaluate`` replies (None when no party's sums are valid: logged)."""
        pending, parts = self.sent, []
        for msg in replies:
            if msg.has_error():
                log(WARNING, "round %d: node %d could not evaluate: %s", server_round, msg.metadata.src_node_id,
                    msg.error.reason)
                continue
            traffic.eval_bytes_received += payload_bytes(msg.content)
            try:
                parts.append(evaluation.parse_reply(msg, pending.phi.shape[0], pending.top[1].size,
                                                    len(pending.pairs)))
            except ReplyError as exc:
                log(WARNING, "round %d: evaluation reply of node %d rejected: %s", server_round,
                    msg.metadata.src_node_id, exc)
        if not parts:
            return None
        return evaluation.combine(parts, pending.phi, pending.top, pending.pairs)

    # ------------------------------------------------------------ carried inside training
    def carry(self, server_round: int, arrays: ArrayRecord, recipients: int, traffic: RoundTraffic) -> RecordDict:
        """The request of round ``server_round``'s model ``arrays`` that the next round's ``recipients``
        training messages carry (:func:`~flower_topics.evaluation.federated.carry_request`)."""
        content, self.carried = self.request(server_round, arrays)
        self._carried_sums = []
        traffic.eval_bytes_sent = payload_bytes(content) * recipients
        return content

    def training_part(self, node_id: int, content: RecordDict, traffic: RoundTraffic) -> RecordDict:
        """A training reply's content without the evaluation it carries, whose sums are kept (validated;
        missing, an error or invalid: logged); ``traffic`` is the scored round's."""
        content, carried = evaluation.split_carried(content)
        pending = self.carried
        if carried is None:
            log(WARNING, "round %d: node %d sent no evaluation with its training reply", pending.server_round,
                node_id)
            return content
        traffic.eval_bytes_received += payload_bytes(carried)
        if evaluation.ERROR_RECORD in carried.config_records:
            log(WARNING, "round %d: node %d could not evaluate: %s", pending.server_round, node_id,
                carried[evaluation.ERROR_RECORD].get("reason", ""))
            return content
        try:
            self._carried_sums.append(evaluation.parse_sums(carried, pending.phi.shape[0], pending.top[1].size,
                                                            len(pending.pairs)))
        except ReplyError as exc:
            log(WARNING, "round %d: evaluation sums of node %d rejected: %s", pending.server_round, node_id, exc)
        return content

    def pool_carried(self) -> tuple[int, Scores | None]:
        """The scored round and its pooled metrics from the sums the training replies carried (None when none
        came back: logged); the carried request is done."""
        pending, parts = self.carried, self._carried_sums
        self.carried, self._carried_sums = None, []
        if not parts:
            log(WARNING, "round %d: no party's evaluation came back with round %d's training replies",
                pending.server_round, pending.server_round + 1)
            return pending.server_round, None
        return pending.server_round, evaluation.combine(parts, pending.phi, pending.top, pending.pairs)
