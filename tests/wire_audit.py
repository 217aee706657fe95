"""Record every message a ClientApp sends and check it against what the docs say may leave a party.

What may leave a party, by message type (README, "What leaves a party"):

- ``query.candidates``: its candidate words (a ``config`` record: ``words``, ``curated``), one
  document frequency per word, and its number of documents (``union``); the words and noisy
  counts that pass its differentially private threshold (``private``); under secure
  aggregation, one masked integer vector over the public candidates and nothing else;
- ``query.vocabulary``: one flag, ``node-corpus`` (1: the party reads its own file, 0: a
  simulated share of the run config's dataset), so the run records which corpus it trained on;
- ``train.<method>``: exactly the method's reply protocol (``MethodSpec.reply_spec``); under
  secure aggregation, one masked integer vector of the protocol's arrays and nothing else;
- ``query.secure_sum`` (every reply marked with its stage and round; ``keys`` and ``shares``
  only in the first round of a key epoch): stage ``keys``, one X25519 public key, one
  mask public key per round of the epoch and one Ed25519 public key; ``shares``, one Fernet
  ciphertext per neighbour (all of one length) addressed to participants it was sent;
  ``check``, one Ed25519 signature of the alive set it was sent; ``unmask``, per party of the
  request, a share of its self-mask seed of the round if it is alive or of its mask key of
  the round if it dropped out, never both (:mod:`flower_topics.secure_sum`);
- ``query.prevalence``: one ``K x T`` table of summed topic shares per period (``T``: the run's public
  periods, or the party's own periods in a plain release), its periods' labels, and in a plain release
  its counts of documents left out; under secure aggregation one masked integer vector and the labels;
- ``evaluate``: the evaluation sums (:func:`flower_topics.evaluation.federated.reply_spec`) and its label
  names; the document frequencies are those of the top words of the model the party was sent
  (:func:`flower_topics.metrics.coherence.coherence_word_ids`), never of words the server names;
- a ``train.<method>`` message that carries an evaluation (records ``evaluate.<name>``): its reply is
  the method's protocol plus, under the same prefix, exactly an ``evaluate`` reply to the carried
  request (checked as one), or one ``evaluate.error`` record with a one-line ``reason``; a reply to
  a training message that carries none has no such record.

Beyond the protocol's keys, dtypes and shapes (which pin every axis to K, V or the number
of top words, except a few documented free axes), the audit checks that no reply carries a
string outside the agreement's words and the evaluation's label names, and that no free
axis outside :data:`DOCUMENTED_FREE_AXES` is as long as the party's documents, held-out
documents or tokens (a per-document or per-token statistic). Given the party's documents,
it also recomputes every ``evaluate`` reply's D(w) and D(wi, wj) from the model the party
was sent: a reply with the counts of any other words (the shapes alone cannot tell) fails.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, RecordDict

from flower_topics.evaluation import federated as evaluation
from flower_topics.methods import METHODS
from flower_topics.metrics.coherence import coherence_word_ids
from flower_topics.metrics.pooled_sums import cooccurrence
from flower_topics.secure_sum.protocol import MESSAGE_TYPE as SECURE_SUM
from flower_topics.secure_sum.protocol import ROUND_RECORD, SecureSumSettings, masked_spec
from flower_topics.wire import agreement
from flower_topics.wire import prevalence
from flower_topics.wire.protocol import CONFIG, METRICS, ArraySpec, ReplyError, ReplySpec, validate_reply


#: Axes a protocol leaves free, and what their length is (README, "What leaves a party").
DOCUMENTED_FREE_AXES = {
    ("tuples", 0): "FedLDA: the number of tuples sent",
    (agreement.DOC_FREQ, 0): "agreement: the number of candidate words",
    (evaluation.CONTINGENCY, 1): "evaluation: the number of the party's labels",
    ("topic-word", 0): "FTM: the party's K_p",
    ("topic-word-delta.gaps", 0): "lda: the nonzero cells of its K x V count change (0 when sent dense)",
    ("topic-word-delta.values", 0): "lda: the nonzero cells of its K x V count change (K x V when sent dense)",
    (prevalence.SUMS, 1): "prevalence: the party's own periods (a plain release without public periods)",
}


#: What :meth:`Audit.check` counts a training reply that carried an evaluation as (besides its ``train.<method>``).
CARRIED_KIND = "evaluate (with training)"


class AuditError(AssertionError):
    """A party sent something the docs do not list."""


@dataclass
class Audit:
    """Every message each party sent, with the request it answered."""

    sent: list[tuple[Message, Message, Context]] = field(default_factory=list)

    def wrap(self, app: Callable[[Message, Context], Message]) -> Callable[[Message, Context], Message]:
        def audited(msg: Message, context: Context) -> Message:
            reply = app(msg, context)
            self.sent.append((msg, reply, context))
            return reply

        return audited

    def check(self, sizes: Callable[[Context], set[int]],
              documents_of: Callable[[Context], Any] | None = None) -> dict[str, int]:
        """Check every reply; ``sizes(context)`` gives the party's document and token counts.

        With ``documents_of(context)`` (the party's ``AgreedDocuments``), every ``evaluate``
        reply's co-document counts are also recomputed from the model it answered.
        Returns the number of replies checked per message type (and, as :data:`CARRIED_KIND`, how many
        training replies carried an evaluation).
        """
        seen: dict[str, int] = {}
        for request, reply, context in self.sent:
            kind = request.metadata.message_type
            seen[kind] = seen.get(kind, 0) + 1
            if reply.has_error():
                continue
            if kind == SECURE_SUM:
                _secure_sum_reply(request, reply, context.node_id)
                continue
            spec, free_axes = _spec(request)
            content = reply.content
            try:
                if kind.startswith("train."):
                    content = _carried_evaluation(request, reply, documents_of and documents_of(context),
                                                  context.node_id)
                    if len(content) < len(reply.content):
                        seen[CARRIED_KIND] = seen.get(CARRIED_KIND, 0) + 1
                if spec is None:
                    if set(reply.content.keys()) != {METRICS} or dict(reply.content[METRICS]) not in (
                            {agreement.NODE_CORPUS: 0}, {agreement.NODE_CORPUS: 1}):
                        raise ReplyError(f"unexpected records {sorted(reply.content.keys())}: "
                                         f"{ {k: dict(v) for k, v in reply.content.items()} }")
                else:
                    validate_reply(content, spec)
            except ReplyError as exc:
                raise AuditError(f"{kind} reply of node {context.node_id}: {exc}") from None
            if kind == prevalence.PREVALENCE and str(request.content[CONFIG]["periods"]) and \
                    str(reply.content[CONFIG]["periods"]) != str(request.content[CONFIG]["periods"]):
                raise AuditError(f"{kind} reply of node {context.node_id}: periods other than the run's public ones")
            _no_strings(kind, reply)
            _no_per_document_arrays(kind, reply, sizes(context), free_axes)
            if kind == evaluation.MESSAGE_TYPE and documents_of is not None:
                _only_top_words(request.content, reply.content, documents_of(context), context.node_id)
        return seen


def _carried_evaluation(request: Message, reply: Message, documents: Any, node_id: int) -> RecordDict:
    """The training reply's own records, once its carried evaluation (if any) is checked as an ``evaluate`` reply
    to the carried request; a reply that carries an evaluation it was not asked for fails."""
    asked = evaluation.split_carried(request.content)[1]
    content, carried = evaluation.split_carried(reply.content)
    if carried is None:
        return content
    if asked is None:
        raise ReplyError(f"evaluation records {sorted(carried.keys())} in a reply to a training message without one")
    if evaluation.ERROR_RECORD in carried.config_records:
        if set(carried.keys()) != {evaluation.ERROR_RECORD} or \
                set(carried[evaluation.ERROR_RECORD].keys()) != {"reason"}:
            raise ReplyError(f"the carried evaluation's error has {sorted(carried.keys())}")
        return content
    phi = evaluation.received_model(asked, _vocabulary_size(asked[CONFIG]))
    top_ids, word_ids = coherence_word_ids(phi, 10)
    validate_reply(carried, evaluation.reply_spec(phi.shape[0], word_ids.size,
                                                  len(evaluation.topic_pairs(top_ids, word_ids))))
    if documents is not None:
        _only_top_words(asked, carried, documents, node_id)
    return content


def _spec(request: Message) -> tuple[ReplySpec | None, set[tuple[str, int]]]:
    kind = request.metadata.message_type
    config = request.content[CONFIG] if CONFIG in request.content else ConfigRecord()
    if kind == agreement.CANDIDATES and ROUND_RECORD in request.content.config_records:
        size = len(agreement.split_words(str(config["candidates"])))
        bits = int(request.content[ROUND_RECORD]["bits"])
        return masked_spec(ReplySpec(agreement.METHOD, {"counts": ArraySpec("integer", (size,))}),
                           SecureSumSettings(bits=bits)), set()
    if kind == prevalence.PREVALENCE:
        k, periods = len(request.content["arrays"][prevalence.TOPIC_WORD].numpy()), prevalence.split_periods(
            str(config["periods"]))
        plain = prevalence.reply_spec(k, len(periods) or None, plain=not bool(config.get("dplda.prevalence-noise")))
        if ROUND_RECORD in request.content.config_records:
            return masked_spec(ReplySpec("prevalence", {prevalence.SUMS: ArraySpec("integer", (k, len(periods)))},
                                         config=("periods",)),
                               SecureSumSettings(bits=int(request.content[ROUND_RECORD]["bits"]))), set()
        spec = plain
    elif kind == agreement.CANDIDATES:
        spec = agreement.candidates_spec(str(config["mode"]) == "private")
    elif kind == agreement.VOCABULARY:
        return None, set()
    elif kind == evaluation.MESSAGE_TYPE:
        phi = _sent_model(request)
        top_ids, word_ids = coherence_word_ids(phi, 10)
        spec = evaluation.reply_spec(phi.shape[0], word_ids.size, len(evaluation.topic_pairs(top_ids, word_ids)))
    else:
        method = METHODS[kind.split(".", 1)[1]]
        spec = method.reply_spec(config, _vocabulary_size(config))
        if ROUND_RECORD in request.content.config_records:
            return masked_spec(spec, SecureSumSettings(bits=int(request.content[ROUND_RECORD]["bits"]))), set()
    free = {(key, axis) for key, array in spec.arrays.items() for axis, n in enumerate(array.shape) if n is None}
    return spec, free - set(DOCUMENTED_FREE_AXES)


def _secure_sum_reply(request: Message, reply: Message, node_id: int) -> None:
    """A secure-sum stage's reply carries exactly what :mod:`flower_topics.secure_sum.party` documents."""
    stage = str(request.content[CONFIG]["stage"])
    expected = {"keys": {"c-pk", "s-pk", "sig-pk"}, "shares": {"destinations", "ciphertexts"},
                "check": {"signature"}, "unmask": {"nodes", "seed-shares", "key-shares"}}[stage] | {"stage", "round"}
    if set(reply.content.keys()) != {CONFIG} or set(reply.content[CONFIG].keys()) != expected:
        raise AuditError(f"secure sum '{stage}' reply of node {node_id}: "
                         f"{ {k: sorted(v.keys()) for k, v in reply.content.items()} }")
    answer, asked = reply.content[CONFIG], request.content[CONFIG]
    rounds = int(asked.get("epoch-rounds", 1))  # a key epoch: one mask key pair per round
    if stage == "keys" and not (isinstance(answer["c-pk"], bytes) and len(answer["c-pk"]) == 44
                                and isinstance(answer["s-pk"], bytes) and len(answer["s-pk"]) == 44 * rounds
                                and isinstance(answer["sig-pk"], bytes) and len(answer["sig-pk"]) == 32):
        raise AuditError(f"secure sum 'keys' reply of node {node_id}: not 1 + {rounds} DER X25519 public keys and "
                         f"one raw Ed25519 public key")
    if stage == "check" and not (isinstance(answer["signature"], bytes) and len(answer["signature"]) == 64):
        raise AuditError(f"secure sum 'check' reply of node {node_id}: not one Ed25519 signature")
    if (str(answer["stage"]), int(answer["round"])) != (stage, int(asked["round"])):
        raise AuditError(f"secure sum '{stage}' reply of node {node_id}: not marked with its stage and round")
    if stage == "shares":  # one ciphertext per neighbour in the round's graph, all of them when it is complete
        peers = set(asked["nodes"]) - {str(node_id)}
        lengths = {len(c) for c in answer["ciphertexts"]}
        destinations = list(answer["destinations"])
        if not set(destinations) <= peers or len(set(destinations)) != len(destinations) \
                or len(answer["ciphertexts"]) != len(destinations) or len(lengths) > 1:
            raise AuditError(f"secure sum 'shares' reply of node {node_id}: not one equal-length ciphertext per peer")
    if stage == "unmask":
        alive, dropped = set(asked["alive"]), set(asked["dropped"])
        for owner, seed_share, key_share in zip(answer["nodes"], answer["seed-shares"], answer["key-shares"]):
            if owner not in alive | dropped or (owner in alive and key_share) or (owner in dropped and seed_share) \
                    or not (seed_share or key_share):
                raise AuditError(f"secure sum 'unmask' reply of node {node_id}: wrong shares for node {owner}")


def _sent_model(request: Message | RecordDict) -> np.ndarray:
    """The topic-word matrix an ``evaluate`` request (or its content) stands for (either form), as the party reads it."""
    content = request if isinstance(request, RecordDict) else request.content
    return evaluation.received_model(content, _vocabulary_size(content["config"]))


def _vocabulary_size(config: Any) -> int:
    """The number of agreed words, from a message config's vocabulary fingerprint (``<size>:<hash>``)."""
    return int(str(config["vocabulary"]).split(":")[0])


def _only_top_words(request: RecordDict, reply: RecordDict, documents: Any, node_id: int) -> None:
    """The reply's D(w) and D(wi, wj) are the counts of the top words of the model it was sent, and of the pairs
    of them within a topic only (:func:`flower_topics.evaluation.federated.topic_pairs`); both as contents."""
    phi = _sent_model(request)
    top_ids, word_ids = coherence_word_ids(phi, 10)
    honest = cooccurrence(documents.training, word_ids)
    pairs = evaluation.topic_pairs(top_ids, word_ids)
    update = reply["update"]
    if not (np.array_equal(update[evaluation.DOC_FREQ].numpy(), honest.doc_freq)
            and np.array_equal(update[evaluation.CO_DOC_FREQ].numpy(),
                               honest.co_doc_freq[pairs[:, 0], pairs[:, 1]])):
        raise AuditError(f"evaluate reply of node {node_id}: co-document counts of words that are not the top words "
                         "of the model it was sent")


def _no_strings(kind: str, reply: Message) -> None:
    allowed = {(CONFIG, agreement.WORDS), (CONFIG, "curated"), (CONFIG, evaluation.LABELS), ("sender", "method")}
    allowed |= {(f"{evaluation.CARRIED}{name}", key) for name, key in allowed} \
        | {(f"{evaluation.CARRIED}{evaluation.ERROR_RECORD}", "reason"), (CONFIG, "periods")}
    for name, record in reply.content.items():
        if isinstance(record, ConfigRecord):
            for key, value in record.items():
                if isinstance(value, (str, bytes, list)) and (name, key) not in allowed:
                    raise AuditError(f"{kind}: record '{name}' carries '{key}' = {str(value)[:40]!r}")


def _no_per_document_arrays(kind: str, reply: Message, sizes: set[int], undocumented: set[tuple[str, int]]) -> None:
    for record in reply.content.values():
        if not isinstance(record, ArrayRecord):
            continue
        for key, array in record.items():
            shape = array.numpy().shape
            for axis, n in enumerate(shape):
                if n in sizes and (key, axis) in undocumented:
                    raise AuditError(f"{kind}: '{key}' has an axis of {n}, as many as the party's documents or "
                                     f"tokens (shape {shape})")


def party_sizes(documents_of: Callable[[Context], Any]) -> Callable[[Context], set[int]]:
    """The party's document and token counts, from its documents (``AgreedDocuments``)."""
    def sizes(context: Context) -> set[int]:
        documents = documents_of(context)
        train, test = documents.training, documents.heldout
        return {train.n_docs + test.n_docs, train.n_docs, test.n_docs, train.n_tokens + test.n_tokens,
                train.n_tokens, test.n_tokens}

    return sizes


def leaky(app: Callable[[Message, Context], Message], key: str, value: Any) -> Callable[[Message, Context], Message]:
    """``app``, but its training replies also carry ``key`` (a deliberate leak, to show the audit can fail)."""
    def client(msg: Message, context: Context) -> Message:
        reply = app(msg, context)
        if msg.metadata.message_type.startswith("train.") and not reply.has_error():
            if isinstance(value, np.ndarray):
                reply.content["update"][key] = type(next(iter(reply.content["update"].values())))(value)
            else:
                reply.content[key] = value
        return reply

    return client
