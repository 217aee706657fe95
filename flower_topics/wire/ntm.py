"""Wire protocol of ``ntm``: gFedNTM (Calvo-Bartolomé and Arenas-García, "Federated Neural Topic Models").

gFedNTM trains one neural topic model (ProdLDA, CombinedTM or ZeroShotTM) over the
parties by synchronous stochastic optimization (Sync-Opt, section 3.2, Algorithm 1).

Server to party: the global weights ``W^(e)`` as one flat float32 vector
(:data:`WEIGHTS_KEY`, shape ``(P,)``, the trainable parameters in
:func:`flower_topics.models.ntm.parameter_spec` order) and :class:`NTMSettings`.

Party to server, one float32 row ``(1, P)`` (a one-row matrix holding the flat vector):

- ``sync="minibatch"`` (the paper): :data:`GRADIENT_KEY`, the gradient ``G_l^(e)`` of the
  mean negative ELBO on one local mini-batch at ``W^(e)`` (Algorithm 1, getClientGrad),
  and the metric ``batch-size`` ``n_l``, eq. (2)'s weight;
- ``sync="local"`` (FedAvg, an option beyond the paper): :data:`NEW_WEIGHTS_KEY`, the
  weights after ``local-steps`` steps of the party's own optimizer, and the metric
  ``num-documents``, the weight of the document-weighted average;

plus ``loss`` (the mean negative ELBO of its last mini-batch) without DP, and
``epsilon`` (the party's own RDP accounting at ``dp-delta``) with DP. Nothing else: no
document, no embedding, no per-document quantity.

Under secure aggregation (``secure-aggregation=true``, :func:`secure_reply_spec`) the reply is
instead the integer arrays below, concatenated and masked into one vector
(:mod:`flower_topics.secure_sum`), and no metric: the server learns only their sum over the
round's parties. With ``n_l`` the aggregation weight (``batch-size``, or ``num-documents``
with ``sync="local"``) and ``u_l`` the update (the gradient ``G_l``, or the weight change
``W_l - W``), each coordinate of ``u_l`` clipped to ``[-secure-clip, secure-clip]``:

- :data:`SECURE_UPDATE_KEY`: ``n_l u_l`` in units of ``1 / quantum``, each entry rounded
  down or up at random (unbiased, the party's secret randomness), ``(1, P)``;
- :data:`SECURE_WEIGHT_KEY`: ``n_l``, ``(1,)``;
- :data:`SECURE_CLIPPED_KEY`: how many coordinates of ``u_l`` the clipping changed, ``(1,)``;
- :data:`SECURE_LOSS_KEY` (without DP): ``n_l`` times the loss, in whole units, ``(1,)``.

A party's entries are at most ``n_l x secure-clip x quantum + 1`` in magnitude; it checks that
against the range before it computes anything (:func:`secure_bound`), so no sum can wrap.
With DP the per-party ``epsilon`` does not leave the party: the server accounts with the
same RDP accountant at the largest sample rate a party may have, ``batch-size /
min-documents`` (1 when ``min-documents`` is 0), and a party with fewer documents refuses.

This module is numpy only (no torch): the parameter count ``P`` of a reply is computed
from the architecture by :func:`n_parameters`, which the tests check against the torch
model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from flower_topics.options import Option, at_least, in_range, one_of, positive, positive_finite
from flower_topics.wire.protocol import ArraySpec, ReplySpec

METHOD = "ntm"
#: Its replies are only averaged (eq. 2, or FedAvg): they can go through secure aggregation, each party's
#: weighted update quantized to ``1 / quantum`` after clipping each coordinate to ``secure-clip``.
SECURE_SUM = True
#: Server to party: the global weights, flat float32 ``(P,)``.
WEIGHTS_KEY = "weights"
#: Party to server, ``sync="minibatch"``: the mini-batch gradient ``G_l``, float32 ``(1, P)``.
GRADIENT_KEY = "gradient"
#: Party to server, ``sync="local"``: the party's weights after its local steps, float32 ``(1, P)``.
NEW_WEIGHTS_KEY = "local-weights"
#: Under secure aggregation (integers, summed under masks): the weighted, clipped, quantized update ``n_l u_l``.
SECURE_UPDATE_KEY = "weighted-update"
#: Under secure aggregation: the aggregation weight ``n_l``.
SECURE_WEIGHT_KEY = "weight"
#: Under secure aggregation: the number of coordinates of ``u_l`` the clipping changed.
SECURE_CLIPPED_KEY = "clipped-entries"
#: Under secure aggregation, without DP: ``n_l`` times the loss, in whole units.
SECURE_LOSS_KEY = "weighted-loss"

MODELS = ("prodlda", "combinedtm", "zeroshottm")
SYNCS = ("minibatch", "local")
NORMS = ("layer", "batch", "none")
OPTIMIZERS = ("adam", "sgd")
#: The encoder's hidden layers (the CTM library's default, ``(100, 100)``).
HIDDEN_SIZES = (100, 100)

#: The options of ``ntm`` (run-config keys ``ntm.<name>``).
OPTIONS: Mapping[str, Option] = {
    "model": Option("prodlda", "network: prodlda (bag of words), combinedtm (BoW + document embedding) or "
                    "zeroshottm (embedding only)", one_of(*MODELS)),
    "sync": Option("minibatch", "minibatch: each round one gradient per party, one server step (the paper's "
                   "Sync-Opt, eqs. 1-3); local: each party runs local-steps steps and the server averages the "
                   "weights by documents (FedAvg)", one_of(*SYNCS)),
    "local-steps": Option(10, "sync=local: optimizer steps a party takes per round", at_least(1)),
    "batch-size": Option(64, "documents in a party's mini-batch (with dp: the expected size of its Poisson "
                         "sample)", at_least(1)),
    "learning-rate": Option(2e-3, "step size lambda of eq. (3)", positive),
    "optimizer": Option("adam", "adam (the CTM library's, betas (0.99, 0.99)) or sgd (eq. 3 as written)",
                        one_of(*OPTIMIZERS)),
    "max-steps": Option(0, "stop after this many aggregations (0 = num-rounds, one a round)", at_least(0)),
    "stop-tolerance": Option(0.0, "stop when the relative change of the weights, norm(W' - W) / norm(W), falls below "
                             "this (0 = off)", at_least(0)),
    "norm": Option("layer", "normalization of mu, logvar and the decoder logits: layer (per document: "
                   "federated == centralized, DP per document), batch (the CTM library's; sync=local without dp "
                   "only) or none", one_of(*NORMS)),
    "dp": Option(True, "DP-SGD at each party (per-document clipping and Gaussian noise, Opacus; RDP accounting)"),
    "noise-multiplier": Option(1.0, "dp: Gaussian noise std / max-grad-norm", positive),
    "max-grad-norm": Option(1.0, "dp: per-document gradient clipping norm C", positive_finite),
    "dp-delta": Option(1e-5, "dp: the delta at which each party reports epsilon",
                       in_range(0, 1, low_open=True, high_open=True)),
    "embedding-model": Option("", "combinedtm/zeroshottm: folder of a sentence-transformers model each party "
                              "embeds its documents with ('' = the offline all-MiniLM-L6-v2)"),
    "secure-clip": Option(100.0, "secure aggregation: each coordinate of a party's update (its mean gradient, or "
                          "with sync=local its weight change) is clipped to [-secure-clip, secure-clip]", positive),
    "quantum": Option(4096.0, "secure aggregation: integer units per unit of the weighted update (each entry scaled "
                      "by it and randomly rounded down or up)", at_least(1)),
    "min-documents": Option(0, "dp with secure aggregation: public lower bound on each party's training documents; "
                            "the server accounts at q = batch-size / min-documents (0: q = 1) and a party with "
                            "fewer refuses", at_least(0)),
}


def n_parameters(model: str, vocab_size: int, n_topics: int, embedding_size: int = 0,
                 hidden_sizes: tuple[int, ...] = HIDDEN_SIZES) -> int:
    """``P``, the trainable parameters of :class:`flower_topics.models.ntm.NeuralTopicModel` (learned priors).

    Encoder (``adapt_bert`` ``Linear(E, V)`` for combinedtm; input layer from ``V``, ``2V``
    or ``E``; hidden layers; the two ``Linear(H, K)`` heads), decoder ``beta`` (``K x V``,
    no bias) and the prior's mean and variance (``2K``). The normalizations have no
    parameters (``affine=False``).

    Raises
    ------
    ValueError
        For combinedtm / zeroshottm without ``embedding_size``.
    """
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}")
    if model != "prodlda" and embedding_size < 1:
        raise ValueError(f"{model} needs the document-embedding size (embedding_size >= 1)")
    v, k, e, h = vocab_size, n_topics, embedding_size, hidden_sizes
    count = 0
    if model == "combinedtm":
        count += e * v + v
    in_size = {"prodlda": v, "combinedtm": 2 * v, "zeroshottm": e}[model]
    count += in_size * h[0] + h[0]
    count += sum(a * b + b for a, b in zip(h[:-1], h[1:]))
    count += 2 * (h[-1] * k + k)
    return count + k * v + 2 * k


@dataclass(frozen=True)
class NTMSettings:
    """What the server tells every party about a gFedNTM round.

    Parameters
    ----------
    n_topics : int
        K (the global ``num-topics``).
    model : {"prodlda", "combinedtm", "zeroshottm"}
    sync : {"minibatch", "local"}
        Sync-Opt (one gradient per party per round, eqs. 1-3) or local steps and FedAvg.
    local_steps : int
        ``sync="local"``: the party's optimizer steps per round.
    batch_size : int
        Documents per mini-batch (with ``dp``: the expected Poisson sample size ``q D_l``).
    learning_rate : float
        lambda of eq. (3) (the server's, and a party's local optimizer for ``sync="local"``).
    optimizer : {"adam", "sgd"}
    norm : {"layer", "batch", "none"}
    dp : bool
        DP-SGD at every party.
    noise_multiplier, max_grad_norm, dp_delta : float
        DP-SGD's sigma, clipping norm C, and the delta of the reported epsilon.
    embedding_model : str
        The sentence-transformers folder ('' = default) the parties embed with.
    embedding_size : int
        E, the dimension of that model's embeddings; resolved by the strategy (0 for
        prodlda), sent as ``ntm.embedding-size`` so that every party builds the same network.
    secure : bool
        Secure aggregation: the party sends :func:`secure_reply_spec`'s integers, no metric.
    secure_clip : float
        Under secure aggregation, the bound on each coordinate of a party's update.
    quantum : float
        Under secure aggregation, integer units per unit of the weighted update.
    min_documents : int
        Under secure aggregation with DP, the public lower bound on a party's documents
        that the server's accounting assumes (0: none, sample rate 1).
    """

    n_topics: int
    model: str = "prodlda"
    sync: str = "minibatch"
    local_steps: int = 10
    batch_size: int = 64
    learning_rate: float = 2e-3
    optimizer: str = "adam"
    norm: str = "layer"
    dp: bool = True
    noise_multiplier: float = 1.0
    max_grad_norm: float = 1.0
    dp_delta: float = 1e-5
    embedding_model: str = ""
    embedding_size: int = 0
    secure: bool = False
    secure_clip: float = 100.0
    quantum: float = 4096.0
    min_documents: int = 0

    def __post_init__(self) -> None:
        if self.n_topics < 2:
            raise ValueError("ntm needs num-topics >= 2")
        for name, value, choices in (("model", self.model, MODELS), ("sync", self.sync, SYNCS),
                                     ("norm", self.norm, NORMS), ("optimizer", self.optimizer, OPTIMIZERS)):
            if value not in choices:
                raise ValueError(f"ntm.{name} must be one of {choices}, got {value!r}")
        if self.local_steps < 1 or self.batch_size < 1 or self.embedding_size < 0:
            raise ValueError("local-steps and batch-size must be >= 1, embedding-size >= 0")
        if not (self.learning_rate > 0 and self.noise_multiplier > 0 and self.max_grad_norm > 0
                and 0 < self.dp_delta < 1):
            raise ValueError("learning-rate, noise-multiplier and max-grad-norm must be > 0, dp-delta in (0, 1)")
        if not (self.secure_clip > 0 and self.quantum >= 1 and self.min_documents >= 0):
            raise ValueError("ntm.secure-clip must be > 0, ntm.quantum >= 1 and ntm.min-documents >= 0")
        problem = self.norm_problem()
        if problem:
            raise ValueError(problem)

    def norm_problem(self) -> str | None:
        """Why ``norm="batch"`` cannot run with these settings (None when it can).

        BatchNorm standardizes every document with the statistics of its mini-batch: with
        ``sync="minibatch"`` eq. (2) is then not the gradient of the concatenated batch
        (each party normalizes with its own ``n_l`` documents), and with ``dp`` a
        document's "per-sample" gradient depends on the other documents, so clipping
        bounds nothing. Local training with FedAvg makes no exactness claim: allowed.
        """
        if self.norm != "batch":
            return None
        if self.dp:
            return ("ntm.norm='batch' mixes the documents of a mini-batch, so DP-SGD's per-document clipping bounds "
                    "nothing; use ntm.norm='layer'")
        if self.sync == "minibatch":
            return ("ntm.norm='batch' with ntm.sync='minibatch' breaks eq. (2): each party standardizes with its own "
                    "mini-batch, so the average is not the centralized gradient; use ntm.norm='layer' (exact) or "
                    "ntm.sync='local'")
        return None

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "NTMSettings":
        """Settings from a validated run config or a round's ConfigRecord (``ntm.embedding-size`` 0 when absent)."""
        return cls(n_topics=int(record["num-topics"]), model=str(record["ntm.model"]), sync=str(record["ntm.sync"]),
                   local_steps=int(record["ntm.local-steps"]), batch_size=int(record["ntm.batch-size"]),
                   learning_rate=float(record["ntm.learning-rate"]), optimizer=str(record["ntm.optimizer"]),
                   norm=str(record["ntm.norm"]), dp=bool(record["ntm.dp"]),
                   noise_multiplier=float(record["ntm.noise-multiplier"]),
                   max_grad_norm=float(record["ntm.max-grad-norm"]), dp_delta=float(record["ntm.dp-delta"]),
                   embedding_model=str(record["ntm.embedding-model"]),
                   embedding_size=int(record.get("ntm.embedding-size", 0)),
                   secure=bool(record.get("secure-aggregation", False)),
                   secure_clip=float(record["ntm.secure-clip"]), quantum=float(record["ntm.quantum"]),
                   min_documents=int(record["ntm.min-documents"]))

    def to_record(self) -> dict[str, int | float | str | bool]:
        """The settings as ConfigRecord entries (inverse of :meth:`from_record`)."""
        return {"num-topics": self.n_topics, "ntm.model": self.model, "ntm.sync": self.sync,
                "ntm.local-steps": self.local_steps, "ntm.batch-size": self.batch_size,
                "ntm.learning-rate": self.learning_rate, "ntm.optimizer": self.optimizer, "ntm.norm": self.norm,
                "ntm.dp": self.dp, "ntm.noise-multiplier": self.noise_multiplier,
                "ntm.max-grad-norm": self.max_grad_norm, "ntm.dp-delta": self.dp_delta,
                "ntm.embedding-model": self.embedding_model, "ntm.embedding-size": self.embedding_size,
                "secure-aggregation": self.secure, "ntm.secure-clip": self.secure_clip, "ntm.quantum": self.quantum,
                "ntm.min-documents": self.min_documents}


#: The settings class (what every party of a round receives).
SETTINGS = NTMSettings


def reply_key(settings: NTMSettings) -> str:
    """The reply's one array: the gradient (``minibatch``) or the new weights (``local``)."""
    return GRADIENT_KEY if settings.sync == "minibatch" else NEW_WEIGHTS_KEY


def reply_metrics(settings: NTMSettings) -> tuple[str, ...]:
    """The reply's metrics: the aggregation weight, then ``epsilon`` with DP or ``loss`` without."""
    weight = "batch-size" if settings.sync == "minibatch" else "num-documents"
    return (weight, "epsilon") if settings.dp else (weight, "loss")


def secure_bound(settings: NTMSettings, weight: int) -> float:
    """The largest magnitude of an entry of a party's secure reply with aggregation weight ``weight``.

    ``weight x secure-clip x quantum``, plus 1 for the random rounding up; the weight itself and
    the clipped-coordinate count are smaller whenever ``secure-clip x quantum >= 1`` and ``P`` is
    below it; the loss entry is clipped to the range (a reported figure only).
    """
    return weight * settings.secure_clip * settings.quantum + 1.0


def secure_reply_spec(settings: NTMSettings, vocab_size: int) -> ReplySpec:
    """A reply's arrays under secure aggregation, in the order they are concatenated (no metric)."""
    p = n_parameters(settings.model, vocab_size, settings.n_topics, settings.embedding_size)
    arrays = {SECURE_UPDATE_KEY: ArraySpec("integer", (1, p), what="weighted update in units of 1/quantum"),
              SECURE_WEIGHT_KEY: ArraySpec("integer", (1,), low=0, what="aggregation weight"),
              SECURE_CLIPPED_KEY: ArraySpec("integer", (1,), low=0, what="clipped coordinates")}
    if not settings.dp:
        arrays[SECURE_LOSS_KEY] = ArraySpec("integer", (1,), what="weighted loss")
    return ReplySpec(METHOD, arrays, metrics=(), max_bytes=8 * (p + 3) + (1 << 16))


def reply_spec(settings: NTMSettings, vocab_size: int) -> ReplySpec:
    """A valid reply: one finite float ``(1, P)`` row (gradient or weights) and :func:`reply_metrics`
    (under secure aggregation, :func:`secure_reply_spec`)."""
    if settings.secure:
        return secure_reply_spec(settings, vocab_size)
    p = n_parameters(settings.model, vocab_size, settings.n_topics, settings.embedding_size)
    what = "mini-batch gradient G_l" if settings.sync == "minibatch" else "local weights"
    return ReplySpec(METHOD, {reply_key(settings): ArraySpec("floating", (1, p), what=what)},
                     metrics=reply_metrics(settings), max_bytes=8 * p + (1 << 16))  # float32 is 4P; float64 would pass
