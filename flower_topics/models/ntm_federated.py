"""What both halves of ``ntm`` (gFedNTM) share beyond :mod:`flower_topics.models.ntm`: the network of a
round's settings, one DP-SGD gradient, and its Renyi-DP accounting.

DP-SGD (Abadi et al. 2016) at a party, one step: each of the party's documents joins the
mini-batch independently with probability ``q = batch_size / D_l`` (Poisson sampling, the
sampling the RDP amplification bound of Mironov et al. 2019 assumes); every document's
gradient of its own negative ELBO is clipped to norm ``C`` (Opacus per-sample gradients,
exact for ``norm="layer"`` / ``"none"``, where a document's loss depends on that document
alone); the clipped gradients are summed, ``N(0, sigma^2 C^2 I)`` is added from the party's
secret generator, and the sum is divided by the *expected* batch size ``q D_l`` (Opacus'
convention: the divisor is public, the actual sample size is not released). The result
replaces ``G_l`` of eq. (2) (``sync="minibatch"``) or drives one local optimizer step
(``sync="local"``). Each step is one subsampled Gaussian mechanism on the party's
documents, composed in RDP by the party's ``"rdp"`` accountant (:mod:`flower_topics.privacy.accountants`).
"""

from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np
import torch

from flower_topics.models.ntm import ForwardNoise, NeuralTopicModel, as_tensor, n_parameters, trainable_parameters


def build_model(vocab_size: int, n_topics: int, kind: str, *, embedding_size: int = 0,
                hidden_sizes: Sequence[int] = (100, 100), norm: str = "layer", seed: int = 0) -> NeuralTopicModel:
    """The float32 network every party and the server of a run build (same architecture, same order)."""
    return NeuralTopicModel(vocab_size, n_topics, kind, embedding_size=embedding_size, hidden_sizes=hidden_sizes,
                            norm=norm, seed=seed).to(torch.float32)


def dp_gradient(model: NeuralTopicModel, bow: torch.Tensor, emb: torch.Tensor | None, noise: ForwardNoise, *,
                max_grad_norm: float, noise_multiplier: float, expected_batch: float,
                generator: torch.Generator) -> tuple[float, np.ndarray]:
    """One DP-SGD gradient: per-document clipping to ``C``, Gaussian noise ``N(0, sigma^2 C^2)``, divided by ``q D``.

    Parameters
    ----------
    model : NeuralTopicModel
        At the current weights; ``norm`` must not be ``"batch"``. Its ``.grad`` is left unset.
    bow, emb : torch.Tensor
        The Poisson-sampled mini-batch (possibly empty: the release is then noise only).
    noise : ForwardNoise
        The forward pass's randomness (dropout, reparameterization) for these rows.
    max_grad_norm, noise_multiplier : float
        ``C`` and ``sigma``.
    expected_batch : float
        ``q D_l``, the public divisor.
    generator : torch.Generator
        The party's secret generator (the Gaussian noise).

    Returns
    -------
    (float, np.ndarray)
        The batch's mean loss (0 for an empty batch; never released under DP) and the
        noisy float32 gradient in :func:`~flower_topics.models.ntm.parameter_spec` order.
    """
    from opacus import GradSampleModule
    from flower_topics.models.ntm import check_per_sample_gradients

    check_per_sample_gradients(model)
    n = int(bow.shape[0])
    total = torch.zeros(n_parameters(model), dtype=torch.float64)
    loss = 0.0
    if n:
        model.zero_grad(set_to_none=True)
        wrapped = GradSampleModule(model, batch_first=True, loss_reduction="sum")
        wrapped.train()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Full backward hook ... " of the functorch fallback
            per_doc = wrapped(bow, emb, noise)
            per_doc.sum().backward()
        per_sample = torch.cat([p.grad_sample.reshape(n, -1).to(torch.float64)
                                for _, p in trainable_parameters(model)], dim=1)
        norms = per_sample.norm(dim=1)
        factor = torch.clamp(max_grad_norm / (norms + 1e-12), max=1.0)
        total = (per_sample * factor[:, None]).sum(dim=0)
        loss = float(per_doc.detach().mean())
        for _, p in trainable_parameters(model):
            p.grad_sample = None
        model.zero_grad(set_to_none=True)
        wrapped._close()
    gaussian = torch.normal(0.0, noise_multiplier * max_grad_norm, size=total.shape, generator=generator,
                            dtype=torch.float64)
    return loss, ((total + gaussian) / expected_batch).numpy().astype(np.float32)


def batch_tensors(bow, emb: np.ndarray | None, index: np.ndarray) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Rows ``index`` of the party's bag of words (sparse) and embeddings as float32 tensors."""
    return as_tensor(bow[index], torch.float32), None if emb is None else as_tensor(emb[index], torch.float32)
