"""Wire protocol of ``expected_counts``: batch variational EM for LDA across parties (no privacy).

Server to party: the topics' Dirichlet parameters ``lambda`` (``K x V`` float64, :data:`LAMBDA_KEY`) and
:class:`Settings`. Party to server: its expected topic-word counts ``sum_d n_dw phi_dwk`` (``K x V``
float64, non-negative, :data:`STATISTIC_KEY`) and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from flower_topics.options import Option, at_least
from flower_topics.wire.protocol import ArraySpec, ReplySpec

METHOD = "expected_counts"
LAMBDA_KEY = "topic-parameters"
STATISTIC_KEY = "expected-counts"

#: Its options (run-config keys ``expected_counts.<name>``).
OPTIONS: Mapping[str, Option] = {
    "max-iterations": Option(100, "E-step iterations of each document's gamma at most", at_least(1)),
}


@dataclass(frozen=True)
class Settings:
    """What the server tells every party of a round.

    Parameters
    ----------
    n_topics : int
        K.
    alpha : float
        Symmetric document-topic Dirichlet prior.
    max_iterations : int
        E-step iterations of each document's gamma at most.
    """

    n_topics: int
    alpha: float
    max_iterations: int

    def __post_init__(self) -> None:
        if self.n_topics < 1 or not 0 < self.alpha < float("inf") or self.max_iterations < 1:
            raise ValueError("expected_counts needs num-topics >= 1, a finite alpha > 0 and max-iterations >= 1")

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "Settings":
        """The settings of a run config or of a training message's ConfigRecord."""
        return cls(int(record["num-topics"]), float(record["alpha"]), int(record[f"{METHOD}.max-iterations"]))

    def to_record(self) -> dict[str, Any]:
        """The settings as ConfigRecord entries (the inverse of :meth:`from_record`)."""
        return {"num-topics": self.n_topics, "alpha": self.alpha, f"{METHOD}.max-iterations": self.max_iterations}


SETTINGS = Settings


def reply_spec(settings: Settings, vocab_size: int) -> ReplySpec:
    """A valid reply: one finite, non-negative ``K x V`` float array, no metrics."""
    shape = (settings.n_topics, vocab_size)
    return ReplySpec(METHOD, {STATISTIC_KEY: ArraySpec("floating", shape, low=0.0, what="expected topic-word counts")},
                     max_bytes=8 * shape[0] * shape[1] + (1 << 16))
