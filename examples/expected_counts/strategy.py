"""Server side of ``expected_counts``: the M-step of batch variational EM, ``lambda = eta + sum of the parties'
expected counts`` (Hoffman, Blei and Bach 2010, eq. 7 with the whole corpus in every step). A party whose reply
is lost leaves its documents out of that round's ``lambda``."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from flwr.app import Array, ArrayRecord

from examples.expected_counts import wire
from flower_topics.models import svi
from flower_topics.strategies.base import Reply, TopicStrategy
from flower_topics.wire.protocol import ReplySpec


class ExpectedCounts(TopicStrategy):
    """Batch variational EM: each round, the parties' expected topic-word counts summed, plus the prior.

    Parameters
    ----------
    vocabulary : sequence of str
        The words, in column order.
    settings : Settings
        What every party receives.
    eta : float
        The topic-word Dirichlet prior (run-config ``beta``).
    **federation : Any
        The base's options (:meth:`TopicStrategy.federation_options`).
    """

    method = wire.METHOD

    def __init__(self, vocabulary: Sequence[str], settings: wire.Settings, *, eta: float, **federation: Any) -> None:
        super().__init__(vocabulary, **federation)
        self.settings, self.eta = settings, eta

    @classmethod
    def from_config(cls, config: Mapping[str, Any], vocabulary: Sequence[str]) -> "ExpectedCounts":
        """The strategy of a validated run config."""
        return cls(vocabulary, wire.SETTINGS.from_record(config), eta=float(config["beta"]),
                   **cls.federation_options(config))

    def initial_arrays(self) -> ArrayRecord:
        """A random public ``lambda`` from the run's seed (:func:`~flower_topics.models.svi.initial_lambda`)."""
        lam = svi.initial_lambda(self.settings.n_topics, self.vocab_size, self.seed)
        return ArrayRecord({wire.LAMBDA_KEY: Array(lam)})

    def topic_word(self, arrays: ArrayRecord) -> np.ndarray:
        """Each topic's mean under ``q``: ``lambda`` normalized by row."""
        lam = arrays[wire.LAMBDA_KEY].numpy()
        return lam / lam.sum(axis=1, keepdims=True)

    def train_config(self) -> dict[str, Any]:
        """K, alpha and the E-step's iterations."""
        return self.settings.to_record()

    def reply_spec(self) -> ReplySpec:
        """One ``K x V`` non-negative float array."""
        return wire.reply_spec(self.settings, self.vocab_size)

    def aggregate(self, server_round: int, arrays: ArrayRecord, replies: list[Reply]
                  ) -> tuple[ArrayRecord, dict[str, float]]:
        """``lambda = eta + sum`` of the replies' expected counts."""
        total = sum(reply.arrays[wire.STATISTIC_KEY] for reply in replies)
        return ArrayRecord({wire.LAMBDA_KEY: Array(self.eta + total)}), {}
