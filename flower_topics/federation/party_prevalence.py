"""A party's topic prevalence by period: its documents folded in against the final topics, on its host.

At ``query.prevalence`` (:mod:`flower_topics.wire.prevalence`) the party reads every document
of its own (its file, or its simulated share) with its dates (reading option ``date-column``),
folds each in against the message's topics with the evaluation's EM (as ``infer`` and
``theta-out`` do), and adds each period's topic shares: a ``K x T`` table. A document with no
date, a date outside the server's grid, or no word of the vocabulary is left out and counted.
What leaves is the table as the method's release rule makes it
(:attr:`~flower_topics.clients.base.LocalStep.prevalence`): plain for a method without a
mechanism, with the method's noise otherwise, masked under secure aggregation. The party's own
exact table stays on its host, in the CSV its node config's ``prevalence-out`` names.
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MetricRecord, RecordDict

from flower_topics import secure_sum
from flower_topics.data.node_data import NodeDocuments, node_options
from flower_topics.data.periods import document_periods
from flower_topics.errors import UserInputError
from flower_topics.federation import party_ledger
from flower_topics.federation.party_side import check_policy, record_release
from flower_topics.methods import MethodSpec
from flower_topics.metrics.prevalence import PrevalenceTable, period_totals
from flower_topics.privacy.party_policy import PREVALENCE, AccountedRelease, PartyFacts
from flower_topics.topic_model.document_topics import count_corpus, document_topics
from flower_topics.wire import prevalence as wire
from flower_topics.wire.agreement import split_words
from flower_topics.wire.protocol import ARRAYS, CONFIG, METRICS, SENDER, UPDATE

logger = logging.getLogger("flower_topics")


def dated_shares(documents: NodeDocuments, vocabulary: tuple[str, ...], topic_word: np.ndarray,
                 request: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, tuple[str, ...], dict[str, int]]:
    """The topic shares of this party's dated documents and each one's period.

    Returns
    -------
    theta : np.ndarray
        ``D' x K`` topic shares of the documents counted (rows sum to 1).
    index : np.ndarray
        ``D'`` period positions in ``periods``.
    periods : tuple of str
        The server's grid, or the party's own periods when the request has none.
    left_out : dict
        Documents left out: :data:`~flower_topics.wire.prevalence.UNDATED` (no date),
        ``OUTSIDE`` (a date outside the grid), ``EMPTY`` (no word of the vocabulary).

    Raises
    ------
    UserInputError
        When the party's documents have no dates (no ``date-column``), or a date is not one.
    """
    corpus = documents.corpus
    dates = getattr(corpus, "dates", None)
    if dates is None:
        raise UserInputError(f"prevalence: {documents.source} has no dates: set date-column (the .jsonl or .csv "
                             "field holding each document's date) in this party's node config or the run config")
    own, index = document_periods(dates, str(request["period"]), source=documents.source)
    grid = wire.split_periods(str(request["periods"]))
    periods = grid or own
    if grid:  # the party's periods onto the grid: -2 outside it, -1 (no date) stays -1
        position = {label: i for i, label in enumerate(grid)}
        index = np.array([position.get(label, -2) for label in own] + [-1], dtype=np.int64)[index]
    undated, outside = int(np.sum(index == -1)), int(np.sum(index == -2))
    counts = count_corpus(corpus, vocabulary)
    dated = np.flatnonzero(index >= 0)
    words = counts.n_words[dated]
    kept = dated[words > 0]
    subset = type(counts)(tuple(counts.ids[i] for i in kept), counts.counts[kept], counts.n_oov[kept])
    theta = document_topics(topic_word, subset, alpha=float(request["eval-alpha"]),
                            n_iter=int(request["eval-iterations"])).theta
    return theta, index[kept], periods, {wire.UNDATED: undated, wire.OUTSIDE: outside,
                                         wire.EMPTY: int(dated.size - kept.size)}


def keep_own_table(context: Context, table: PrevalenceTable) -> None:
    """Write the party's exact table to its node config's ``prevalence-out`` (nothing when unset); a failure is
    logged on the party and sent nowhere."""
    target = str(node_options(context.node_config).get("prevalence-out", "")).strip()
    if not target:
        return
    try:
        table.write_csv(target)
    except OSError as exc:
        logger.error("flower-topics: prevalence-out: could not write %s: %s (kept on this node, nothing was sent)",
                     target, exc)
        return
    logger.info("flower-topics: prevalence-out: wrote this party's topic prevalence over %d period(s) to %s on "
                "this node", len(table.periods), target)


def answer(msg: Message, context: Context, config: Mapping[str, Any], spec: MethodSpec, documents: NodeDocuments,
           request_config: ConfigRecord, party: PartyFacts, state: Any, seed: int) -> tuple[Message, Any]:
    """This party's reply to ``query.prevalence``, and its method's local state after the release.

    ``spec`` is the request's method: its release rule (:attr:`~flower_topics.clients.base.LocalStep.prevalence`)
    makes the table that leaves from ``request_config`` (the request's ConfigRecord) and, beside it, ``party`` (this
    party's own side: its cap, its account, its secure-sum facts); its account and its ledger record what it spends
    before it leaves, and a party that requires a document-level guarantee sends no table without one.
    """
    request = msg.content[CONFIG]
    record = context.state["vocabulary"]  # the ClientApp checked that the party holds one
    if str(request["vocabulary"]) != str(record["fingerprint"]):
        raise UserInputError("prevalence: the server's topics are not over the vocabulary this party agreed to")
    vocabulary = split_words(str(record["words"]))
    topic_word = msg.content[ARRAYS][wire.TOPIC_WORD].numpy()
    theta, index, periods, left_out = dated_shares(documents, vocabulary, topic_word, request)
    sums, _ = period_totals(theta, index, len(periods))
    keep_own_table(context, PrevalenceTable(periods, sums, sums.sum(axis=0), left_out[wire.UNDATED]))
    secure = msg.content.config_records.get(secure_sum.ROUND_RECORD)
    table, releases = spec.local_step().prevalence(theta, index, len(periods), request_config, state, seed, party)
    check_policy(party.policy, spec.name, releases is not None, "prevalence")  # before anything leaves
    share = party.secure.noise_share if party.secure is not None else 1.0
    for release in releases or ():
        record_release(context.state, AccountedRelease(PREVALENCE, spec.name, release, secure is not None, share))
    party_ledger.record_round(context, config, spec.name, releases, "a plain topic-prevalence table")
    if secure is not None:
        from flower_topics.secure_sum import party as secure_party

        if party.secure is None:
            raise UserInputError("prevalence: a secure-sum round this party has no facts of")
        masked = secure_party.mask_update(context.state, context.node_id, secure,
                                          encode_table(table, request_config, party.secure.entry_limit))
        update, metrics = {secure_sum.MASKED_KEY: masked}, {}
    else:
        update = {wire.SUMS: np.asarray(table, dtype=np.float64)}
        metrics = left_out if releases is None else {}
    content = RecordDict({
        UPDATE: ArrayRecord({key: Array(value) for key, value in update.items()}),
        METRICS: MetricRecord(metrics),
        SENDER: ConfigRecord({"method": "prevalence"}),
        CONFIG: ConfigRecord({"periods": wire.join_periods(periods)}),
    })
    logger.info("flower-topics: prevalence: %d document(s) over %d period(s) released (%d without a date, %d "
                "outside the periods, %d without a word of the vocabulary)", len(index), len(periods),
                left_out[wire.UNDATED], left_out[wire.OUTSIDE], left_out[wire.EMPTY])
    return Message(content=content, reply_to=msg), state


def encode_table(table: np.ndarray, request_config: Mapping[str, Any], limit: int) -> np.ndarray:
    """The table as the secure sum's integer vector: an integer table as it is (the method encoded it), a real one
    in units of ``1 / quantum`` (unbiased random rounding, :func:`~flower_topics.secure_sum.protocol.quantize`);
    ``limit`` is the party's own entry limit of the round."""
    from flower_topics.secure_sum.protocol import quantize

    if np.issubdtype(np.asarray(table).dtype, np.integer):
        values = np.asarray(table, dtype=np.int64).ravel()
    else:
        values = quantize(np.asarray(table).ravel(), float(request_config[wire.QUANTUM]), limit,
                          np.random.default_rng())
    if values.size and int(np.abs(values).max()) >= limit:
        raise UserInputError(f"prevalence: an entry of this party's table reaches {int(np.abs(values).max())}, over "
                             f"{limit}: use a larger secure-aggregation-bits")
    return values
