"""What a method's strategy implements: how it is built from a run config, and of a round its model, its
settings, what a valid reply is and how replies are aggregated (the hooks
:class:`~flower_topics.strategies.base.TopicStrategy` calls)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Mapping, Self, Sequence

import numpy as np
from flwr.app import ArrayRecord

from flower_topics.strategies.reply_screen import Reply
from flower_topics.wire.protocol import ReplySpec


class MethodHooks(ABC):
    """The hooks of a method's strategy; the six abstract ones are required, the others have defaults."""

    @classmethod
    @abstractmethod
    def from_config(cls, config: Mapping[str, Any], vocabulary: Sequence[str]) -> Self:
        """The strategy of a validated run config over the run's vocabulary (what
        :meth:`~flower_topics.methods.MethodSpec.build_strategy` calls): the method's settings from its wire
        module's ``SETTINGS.from_record(config)``, the base's from
        :meth:`~flower_topics.strategies.base.TopicStrategy.federation_options`."""

    @abstractmethod
    def initial_arrays(self) -> ArrayRecord:
        """The global model the first round starts from."""

    @abstractmethod
    def topic_word(self, arrays: ArrayRecord) -> np.ndarray:
        """The ``K x V`` topic-word distribution of a global model."""

    @abstractmethod
    def train_config(self) -> dict[str, Any]:
        """The method's entries of every training message's ConfigRecord: its settings, what every party receives
        (the wire module's ``SETTINGS.to_record()``)."""

    @abstractmethod
    def reply_spec(self) -> ReplySpec:
        """What a valid reply is (the wire module's ``reply_spec``)."""

    @abstractmethod
    def aggregate(self, server_round: int, arrays: ArrayRecord, replies: list[Reply]
                  ) -> tuple[ArrayRecord, dict[str, float]]:
        """The new global model from the round's model and its valid replies (at least one),
        and the method's own metrics of the round."""

    def begin_round(self, server_round: int, arrays: ArrayRecord) -> None:
        """Called first when round ``server_round`` is configured, with the global model it starts from
        (what :meth:`node_arrays` derives from it once for all nodes); nothing by default."""

    def node_arrays(self, server_round: int, node_id: int, arrays: ArrayRecord) -> ArrayRecord:
        """What one node receives of the global model (by default all of it)."""
        return arrays

    def check_reply(self, server_round: int, reply: Reply) -> None:
        """Checks that need the global model (raise :class:`~flower_topics.wire.protocol.ReplyError`); none by
        default."""

    def decode_sum(self, server_round: int, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The method's arrays from the integer sums a secure round unmasked (as they are, by default)."""
        return arrays

    def evaluation_counts(self, arrays: ArrayRecord) -> tuple[np.ndarray, float] | None:
        """Integer ``K x V`` counts and a prior whose :func:`~flower_topics.evaluation.federated.counts_phi` is this
        model's topic-word matrix, sent to the parties for evaluation instead of the float64 matrix; None (the
        default) sends the matrix."""
        return None
