"""ProdLDA, CombinedTM and ZeroShotTM in torch: the networks gFedNTM trains by Sync-Opt.

gFedNTM (Calvo-Bartolomé and Arenas-García, "Federated Neural Topic Models") trains one
neural topic model over ``L`` parties by synchronous stochastic optimization: at step ``e``
every party computes the gradient ``G_l`` of the loss on one local mini-batch at the
current global weights ``W``, the server aggregates them (eq. 1) by the mini-batch-size
weighted average ``G = sum_l n_l G_l / sum_l n_l`` (eq. 2) and takes one optimizer step
``W <- W - lambda G`` (eq. 3; Adam here by default, as the CTM defaults the paper uses).
This module is the math of both sides, without Flower: the network, its loss, the party's
:func:`batch_gradient`, the server's :func:`apply_gradient`, the flat float32 vector that
travels on the wire, and the model's outputs (:func:`topic_word`, :func:`infer_theta`,
:func:`elbo_perplexity`).

The networks
------------
ProdLDA (Srivastava and Sutton, "Autoencoding Variational Inference for Topic Models",
ICLR 2017) and the contextualized topic models of Bianchi et al. (2021), CombinedTM
("Pre-training is a hot topic", ACL 2021) and ZeroShotTM ("Cross-lingual contextualized
topic models with zero-shot learning", EACL 2021), with the defaults of the
``contextualized-topic-models`` library 2.5.0 (checked against its source):

- encoder input: ProdLDA the bag of words ``x`` (V); CombinedTM ``[x, A e]`` where ``e`` is
  the SBERT document embedding and ``A`` a learned ``Linear(E, V)`` (``adapt_bert``), so the
  first layer sees 2V inputs; ZeroShotTM only ``e`` (the BoW is not an input, it is still
  what the decoder reconstructs);
- ``Linear(in, 100)``, softplus, ``Linear(100, 100)``, softplus, dropout 0.2, then two
  heads ``Linear(100, K)`` for the posterior mean ``mu`` and log-variance ``logvar``, each
  followed by a normalization (the library: ``BatchNorm1d(K, affine=False)``);
- reparameterization ``z = mu + exp(logvar / 2) eps``, ``eps ~ N(0, I)``; ``theta =
  softmax(z)``, then dropout 0.2 on ``theta`` (as the library; no renormalization);
- decoder (product of experts): ``p(w | theta) = softmax(norm(theta beta))`` with ``beta``
  a K x V matrix (Xavier-uniform init), ``norm`` the library's ``BatchNorm1d(V,
  affine=False)``;
- prior: the Laplace approximation of a Dirichlet(alpha) prior in the softmax basis
  (Srivastava and Sutton 2017): ``mu0_k = log alpha_k - mean_i log alpha_i`` and
  ``sigma0^2_k = (1 / alpha_k)(1 - 2 / K) + (1 / K^2) sum_i 1 / alpha_i``; with alpha = 1
  this is ``mu0 = 0``, ``sigma0^2 = 1 - 1 / K``. Both are trainable parameters (the
  library's ``learn_priors=True``), the variance parametrized directly as in the library;
- loss per document, the negative ELBO
  ``-sum_w x_w log p(w | theta) + KL(N(mu, diag exp(logvar)) || N(mu0, diag sigma0^2))``,
  ``KL = 1/2 [sum_k exp(logvar_k) / sigma0^2_k + sum_k (mu0_k - mu_k)^2 / sigma0^2_k - K
  + sum_k log sigma0^2_k - sum_k logvar_k]``. The reconstruction uses ``log_softmax``
  (the library takes ``log(softmax + 1e-10)``, which differs only for words of
  probability below about 1e-8);
- optimizer: Adam, lr 2e-3, ``betas=(momentum, 0.99)`` with momentum 0.99 (the library
  passes ``betas=(self.momentum, 0.99)``: the second beta is 0.99, not torch's 0.999);
  batch size 64, 100 epochs, the per-batch loss the *sum* over the batch's documents.

The normalization option (``norm``)
-----------------------------------
``"batch"`` is the library's BatchNorm: in training mode every document's ``mu``,
``logvar`` and decoder logits are standardized with the mean and variance *of its
mini-batch*, so one document's loss depends on the other documents of the batch. Two
things break:

(a) the weighted average of eq. (2) is no longer the gradient on the concatenated batch:
    party ``l`` normalizes with the statistics of its own ``n_l`` documents, the
    centralized model with those of all ``sum_l n_l`` (the test suite shows the
    difference is large);
(b) per-document gradients are undefined, so DP-SGD's per-sample clipping bounds
    nothing. Opacus rejects affine BatchNorm, but the library's BatchNorm has
    ``affine=False`` (no parameters) and passes Opacus' validation silently, with
    "per-sample" gradients that move when another document of the batch changes (shown
    by a test); :func:`check_per_sample_gradients` refuses it instead.

``"layer"`` (the default for federated and private training) replaces each BatchNorm by
``LayerNorm(affine=False)`` over the same vector *of one document*: ``mu`` and
``logvar`` standardized over the K topics, the decoder logits over the V words. It keeps
BatchNorm's role in ProdLDA (logits and posterior parameters on a fixed scale, which
avoids the component collapse Srivastava and Sutton report without it) while every
document's loss is a function of that document alone. The mini-batch loss is then a sum
of independent per-document terms, so with ``G_l`` the gradient of the *mean* loss over
party ``l``'s batch, eq. (2) is exactly the gradient of the mean loss over the
concatenated batch, and a server step with it equals the centralized step (up to
floating-point summation order); and Opacus computes per-sample gradients. ``"none"``
(identity) has the same two properties but collapses as Srivastava and Sutton warn: on
BBC News (K=20, 100 epochs) every topic came out the same ("good game win government
..."; NPMI 0.005, diversity 0.06), so it is there for tests and ablations only.

What ``"layer"`` costs (``benchmarks/bench_ntm.py``, BBC News, K=20, 100 epochs, 3
seeds): softmax is shift-invariant, so LayerNorm on the decoder logits only rescales each
document's logits, while BatchNorm also standardizes every word across the batch's
documents (subtracting a per-word mean acts as a background). With LayerNorm the training
loss and perplexities are lower and NPMI higher (ProdLDA 0.27 vs 0.23), but topics repeat
(diversity 0.55 vs 0.84: several "mobile phone technology" topics); a per-word affine
LayerNorm does not change that (diversity 0.59 on one seed).

gFedNTM's own claim that the federated model "is equivalent to a centralized model
training" holds exactly only for a normalization of the ``"layer"`` kind; with the CTM
library's BatchNorm each party's statistics differ from the pooled batch's.

Noise
-----
Training draws three kinds of randomness: the encoder dropout mask, ``eps`` of the
reparameterization and the dropout mask on ``theta``. They are drawn per document, in a
:class:`ForwardNoise` (from a ``torch.Generator`` or the global RNG) that can also be
passed in explicitly. Slicing the noise of a concatenated batch gives each party exactly
the noise its documents had centrally, which makes the equivalence of federated and
centralized steps testable with noise on; :meth:`ForwardNoise.zeros` (``eps = 0``, no
dropout) is the noise-free mode.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn

MODEL_KINDS = ("prodlda", "combinedtm", "zeroshottm")
NORMS = ("batch", "layer", "none")
SOLVERS = ("adam", "sgd")

ArrayLike = np.ndarray | sp.spmatrix | torch.Tensor


# --------------------------------------------------------------------------- modules


def _make_norm(norm: str, size: int) -> nn.Module:
    if norm == "batch":
        return nn.BatchNorm1d(size, affine=False)
    if norm == "layer":
        return nn.LayerNorm(size, elementwise_affine=False)
    if norm == "none":
        return nn.Identity()
    raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")


def _make_activation(activation: str) -> nn.Module:
    if activation == "softplus":
        return nn.Softplus()
    if activation == "relu":
        return nn.ReLU()
    raise ValueError(f"activation must be 'softplus' or 'relu', got {activation!r}")


@dataclass(frozen=True)
class ForwardNoise:
    """The randomness of one forward pass, one row per document.

    Parameters
    ----------
    eps : torch.Tensor
        ``(B, K)`` standard normal draws of the reparameterization ``z = mu + sigma eps``.
    encoder_mask : torch.Tensor
        ``(B, H)`` inverted-dropout multipliers (0 or ``1 / (1 - p)``) on the last hidden
        layer of the encoder; all ones for no dropout.
    theta_mask : torch.Tensor
        ``(B, K)`` inverted-dropout multipliers on ``theta``.
    """

    eps: torch.Tensor
    encoder_mask: torch.Tensor
    theta_mask: torch.Tensor

    def __len__(self) -> int:
        return int(self.eps.shape[0])

    def slice(self, start: int, stop: int) -> "ForwardNoise":
        """The noise of documents ``start:stop`` (a party's share of a concatenated batch)."""
        return ForwardNoise(self.eps[start:stop], self.encoder_mask[start:stop], self.theta_mask[start:stop])

    @staticmethod
    def zeros(model: "NeuralTopicModel", n_docs: int) -> "ForwardNoise":
        """No noise: ``eps = 0`` (``z`` is the posterior mean) and no dropout, on the model's device."""
        dtype, device = model.dtype, model.device
        return ForwardNoise(
            torch.zeros(n_docs, model.n_topics, dtype=dtype, device=device),
            torch.ones(n_docs, model.hidden_sizes[-1], dtype=dtype, device=device),
            torch.ones(n_docs, model.n_topics, dtype=dtype, device=device),
        )

    def to(self, device: torch.device) -> "ForwardNoise":
        """The same noise on ``device``."""
        return ForwardNoise(self.eps.to(device), self.encoder_mask.to(device), self.theta_mask.to(device))


def draw_noise(model: "NeuralTopicModel", n_docs: int, generator: torch.Generator | None = None,
               *, dropout: bool = True) -> ForwardNoise:
    """Draw the noise of a forward pass over ``n_docs`` documents.

    Parameters
    ----------
    model : NeuralTopicModel
        Gives K, the hidden size, the dropout rate and the dtype.
    n_docs : int
        Number of documents (rows).
    generator : torch.Generator, optional
        Source of randomness; the global torch RNG when None.
    dropout : bool, default True
        Draw dropout masks (training); all-ones masks when False (evaluation).

    Returns
    -------
    ForwardNoise
        On the model's device; drawn on the CPU (``generator`` is a CPU generator), so that a model on a GPU
        sees the same draws as on the CPU.
    """
    dtype = model.dtype
    k, h, p = model.n_topics, model.hidden_sizes[-1], model.dropout
    eps = torch.randn(n_docs, k, generator=generator, dtype=dtype)

    def mask(cols: int) -> torch.Tensor:
        if not dropout or p == 0.0:
            return torch.ones(n_docs, cols, dtype=dtype)
        keep = torch.rand(n_docs, cols, generator=generator, dtype=dtype) >= p
        return keep.to(dtype) / (1.0 - p)

    return ForwardNoise(eps, mask(h), mask(k)).to(model.device)  # on the CPU: the same tensors


class Encoder(nn.Module):
    """Inference network: a document to the Gaussian posterior ``(mu, logvar)`` over ``z``.

    Layers as in the class docstring of :class:`NeuralTopicModel`; ``norm`` is applied to
    both heads.
    """

    def __init__(self, kind: str, vocab_size: int, embedding_size: int, n_topics: int,
                 hidden_sizes: Sequence[int], activation: str, norm: str) -> None:
        super().__init__()
        self.kind = kind
        if kind == "prodlda":
            in_size = vocab_size
        elif kind == "combinedtm":
            self.adapt_bert = nn.Linear(embedding_size, vocab_size)
            in_size = 2 * vocab_size
        elif kind == "zeroshottm":
            in_size = embedding_size
        else:
            raise ValueError(f"kind must be one of {MODEL_KINDS}, got {kind!r}")
        self.activation = _make_activation(activation)
        self.input_layer = nn.Linear(in_size, hidden_sizes[0])
        self.hiddens = nn.Sequential(OrderedDict(
            (f"l_{i}", nn.Sequential(nn.Linear(h_in, h_out), _make_activation(activation)))
            for i, (h_in, h_out) in enumerate(zip(hidden_sizes[:-1], hidden_sizes[1:]))
        ))
        self.f_mu = nn.Linear(hidden_sizes[-1], n_topics)
        self.f_mu_norm = _make_norm(norm, n_topics)
        self.f_sigma = nn.Linear(hidden_sizes[-1], n_topics)
        self.f_sigma_norm = _make_norm(norm, n_topics)

    def forward(self, bow: torch.Tensor, emb: torch.Tensor | None,
                encoder_mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(mu, logvar)``, each ``(B, K)``; ``encoder_mask`` multiplies the last hidden layer."""
        if self.kind == "prodlda":
            x = bow
        elif self.kind == "combinedtm":
            x = torch.cat((bow, self.adapt_bert(emb)), dim=1)
        else:
            x = emb
        x = self.hiddens(self.activation(self.input_layer(x)))
        if encoder_mask is not None:
            x = x * encoder_mask
        return self.f_mu_norm(self.f_mu(x)), self.f_sigma_norm(self.f_sigma(x))


class GaussianPrior(nn.Module):
    """The learned logistic-normal prior ``N(mu0, diag sigma0^2)`` and its KL term.

    Initialized with the Laplace approximation of Dirichlet(``alpha``) (see the module
    docstring). ``forward`` takes ``[mu, logvar]`` concatenated along columns (one input
    tensor, so that Opacus' functorch fallback computes per-sample gradients of ``mu0`` and
    ``sigma0^2``) and returns each document's ``KL(q(z|d) || p(z))``.
    """

    def __init__(self, n_topics: int, alpha: float = 1.0, learn: bool = True) -> None:
        super().__init__()
        a = torch.full((n_topics,), float(alpha))
        mean = a.log() - a.log().mean()
        variance = (1.0 / a) * (1.0 - 2.0 / n_topics) + (1.0 / a).sum() / n_topics**2
        self.n_topics = n_topics
        self.mean = nn.Parameter(mean, requires_grad=learn)
        self.variance = nn.Parameter(variance, requires_grad=learn)

    def forward(self, stats: torch.Tensor) -> torch.Tensor:
        """``(B,)`` KL divergences; ``stats`` is ``(B, 2K)`` = ``[mu, logvar]``."""
        mu, logvar = stats[:, : self.n_topics], stats[:, self.n_topics:]
        var_division = (logvar.exp() / self.variance).sum(dim=1)
        diff = self.mean - mu
        diff_term = (diff * diff / self.variance).sum(dim=1)
        logdet = self.variance.log().sum() - logvar.sum(dim=1)
        return 0.5 * (var_division + diff_term - self.n_topics + logdet)


class Decoder(nn.Module):
    """Product-of-experts decoder: ``log p(w | theta) = log_softmax(norm(theta beta))``.

    ``beta`` (K x V) is stored as the weight of a bias-free ``Linear(K, V)``
    (``weight = beta^T``), a layer Opacus computes per-sample gradients for natively.
    """

    def __init__(self, n_topics: int, vocab_size: int, norm: str) -> None:
        super().__init__()
        self.topics = nn.Linear(n_topics, vocab_size, bias=False)
        beta = torch.empty(n_topics, vocab_size)
        nn.init.xavier_uniform_(beta)
        with torch.no_grad():
            self.topics.weight.copy_(beta.T)
        self.norm = _make_norm(norm, vocab_size)

    @property
    def beta(self) -> torch.Tensor:
        """The K x V topic-word weights (unnormalized)."""
        return self.topics.weight.T

    def forward(self, theta: torch.Tensor) -> torch.Tensor:
        """``(B, V)`` log word probabilities."""
        return F.log_softmax(self.norm(self.topics(theta)), dim=1)


# --------------------------------------------------------------------------- the model


class NeuralTopicModel(nn.Module):
    """ProdLDA, CombinedTM or ZeroShotTM (see the module docstring for the layers).

    Parameters
    ----------
    vocab_size : int
        V, the bag-of-words dimension.
    n_topics : int
        K.
    kind : {"prodlda", "combinedtm", "zeroshottm"}
        Encoder input: BoW, BoW and projected embedding, or embedding only.
    embedding_size : int, default 0
        E, the document-embedding dimension (384 for all-MiniLM-L6-v2); required (> 0) by
        combinedtm and zeroshottm, ignored by prodlda.
    hidden_sizes : sequence of int, default (100, 100)
        Encoder hidden layers.
    activation : {"softplus", "relu"}, default "softplus"
    dropout : float, default 0.2
        On the encoder's last hidden layer and on theta (training only).
    norm : {"batch", "layer", "none"}, default "layer"
        Normalization of mu, logvar and the decoder logits; "batch" is the library's
        (centralized reproduction only), "layer" and "none" keep documents independent
        (federated equivalence, per-sample gradients). See the module docstring.
    prior_alpha : float, default 1.0
        Dirichlet parameter whose Laplace approximation initializes the prior.
    learn_priors : bool, default True
        Train the prior mean and variance.
    seed : int, optional
        Seed of the weight initialization (``torch.manual_seed`` on a forked RNG); the
        global RNG when None.
    """

    def __init__(self, vocab_size: int, n_topics: int, kind: str = "prodlda", *, embedding_size: int = 0,
                 hidden_sizes: Sequence[int] = (100, 100), activation: str = "softplus", dropout: float = 0.2,
                 norm: str = "layer", prior_alpha: float = 1.0, learn_priors: bool = True,
                 seed: int | None = None) -> None:
        super().__init__()
        if kind not in MODEL_KINDS:
            raise ValueError(f"kind must be one of {MODEL_KINDS}, got {kind!r}")
        if norm not in NORMS:
            raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")
        if kind != "prodlda" and embedding_size <= 0:
            raise ValueError(f"{kind} needs embedding_size > 0 (the document-embedding dimension)")
        if vocab_size < 1 or n_topics < 2 or not hidden_sizes or min(hidden_sizes) < 1:
            raise ValueError("need vocab_size >= 1, n_topics >= 2 and non-empty positive hidden_sizes")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must lie in [0, 1), got {dropout}")
        self.vocab_size = int(vocab_size)
        self.n_topics = int(n_topics)
        self.kind = kind
        self.embedding_size = int(embedding_size) if kind != "prodlda" else 0
        self.hidden_sizes = tuple(int(h) for h in hidden_sizes)
        self.activation = activation
        self.dropout = float(dropout)
        self.norm = norm
        self.prior_alpha = float(prior_alpha)
        self.learn_priors = bool(learn_priors)
        with torch.random.fork_rng(enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            self.encoder = Encoder(kind, self.vocab_size, self.embedding_size, self.n_topics,
                                   self.hidden_sizes, activation, norm)
            self.decoder = Decoder(self.n_topics, self.vocab_size, norm)
            self.prior = GaussianPrior(self.n_topics, prior_alpha, learn_priors)

    @property
    def config(self) -> dict[str, object]:
        """The constructor arguments (JSON-serializable), to rebuild the same network."""
        return {"vocab_size": self.vocab_size, "n_topics": self.n_topics, "kind": self.kind,
                "embedding_size": self.embedding_size, "hidden_sizes": list(self.hidden_sizes),
                "activation": self.activation, "dropout": self.dropout, "norm": self.norm,
                "prior_alpha": self.prior_alpha, "learn_priors": self.learn_priors}

    @property
    def dtype(self) -> torch.dtype:
        """Floating dtype of the parameters."""
        return self.decoder.topics.weight.dtype

    @property
    def device(self) -> torch.device:
        """Device of the parameters (``model.to("cuda")`` moves them; :func:`fit` trains there)."""
        return self.decoder.topics.weight.device

    @property
    def uses_embeddings(self) -> bool:
        """Whether the encoder needs document embeddings (combinedtm, zeroshottm)."""
        return self.kind != "prodlda"

    def terms(self, bow: torch.Tensor, emb: torch.Tensor | None = None, noise: ForwardNoise | None = None,
              generator: torch.Generator | None = None) -> dict[str, torch.Tensor]:
        """Every per-document quantity of one forward pass.

        Dropout is applied in training mode only (the masks of ``noise`` are ignored in
        eval mode); ``eps`` is used in both modes (the library samples in eval too).

        Returns
        -------
        dict
            ``"rec"`` (B,) reconstruction ``-sum_w x_w log p(w | theta)``, ``"kl"`` (B,),
            ``"loss"`` (B,) their sum (negative ELBO), ``"mu"``, ``"logvar"``, ``"theta"``
            (B, K), ``"log_word"`` (B, V).
        """
        if self.uses_embeddings and emb is None:
            raise ValueError(f"{self.kind} needs document embeddings")
        n = bow.shape[0]
        if noise is None:
            noise = draw_noise(self, n, generator, dropout=self.training)
        elif len(noise) != n:
            raise ValueError(f"noise has {len(noise)} rows for a batch of {n} documents")
        mu, logvar = self.encoder(bow, emb, noise.encoder_mask if self.training else None)
        z = mu + torch.exp(0.5 * logvar) * noise.eps
        theta = F.softmax(z, dim=1)
        if self.training:
            theta = theta * noise.theta_mask
        log_word = self.decoder(theta)
        rec = -(bow * log_word).sum(dim=1)
        kl = self.prior(torch.cat((mu, logvar), dim=1))
        return {"rec": rec, "kl": kl, "loss": rec + kl, "mu": mu, "logvar": logvar, "theta": theta,
                "log_word": log_word}

    def forward(self, bow: torch.Tensor, emb: torch.Tensor | None = None, noise: ForwardNoise | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
        """Per-document negative ELBO, ``(B,)``; the training loss is its sum or mean."""
        return self.terms(bow, emb, noise, generator)["loss"]


# --------------------------------------------------------------------------- data helpers


def as_tensor(rows: ArrayLike | None, dtype: torch.dtype = torch.float32) -> torch.Tensor | None:
    """A dense torch tensor of ``rows`` (numpy, scipy sparse or torch); None stays None."""
    if rows is None:
        return None
    if isinstance(rows, torch.Tensor):
        return rows.to(dtype)
    if sp.issparse(rows):
        rows = rows.toarray()
    return torch.as_tensor(np.asarray(rows), dtype=dtype)


def _rows(x: ArrayLike | None, index: np.ndarray | slice, dtype: torch.dtype) -> torch.Tensor | None:
    """Rows ``index`` of ``x`` as a dense tensor (sparse rows are densified per batch)."""
    return None if x is None else as_tensor(x[index], dtype)


# --------------------------------------------------------------------------- the wire


def trainable_parameters(model: nn.Module) -> list[tuple[str, torch.nn.Parameter]]:
    """``(name, parameter)`` of every trainable parameter, in the wire order."""
    return [(name, p) for name, p in model.named_parameters() if p.requires_grad]


def parameter_spec(model: nn.Module) -> list[tuple[str, tuple[int, ...]]]:
    """Name and shape of every trainable parameter, in the order of the flat vector."""
    return [(name, tuple(p.shape)) for name, p in trainable_parameters(model)]


def n_parameters(model: nn.Module) -> int:
    """Length of the flat parameter / gradient vector."""
    return sum(p.numel() for _, p in trainable_parameters(model))


def flatten_parameters(model: nn.Module, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """All trainable parameters concatenated into one vector (float32 for the wire)."""
    with torch.no_grad():
        parts = [p.detach().reshape(-1).to(torch.float64) for _, p in trainable_parameters(model)]
        return torch.cat(parts).numpy().astype(dtype)


def unflatten_parameters(model: nn.Module, flat: np.ndarray) -> None:
    """Load a vector made by :func:`flatten_parameters` into ``model`` in place.

    Raises
    ------
    ValueError
        If the length is not :func:`n_parameters` or a value is not finite.
    """
    for (_, p), chunk in zip(trainable_parameters(model), _split(model, flat)):
        with torch.no_grad():
            p.copy_(chunk.reshape(p.shape).to(p.dtype))


def flatten_gradients(model: nn.Module, dtype: np.dtype | type = np.float32) -> np.ndarray:
    """The ``.grad`` of every trainable parameter, concatenated (zeros where None)."""
    parts = []
    for _, p in trainable_parameters(model):
        g = p.grad if p.grad is not None else torch.zeros_like(p)
        parts.append(g.detach().reshape(-1).to(torch.float64))
    return torch.cat(parts).numpy().astype(dtype)


def unflatten_gradients(model: nn.Module, flat: np.ndarray) -> None:
    """Set every trainable parameter's ``.grad`` from a flat vector (:func:`flatten_gradients`)."""
    for (_, p), chunk in zip(trainable_parameters(model), _split(model, flat)):
        p.grad = chunk.reshape(p.shape).to(p.dtype).clone()


def _split(model: nn.Module, flat: np.ndarray) -> list[torch.Tensor]:
    flat = np.asarray(flat)
    total = n_parameters(model)
    if flat.ndim != 1 or flat.size != total:
        raise ValueError(f"expected a flat vector of {total} values, got shape {flat.shape}")
    if not np.all(np.isfinite(flat)):
        raise ValueError("the flat vector has non-finite values")
    tensor = torch.from_numpy(flat.astype(np.float64, copy=False))
    sizes = [p.numel() for _, p in trainable_parameters(model)]
    return list(torch.split(tensor, sizes))


def weighted_average(gradients: Sequence[np.ndarray], batch_sizes: Sequence[int]) -> np.ndarray:
    """Eq. (2): ``G = sum_l n_l G_l / sum_l n_l`` (accumulated in float64, returned as the inputs' dtype)."""
    if len(gradients) != len(batch_sizes) or not gradients:
        raise ValueError("need one batch size per gradient, and at least one gradient")
    n = np.asarray(batch_sizes, dtype=np.float64)
    if np.any(n < 0) or n.sum() <= 0:
        raise ValueError("batch sizes must be non-negative with a positive sum")
    total = np.zeros(np.asarray(gradients[0]).shape, dtype=np.float64)
    for g, n_l in zip(gradients, n):
        total += n_l * np.asarray(g, dtype=np.float64)
    return (total / n.sum()).astype(np.asarray(gradients[0]).dtype)


def batch_gradient(model: NeuralTopicModel, bow_batch: ArrayLike, emb_batch: ArrayLike | None = None, *,
                   noise: ForwardNoise | None = None, generator: torch.Generator | None = None,
                   reduction: str = "mean", dtype: np.dtype | type = np.float32) -> tuple[float, np.ndarray]:
    """A party's step of Algorithm 1 (getClientGrad): the gradient on one mini-batch.

    The model is put in training mode (dropout on; with ``norm="batch"`` the running
    statistics of the party's copy are updated, which never reaches the server).

    Parameters
    ----------
    model : NeuralTopicModel
        At the current global weights ``W^(e)``.
    bow_batch : array or sparse matrix
        ``(n_l, V)`` word counts of the mini-batch.
    emb_batch : array, optional
        ``(n_l, E)`` document embeddings (combinedtm, zeroshottm).
    noise : ForwardNoise, optional
        Explicit noise (tests); else drawn from ``generator`` (or the global RNG).
    reduction : {"mean", "sum"}, default "mean"
        ``"mean"``: ``G_l`` is the gradient of the mean negative ELBO over the ``n_l``
        documents, the quantity eq. (2) weights by ``n_l``; ``"sum"``: of the sum (the
        library's per-batch loss; Adam is invariant to that constant scale up to its eps).
    dtype : numpy dtype, default float32
        Of the returned vector (float32 on the wire).

    Returns
    -------
    loss : float
        The mean (or summed) negative ELBO of the batch.
    flat_grad : np.ndarray
        ``G_l`` as one vector in :func:`parameter_spec` order.
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    model.train()
    model.zero_grad(set_to_none=True)
    bow = as_tensor(bow_batch, model.dtype)
    emb = as_tensor(emb_batch, model.dtype)
    per_doc = model(bow, emb, noise, generator)
    loss = per_doc.mean() if reduction == "mean" else per_doc.sum()
    loss.backward()
    flat = flatten_gradients(model, dtype)
    model.zero_grad(set_to_none=True)
    return float(loss.detach()), flat


def make_optimizer(model: nn.Module, solver: str = "adam", lr: float = 2e-3,
                   momentum: float | None = None) -> torch.optim.Optimizer:
    """The server's optimizer for eq. (3).

    Parameters
    ----------
    solver : {"adam", "sgd"}, default "adam"
        ``"adam"``: the library's Adam, ``betas=(momentum, 0.99)``, momentum default 0.99;
        ``"sgd"``: plain ``W <- W - lr G`` (eq. 3 as written) unless a momentum is given.
    lr : float, default 2e-3
    momentum : float, optional
    """
    params = [p for _, p in trainable_parameters(model)]
    if solver == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(0.99 if momentum is None else momentum, 0.99))
    if solver == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.0 if momentum is None else momentum)
    raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")


def apply_gradient(model: nn.Module, optimizer: torch.optim.Optimizer, flat_grad: np.ndarray) -> None:
    """The server's step, eq. (3): set the aggregated gradient ``G`` and step the optimizer.

    Raises
    ------
    ValueError
        If ``flat_grad`` has the wrong length or a non-finite value (nothing is changed).
    """
    unflatten_gradients(model, flat_grad)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def check_per_sample_gradients(model: NeuralTopicModel) -> None:
    """Refuse a model whose per-document gradients are not functions of one document.

    DP-SGD clips each document's gradient; that bounds a document's influence only if no
    document's loss depends on another's. ``norm="batch"`` breaks this, and Opacus does
    *not* catch it: its validator rejects only affine BatchNorm, while the library's
    BatchNorm (``affine=False``) has no parameters and passes, yielding "per-sample"
    gradients that change when another document of the batch changes.

    Raises
    ------
    ValueError
        If ``model.norm == "batch"``.
    """
    if model.norm == "batch":
        raise ValueError("norm='batch' mixes the documents of a mini-batch, so per-sample gradients (DP-SGD) "
                         "and the exact federated average are not defined; build the model with norm='layer'")


# --------------------------------------------------------------------------- outputs


def topic_word(model: NeuralTopicModel) -> np.ndarray:
    """The K x V word distribution the decoder produces for a one-topic document.

    For ``theta = e_k`` the decoder outputs ``softmax(norm_eval(beta_k))``: with
    ``norm="batch"`` that is BatchNorm with its running statistics,
    ``(beta_kw - m_w) / sqrt(v_w + eps)`` (not ``softmax(beta)``, which the library
    reports); with ``"layer"`` each row standardized over the words; with ``"none"``
    ``softmax(beta)``. Computed in float64.

    Returns
    -------
    np.ndarray
        ``(K, V)`` float64, rows summing to 1.
    """
    with torch.no_grad():
        beta = model.decoder.beta.detach().to(torch.float64)
        norm = model.decoder.norm
        if isinstance(norm, nn.BatchNorm1d):
            logits = F.batch_norm(beta, norm.running_mean.to(torch.float64), norm.running_var.to(torch.float64),
                                  training=False, eps=norm.eps)
        elif isinstance(norm, nn.LayerNorm):
            logits = F.layer_norm(beta, norm.normalized_shape, eps=norm.eps)
        else:
            logits = beta
        phi = F.softmax(logits, dim=1).numpy()
    return phi / phi.sum(axis=1, keepdims=True)


def infer_theta(model: NeuralTopicModel, bow: ArrayLike, emb: ArrayLike | None = None, *,
                batch_size: int = 1024) -> np.ndarray:
    """Document-topic proportions ``softmax(mu)`` from the posterior mean (eval mode).

    The library averages ``softmax(z)`` over 20 posterior samples instead; the posterior
    mean is deterministic. Eval mode: no dropout, BatchNorm with running statistics.

    Returns
    -------
    np.ndarray
        ``(D, K)`` float64, rows summing to 1.
    """
    was_training = model.training
    model.eval()
    out = []
    n = bow.shape[0]
    with torch.no_grad():
        for start in range(0, n, batch_size):
            index = slice(start, min(start + batch_size, n))
            mu, _ = model.encoder(_rows(bow, index, model.dtype), _rows(emb, index, model.dtype), None)
            out.append(F.softmax(mu.to(torch.float64), dim=1).numpy())
    model.train(was_training)
    theta = np.concatenate(out) if out else np.zeros((0, model.n_topics))
    return theta / theta.sum(axis=1, keepdims=True) if theta.size else theta


def elbo_perplexity(model: NeuralTopicModel, bow: ArrayLike, emb: ArrayLike | None = None, *,
                    n_samples: int = 20, seed: int = 0, batch_size: int = 512) -> dict[str, float]:
    """The model's own held-out perplexity bound from the ELBO.

    In eval mode (no dropout, BatchNorm with running statistics), for each document
    ``d`` with ``N_d = sum_w x_dw > 0`` tokens,
    ``ELBO_d = (1/S) sum_s sum_w x_dw log p(w | theta_ds) - KL(q(z|d) || p(z))`` with
    ``theta_ds = softmax(mu_d + sigma_d eps_s)``, ``eps_s ~ N(0, I)`` drawn from a
    generator seeded with ``seed`` (S = ``n_samples`` Monte-Carlo samples, so the value is
    deterministic), and

        perplexity = exp(-sum_d ELBO_d / sum_d N_d).

    Since ``ELBO_d <= log p(x_d)`` this bounds the model's true perplexity from above.
    Documents with no tokens are skipped. It is *not* the document-completion perplexity
    of :func:`flower_topics.metrics.perplexity` (which folds in theta on half a document
    against ``topic_word``): the encoder sees the whole document here.

    Returns
    -------
    dict
        ``"perplexity"``, ``"elbo"`` (sum over documents), ``"rec"`` and ``"kl"`` (sums,
        the reconstruction averaged over samples), ``"n_tokens"``, ``"n_docs"``.
    """
    if n_samples < 1:
        raise ValueError("n_samples must be >= 1")
    was_training = model.training
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    rec_sum = kl_sum = 0.0
    n_tokens = 0.0
    n_docs = 0
    n = bow.shape[0]
    with torch.no_grad():
        for start in range(0, n, batch_size):
            index = slice(start, min(start + batch_size, n))
            x = _rows(bow, index, model.dtype)
            e = _rows(emb, index, model.dtype)
            keep = x.sum(dim=1) > 0
            if not bool(keep.any()):
                continue
            x = x[keep]
            e = e[keep] if e is not None else None
            rec = torch.zeros(x.shape[0], dtype=torch.float64)
            kl = None
            for _ in range(n_samples):
                terms = model.terms(x, e, draw_noise(model, x.shape[0], generator, dropout=False))
                rec += terms["rec"].to(torch.float64)
                kl = terms["kl"].to(torch.float64)
            rec_sum += float(rec.sum()) / n_samples
            kl_sum += float(kl.sum())
            n_tokens += float(x.sum())
            n_docs += int(x.shape[0])
    model.train(was_training)
    if n_tokens == 0:
        raise ValueError("no document has tokens; perplexity is undefined")
    elbo = -(rec_sum + kl_sum)
    return {"perplexity": math.exp(-elbo / n_tokens), "elbo": elbo, "rec": rec_sum, "kl": kl_sum,
            "n_tokens": n_tokens, "n_docs": n_docs}


# --------------------------------------------------------------------------- centralized training


def fit(model: NeuralTopicModel, bow: ArrayLike, emb: ArrayLike | None = None, *, epochs: int = 100,
        batch_size: int = 64, lr: float = 2e-3, momentum: float = 0.99, solver: str = "adam",
        reduction: str = "sum", seed: int = 0,
        callback: Callable[[int, float], None] | None = None) -> list[float]:
    """Centralized training as the library does it (the reference for gFedNTM), on the model's device.

    Each epoch shuffles the documents (a numpy generator seeded with ``seed``), takes
    mini-batches of ``batch_size``, and steps the optimizer of :func:`make_optimizer` on
    the batch's summed (``reduction="sum"``, the library) or mean negative ELBO. With
    ``norm="batch"`` a trailing batch of one document is skipped (BatchNorm cannot
    standardize one row in training mode). Each batch is moved to the model's device (a GPU
    after ``model.to("cuda")``); the forward pass's noise is drawn on the CPU from the same
    generator either way.

    Parameters
    ----------
    callback : callable, optional
        Called after every epoch with ``(epoch, mean loss per document)``.

    Returns
    -------
    list of float
        Mean negative ELBO per document of every epoch (averaged over the batches, as the
        library reports it).
    """
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', got {reduction!r}")
    optimizer = make_optimizer(model, solver, lr, momentum)
    rng = np.random.default_rng(seed)
    generator = torch.Generator().manual_seed(int(rng.integers(2**62)))
    n = bow.shape[0]
    if sp.issparse(bow):
        bow = sp.csr_matrix(bow)
    history = []
    for epoch in range(epochs):
        model.train()
        order = rng.permutation(n)
        total, seen = 0.0, 0
        for start in range(0, n, batch_size):
            index = np.sort(order[start:start + batch_size])
            if index.size == 1 and model.norm == "batch":
                continue
            x = _rows(bow, index, model.dtype).to(model.device)
            e = _rows(emb, index, model.dtype)
            per_doc = model(x, None if e is None else e.to(model.device), None, generator)
            loss = per_doc.sum() if reduction == "sum" else per_doc.mean()
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += float(per_doc.detach().sum())
            seen += index.size
        history.append(total / max(seen, 1))
        if callback is not None:
            callback(epoch, history[-1])
    model.eval()
    return history
