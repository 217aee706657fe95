"""Wire protocol of ``ftm``: Federated Topic Modeling (Jiang et al., CIKM 2019).

Server to party: :class:`FTMSettings` and, from the second round on, the local model the
master composed for this party (Algorithm 3; ``K_p x V`` float32, :data:`LOCAL_MODEL_KEY`;
absent in the first round). Party to server: its topic-wise normalized local model
(Section 3.1.3; ``K_p x V`` float, rows summing to 1, :data:`TOPIC_WORD_KEY`) and its number
of tokens (``num-tokens``, the data amount Algorithm 2 weights its topics by).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from flower_topics.options import Option, at_least, in_range, positive
from flower_topics.wire.protocol import ArraySpec, ReplySpec

METHOD = "ftm"
LOCAL_MODEL_KEY = "local-model"
TOPIC_WORD_KEY = "topic-word"
GLOBAL_KEY = "topic-word"
#: A reply's rows must sum to 1 within this tolerance (float32 on the wire).
ROW_SUM_TOLERANCE = 1e-3
MAX_LOCAL_TOPICS = 1000


def _local_topics(value: Any) -> str | None:
    try:
        counts = [int(x) for x in str(value).split(",")] if str(value).strip() else []
    except ValueError:
        return "must be '' or whole numbers separated by commas, e.g. '10' or '5,10,20'"
    return None if all(1 <= k <= MAX_LOCAL_TOPICS for k in counts) else f"entries must be in [1, {MAX_LOCAL_TOPICS}]"


#: Node-config keys a party of ``ftm`` may set for itself (its local step finds each in ``party.policy.options``).
NODE_OPTIONS: Mapping[str, Option] = {
    "local-topics": Option(0, "FTM: this party's own number of topics K_p (0 = the run's)", at_least(0)),
}

#: The options of ``ftm`` (run-config keys ``ftm.<name>``).
OPTIONS: Mapping[str, Option] = {
    "epsilon": Option(11.0, "Laplace budget of every count entry of a token's vector (eq. 9)", positive),
    "tau": Option(0.2, "threshold: noisy entries <= tau are set to 0 (eq. 10)", at_least(0)),
    "xi": Option(0.5, "merge threshold: topics with weighted Jaccard similarity >= xi are merged (Alg. 2, 3)",
                 in_range(0, 1, low_open=True)),
    "top-words": Option(20, "L: the top words of each topic the similarity of eq. 17 compares", at_least(2)),
    "local-iterations": Option(50, "private MH iterations a party runs per round (Algorithm 1)", at_least(1)),
    "local-topics": Option("", "K_p of every party: '' = num-topics, one number for all, or one per simulated "
                           "partition ('5,10,20'); a party's node config 'local-topics' overrides it",
                           _local_topics),
}


@dataclass(frozen=True)
class FTMSettings:
    """What the server tells every party about an FTM round.

    Parameters
    ----------
    n_topics : int
        The run's K, a party's K_p unless ``local_topics`` says otherwise.
    alpha, beta : float
        Symmetric Dirichlet priors (doc-topic, topic-word).
    epsilon, tau : float
        The Laplace mechanism and its threshold (eq. 9-10).
    local_iterations : int
        Private MH iterations per round.
    local_topics : str
        ``''``, one K_p, or one per simulated partition.
    """

    n_topics: int
    alpha: float
    beta: float
    epsilon: float = 11.0
    tau: float = 0.2
    local_iterations: int = 50
    local_topics: str = ""

    def __post_init__(self) -> None:
        if self.n_topics < 1 or not self.alpha > 0 or not self.beta > 0:
            raise ValueError("n_topics must be >= 1 and alpha, beta > 0")
        if not self.epsilon > 0 or not self.tau >= 0 or self.local_iterations < 1:
            raise ValueError("epsilon must be > 0, tau >= 0 and local_iterations >= 1")
        problem = _local_topics(self.local_topics)
        if problem:
            raise ValueError(f"local_topics {problem}")

    def party_topics(self, partition_id: int | None, own: int = 0) -> int:
        """K_p of a party: its own choice (``own`` > 0), else its entry of ``local_topics``, else K."""
        if own > 0:
            return own
        counts = [int(x) for x in self.local_topics.split(",")] if self.local_topics.strip() else []
        if len(counts) == 1:
            return counts[0]
        if counts:
            if partition_id is None or not 0 <= partition_id < len(counts):
                raise ValueError(f"local-topics lists {len(counts)} values, one per simulated partition, but this "
                                 f"party's partition is {partition_id}; set local-topics in its node config")
            return counts[partition_id]
        return self.n_topics

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "FTMSettings":
        """Settings from a run config or a round's ConfigRecord."""
        return cls(n_topics=int(record["num-topics"]), alpha=float(record["alpha"]), beta=float(record["beta"]),
                   epsilon=float(record["ftm.epsilon"]), tau=float(record["ftm.tau"]),
                   local_iterations=int(record["ftm.local-iterations"]),
                   local_topics=str(record["ftm.local-topics"]))

    def to_record(self) -> dict[str, Any]:
        """The settings as ConfigRecord entries (inverse of :meth:`from_record`)."""
        return {"num-topics": self.n_topics, "alpha": self.alpha, "beta": self.beta, "ftm.epsilon": self.epsilon,
                "ftm.tau": self.tau, "ftm.local-iterations": self.local_iterations,
                "ftm.local-topics": self.local_topics}


#: The settings class (what every party of a round receives).
SETTINGS = FTMSettings


def reply_spec(settings: FTMSettings, vocab_size: int, local_topics: int | None = None) -> ReplySpec:
    """A valid reply: a ``K_p x V`` non-negative float model (``K_p`` as sent, when known) and ``num-tokens``."""
    rows = ArraySpec("floating", (local_topics, vocab_size), low=0, what="topic-word probabilities")
    return ReplySpec(METHOD, {TOPIC_WORD_KEY: rows}, metrics=("num-tokens",),
                     max_bytes=8 * MAX_LOCAL_TOPICS * vocab_size + (1 << 16))
