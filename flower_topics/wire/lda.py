"""Wire protocol of ``lda``: AD-LDA (approximate distributed LDA, Newman et al. 2009), no privacy.

Server to party: the global topic-word counts ``n_kw`` (``K x V`` int32, :data:`COUNTS_KEY`)
and :class:`LDASettings` plus ``last-applied-round``. Party to server: the change of its own
counts (``K x V`` integer, :data:`DELTA_KEY`) and ``num-tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from flower_topics.options import Option, at_least
from flower_topics.wire.protocol import ArraySpec, ReplySpec

METHOD = "lda"
#: Its reply is an integer count change that the server only adds: it can go through secure aggregation exactly.
SECURE_SUM = True
COUNTS_KEY = "topic-word-counts"
DELTA_KEY = "topic-word-delta"

#: The options of ``lda`` (run-config keys ``lda.<name>``).
OPTIONS: Mapping[str, Option] = {
    "local-sweeps": Option(1, "collapsed Gibbs sweeps over its tokens a party runs per round", at_least(1)),
}


@dataclass(frozen=True)
class LDASettings:
    """What the server tells every party about an ``lda`` round.

    Parameters
    ----------
    n_topics : int
        K.
    alpha, beta : float
        Symmetric document-topic and topic-word Dirichlet priors.
    local_sweeps : int
        Gibbs sweeps per round.
    """

    n_topics: int
    alpha: float
    beta: float
    local_sweeps: int = 1

    def __post_init__(self) -> None:
        if self.n_topics < 1:
            raise ValueError("n_topics must be >= 1")
        if self.alpha <= 0 or self.beta <= 0:
            raise ValueError("alpha and beta must be > 0")
        if self.local_sweeps < 1:
            raise ValueError("local_sweeps must be >= 1")

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "LDASettings":
        """Settings from a run config or a round's ConfigRecord."""
        return cls(n_topics=int(record["num-topics"]), alpha=float(record["alpha"]), beta=float(record["beta"]),
                   local_sweeps=int(record["lda.local-sweeps"]))

    def to_record(self) -> dict[str, Any]:
        """The settings as ConfigRecord entries (inverse of :meth:`from_record`)."""
        return {"num-topics": self.n_topics, "alpha": self.alpha, "beta": self.beta,
                "lda.local-sweeps": self.local_sweeps}


#: The settings class (what every party of a round receives).
SETTINGS = LDASettings


def reply_spec(settings: LDASettings, vocab_size: int) -> ReplySpec:
    """A valid reply: one ``K x V`` integer count change and the party's token count."""
    shape = (settings.n_topics, vocab_size)
    return ReplySpec(METHOD, {DELTA_KEY: ArraySpec("integer", shape, what="topic-word count change")},
                     metrics=("num-tokens",), max_bytes=8 * shape[0] * shape[1] + (1 << 16))
