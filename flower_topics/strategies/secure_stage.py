"""The secure sum's part of a round (:mod:`flower_topics.secure_sum`): its key and share stages before
the training messages, and the unmasking of the sum of the masked replies after."""

from __future__ import annotations

from collections.abc import Callable
from logging import WARNING

import numpy as np
from flwr.app import ConfigRecord
from flwr.common import log
from flwr.serverapp import Grid

from flower_topics.secure_sum.protocol import MASKED_KEY, ROUND_RECORD, SecureSumSettings
from flower_topics.secure_sum.server import KeyEpoch, SecureRound, SecureRoundFailed
from flower_topics.strategies.reply_screen import Reply
from flower_topics.strategies.traffic import RoundTraffic
from flower_topics.wire.protocol import ReplyError, ReplySpec


class SecureSumStage:
    """The secure sum of each round's replies; only the current round's keys and ciphertexts are kept.

    Parameters
    ----------
    settings : SecureSumSettings
        The secure sum's parameters.
    round_timeout : float
        Seconds each of its stages waits for replies.
    """

    def __init__(self, settings: SecureSumSettings, round_timeout: float) -> None:
        self.settings, self.round_timeout = settings, round_timeout
        self.rounds: dict[int, SecureRound] = {}
        #: the key epoch the next secure round (or the prevalence release) may continue
        self.epoch: KeyEpoch | None = None

    def setup(self, grid: Grid, server_round: int, nodes: list[int], traffic: RoundTraffic
              ) -> dict[int, dict[str, ConfigRecord]]:
        """The key and share stages; the round record each remaining node's training message carries (none
        when the stages failed: logged)."""
        secure = SecureRound(grid, nodes, self.settings, server_round, self.round_timeout, epoch=self.epoch)
        self.rounds = {server_round: secure}
        try:
            records = secure.setup()
            self.epoch = secure.epoch
        except SecureRoundFailed as exc:
            self.epoch = None
            log(WARNING, "%s; no training message is sent this round", exc)
            records = {}
        finally:
            traffic.bytes_sent += secure.bytes_sent
            traffic.bytes_received += secure.bytes_received
        return {node_id: {ROUND_RECORD: record} for node_id, record in records.items()}

    def summed_reply(self, server_round: int, masked: list[Reply], spec: ReplySpec, traffic: RoundTraffic,
                     decode: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]],
                     check: Callable[[Reply], None]) -> list[Reply]:
        """The round's sum of the ``masked`` replies as one reply (node 0) of the ``parties`` that sent them:
        ``spec``'s arrays, ``decode``-d; [] when the secure sum could not finish or the sum fails ``check``
        (logged: it cannot be traced to a party, so the whole round is held)."""
        arrays = self.unmask(server_round, {reply.node_id: reply.arrays[MASKED_KEY] for reply in masked}, spec,
                             traffic)
        if arrays is None:
            return []
        summed = Reply(0, decode(arrays), {}, parties=len(masked))
        try:
            check(summed)
        except ReplyError as exc:
            log(WARNING, "round %d: the secure sum of %d parties rejected: %s; the global model stays as it was",
                server_round, len(masked), exc)
            return []
        return [summed]

    def unmask(self, server_round: int, masked: dict[int, np.ndarray], spec: ReplySpec, traffic: RoundTraffic
               ) -> dict[str, np.ndarray] | None:
        """The sum of the ``masked`` vectors (by node) as ``spec``'s integer arrays, or None when the round has
        no secure sum or it could not finish (logged)."""
        secure = self.rounds.pop(server_round, None)
        if secure is None:
            return None
        sent, received = secure.bytes_sent, secure.bytes_received
        try:
            total = secure.unmask(masked)
        except SecureRoundFailed as exc:
            log(WARNING, "%s: the global model stays as it was", exc)
            return None
        finally:
            traffic.bytes_sent += secure.bytes_sent - sent
            traffic.bytes_received += secure.bytes_received - received
        arrays, start = {}, 0
        for key, array_spec in spec.arrays.items():
            size = int(np.prod(array_spec.shape))
            arrays[key] = total[start:start + size].reshape(array_spec.shape)
            start += size
        return arrays
