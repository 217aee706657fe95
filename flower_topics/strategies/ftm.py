"""Server side of FTM (Jiang et al., CIKM 2019, Section 3.2, Algorithms 2-4).

Each round (Algorithm 4) the master receives every sampled party's topic-wise normalized
local model ``M^_p`` (``K_p x V``, parties' K_p may differ) and its number of tokens, then:

1. integrates them into the global model ``M*`` (Algorithm 2,
   :func:`~flower_topics.models.ftm_merge.integrate_local_models`): the weighted Jaccard
   similarity of eq. 17 on each pair of topics' top-L words, union-find over the pairs with
   similarity ``>= xi``, each set merged as the average weighted by the parties' token
   counts, normalized; parties merged in turn, in node-id order (deterministic);
2. composes each party's next local model (Algorithm 3,
   :func:`~flower_topics.models.ftm_merge.compose_local_models`): for each local topic the
   most similar unused global topic when its similarity is ``>= xi``, else the party's own
   topic; each party gets its own model in the next round's message.

The global model is ``M*`` itself (``K* x V``; K* is what the merge produced, reported each
round as ``global-topics``). A missing party's contribution: a round integrates the replies
it got; the absent party keeps its noisy statistics and its composed model from its last
round, and rejoins with them (nothing is counted twice: ``M*`` is rebuilt every round).

Privacy (Section 3.1.1): every count entry of every token's vector went once through the
Laplace mechanism with sensitivity 1, ``eps``-DP per token under the paper's
include/exclude adjacency; everything after it (MH, normalization, merging, every round's
reply) is post-processing, so the total does not grow with rounds. Per document, basic
composition over its tokens gives ``eps x`` its length. The party's token count (its
merge weight) is released as it is.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from flwr.app import Array, ArrayRecord

from flower_topics.models.ftm_merge import compose_local_models, integrate_local_models
from flower_topics.models.topic_word import normalize_rows
from flower_topics.privacy.document_level import EXAMPLE_LENGTHS, laplace_document_epsilon
from flower_topics.privacy.privacy_report import NoDocumentGuarantee, PrivacyReport
from flower_topics.strategies.base import Reply, TopicStrategy
from flower_topics.wire import ftm as wire
from flower_topics.wire.protocol import ReplyError, ReplySpec


class FTM(TopicStrategy):
    """FTM: private local MH, topic-wise normalization, weighted-Jaccard union-find merging.

    Parameters
    ----------
    vocabulary : sequence of str
        The words, in column order (V = its length).
    settings : FTMSettings
        K, the priors, the mechanism and the local iterations, sent to every party.
    xi : float (default: 0.5)
        Merge threshold of Algorithms 2 and 3.
    top_words : int (default: 20)
        L, the top words eq. 17 compares.
    **federation : Any
        ``fraction_train``, ``min_nodes``, ``min_replies``, ``seed``, ``evaluation`` of :class:`TopicStrategy`.
    """

    method = wire.METHOD
    evaluation_with_train = True  # scoring in the training handler leaves its local step as it was

    def __init__(self, vocabulary: Sequence[str], settings: wire.FTMSettings, xi: float = 0.5, top_words: int = 20,
                 **federation: Any) -> None:
        super().__init__(vocabulary, **federation)
        if not 0 < xi <= 1:
            raise ValueError("xi must be in (0, 1]")
        if not 2 <= top_words <= self.vocab_size:
            raise ValueError(f"top_words must be in [2, V={self.vocab_size}]")
        self.ftm = settings
        self.xi = xi
        self.top_words = top_words
        self.local_topics: dict[int, int] = {}
        self.composed: dict[int, np.ndarray] = {}
        # resume (flower_topics.run.checkpoint): a party of a new Flower run draws its noisy statistics again
        self.previous_draws = 0
        self.segment_released = False

    @classmethod
    def from_config(cls, config: Mapping[str, Any], vocabulary: Sequence[str]) -> "FTM":
        """The strategy of a validated run config."""
        return cls(vocabulary, wire.FTMSettings.from_record(config), xi=float(config["ftm.xi"]),
                   top_words=int(config["ftm.top-words"]), **cls.federation_options(config))

    def initial_arrays(self) -> ArrayRecord:
        """No global model yet: the first round's parties start from random topics."""
        return ArrayRecord({wire.GLOBAL_KEY: Array(np.full((1, self.vocab_size), 1.0 / self.vocab_size))})

    def topic_word(self, arrays: ArrayRecord) -> np.ndarray:
        """M*, rows renormalized."""
        return normalize_rows(arrays[wire.GLOBAL_KEY].numpy())

    def train_config(self) -> dict[str, Any]:
        """K, the priors, the mechanism and the local iterations."""
        return self.ftm.to_record()

    def reply_spec(self) -> ReplySpec:
        """A non-negative ``K_p x V`` float model and ``num-tokens``."""
        return wire.reply_spec(self.ftm, self.vocab_size)

    def released(self, server_round: int, nodes: Sequence[int]) -> None:
        """The parties of this run have drawn their noisy statistics (once a run, at their first round)."""
        self.segment_released = True

    @property
    def draws(self) -> int:
        """How many times the parties drew their noisy statistics: once a run, once more after each resume."""
        return self.previous_draws + int(self.segment_released)

    # ------------------------------------------------------------ checkpoint
    def checkpoint_state(self) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Each party's composed local model and K_p, and the draws of the statistics."""
        arrays = {f"ftm-composed-{n}": m for n, m in self.composed.items()}
        return arrays, {"local_topics": {str(n): k for n, k in self.local_topics.items()},
                        "previous_draws": self.previous_draws,
                        "segment_released": self.segment_released}

    def load_checkpoint_state(self, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
        """Restore :meth:`checkpoint_state`."""
        prefix = "ftm-composed-"
        self.composed = {int(k[len(prefix):]): np.array(v) for k, v in arrays.items() if k.startswith(prefix)}
        self.local_topics = {int(n): int(k) for n, k in meta["local_topics"].items()}
        self.previous_draws = int(meta["previous_draws"])
        self.segment_released = bool(meta["segment_released"])

    def lost_release(self, release: Mapping[str, Any]) -> None:
        """A round released and lost to a crash (its parties drew their statistics if they had not yet)."""
        self.segment_released = True

    def on_resume(self, arrays: Mapping[str, np.ndarray]) -> None:
        """The parties of a new Flower run draw their statistics again: one more Laplace release per token.

        They restart from the models the master composed for them (kept by node id; a new
        node id starts from random topics, as in round 1).
        """
        self.previous_draws += int(self.segment_released)
        self.segment_released = False

    def node_arrays(self, server_round: int, node_id: int, arrays: ArrayRecord) -> ArrayRecord:
        """The local model the master composed for this party (none in its first round)."""
        if node_id not in self.composed:
            return ArrayRecord()
        return ArrayRecord({wire.LOCAL_MODEL_KEY: Array(self.composed[node_id].astype(np.float32))})

    def check_reply(self, server_round: int, reply: Reply) -> None:
        """Rows sum to 1 (topic-wise normalization), and K_p is what the party had before."""
        model = reply.arrays[wire.TOPIC_WORD_KEY]
        if model.shape[0] > wire.MAX_LOCAL_TOPICS or model.shape[0] < 1:
            raise ReplyError(f"{model.shape[0]} local topics, expected 1 to {wire.MAX_LOCAL_TOPICS}")
        if not np.allclose(model.sum(axis=1), 1.0, atol=wire.ROW_SUM_TOLERANCE):
            raise ReplyError("the local model's rows do not sum to 1 (topic-wise normalization)")
        known = self.local_topics.get(reply.node_id)
        if known is not None and model.shape[0] != known:
            raise ReplyError(f"{model.shape[0]} local topics, this party had {known}")

    def aggregate(self, server_round: int, arrays: ArrayRecord, replies: list[Reply]
                  ) -> tuple[ArrayRecord, dict[str, float]]:
        """Algorithm 2 over the replies in node-id order, then Algorithm 3 for each of those parties."""
        replies = sorted(replies, key=lambda r: r.node_id)
        models = [normalize_rows(r.arrays[wire.TOPIC_WORD_KEY]) for r in replies]
        weights = [float(r.metrics["num-tokens"]) for r in replies]
        merged = integrate_local_models(models, weights, xi=self.xi, top_l=self.top_words)
        for reply, composed in zip(replies, compose_local_models(merged, models, xi=self.xi, top_l=self.top_words)):
            self.local_topics[reply.node_id] = composed.shape[0]
            self.composed[reply.node_id] = composed
        metrics = {"global-topics": merged.n_topics, "local-topics": sum(m.shape[0] for m in models)}
        return ArrayRecord({wire.GLOBAL_KEY: Array(merged.topic_word)}), metrics

    def privacy_report(self) -> PrivacyReport:
        """eps per token, once (the noisy statistics are drawn once; every round is post-processing)."""
        eps, draws, rounds = self.ftm.epsilon, self.draws, self.rounds_released()
        return PrivacyReport(
            mechanism="laplace + threshold", unit="token",
            accountant="one release, post-processing after it" + (
                f"; {draws} draws (a resume redraws the statistics), basic composition" if draws > 1 else ""),
            rounds=rounds, epsilon_round=eps if rounds else None, delta_round=0.0,
            epsilon=eps * draws if rounds else None, delta=0.0 if rounds else None,
            guarantee="Section 3.1.1: eps-DP per token (Laplace, L1 sensitivity 1, include/exclude adjacency) "
                      "on the party's noisy count vectors, drawn once; per document eps x its length",
            document_guarantee=NoDocumentGuarantee(
                "the guarantee is per token, and a document of L tokens gets L x eps by group privacy (pure); nothing "
                "bounds L (the server never sees a document's length)"),
            details={"tau": self.ftm.tau, "epsilon_per_document": f"{eps:g} x document length",
                     "document_epsilon_at_length": {str(n): laplace_document_epsilon(eps, n) for n in EXAMPLE_LENGTHS},
                     "released_in_clear": "num-tokens: each party's token count, with every reply"})


def quality_notes(config: Mapping[str, Any]) -> list[str]:
    """Why a run with this config gives collapsed topics, and the options that change it (the console says it)."""
    import math

    epsilon, tau = float(config["ftm.epsilon"]), float(config["ftm.tau"])
    share = math.exp(-tau * epsilon) / 2  # expected share of the vocabulary a token's noisy vector keeps as noise
    if share < 1e-3:
        return []
    return [f"ftm.epsilon={epsilon:g}, ftm.tau={tau:g}: each token's noisy vector keeps about {100 * share:.2g}% of "
            "the vocabulary as noise entries against its one word, so the merged topics collapse (docs/ftm.md); "
            "a larger ftm.epsilon x ftm.tau shrinks that share (without noise, ftm.epsilon=1e6 ftm.tau=0.5, "
            "the topics read)"]
