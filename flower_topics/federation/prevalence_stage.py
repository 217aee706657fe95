"""The server's stage after the last round: topic prevalence by period, summed over the parties.

With ``prevalence-period`` set, the ServerApp sends the final topics to every party that
trained (``query.prevalence``, :mod:`flower_topics.wire.prevalence`); each folds its own
dated documents in on its host and replies with its ``K x T`` table of summed topic shares
(:mod:`flower_topics.federation.party_prevalence`). The server adds the tables: in the plain,
over the union of the parties' periods (or the run's grid, ``prevalence-from`` to
``prevalence-to``); under secure aggregation as one secure sum over the grid, so that it
sees only the total. A method with a mechanism (``dplda``) has each party add its noise
(the strategy's :meth:`~flower_topics.strategies.base.TopicStrategy.prevalence_config`),
accounted in the run's one guarantee. With ``prevalence-by-party`` (plain releases only) the
server also keeps each party's table.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict
from flwr.serverapp import Grid

from flower_topics.data.periods import period_grid
from flower_topics.errors import UserInputError
from flower_topics.federation.grids import collect_replies
from flower_topics.metrics.prevalence import PrevalenceTable
from flower_topics.secure_sum.protocol import masked_spec
from flower_topics.strategies.base import TopicStrategy, exclusion_reasons
from flower_topics.wire import prevalence as wire
from flower_topics.wire.protocol import (
    ARRAYS,
    CONFIG,
    ReplyError,
    validate_reply,
    vocabulary_fingerprint,
)

logger = logging.getLogger("flower_topics")


@dataclass
class Prevalence:
    """What the prevalence stage gave.

    Parameters
    ----------
    table : PrevalenceTable
        The parties' tables summed (documents per period: the column sums).
    parties : int
        Parties whose table is in the sum.
    noise_std : float
        Standard deviation of the noise in each cell of ``table.sums`` (0: plain).
    by_party : dict
        Each party's table, by node id (``prevalence-by-party`` only).
    excluded : dict
        Parties that could not answer, with the reason.
    left_out : dict
        Documents the parties left out (no date, outside the periods, no word of the vocabulary), plain
        releases only.
    seconds : float
        Wall time of the stage.
    """

    table: PrevalenceTable
    parties: int
    noise_std: float = 0.0
    by_party: dict[int, PrevalenceTable] = field(default_factory=dict)
    excluded: dict[int, str] = field(default_factory=dict)
    left_out: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def summary(self) -> dict[str, Any]:
        """What metrics and the model's metadata record of the stage."""
        return {"periods": len(self.table.periods), "parties": self.parties, "noise_std": self.noise_std,
                "documents": float(np.sum(self.table.documents)), "seconds": self.seconds, **self.left_out}


def check_prevalence_config(config: Mapping[str, Any], noisy: bool) -> tuple[str, ...]:
    """The run's public grid of periods (empty: the parties' own), refusing in one line what cannot be released.

    Under secure aggregation, or for a method that adds noise to the release, the periods must be public and
    fixed before anything is released (``prevalence-from`` and ``prevalence-to``): a party's own periods
    would tell when its documents were written. Per-party tables cannot go with secure aggregation (the
    run config's own checks, :func:`flower_topics.run.config.parse_run_config`).
    """
    start, end = str(config["prevalence-from"]).strip(), str(config["prevalence-to"]).strip()
    if not start:
        if noisy:
            raise UserInputError(f"{config['method']}: prevalence adds noise to every period's cell, so the periods "
                                 "must be public: set prevalence-from and prevalence-to (e.g. '2015-01' and "
                                 "'2024-12')")
        return ()
    return period_grid(start, end, str(config["prevalence-period"]))


def collect_prevalence(grid: Grid, config: Mapping[str, Any], strategy: TopicStrategy, topic_word: np.ndarray,
                       vocabulary: Sequence[str], timeout: float) -> Prevalence | None:
    """Run the prevalence stage after the last round (None when ``prevalence-period`` is not set).

    Raises
    ------
    UserInputError
        When no party can answer (every reason named), or the secure sum cannot finish.
    """
    if not str(config["prevalence-period"]):
        return None
    started = time.time()
    release_rule = strategy.prevalence_config()
    periods = check_prevalence_config(config, noisy=bool(release_rule))
    nodes = sorted(set(grid.get_node_ids()) - set(strategy.excluded))  # the parties still in the run
    if not nodes:
        raise UserInputError(f"prevalence: no party is left to answer ({exclusion_reasons(strategy.excluded)})")
    k = int(topic_word.shape[0])
    request = {"vocabulary": vocabulary_fingerprint(tuple(vocabulary)), "method": strategy.method,
               "period": str(config["prevalence-period"]), "periods": wire.join_periods(periods),
               "eval-alpha": float(config["eval-alpha"]), "eval-iterations": int(config["eval-iterations"]),
               wire.QUANTUM: wire.DEFAULT_QUANTUM, **release_rule}
    arrays = ArrayRecord({wire.TOPIC_WORD: Array(np.asarray(topic_word, dtype=np.float64))})
    excluded: dict[int, str] = {}
    strategy.prevalence_released(len(nodes))  # before anything is sent: a stage that fails later still counts
    if strategy.secure is not None:
        table, parties = _secure(grid, config, strategy, request, arrays, nodes, periods, k, excluded, timeout)
        by_party, left_out = {}, {}
    else:
        table, parties, by_party, left_out = _plain(grid, request, arrays, nodes, periods, k, excluded, timeout,
                                                    plain=not release_rule)
    for node, why in excluded.items():
        logger.warning("prevalence: node %d: %s", node, why)
    noise = float(np.sqrt(strategy.prevalence_noise_variance(parties)))
    result = Prevalence(table, parties, noise, by_party if bool(config["prevalence-by-party"]) else {}, excluded,
                        left_out, time.time() - started)
    logger.info("prevalence: %d period(s) from %d part(y/ies) in %.2f s", len(table.periods), parties, result.seconds)
    return result


def _messages(request: Mapping[str, Any], arrays: ArrayRecord, nodes: Sequence[int],
              records: Mapping[int, Any] | None = None) -> list[Message]:
    from flower_topics.secure_sum.protocol import ROUND_RECORD

    return [Message(RecordDict({CONFIG: ConfigRecord(dict(request)), ARRAYS: arrays,
                                **({ROUND_RECORD: records[node]} if records else {})}),
                    dst_node_id=node, message_type=wire.PREVALENCE) for node in nodes]


def _plain(grid: Grid, request: Mapping[str, Any], arrays: ArrayRecord, nodes: Sequence[int],
           periods: tuple[str, ...], k: int, excluded: dict[int, str], timeout: float, plain: bool
           ) -> tuple[PrevalenceTable, int, dict[int, PrevalenceTable], dict[str, int]]:
    spec = wire.reply_spec(k, len(periods) or None, plain)

    def table_of(reply: Message) -> tuple[PrevalenceTable, dict[str, float]]:
        update, metrics = validate_reply(reply.content, spec)
        own = wire.split_periods(str(reply.content[CONFIG]["periods"]))
        if (periods and own != periods) or len(own) != update[wire.SUMS].shape[1] or list(own) != sorted(set(own)):
            raise ReplyError("its periods are not the run's, or not one per column in time order")
        sums = update[wire.SUMS]
        return PrevalenceTable(own, sums, sums.sum(axis=0), int(metrics.get(wire.UNDATED, 0))), metrics

    parsed, _ = collect_replies(grid, _messages(request, arrays, nodes), timeout, excluded, "prevalence reply",
                                table_of)
    if not parsed:
        raise UserInputError(f"prevalence: no party could answer ({exclusion_reasons(excluded)})")
    tables = {node: table for node, (table, _) in parsed.items()}
    left_out = {key: sum(int(metrics.get(key, 0)) for _, metrics in parsed.values())
                for key in (wire.UNDATED, wire.OUTSIDE, wire.EMPTY)}
    total = PrevalenceTable(periods, np.zeros((k, len(periods))), np.zeros(len(periods)))
    for table in tables.values():
        total = total.plus(table)
    return total, len(tables), tables, left_out if plain else {}


def _secure(grid: Grid, config: Mapping[str, Any], strategy: TopicStrategy, request: dict[str, Any],
            arrays: ArrayRecord, nodes: list[int], periods: tuple[str, ...], k: int, excluded: dict[int, str],
            timeout: float) -> tuple[PrevalenceTable, int]:
    from flower_topics.secure_sum.protocol import MASKED_KEY
    from flower_topics.secure_sum.server import SecureRound, SecureRoundFailed
    from flower_topics.wire.protocol import ArraySpec, ReplySpec

    problem = strategy.secure.check_parties(len(nodes))
    if problem:
        raise UserInputError(f"prevalence: {problem}")
    secure = SecureRound(grid, nodes, strategy.secure, int(config["num-rounds"]) + 1, timeout,
                         epoch=strategy.secure_epoch)
    spec = masked_spec(ReplySpec("prevalence", {wire.SUMS: ArraySpec("integer", (k, len(periods)))},
                                 config=("periods",)), strategy.secure)
    try:
        records = secure.setup()
        messages = _messages(request, arrays, sorted(records), records)
        masked, _ = collect_replies(grid, messages, timeout, excluded, "prevalence reply",
                                    lambda reply: validate_reply(reply.content, spec)[0][MASKED_KEY])
        total = secure.unmask(masked)
    except SecureRoundFailed as exc:
        raise UserInputError(f"prevalence: {exc} ({exclusion_reasons(excluded)})") from None
    units = float(request.get(wire.UNITS, request[wire.QUANTUM]))
    sums = total.reshape(k, len(periods)).astype(np.float64) / units
    return PrevalenceTable(periods, sums, sums.sum(axis=0)), len(masked)
