"""gFedNTM's party side (Calvo-Bartolomé and Arenas-García, Algorithm 1, getClientGrad).

Each round a party receives the global weights ``W^(e)`` and its settings, loads them into
its own copy of the network (``W_l^(e) <- W^(e)``, line 5), and:

- ``sync="minibatch"`` (the paper's Sync-Opt): selects one mini-batch ``b`` of its
  documents (line 4) and returns ``G_l^(e) = grad L(W_l^(e); b)`` (line 6), the gradient of
  the mean negative ELBO over ``b``, with ``n_l = |b|`` for eq. (2);
- ``sync="local"``: takes ``local-steps`` steps of its own optimizer (fresh each round)
  from ``W^(e)`` and returns the new weights with its number of documents (FedAvg).

With ``dp`` every gradient is a DP-SGD gradient (:func:`flower_topics.models.ntm_federated.dp_gradient`):
Poisson sampling at ``q = min(1, batch_size / D_l)``, per-document clipping, Gaussian
noise from the party's secret generator; the party accumulates the steps' Renyi DP in its
state (never sent) and reports its epsilon at ``dp-delta``. Under DP the loss is not
reported and ``batch-size`` is the expected size ``q D_l = min(batch_size, D_l)`` (the
divisor of the noisy sum), not the Poisson sample's size.

Randomness. The mini-batches, the dropout masks, the reparameterization draws and the DP
noise all come from the party's seed and the round (:func:`round_randomness`); ``ntm`` is
registered as private, so that seed is the party's secret (``secret-seed`` in its node
config mixed with a nonce drawn once per run, else fresh entropy).

Secure aggregation (``secure-aggregation=true``): the party sends the weighted update
``n_l u_l`` (``u_l`` the gradient, or the weight change ``W_l - W`` with ``sync="local"``;
each coordinate clipped to ``secure-clip``), quantized to ``1 / quantum`` with its secret
randomness, its weight ``n_l``, the number of clipped coordinates and, without DP, its
weighted loss (:func:`secure_update`); the client app masks them into one vector. It checks
the range before it computes anything (:func:`secure_headroom`) and sends no metric: its
epsilon stays in its state.

Documents are the party's training documents over the agreed vocabulary
(``corpus.doc_term_matrix()``). CombinedTM / ZeroShotTM embed them once (cached in this
process) with the local sentence-transformers model; the corpora may carry no raw text
(OCTIS corpora have none), so a document's text is its words joined by spaces, as the
benchmarks do.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
import torch
from flwr.app import ArrayRecord, ConfigRecord

from flower_topics.clients.base import LocalStep, Update
from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError
from flower_topics.models.ntm import (
    apply_gradient,
    batch_gradient,
    draw_noise,
    flatten_parameters,
    make_optimizer,
    n_parameters,
    unflatten_parameters,
)
from flower_topics.models.ntm_federated import batch_tensors, build_model, dp_gradient
from flower_topics.privacy.accountants import RDPAccountant
from flower_topics.privacy.ledger import Release
from flower_topics.privacy.party_policy import NO_PARTY, PartyFacts
from flower_topics.secure_sum.protocol import quantize
from flower_topics.wire import ntm as wire
from flower_topics.wire.ntm import NTMSettings

_EMBEDDINGS: dict[tuple[str, str], np.ndarray] = {}


@dataclass
class NTMClientState:
    """What a party keeps between rounds (never sent).

    Parameters
    ----------
    releases : np.ndarray
        ``n x 2``: the noise multiplier and sample rate of each DP-SGD step it took, in order (each a
        Poisson-subsampled Gaussian release, composed by the ``"rdp"`` accountant, Opacus).
    dp_steps : int
        DP-SGD steps taken so far.
    """

    releases: np.ndarray = field(default_factory=lambda: np.zeros((0, 2)))
    dp_steps: int = 0

    def epsilon(self, delta: float) -> float:
        """Epsilon at ``delta`` of every DP-SGD step taken (its RDP curves added in order)."""
        accountant = RDPAccountant()
        for sigma, rate in self.releases:
            accountant.step(noise_multiplier=sigma, sample_rate=rate)
        return accountant.get_epsilon(delta)


def document_texts(corpus: Corpus) -> list[str]:
    """Each document's words joined by spaces (the corpora keep no raw text after preprocessing)."""
    return [" ".join(corpus.words(d)) for d in range(corpus.n_docs)]


def party_embeddings(corpus: Corpus, settings: NTMSettings) -> np.ndarray | None:
    """The party's ``(D, E)`` document embeddings (None for prodlda), embedded once per process.

    Raises
    ------
    UserInputError
        When the model's dimension is not the run's ``embedding-size``.
    """
    if settings.model == "prodlda":
        return None
    from flower_topics.models.embeddings import content_hash, embed_documents, resolve_model

    texts = document_texts(corpus)
    model = resolve_model(settings.embedding_model or None)
    key = (model, content_hash(texts))
    if key not in _EMBEDDINGS:
        if len(_EMBEDDINGS) >= 8:
            _EMBEDDINGS.pop(next(iter(_EMBEDDINGS)))
        _EMBEDDINGS[key] = embed_documents(texts, model).embeddings
    emb = _EMBEDDINGS[key]
    if emb.shape[1] != settings.embedding_size:
        raise UserInputError(f"this party's embedding model gives {emb.shape[1]}-dimensional embeddings, the run "
                             f"uses {settings.embedding_size}: set ntm.embedding-model to the server's model")
    return emb


def round_randomness(seed: int, server_round: int) -> tuple[np.random.Generator, torch.Generator]:
    """The party's generators of one round: numpy (mini-batches) and torch (dropout, reparameterization, DP noise)."""
    rng = np.random.default_rng([seed, server_round])
    state = np.random.SeedSequence([seed, server_round, 1]).generate_state(2, np.uint32)
    generator = torch.Generator().manual_seed(int(state[0]) << 31 | int(state[1]) >> 1)
    return rng, generator


def draw_batch(rng: np.random.Generator, n_docs: int, settings: NTMSettings) -> np.ndarray:
    """Sorted document ids of one mini-batch (Algorithm 1, getClientGrad line 4).

    Without DP: ``min(batch_size, D)`` documents uniformly without replacement. With DP:
    a Poisson sample, each document independently with probability ``q``
    (:func:`sample_rate`), which the RDP accounting assumes.
    """
    if settings.dp:
        return np.flatnonzero(rng.random(n_docs) < sample_rate(n_docs, settings))
    return np.sort(rng.choice(n_docs, size=min(settings.batch_size, n_docs), replace=False))


def sample_rate(n_docs: int, settings: NTMSettings) -> float:
    """DP-SGD's ``q = min(1, batch_size / D_l)``."""
    return min(1.0, settings.batch_size / n_docs)


def train_round(corpus: Corpus, weights: np.ndarray, state: NTMClientState, *, server_round: int,
                settings: NTMSettings, seed: int) -> tuple[np.ndarray, dict[str, float]]:
    """One round of gFedNTM at a party: ``G_l`` (minibatch) or the local weights (local), and the metrics.

    Parameters
    ----------
    corpus : Corpus
        The party's training documents over the agreed vocabulary.
    weights : np.ndarray
        ``(P,)`` global weights ``W^(e)``.
    state : NTMClientState
        The party's RDP accounting; updated in place with DP.
    server_round : int
        The round (>= 1); with ``seed`` it seeds every draw of the round.
    settings : NTMSettings
        The round's settings.
    seed : int
        The party's secret seed.

    Returns
    -------
    (np.ndarray, dict)
        The ``(1, P)`` float32 reply row, and :func:`flower_topics.wire.ntm.reply_metrics`.
    """
    if corpus.n_docs == 0:
        raise UserInputError("this party has no training documents over the agreed vocabulary")
    problem = settings.norm_problem()
    if problem:
        raise UserInputError(problem)
    bow = sp.csr_matrix(corpus.doc_term_matrix(), dtype=np.float32)
    emb = party_embeddings(corpus, settings)
    model = build_model(corpus.n_words, settings.n_topics, settings.model, embedding_size=settings.embedding_size,
                        hidden_sizes=wire.HIDDEN_SIZES, norm=settings.norm)
    weights = np.asarray(weights).reshape(-1)
    if weights.size != n_parameters(model):
        raise ValueError(f"the server's weights have {weights.size} values, this network {n_parameters(model)}")
    unflatten_parameters(model, weights)
    rng, generator = round_randomness(seed, server_round)
    steps = 1 if settings.sync == "minibatch" else settings.local_steps
    optimizer = make_optimizer(model, settings.optimizer, settings.learning_rate) if settings.sync == "local" else None
    losses, gradient, n_batch = [], None, 0
    for _ in range(steps):
        index = draw_batch(rng, corpus.n_docs, settings)
        x, e = batch_tensors(bow, emb, index)
        noise = draw_noise(model, int(index.size), generator)
        if settings.dp:
            loss, gradient = dp_gradient(model, x, e, noise, max_grad_norm=settings.max_grad_norm,
                                         noise_multiplier=settings.noise_multiplier,
                                         expected_batch=sample_rate(corpus.n_docs, settings) * corpus.n_docs,
                                         generator=generator)
            step = [float(settings.noise_multiplier), float(sample_rate(corpus.n_docs, settings))]
            state.releases = np.vstack([state.releases, [step]])
            state.dp_steps += 1
        else:
            loss, gradient = batch_gradient(model, x, e, noise=noise)
        losses.append(loss)
        n_batch = int(index.size)
        if optimizer is not None:
            apply_gradient(model, optimizer, gradient)
    metrics: dict[str, float] = {}
    if settings.sync == "minibatch":
        row = gradient
        # eq. (2)'s n_l: the sample's size, or with DP the public expected size q D_l (the divisor of G_l)
        metrics["batch-size"] = min(settings.batch_size, corpus.n_docs) if settings.dp else n_batch
    else:
        row = flatten_parameters(model, np.float32)
        metrics["num-documents"] = corpus.n_docs
    if settings.dp:
        metrics["epsilon"] = state.epsilon(settings.dp_delta)
    else:
        metrics["loss"] = float(np.mean(losses))
    return np.asarray(row, dtype=np.float32).reshape(1, -1), metrics


def aggregation_weight(n_docs: int, settings: NTMSettings) -> int:
    """``n_l``: the documents of a mini-batch, ``min(batch-size, D_l)`` (with DP the public expected size
    ``q D_l``, without it the sample's size, the same number), or ``D_l`` with ``sync="local"``."""
    return min(settings.batch_size, n_docs) if settings.sync == "minibatch" else n_docs


def secure_headroom(corpus: Corpus, settings: NTMSettings, limit: int) -> str | None:
    """Why this party cannot send its update through the secure sum with entry ``limit``, or None.

    An entry of its weighted update is at most ``n_l x secure-clip x quantum + 1``
    (:func:`flower_topics.wire.ntm.secure_bound`) by construction; that must not exceed
    ``limit``, the most each party may add without the sum wrapping modulo ``2^bits``. With DP
    the party must also hold at least ``min-documents`` documents, the bound the server's
    accounting assumes.
    """
    weight = aggregation_weight(corpus.n_docs, settings)
    bound = wire.secure_bound(settings, weight)
    if bound > limit:
        return (f"secure sum: an entry of this party's weighted update could reach {bound:.4g} units ({weight} x "
                f"ntm.secure-clip {settings.secure_clip:g} x ntm.quantum {settings.quantum:g}), over {limit}, the "
                f"most each party may add without the sum wrapping; use a larger secure-aggregation-bits or a "
                f"smaller ntm.quantum or ntm.secure-clip")
    if settings.dp and corpus.n_docs < settings.min_documents:
        return (f"secure sum: this party has {corpus.n_docs} training documents, fewer than ntm.min-documents "
                f"{settings.min_documents}, which the server's DP accounting assumes")
    return None


def secure_update(update: np.ndarray, weight: int, loss: float | None, settings: NTMSettings, limit: int,
                  rng: np.random.Generator) -> dict[str, np.ndarray]:
    """The integer arrays of a secure reply (:func:`flower_topics.wire.ntm.secure_reply_spec`, in its order).

    Parameters
    ----------
    update : np.ndarray
        ``u_l``: the gradient ``G_l``, or the weight change ``W_l - W``; each coordinate is
        clipped to ``[-secure-clip, secure-clip]``.
    weight : int
        ``n_l``, the aggregation weight.
    loss : float or None
        The mean loss (without DP), sent as ``n_l x loss`` in whole units.
    settings : NTMSettings
    limit : int
        The largest magnitude an entry may have (every entry is clipped to it as well).
    rng : np.random.Generator
        The party's secret randomness for the rounding.

    Raises
    ------
    ValueError
        If ``update`` or ``loss`` is not finite (nothing is sent).
    """
    u = np.asarray(update, dtype=np.float64).reshape(1, -1)
    if not np.isfinite(u).all() or (loss is not None and not np.isfinite(loss)):
        raise ValueError("ntm: this party's update is not finite; it is not sent")
    clipped = int(np.count_nonzero(np.abs(u) > settings.secure_clip))
    u = np.clip(u, -settings.secure_clip, settings.secure_clip)
    arrays = {wire.SECURE_UPDATE_KEY: quantize(weight * u, settings.quantum, limit, rng),
              wire.SECURE_WEIGHT_KEY: np.array([weight], dtype=np.int64),
              wire.SECURE_CLIPPED_KEY: np.array([min(clipped, limit)], dtype=np.int64)}
    if not settings.dp:
        arrays[wire.SECURE_LOSS_KEY] = quantize(np.array([weight * float(loss)]), 1.0, limit, rng)
    return arrays


def local_step(arrays: ArrayRecord, config: ConfigRecord, corpus: Corpus, state: NTMClientState,
               seed: int, party: PartyFacts = NO_PARTY) -> Update:
    """One round of ``ntm`` from a training message: the gradient or the local weights, and the metrics.

    Under secure aggregation (the settings say so, and the party's secure-sum state gave it
    its entry limit) the integers of :func:`secure_update` and no metric; refused before
    anything is computed when the range could not hold them (:func:`secure_headroom`, checked by
    :meth:`LocalStep.train`).
    """
    settings = NTMSettings.from_record(config)
    limit = party.secure.entry_limit if party.secure is not None else None
    if settings.secure and limit is None:
        raise UserInputError("secure sum: this training message belongs to no secure-sum round of this party; "
                             "nothing is sent in clear")
    server_round = int(config["server-round"])
    weights = arrays[wire.WEIGHTS_KEY].numpy()
    row, metrics = train_round(corpus, weights, state, server_round=server_round, settings=settings, seed=seed)
    if limit is None:
        return {wire.reply_key(settings): row}, metrics
    update = row.astype(np.float64) if settings.sync == "minibatch" else \
        row.astype(np.float64) - np.asarray(weights, dtype=np.float64).reshape(1, -1)
    weight = int(metrics[wire.reply_metrics(settings)[0]])  # the plain reply's weight: aggregation_weight's value
    rng = np.random.default_rng([seed, server_round, 2])  # the party's secret randomness: rounding only
    return secure_update(update, weight, metrics.get("loss"), settings, limit, rng), {}


def accounted(config: ConfigRecord, corpus: Corpus) -> tuple[Release, ...] | None:
    """With DP, a round's DP-SGD steps on this party's documents (Poisson-subsampled Gaussian releases at its
    ``q``); without DP, None (its gradient or weights have no document-level accounting)."""
    settings = NTMSettings.from_record(config)
    if not settings.dp or corpus.n_docs == 0:
        return None
    steps = 1 if settings.sync == "minibatch" else settings.local_steps
    return (Release("gaussian", settings.noise_multiplier, sample_rate(corpus.n_docs, settings), steps=steps),)


#: The party side of ``ntm``.
STEP = LocalStep(state=NTMClientState, run=local_step,
                 secure_headroom=lambda corpus, config, secure: secure_headroom(
                     corpus, NTMSettings.from_record(config), secure.entry_limit),
                 accounted=accounted)
