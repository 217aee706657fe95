"""Wire protocol of ``fedlda`` (Wang, Tong and Shi, AAAI 2020).

Server to party: phi (``K x V`` float32, :data:`PHI_KEY`; the counts stay on the server) and
:class:`FedLDASettings` plus ``last-applied-round``. Party to server: the perturbed,
shuffled tuples ``(w, k_old, k_new)`` (``n x 3``, uint16 when V and K + 1 fit, else int32,
:data:`TUPLES_KEY`; ``k_old = K`` enters a word not counted yet); with each document's own
padding length, also the number of documents and the largest number of tuples one document
sent (for the accounting); with a public ``pad-length``, nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from flower_topics.models.samplers import SAMPLERS
from flower_topics.models.update_tuples import DUMMY_KINDS
from flower_topics.options import Option, at_least, in_range, one_of, positive
from flower_topics.privacy.word_randomizers import MECHANISMS
from flower_topics.wire.protocol import ArraySpec, ReplySpec

METHOD = "fedlda"
COUNTS_KEY = "topic-word-counts"
PHI_KEY = "topic-word"
TUPLES_KEY = "tuples"
#: Most tuples one reply may carry (a larger reply is rejected as oversized).
MAX_TUPLES = 1 << 24

#: The options of ``fedlda`` (run-config keys ``fedlda.<name>``).
OPTIONS: Mapping[str, Option] = {
    "sampler": Option("gibbs", "local sampler: gibbs (O(K) per token) or mh (alias Metropolis-Hastings, O(1))",
                      one_of(*SAMPLERS)),
    "local-sweeps": Option(1, "sampling sweeps over its tokens a party runs per round", at_least(1)),
    "mechanism": Option("rrp", "word randomizer: rrp (Algorithm 3), krr, tkrr (the paper's t-kRR: tail words "
                        "unperturbed), tkrr-uniform-tail (pure eps), hm (Wang et al. 2019) or none",
                        one_of(*MECHANISMS)),
    "epsilon": Option(7.5, "privacy budget of one tuple", positive),
    "delta": Option(0.1, "mass of each topic's deserted set (RRP; Theorem 1 claims (eps, 2 delta) per tuple); "
                    "t-kRR's truncated mass", in_range(0, 1, low_open=True, high_open=True)),
    "gamma": Option(1.0, "the Zipf constant of Theorem 1 (>= 1; inf gives the paper's experimental eta)",
                    at_least(1), infinite=True),
    "sample-ratio": Option(0.7, "l / M, the share of padded tuples a document sends (0 sends one)",
                           in_range(0, 1)),
    "dummy-tuples": Option("cancelling", "padding: noop (k_old = k_new, recognisable), noise (look like changes, "
                           "zero-mean noise) or cancelling (look like changes, undone by a later reversal)",
                           one_of(*DUMMY_KINDS)),
    "pad-length": Option(0, "public padding length M (0 = each document's own length, which l reveals)",
                         at_least(0)),
    "resend-replaced": Option(True, "a move whose word the randomizer replaced stays pending and is sent again "
                              "(entries never are; false: counted as sent, as in the paper)"),
}


@dataclass(frozen=True)
class FedLDASettings:
    """What the server tells every party about a FedLDA round.

    Parameters
    ----------
    n_topics : int
        K.
    alpha : float
        Symmetric document-topic prior.
    sampler : {"gibbs", "mh"}
        Local sampler.
    n_sweeps : int
        Sampling passes over the party's tokens per round.
    mechanism : {"rrp", "krr", "tkrr", "tkrr-uniform-tail", "hm", "none"}
        Word randomizer.
    epsilon : float
        Budget of one tuple.
    delta : float
        Deserted mass (RRP) or truncated mass (t-kRR).
    gamma : float
        Theorem 1's constant (RRP).
    sample_ratio : float
        l / M.
    pad_length : int
        Public M, or 0 for each document's own length.
    dummies : {"noop", "noise", "cancelling"}
        Kind of dummy tuples (:func:`~flower_topics.models.update_tuples.model_dummies`).
    resend_replaced : bool
        Keep a change whose word the randomizer replaced pending (sent again, perturbed
        afresh, in a later round) instead of counting it as sent.
    """

    n_topics: int
    alpha: float
    sampler: str = "gibbs"
    n_sweeps: int = 1
    mechanism: str = "rrp"
    epsilon: float = 7.5
    delta: float = 0.1
    gamma: float = 1.0
    sample_ratio: float = 0.7
    pad_length: int = 0
    dummies: str = "cancelling"
    resend_replaced: bool = True

    def __post_init__(self) -> None:
        if self.mechanism not in MECHANISMS:
            raise ValueError(f"mechanism must be one of {', '.join(MECHANISMS)}")
        if self.dummies not in DUMMY_KINDS:
            raise ValueError(f"dummies must be one of {', '.join(DUMMY_KINDS)}")
        if self.sampler not in SAMPLERS:
            raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}")
        if self.n_topics < 2:
            raise ValueError("FedLDA needs at least 2 topics (a tuple moves a word between two)")

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "FedLDASettings":
        """Settings from a run config or a round's ConfigRecord."""
        return cls(
            n_topics=int(record["num-topics"]),
            alpha=float(record["alpha"]),
            sampler=str(record["fedlda.sampler"]),
            n_sweeps=int(record["fedlda.local-sweeps"]),
            mechanism=str(record["fedlda.mechanism"]),
            epsilon=float(record["fedlda.epsilon"]),
            delta=float(record["fedlda.delta"]),
            gamma=float(record["fedlda.gamma"]),
            sample_ratio=float(record["fedlda.sample-ratio"]),
            pad_length=int(record["fedlda.pad-length"]),
            dummies=str(record["fedlda.dummy-tuples"]),
            resend_replaced=bool(record["fedlda.resend-replaced"]),
        )

    def to_record(self) -> dict[str, Any]:
        """The settings as ConfigRecord entries (inverse of :meth:`from_record`)."""
        return {
            "num-topics": self.n_topics, "alpha": self.alpha, "fedlda.sampler": self.sampler,
            "fedlda.local-sweeps": self.n_sweeps, "fedlda.mechanism": self.mechanism,
            "fedlda.epsilon": self.epsilon, "fedlda.delta": self.delta,
            "fedlda.gamma": self.gamma,
            "fedlda.sample-ratio": self.sample_ratio, "fedlda.pad-length": self.pad_length,
            "fedlda.dummy-tuples": self.dummies, "fedlda.resend-replaced": self.resend_replaced,
        }


#: The settings class (what every party of a round receives).
SETTINGS = FedLDASettings


def reply_spec(settings: FedLDASettings, vocab_size: int) -> ReplySpec:
    """A valid reply: integer ``(n, 3)`` tuples with words < V, k_old <= K, k_new < K.

    With each document's own M the reply also carries ``num-documents`` and
    ``max-tuples-per-document`` (the largest l, for the accounting: it tells the server the
    longest document's length); with a public M it carries no metric at all.
    """
    k = settings.n_topics
    tuples = ArraySpec("integer", (None, 3), columns=((0, vocab_size), (0, k + 1), (0, k)),
                       what=f"tuples (w < {vocab_size}, k_old <= {k}, k_new < {k})")
    metrics = () if settings.pad_length else ("num-documents", "max-tuples-per-document")
    return ReplySpec(METHOD, {TUPLES_KEY: tuples}, metrics=metrics,
                     max_bytes=12 * MAX_TUPLES + (1 << 16))
