"""What every topic-modeling strategy shares: the stages of a round, each delegated to a part with one job.

A method's strategy subclasses :class:`TopicStrategy`, names its :attr:`method`, and
implements the hooks of :class:`~flower_topics.strategies.method_hooks.MethodHooks` (its model,
settings, reply protocol and aggregation) and, where it releases more than its updates or keeps
state across a resume, those of :class:`~flower_topics.strategies.releases.ReleaseHooks` (one
:meth:`~flower_topics.strategies.releases.ReleaseHooks.released` hook counts its releases). The
base keeps Flower's :meth:`~flwr.serverapp.strategy.Strategy.start` loop untouched, so that any
ServerApp can run the strategy, and does the rest of a round:

1. sample the nodes (seeded), skipping nodes that said they cannot take part
   (:class:`~flower_topics.strategies.participants.Participants`);
2. with secure aggregation, run the secure sum's key and share stages
   (:class:`~flower_topics.strategies.secure_stage.SecureSumStage`);
3. send each node a ``train.<method>`` message: the method's arrays, its settings, the round,
   the node's last applied round and the vocabulary's fingerprint (and the evaluation of the
   round before, when carried: step 7), and count the release (:meth:`released`);
4. screen the replies (:class:`~flower_topics.strategies.reply_screen.ReplyScreen`): an error
   reply is logged and counted; a node whose error says it can never take part
   (:data:`~flower_topics.wire.protocol.BAD_INPUT`, or a ClientApp without this method's
   handler) is no longer sampled, and the run stops with one line when fewer than ``min_nodes``
   nodes remain; every other reply is validated against the method's protocol
   (:func:`~flower_topics.wire.protocol.validate_reply`, then :meth:`check_reply`) and rejected,
   with a logged reason, when it fails;
5. when at least ``min_replies`` replies are valid, aggregate them (under secure aggregation:
   their unmasked sum, one :class:`Reply` from node 0 decoded by :meth:`decode_sum`; a sum that
   fails :meth:`check_reply` holds the round: it cannot be traced to a party) and record each
   node's last applied round; otherwise keep the previous global model and say so;
6. count bytes and participants (:class:`~flower_topics.strategies.traffic.RoundTraffic`); a reply
   that arrives after its round ended is pulled at the start of the next one, logged and ignored
   (:mod:`~flower_topics.strategies.outstanding`);
7. federated evaluation (``evaluation`` set;
   :class:`~flower_topics.strategies.evaluation_stage.EvaluationStage`): an ``evaluate`` message to
   every node that can take part after each scored round, or, for a method that sets
   :attr:`evaluation_with_train`, a scored round other than the last has its evaluation carried in
   the next round's training messages (:meth:`carries_evaluation`; the parties' sums come back in
   their training replies and are recorded under the scored round): one exchange a party fewer.
"""

from __future__ import annotations

from collections.abc import Iterable
from logging import INFO, WARNING
from typing import Any, ClassVar, Mapping, Sequence

from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from flower_topics.evaluation import federated as evaluation
from flower_topics.evaluation.federated import EvaluationSettings
from flower_topics.secure_sum.protocol import SecureSumSettings, masked_spec
from flower_topics.secure_sum.server import KeyEpoch
from flower_topics.strategies.evaluation_stage import EvaluationStage, PendingEvaluation
from flower_topics.strategies.method_hooks import MethodHooks
from flower_topics.strategies.outstanding import OutstandingMessages
from flower_topics.strategies.participants import (NO_HANDLER, FederationError, Participants, error_reason,
                                                   exclusion_reasons, wait_for_nodes)
from flower_topics.strategies.releases import ReleaseHooks
from flower_topics.strategies.reply_screen import Reply, ReplyScreen, ScreenedReplies, replies_needed
from flower_topics.strategies.secure_stage import SecureSumStage
from flower_topics.strategies.traffic import RoundTraffic
from flower_topics.wire.protocol import ARRAYS, CONFIG, message_type, payload_bytes, vocabulary_fingerprint

__all__ = ["NO_HANDLER", "FederationError", "PendingEvaluation", "Reply", "RoundTraffic", "TopicStrategy",
           "error_reason", "exclusion_reasons", "masked_spec", "wait_for_nodes"]


class TopicStrategy(MethodHooks, ReleaseHooks, Strategy):
    """Base of the package's strategies.

    Parameters
    ----------
    vocabulary : sequence of str
        The words, in column order; every party must hold exactly this vocabulary (its
        fingerprint travels with each message and the parties check it): the
        vocabulary of :func:`flower_topics.federation.vocabulary_agreement.agree_vocabulary`.
    fraction_train : float (default: 1.0)
        Fraction of connected nodes sampled each round (at least ``min_nodes``).
    min_nodes : int (default: 1)
        Nodes to wait for before a round starts; the run stops when fewer can take part.
    min_replies : float (default: 1)
        Valid replies a round needs to change the global model: a count >= 1, or a
        fraction in (0, 1) of the nodes sampled.
    seed : int (default: 0)
        Seeds the node sampling of every round (and a method's public initial model).
    evaluation : EvaluationSettings, optional
        Federated evaluation (:mod:`flower_topics.evaluation.federated`): every ``every`` rounds the
        nodes score the model on their own documents and the strategy sums the scores
        into :attr:`evaluations`. None: no client-side evaluation.
    secure : SecureSumSettings, optional
        Secure aggregation (:mod:`flower_topics.secure_sum`): the server learns only each
        round's sum. Only for a strategy whose :meth:`aggregate` needs no more than the sum.
    round_timeout : float (default: 600)
        Seconds each stage of the secure sum waits for replies.
    """

    #: The registered method this strategy runs (the ``train.<method>`` message type).
    method: ClassVar[str]
    #: Whether a scored round's evaluation may travel with the next round's training messages instead of an
    #: ``evaluate`` message of its own (:meth:`carries_evaluation`). A method opts in when its parties may score
    #: the global model in the handler that trains them: the request, the checks and the sums are the
    #: ``evaluate`` message's, so what evaluation releases is unchanged, and scoring touches nothing of the
    #: local step (its state, its randomness, what its privacy accountant counts). False by default.
    evaluation_with_train: ClassVar[bool] = False

    def __init__(self, vocabulary: Sequence[str], *, fraction_train: float = 1.0, min_nodes: int = 1,
                 min_replies: float = 1, seed: int = 0, evaluation: EvaluationSettings | None = None,
                 secure: SecureSumSettings | None = None, round_timeout: float = 600.0) -> None:
        if len(vocabulary) < 1:
            raise ValueError("the vocabulary is empty")
        self.vocabulary = tuple(vocabulary)
        self.vocab_size = len(self.vocabulary)
        self.fingerprint = vocabulary_fingerprint(self.vocabulary)
        self.fraction_train, self.min_nodes, self.min_replies, self.seed = fraction_train, min_nodes, min_replies, seed
        self.evaluation, self.secure, self.round_timeout = evaluation, secure, round_timeout
        # the parts of a round (each checks its own parameters)
        self.participants = Participants(fraction_train, min_nodes, seed)
        self.screen = ReplyScreen(self.participants, min_replies)
        self.excluded: dict[int, str] = self.participants.excluded  # node id -> why it can no longer take part
        self.secure_stage = None if secure is None else SecureSumStage(secure, round_timeout)
        self.evaluation_stage = None if evaluation is None else EvaluationStage(  # hooks looked up at each call
            evaluation, self.fingerprint, lambda a: self.topic_word(a), lambda a: self.evaluation_counts(a),
            may_carry=self.evaluation_with_train and secure is None and fraction_train >= 1.0)
        #: unanswered messages of recent rounds; a reply that comes after its round is logged and ignored
        self.outstanding = OutstandingMessages()
        # what the run reports and its checkpoint keeps
        self.evaluations: dict[int, dict[str, float | int]] = {}
        self.method_metrics: dict[int, dict[str, float]] = {}
        self.traffic: dict[int, RoundTraffic] = {}
        self.last_applied: dict[int, int] = {}
        self.prevalence_parties = 0  # parties asked for their topic prevalence after the last round
        #: why training stopped (a method's stopping rule): no more training messages are sent; None: it goes on
        self.stopped: str | None = None
        self._current: ArrayRecord | None = None
        self._grid: Grid | None = None
        self._sent: dict[tuple[str, int], list[Message]] = {}

    @staticmethod
    def federation_options(config: Mapping[str, Any]) -> dict[str, Any]:
        """The base's keyword arguments from a validated run config."""
        return dict(fraction_train=float(config["fraction-train"]), min_nodes=int(config["min-nodes"]),
                    min_replies=float(config["min-replies"]), seed=int(config["seed"]),
                    evaluation=EvaluationSettings.from_config(config),
                    secure=SecureSumSettings.from_config(config) if bool(config["secure-aggregation"]) else None,
                    round_timeout=float(config["round-timeout"]))

    @property
    def secure_epoch(self) -> KeyEpoch | None:
        """The secure sum's key epoch the next secure round (or the prevalence release) may continue."""
        return None if self.secure_stage is None else self.secure_stage.epoch

    def summary(self) -> None:
        """Log the strategy's settings."""
        log(INFO, "\t├──> %s (method %s, V=%d)", type(self).__name__, self.method, self.vocab_size)
        log(INFO, "\t├──> Sampling: fraction %.2f, at least %d node(s), %g valid replies a round, seed %d",
            self.fraction_train, self.min_nodes, self.min_replies, self.seed)
        log(INFO, "\t└──> Settings: %s", self.train_config())

    def sample_nodes(self, grid: Grid, server_round: int) -> list[int]:
        """Wait for ``min_nodes`` nodes that can take part, then sample the round's nodes with the seed."""
        return self.participants.sample(grid, server_round)

    def replies_needed(self, nodes_sampled: int) -> int:
        """Valid replies a round of ``nodes_sampled`` nodes needs (``min_replies`` as a count)."""
        return replies_needed(self.min_replies, nodes_sampled)

    def traffic_metrics(self, server_round: int) -> MetricRecord:
        """The round's traffic as a MetricRecord."""
        return self.traffic.get(server_round, RoundTraffic()).metrics()

    def carries_evaluation(self, server_round: int) -> bool:
        """Whether round ``server_round``'s evaluation travels with round ``server_round + 1``'s training messages.
        It does while training goes on, when the method opts in (:attr:`evaluation_with_train`), every node
        that can take part is sent a training message (``fraction_train`` 1), there is no secure aggregation
        (a masked reply carries nothing else) and :meth:`~.evaluation_stage.EvaluationStage.carries`."""
        return self.evaluation_stage is not None and not self.stopped and self.evaluation_stage.carries(server_round)

    def evaluation_pending(self, server_round: int) -> bool:
        """Whether round ``server_round`` is scored by the next round's training messages and its pooled metrics
        are not in :attr:`evaluations` yet."""
        return self.carries_evaluation(server_round) and server_round not in self.evaluations

    # ------------------------------------------------------------ training: the stages of a round
    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One ``train.<method>`` message per sampled node (none once training :attr:`stopped`); when the round
        before is scored and :meth:`carries_evaluation`, each also carries its evaluation request, for
        ``arrays``: the global model the round before ended with."""
        if self.stopped:
            log(INFO, "configure_train: round %d skipped, training stopped (%s)", server_round, self.stopped)
            return []
        self.begin_round(server_round, arrays)
        self._grid, self._current = grid, arrays
        self.outstanding.collect_late(grid, server_round)
        traffic = self.traffic[server_round] = RoundTraffic()
        nodes = self.sample_nodes(grid, server_round)
        records = {node_id: {} for node_id in nodes}
        if self.secure_stage is not None:
            records = self.secure_stage.setup(grid, server_round, nodes, traffic)
        carried = self._carry_evaluation(server_round, arrays, len(records))
        entries = {**dict(config), **self.train_config(), "server-round": server_round, "vocabulary": self.fingerprint}
        messages = []
        for node_id, node_records in records.items():
            content = RecordDict({
                ARRAYS: self.node_arrays(server_round, node_id, arrays),
                CONFIG: ConfigRecord({**entries, "last-applied-round": self.last_applied.get(node_id, 0)}),
                **node_records,
            })
            traffic.bytes_sent += payload_bytes(content)
            if carried is not None:
                evaluation.carry_request(content, carried)
            messages.append(Message(content=content, message_type=message_type(self.method), dst_node_id=node_id))
        traffic.nodes_sampled = max(len(messages), len(nodes) if self.secure is not None else 0)
        log(INFO, "configure_train: round %d sent to %d node(s)%s", server_round, len(messages),
            "" if carried is None else f", with the evaluation of round {server_round - 1}")
        self._sent[("train", server_round)] = messages
        if messages:
            self.released(server_round, [msg.metadata.dst_node_id for msg in messages])
        return messages

    def _carry_evaluation(self, server_round: int, arrays: ArrayRecord, recipients: int) -> RecordDict | None:
        """The evaluation request of round ``server_round - 1`` that this round's messages carry, if any."""
        if self.evaluation_stage is not None:
            self.evaluation_stage.carried = None  # a request whose round never ended is not pooled later
        if not self.evaluation_pending(server_round - 1):
            return None
        if not recipients:
            log(WARNING, "round %d: no training message to carry round %d's evaluation; it is not scored",
                server_round, server_round - 1)
            return None
        scored = self.traffic.setdefault(server_round - 1, RoundTraffic())
        return self.evaluation_stage.carry(server_round - 1, arrays, recipients, scored)

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Screen, validate and aggregate the round's replies (see the module docstring).

        Returns ``(None, metrics)``, which keeps the previous global model, when fewer than
        ``min_replies`` replies are valid (or training :attr:`stopped` and the round sent nothing).
        """
        if self.stopped and not self.traffic.get(server_round):
            return None, self.traffic_metrics(server_round)
        if self._current is None:
            raise RuntimeError("aggregate_train called before configure_train")
        traffic = self.traffic.setdefault(server_round, RoundTraffic())
        screened = self._screen(server_round, replies, traffic)
        self.outstanding.collect_late(self._grid, server_round)  # what came in late while this round ran
        self.outstanding.round_ended(server_round, "train", self._sent.pop(("train", server_round), []),
                                     screened.replied)
        self.participants.stop_if_too_few(server_round)
        valid = screened.valid
        if not self.screen.enough(server_round, len(valid), traffic):
            return None, self.traffic_metrics(server_round)
        applied = [reply.node_id for reply in valid]
        if self.secure_stage is not None:
            valid = self.secure_stage.summed_reply(server_round, valid, self.reply_spec(), traffic,
                                                   lambda arrays: self.decode_sum(server_round, arrays),
                                                   lambda summed: self.check_reply(server_round, summed))
            if not valid:
                traffic.model_held = True
                return None, self.traffic_metrics(server_round)
        new_arrays, method_metrics = self.aggregate(server_round, self._current, valid)
        for node_id in applied:
            self.last_applied[node_id] = server_round
        traffic.replies_applied = len(applied)
        self.method_metrics[server_round] = dict(method_metrics)
        metrics = self.traffic_metrics(server_round)
        for key, value in method_metrics.items():
            metrics[key] = value
        return new_arrays, metrics

    def _screen(self, server_round: int, replies: Iterable[Message], traffic: RoundTraffic) -> ScreenedReplies:
        """The round's replies screened (:class:`~.reply_screen.ReplyScreen`); the evaluation they carry pooled."""
        if self.secure is not None:  # a masked update says nothing; the unmasked sum is checked instead
            return self.screen.screen(server_round, replies, masked_spec(self.reply_spec(), self.secure), traffic)
        stage = self.evaluation_stage
        pending = None if stage is None else stage.carried
        screened = self.screen.screen(
            server_round, replies, self.reply_spec(), traffic, lambda reply: self.check_reply(server_round, reply),
            None if pending is None else lambda node, content: stage.training_part(
                node, content, self.traffic[pending.server_round]))
        if pending is not None and (pooled := stage.pool_carried())[1] is not None:
            self.evaluations[pooled[0]] = pooled[1]
        return screened

    # ------------------------------------------------------------ evaluation: its own messages
    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """An ``evaluate`` message of the global model to every node that can take part, on the rounds it scores."""
        if not self._evaluates(server_round):
            return []
        traffic = self.traffic.setdefault(server_round, RoundTraffic())
        messages = self.evaluation_stage.messages(server_round, arrays, self.participants.able(grid), traffic)
        self._sent[("evaluate", server_round)] = messages
        return messages

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """The pooled metrics from the parties' sums (:func:`flower_topics.evaluation.federated.combine`)."""
        if not self._evaluates(server_round):
            return None
        replies = list(replies)
        self.outstanding.round_ended(server_round, "evaluate", self._sent.pop(("evaluate", server_round), []),
                                     {msg.metadata.reply_to_message_id for msg in replies})
        scores = self.evaluation_stage.pool(server_round, replies, self.traffic.setdefault(server_round,
                                                                                           RoundTraffic()))
        if scores is None:
            return None
        self.evaluations[server_round] = scores
        return MetricRecord(dict(evaluation.numeric(scores)))

    def _evaluates(self, server_round: int) -> bool:
        """Whether round ``server_round`` is scored by an ``evaluate`` message of its own (not carried in training)."""
        return (self.evaluation is not None and self.evaluation.due(server_round)
                and not self.carries_evaluation(server_round))
