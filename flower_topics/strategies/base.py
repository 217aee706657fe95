"""What every topic-modeling strategy shares: seeded node sampling, typed per-node
messages, and one validated aggregation path.

A method's strategy subclasses :class:`TopicStrategy`, names its :attr:`method`, and
implements the hooks: :meth:`initial_arrays`, :meth:`topic_word`, :meth:`settings`,
:meth:`reply_spec` and :meth:`aggregate` (and, where it needs them, :meth:`node_arrays`,
:meth:`check_reply` and :meth:`privacy_report`). The base keeps Flower's
:meth:`~flwr.serverapp.strategy.Strategy.start` loop untouched, so that any ServerApp
can run the strategy, and does the rest of a round:

1. sample the nodes (seeded), skipping nodes that said they cannot take part;
2. send each a ``train.<method>`` message: the method's arrays, its settings, the round,
   the node's last applied round and the vocabulary's fingerprint;
3. screen the replies: an error reply is logged and counted; a node whose error says it
   can never take part (:data:`~flower_topics.wire.protocol.BAD_INPUT`, or a ClientApp
   without this method's handler) is no longer sampled, and the run stops with one line
   when fewer than ``min_nodes`` nodes remain;
4. validate every other reply against the method's protocol
   (:func:`~flower_topics.wire.protocol.validate_reply`, then :meth:`check_reply`) and
   reject, with a logged reason, those that fail;
5. when at least ``min_replies`` replies are valid, aggregate them and record each
   node's last applied round; otherwise keep the previous global model and say so;
6. count bytes and participants; a reply that arrives after its round ended is pulled at
   the start of the next one, logged and ignored (:mod:`~flower_topics.strategies.outstanding`).

Federated evaluation (``evaluation`` set) is an ``evaluate`` message to every node that can
take part after each scored round; for a method that sets :attr:`evaluation_with_train`, a
scored round other than the last instead has its evaluation carried in the next round's
training messages (:meth:`carries_evaluation`; the parties' sums come back in their training
replies and are recorded under the scored round): one exchange a party fewer per evaluation.

With secure aggregation (``secure`` set, for the methods whose replies are sums), step 2 is
preceded by the secure sum's key and share stages, every reply carries only its masked
integer update, and step 5 unmasks their sum (:mod:`flower_topics.secure_sum`): the method's
:meth:`check_reply` and :meth:`aggregate` receive one :class:`Reply` from node 0, the sum over
``parties`` parties, decoded by :meth:`decode_sum` (a sum that fails the check holds the round:
it cannot be traced to a party).
"""

from __future__ import annotations

import math
import time
from abc import abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass, field
from logging import INFO, WARNING
from typing import Any, ClassVar, Mapping, Sequence

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common import log
from flwr.serverapp import Grid
from flwr.serverapp.strategy import Strategy

from flower_topics.evaluation import federated as evaluation
from flower_topics.errors import UserInputError
from flower_topics.evaluation.federated import EvaluationSettings
from flower_topics.privacy.privacy_report import PrivacyReport
from flower_topics.secure_sum.protocol import MASKED_KEY, ROUND_RECORD, SecureSumSettings
from flower_topics.secure_sum.server import KeyEpoch, SecureRound, SecureRoundFailed
from flower_topics.strategies.outstanding import OutstandingMessages
from flower_topics.wire.protocol import (
    ARRAYS,
    BAD_INPUT,
    CONFIG,
    ArraySpec,
    ReplyError,
    ReplySpec,
    message_type,
    payload_bytes,
    validate_reply,
    vocabulary_fingerprint,
)

def masked_spec(spec: ReplySpec, secure: SecureSumSettings) -> ReplySpec:
    """What a reply is under secure aggregation: one masked integer vector of all of ``spec``'s arrays, no metrics,
    and the entries of ``spec``'s config record (public labels of what was summed), if it has any."""
    size = sum(int(np.prod(a.shape)) for a in spec.arrays.values())
    return ReplySpec(spec.method, {MASKED_KEY: ArraySpec("integer", (size,), 0, 2.0 ** secure.bits,
                                                         what="masked update modulo 2^bits")},
                     metrics=(), max_bytes=8 * size + (1 << 16), config=spec.config)


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


@dataclass(frozen=True)
class PendingEvaluation:
    """A scored round's evaluation request carried in the next round's training messages.

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


@dataclass
class RoundTraffic:
    """Bytes and participants of one round.

    Parameters
    ----------
    bytes_sent : int
        Payload bytes the server sent, over all nodes.
    bytes_received : int
        Payload bytes of the replies received.
    nodes_sampled : int
        Nodes the round was sent to.
    replies_applied : int
        Replies that passed validation and were aggregated.
    replies_failed : int
        Replies that carried an error or failed validation.
    model_held : bool
        Fewer than ``min_replies`` valid replies: the global model did not change.
    started : float
        ``time.time()`` when the round was configured.
    """

    bytes_sent: int = 0
    bytes_received: int = 0
    nodes_sampled: int = 0
    replies_applied: int = 0
    replies_failed: int = 0
    model_held: bool = False
    eval_bytes_sent: int = 0
    eval_bytes_received: int = 0
    started: float = field(default_factory=time.time)


class TopicStrategy(Strategy):
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
        if not 0.0 < fraction_train <= 1.0:
            raise ValueError("fraction_train must be in (0, 1]")
        if min_nodes < 1:
            raise ValueError("min_nodes must be >= 1")
        if not (0 < min_replies < 1 or (min_replies >= 1 and float(min_replies).is_integer())):
            raise ValueError("min_replies must be a fraction in (0, 1) or a whole count >= 1")
        self.vocabulary = tuple(vocabulary)
        self.vocab_size = len(self.vocabulary)
        self.fingerprint = vocabulary_fingerprint(self.vocabulary)
        self.fraction_train = fraction_train
        self.min_nodes = min_nodes
        self.min_replies = min_replies
        self.seed = seed
        self.evaluation = evaluation
        self.secure = secure
        self.round_timeout = round_timeout
        self.secure_rounds: dict[int, SecureRound] = {}
        self.secure_epoch: KeyEpoch | None = None  # the key epoch the next secure round may continue
        self.evaluations: dict[int, dict[str, float | int]] = {}
        self.method_metrics: dict[int, dict[str, float]] = {}
        self.traffic: dict[int, RoundTraffic] = {}
        self.last_applied: dict[int, int] = {}
        self.excluded: dict[int, str] = {}
        self.prevalence_parties = 0  # parties asked for their topic prevalence after the last round
        self._connected: set[int] = set()
        self._current: ArrayRecord | None = None
        self._eval_phi: np.ndarray | None = None
        self._eval_top: tuple[np.ndarray, np.ndarray] | None = None
        self._eval_pairs: np.ndarray | None = None  # evaluation.topic_pairs of _eval_top
        self._carried: PendingEvaluation | None = None  # the evaluation the current round's messages carry
        #: unanswered messages of recent rounds; a reply that comes after its round is logged and ignored
        self.outstanding = OutstandingMessages()
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

    # ------------------------------------------------------------ hooks
    @abstractmethod
    def initial_arrays(self) -> ArrayRecord:
        """The global model the first round starts from."""

    @abstractmethod
    def topic_word(self, arrays: ArrayRecord) -> np.ndarray:
        """The ``K x V`` topic-word distribution of a global model."""

    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """The method's settings every party receives (the wire module's ``to_record``)."""

    @abstractmethod
    def reply_spec(self) -> ReplySpec:
        """What a valid reply is (the wire module's ``reply_spec``)."""

    @abstractmethod
    def aggregate(self, server_round: int, arrays: ArrayRecord, replies: list[Reply]
                  ) -> tuple[ArrayRecord, dict[str, float]]:
        """The new global model from the round's model and its valid replies (at least one),
        and the method's own metrics of the round."""

    def node_arrays(self, server_round: int, node_id: int, arrays: ArrayRecord) -> ArrayRecord:
        """What one node receives of the global model (by default all of it)."""
        return arrays

    def check_reply(self, server_round: int, reply: Reply) -> None:
        """Checks that need the global model (raise :class:`ReplyError`); none by default."""

    def decode_sum(self, server_round: int, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The method's arrays from the integer sums a secure round unmasked (as they are, by default)."""
        return arrays

    def evaluation_counts(self, arrays: ArrayRecord) -> tuple[np.ndarray, float] | None:
        """Integer ``K x V`` counts and a prior whose :func:`~flower_topics.evaluation.federated.counts_phi` is this model's
        topic-word matrix, sent to the parties for evaluation instead of the float64 matrix; None (the default)
        sends the matrix."""
        return None

    def privacy_report(self) -> PrivacyReport:
        """Privacy spent so far (none by default: the update is sent as it is)."""
        rounds = sum(1 for t in self.traffic.values() if t.nodes_sampled)
        return PrivacyReport.no_mechanism(rounds=rounds, reason=f"no privacy mechanism: each party's {self.method} "
                                          "update is sent as it is computed from its documents")

    def unaccounted_evaluation(self) -> str | None:
        """The federated evaluation as a release outside every accountant, or None when it is off.

        The parties' evaluation sums (held-out log-likelihoods, token counts, co-document
        counts of the top words) are computed from their documents and sent without noise.
        """
        if self.evaluation is None:
            return None
        return ("federated evaluation (each party's held-out log-likelihood sums and the co-document counts of the "
                "top words, sent without noise; federated-eval=false turns it off)")

    def prevalence_settings(self) -> dict[str, Any]:
        """What the prevalence request carries of the method's release rule, beside the periods and the fold-in
        (:mod:`flower_topics.wire.prevalence`); empty (the default): the parties send their exact tables."""
        return {}

    def prevalence_released(self, parties: int) -> None:
        """Record that ``parties`` were asked for their topic prevalence (a release of their documents)."""
        self.prevalence_parties = parties

    def prevalence_noise_variance(self, parties: int) -> float:
        """The noise variance in each cell of the summed prevalence table of ``parties`` (0: none, the default)."""
        return 0.0

    # ------------------------------------------------------------ resume hooks (flower_topics.run.checkpoint)
    def checkpoint_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """``(arrays, numbers)``: the method's own state that ``aggregate`` and ``privacy_report`` need to
        continue after a resume, beyond the base's accumulators (traffic, last applied rounds,
        excluded nodes, metrics, evaluations); written to every checkpoint. Numbers must be JSON
        values. None by default."""
        return {}, {}

    def load_checkpoint_state(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Restore :meth:`checkpoint_state` into this strategy, freshly built from the same run config and
        vocabulary (nothing to restore by default)."""

    def release_details(self) -> dict[str, Any] | None:
        """What ``checkpoint-release.json`` records of a round about to be released beyond its nodes (e.g. how
        many tuples each party sends), so that a resume can count a release lost to a crash; None by default."""
        return None

    def count_lost_release(self, release: Mapping[str, Any]) -> None:
        """Count a release that went out after the last checkpoint and was lost to a crash (a line of
        ``checkpoint-release.json``); by default a round to its nodes (:meth:`record_lost_round`)."""
        self.record_lost_round(release.get("nodes", []))

    def record_lost_round(self, nodes: Sequence[int]) -> None:
        """Count a round released to ``nodes`` and lost to a crash in the traffic.

        The round is re-run under its own number after the resume, so the lost release is
        kept under a negative key (below every other): every report that counts the rounds
        with ``nodes_sampled`` counts it, and no round's metrics change.
        """
        key = min(0, *self.traffic) - 1 if self.traffic else -1
        self.traffic[key] = RoundTraffic(nodes_sampled=len(nodes), started=0.0)

    def on_resume(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Called once a resumed strategy holds the checkpoint's state, with the checkpoint's global arrays:
        what the method does because the parties of a new Flower run start without their ``context.state``
        (nothing by default)."""

    # ------------------------------------------------------------ Strategy API
    def summary(self) -> None:
        """Log the strategy's settings."""
        log(INFO, "\t├──> %s (method %s, V=%d)", type(self).__name__, self.method, self.vocab_size)
        log(INFO, "\t├──> Sampling: fraction %.2f, at least %d node(s), %g valid replies a round, seed %d",
            self.fraction_train, self.min_nodes, self.min_replies, self.seed)
        log(INFO, "\t└──> Settings: %s", self.settings())

    def sample_nodes(self, grid: Grid, server_round: int) -> list[int]:
        """Wait for ``min_nodes`` nodes that can take part, then sample the round's nodes with the seed."""
        self._connected = wait_for_nodes(grid, self.min_nodes, self.excluded)
        nodes = sorted(self._connected - set(self.excluded))
        size = max(self.min_nodes, int(round(len(nodes) * self.fraction_train)))
        rng = np.random.default_rng([self.seed, server_round])
        # choose positions, not ids: node ids are uint64 and would not survive a numpy round trip
        chosen = rng.choice(len(nodes), size=min(size, len(nodes)), replace=False)
        return sorted(nodes[i] for i in chosen)

    def carries_evaluation(self, server_round: int) -> bool:
        """Whether round ``server_round``'s evaluation travels with round ``server_round + 1``'s training messages.

        It does when the method opts in (:attr:`evaluation_with_train`) and the run config lets it
        (``eval-with-train``, true by default), the round is scored and
        is not the last (the last has no next round: its ``evaluate`` message stays), every node
        that can take part is sent a training message (``fraction_train`` 1, as every one is sent an
        ``evaluate`` message), and there is no secure aggregation (a masked reply carries its
        masked vector and nothing else).
        """
        return (self.evaluation_with_train and self.evaluation is not None and self.evaluation.with_train
                and self.secure is None
                and self.fraction_train >= 1.0 and 1 <= server_round < self.evaluation.num_rounds
                and self.evaluation.due(server_round))

    def evaluation_pending(self, server_round: int) -> bool:
        """Whether round ``server_round`` is scored by the next round's training messages and its pooled metrics
        are not in :attr:`evaluations` yet."""
        return self.carries_evaluation(server_round) and server_round not in self.evaluations

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """One ``train.<method>`` message per sampled node; when the round before is scored and
        :meth:`carries_evaluation`, each also carries its evaluation request, for ``arrays``: the global
        model the round before ended with."""
        self._grid = grid
        self.outstanding.collect_late(grid, server_round)
        traffic = self.traffic[server_round] = RoundTraffic()
        self._current = arrays
        settings = {**dict(config), **self.settings(), "server-round": server_round,
                    "vocabulary": self.fingerprint}
        messages = []
        nodes = self.sample_nodes(grid, server_round)
        extra = {node_id: {} for node_id in nodes}
        if self.secure is not None:
            extra = self._secure_setup(server_round, nodes, grid)
        carried, self._carried = None, None
        if self.evaluation_pending(server_round - 1) and not extra:
            log(WARNING, "round %d: no training message to carry round %d's evaluation; it is not scored",
                server_round, server_round - 1)
        if self.evaluation_pending(server_round - 1) and extra:
            carried, *pending = self._evaluation_request(server_round - 1, arrays)
            self._carried = PendingEvaluation(server_round - 1, *pending)
            self.traffic.setdefault(server_round - 1, RoundTraffic()).eval_bytes_sent = \
                payload_bytes(carried) * len(extra)
        for node_id in extra:
            content = RecordDict({
                ARRAYS: self.node_arrays(server_round, node_id, arrays),
                CONFIG: ConfigRecord({**settings, "last-applied-round": self.last_applied.get(node_id, 0)}),
                **extra[node_id],
            })
            traffic.bytes_sent += payload_bytes(content)
            if carried is not None:
                evaluation.carry_request(content, carried)
            messages.append(Message(content=content, message_type=message_type(self.method), dst_node_id=node_id))
        traffic.nodes_sampled = max(len(messages), len(nodes) if self.secure is not None else 0)
        log(INFO, "configure_train: round %d sent to %d node(s)%s", server_round, len(messages),
            "" if carried is None else f", with the evaluation of round {server_round - 1}")
        self._sent[("train", server_round)] = messages
        return messages

    def _secure_setup(self, server_round: int, nodes: list[int], grid: Grid) -> dict[int, dict[str, ConfigRecord]]:
        """The secure sum's key and share stages; the round record each remaining node's message carries."""
        secure = SecureRound(grid, nodes, self.secure, server_round, self.round_timeout, epoch=self.secure_epoch)
        self.secure_rounds = {server_round: secure}  # only the current round's keys and ciphertexts are kept
        try:
            records = secure.setup()
            self.secure_epoch = secure.epoch
        except SecureRoundFailed as exc:
            self.secure_epoch = None
            log(WARNING, "%s; no training message is sent this round", exc)
            records = {}
        finally:
            self.traffic[server_round].bytes_sent += secure.bytes_sent
            self.traffic[server_round].bytes_received += secure.bytes_received
        return {node_id: {ROUND_RECORD: record} for node_id, record in records.items()}

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        """Screen, validate and aggregate the round's replies (see the module docstring).

        Returns ``(None, metrics)``, which keeps the previous global model, when fewer
        than ``min_replies`` replies are valid.
        """
        if self._current is None:
            raise RuntimeError("aggregate_train called before configure_train")
        traffic = self.traffic.setdefault(server_round, RoundTraffic())
        spec = self.reply_spec()
        if self.secure is not None:
            spec = masked_spec(spec, self.secure)
        valid, replied, scored = [], set(), []
        for msg in replies:
            node_id = msg.metadata.src_node_id
            replied.add(msg.metadata.reply_to_message_id)
            if msg.has_error():
                self._error_reply(server_round, node_id, msg)
                continue
            content = msg.content
            if self._carried is not None:  # the carried evaluation's records, apart from the training reply's
                content, carried = evaluation.split_carried(content)
                scored.extend(self._carried_scores(node_id, carried))
            traffic.bytes_received += payload_bytes(content)
            try:
                reply = Reply(node_id, *validate_reply(content, spec))
                if self.secure is None:  # a masked update says nothing; the unmasked sum is checked instead
                    self.check_reply(server_round, reply)
            except ReplyError as exc:
                traffic.replies_failed += 1
                log(WARNING, "round %d: reply of node %d rejected: %s", server_round, node_id, exc)
                continue
            valid.append(reply)
        if self._carried is not None:
            self._record_evaluation(self._carried, scored)
            self._carried = None
        self.outstanding.collect_late(self._grid, server_round)  # what came in late while this round ran
        self.outstanding.round_ended(server_round, "train", self._sent.pop(("train", server_round), []), replied)
        self._stop_if_too_few_nodes(server_round)
        needed = self.replies_needed(traffic.nodes_sampled)
        if len(valid) < needed or not valid:
            traffic.model_held = True
            log(WARNING, "round %d: %d valid repl%s, %d needed (min-replies): the global model stays as it was",
                server_round, len(valid), "y" if len(valid) == 1 else "ies", needed)
            return None, self.traffic_metrics(server_round)
        applied = [reply.node_id for reply in valid]
        if self.secure is not None:
            valid = self._unmask(server_round, valid)
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

    def _unmask(self, server_round: int, masked: list[Reply]) -> list[Reply]:
        """The round's sum as one reply (node 0), or [] when the secure sum could not finish (logged)."""
        secure = self.secure_rounds.pop(server_round, None)
        if secure is None:
            return []
        traffic = self.traffic[server_round]
        sent, received = secure.bytes_sent, secure.bytes_received
        try:
            total = secure.unmask({reply.node_id: reply.arrays[MASKED_KEY] for reply in masked})
        except SecureRoundFailed as exc:
            log(WARNING, "%s: the global model stays as it was", exc)
            return []
        finally:
            traffic.bytes_sent += secure.bytes_sent - sent
            traffic.bytes_received += secure.bytes_received - received
        arrays, start = {}, 0
        for key, array_spec in self.reply_spec().arrays.items():
            size = int(np.prod(array_spec.shape))
            arrays[key] = total[start:start + size].reshape(array_spec.shape)
            start += size
        summed = Reply(0, self.decode_sum(server_round, arrays), {}, parties=len(masked))
        try:
            self.check_reply(server_round, summed)
        except ReplyError as exc:  # it cannot be traced to a party: the whole round is held
            log(WARNING, "round %d: the secure sum of %d parties rejected: %s; the global model stays as it was",
                server_round, len(masked), exc)
            return []
        return [summed]

    def replies_needed(self, nodes_sampled: int) -> int:
        """Valid replies a round of ``nodes_sampled`` nodes needs (``min_replies`` as a count)."""
        if self.min_replies >= 1:
            return int(self.min_replies)
        return max(1, math.ceil(self.min_replies * nodes_sampled))

    def traffic_metrics(self, server_round: int) -> MetricRecord:
        """The round's traffic as a MetricRecord."""
        t = self.traffic.get(server_round, RoundTraffic())
        return MetricRecord({
            "bytes-sent": t.bytes_sent,
            "bytes-received": t.bytes_received,
            "nodes-sampled": t.nodes_sampled,
            "replies-applied": t.replies_applied,
            "replies-failed": t.replies_failed,
            "model-held": int(t.model_held),
            "eval-bytes-sent": t.eval_bytes_sent,
            "eval-bytes-received": t.eval_bytes_received,
        })

    def _evaluation_request(self, server_round: int, arrays: ArrayRecord
                            ) -> tuple[RecordDict, np.ndarray, tuple[np.ndarray, np.ndarray], np.ndarray]:
        """An ``evaluate`` request of the global model ``arrays`` scored as round ``server_round``, the model as
        the parties hold it, its top words and their pairs."""
        counts = self.evaluation_counts(arrays)
        if counts is None:
            phi = evaluation.model_phi(self.topic_word(arrays))  # what the parties are sent
            content = evaluation.request(phi, self.evaluation, self.fingerprint, server_round)
        else:  # the counts stand for the same float64 matrix, computed the same way on both sides
            phi = evaluation.counts_phi(*counts)
            content = evaluation.counts_request(*counts, self.evaluation, self.fingerprint, server_round)
        top = evaluation.coherence_word_ids(phi, 10)  # the top words the parties count
        return content, phi, top, evaluation.topic_pairs(*top)  # and the pairs of them they count

    def _carried_scores(self, node_id: int, carried: RecordDict | None) -> list[evaluation.PartyScores]:
        """A training reply's evaluation sums, validated ([] when it has none, or they fail: logged)."""
        pending, traffic = self._carried, self.traffic[self._carried.server_round]
        if carried is None:
            log(WARNING, "round %d: node %d sent no evaluation with its training reply", pending.server_round,
                node_id)
            return []
        traffic.eval_bytes_received += payload_bytes(carried)
        if evaluation.ERROR_RECORD in carried.config_records:
            log(WARNING, "round %d: node %d could not evaluate: %s", pending.server_round, node_id,
                carried[evaluation.ERROR_RECORD].get("reason", ""))
            return []
        try:
            return [evaluation.parse_sums(carried, pending.phi.shape[0], pending.top[1].size, len(pending.pairs))]
        except ReplyError as exc:
            log(WARNING, "round %d: evaluation sums of node %d rejected: %s", pending.server_round, node_id, exc)
            return []

    def _record_evaluation(self, pending: PendingEvaluation, parts: list[evaluation.PartyScores]) -> None:
        """Round ``pending.server_round``'s pooled metrics from the sums its next round's training replies carried."""
        if not parts:
            log(WARNING, "round %d: no party's evaluation came back with round %d's training replies",
                pending.server_round, pending.server_round + 1)
            return
        self.evaluations[pending.server_round] = evaluation.combine(parts, pending.phi, pending.top, pending.pairs)

    def configure_evaluate(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        """On evaluation rounds, an ``evaluate`` message with the global model to every node that can take part;
        none where the next round's training messages carry the evaluation (:meth:`carries_evaluation`)."""
        if self.evaluation is None or not self.evaluation.due(server_round) or self.carries_evaluation(server_round):
            return []
        content, self._eval_phi, self._eval_top, self._eval_pairs = self._evaluation_request(server_round, arrays)
        nodes = sorted(set(grid.get_node_ids()) - set(self.excluded))
        traffic = self.traffic.setdefault(server_round, RoundTraffic())
        traffic.eval_bytes_sent = payload_bytes(content) * len(nodes)
        messages = [Message(content=content, message_type=evaluation.MESSAGE_TYPE, dst_node_id=n) for n in nodes]
        self._sent[("evaluate", server_round)] = messages
        return messages

    def aggregate_evaluate(self, server_round: int, replies: Iterable[Message]) -> MetricRecord | None:
        """The pooled metrics from the parties' sums (:func:`flower_topics.evaluation.federated.combine`)."""
        if self.evaluation is None or not self.evaluation.due(server_round) or self.carries_evaluation(server_round):
            return None
        replies = list(replies)
        self.outstanding.round_ended(server_round, "evaluate", self._sent.pop(("evaluate", server_round), []),
                                     {msg.metadata.reply_to_message_id for msg in replies})
        traffic = self.traffic.setdefault(server_round, RoundTraffic())
        k, n_words = self._eval_phi.shape[0], self._eval_top[1].size
        parts = []
        for msg in replies:
            if msg.has_error():
                log(WARNING, "round %d: node %d could not evaluate: %s", server_round, msg.metadata.src_node_id,
                    msg.error.reason)
                continue
            traffic.eval_bytes_received += payload_bytes(msg.content)
            try:
                parts.append(evaluation.parse_reply(msg, k, n_words, len(self._eval_pairs)))
            except ReplyError as exc:
                log(WARNING, "round %d: evaluation reply of node %d rejected: %s", server_round,
                    msg.metadata.src_node_id, exc)
        if not parts:
            return None
        self.evaluations[server_round] = evaluation.combine(parts, self._eval_phi, self._eval_top,
                                                            self._eval_pairs)
        return MetricRecord(dict(evaluation.numeric(self.evaluations[server_round])))

    # ------------------------------------------------------------ internals
    def _error_reply(self, server_round: int, node_id: int, msg: Message) -> None:
        self.traffic[server_round].replies_failed += 1
        reason = msg.error.reason
        if msg.error.code == BAD_INPUT or NO_HANDLER in reason:
            self.excluded[node_id] = error_reason(msg)
            log(WARNING, "round %d: node %d cannot take part and is no longer sampled: %s",
                server_round, node_id, self.excluded[node_id])
        else:
            log(WARNING, "round %d: node %d replied with an error: %s", server_round, node_id, reason)

    def _stop_if_too_few_nodes(self, server_round: int) -> None:
        able = self._connected - set(self.excluded)
        if self.excluded and len(able) < self.min_nodes:
            raise FederationError.too_few(f"round {server_round}", len(able), self.min_nodes, self.excluded)
