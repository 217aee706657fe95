"""A public head start for DP-SVI (:func:`public_start`: an LDA of public text) and its settings, from the public
corpus and the run's public settings alone.

A public start is LDA topics of public text of the parties' domain. Two numbers decide how much
of it the final topics keep: its pseudo-counts (its mass in ``lambda``) and how fast the steps
``rho_t = (tau0 + t)^-kappa`` forget it. The rule here sets both without any private data:

1. **Weight = the public corpus' own evidence, in the units of a private round.** Each public
   document's expected counts against the public topics, clipped to ``C`` as a party clips its
   own documents, summed (:func:`public_evidence`). A private round estimates the same sum over
   the parties' documents (``S / q``), so start and rounds are in the same units.
2. **tau0 = the delay at which the start keeps half its weight after the run's rounds**
   (:func:`half_weight_delay`). After ``T`` steps ``lambda = w_0 start + (1 - w_0) average of the
   rounds``, with ``w_0 = prod_{t<T} (1 - rho_t)``. With the start equal to the public evidence
   ``P`` and the rounds estimating the private evidence ``D``, ``w_0 = 1/2`` gives
   ``lambda = eta + (P + D) / 2``: topics proportional to ``P + D``, what an LDA posterior over
   both corpora would hold, whatever the (unknown) size of the private corpus. The steps are
   then nearly equal (``rho_t`` varies little for large ``tau0``), so every round's noise is
   averaged with about the same weight.

The rule counts the private rounds as if they were free of noise: at a small epsilon, where the
rounds carry mostly noise, a heavier start would do better; it never looks at the private
documents to find that out.
"""

from __future__ import annotations

import math

from typing import Sequence

import numpy as np
import scipy.sparse as sp

from flower_topics.data.corpus import Corpus
from flower_topics.data.public_corpus import check_public_size, over_vocabulary
from flower_topics.models import svi
from flower_topics.models.lda import fit_lda
from flower_topics.models.seed_words import SeedPrior
from flower_topics.models.svi_seeds import seeded_start

#: The share of the start's weight left after the run's rounds (:func:`half_weight_delay`).
KEPT_SHARE = 0.5


def start_weight_left(tau0: float, rounds: int, kappa: float) -> float:
    """``prod_{t<rounds} (1 - (tau0 + t)^-kappa)``: the share of the initial ``lambda`` left after ``rounds`` steps
    (0 once a step has ``rho >= 1``)."""
    rho = (tau0 + np.arange(rounds, dtype=np.float64)) ** -kappa
    return 0.0 if np.any(rho >= 1.0) else float(np.exp(np.sum(np.log1p(-rho))))


def half_weight_delay(rounds: int, kappa: float, kept: float = KEPT_SHARE) -> float:
    """The ``tau0`` at which the start keeps ``kept`` of its weight after ``rounds`` steps of
    ``rho_t = (tau0 + t)^-kappa`` (bisection on ``log tau0``; the share left grows with ``tau0``).

    Parameters
    ----------
    rounds : int
        The run's rounds (``num-rounds``), >= 1.
    kappa : float
        The forgetting rate, in (0, 1].
    kept : float (default: 0.5)
        The share of the start's weight left after the rounds, in (0, 1).

    Returns
    -------
    float
        ``tau0 >= 1`` with :func:`start_weight_left` ``(tau0, rounds, kappa)`` equal to ``kept`` (relative error
        below 1e-9).
    """
    if rounds < 1 or not 0 < kappa <= 1 or not 0 < kept < 1:
        raise ValueError("need rounds >= 1, 0 < kappa <= 1 and 0 < kept < 1")
    low, high = 0.0, math.log(1e15)  # log tau0: tau0 = 1 keeps nothing; 1e15 keeps all but ~rounds x 1e-10
    for _ in range(200):
        middle = (low + high) / 2
        if start_weight_left(math.exp(middle), rounds, kappa) < kept:
            low = middle
        else:
            high = middle
        if high - low < 1e-12:
            break
    return math.exp(high)


def public_evidence(topic_word: np.ndarray, counts: sp.csr_matrix, *, alpha: float, clip: float,
                    e_step_iterations: int = 50) -> np.ndarray:
    """The public documents' clipped expected counts against their own topics: a start in a private round's units.

    The E-step of :func:`~flower_topics.models.svi.e_step` (as a party runs it, without noise) on
    every public document against ``lambda`` = the public topics scaled to the corpus' token
    count a topic, each document's ``K x V`` statistic clipped to Frobenius norm ``clip``, summed.

    Parameters
    ----------
    topic_word : numpy.ndarray
        ``(K, V)`` topic-word distributions of an LDA of the public corpus.
    counts : scipy.sparse.csr_matrix
        ``D x V`` counts of the public documents over the agreed vocabulary.
    alpha : float
        The run's document-topic prior.
    clip : float
        The run's clip norm ``C``.
    e_step_iterations : int (default: 50)
        Most gamma iterations of the E-step.

    Returns
    -------
    numpy.ndarray
        ``(K, V)`` float64, non-negative: the public corpus' evidence.
    """
    n_topics = topic_word.shape[0]
    lam = svi.distribution_lambda(topic_word, mass=max(float(counts.sum()) / n_topics, 1.0))
    return svi.e_step(lam, counts, alpha=alpha, clip=clip, max_iter=e_step_iterations).statistic


#: Gibbs sweeps of the public start's LDA (:func:`public_start`).
PUBLIC_SWEEPS = 200


def public_start(corpus: Corpus, vocabulary: Sequence[str], n_topics: int, *, alpha: float, eta: float, seed: int,
                 source: str = "dplda.public-corpus", sweeps: int = PUBLIC_SWEEPS,
                 mass: float | None = svi.START_MASS, clip: float = 2.0, e_step_iterations: int = 50,
                 seeds: SeedPrior | None = None) -> np.ndarray:
    """A public initial ``lambda``: non-private collapsed Gibbs LDA of public text over the agreed vocabulary.

    The corpus' words outside ``vocabulary`` are dropped (and documents left empty); ``sweeps``
    sweeps of :func:`~flower_topics.models.lda.fit_lda` from ``seed`` (the run's public seed)
    give the topic-word distributions, scaled by :func:`~flower_topics.models.svi.distribution_lambda`
    to ``mass`` pseudo-counts a topic, or with ``mass=None`` turned into the public corpus' evidence,
    ``eta +`` :func:`public_evidence` (its documents' expected counts,
    clipped to ``clip`` as a party's). No party's document enters it: it costs no privacy. With ``seeds`` the
    LDA's prior is :meth:`~flower_topics.models.seed_words.SeedPrior.matrix` of ``eta`` (the seeded topics come
    first, as in ``lda``), and that matrix replaces ``eta`` in the evidence (or, with ``mass``, its seed weight is
    added: :func:`~flower_topics.models.svi_seeds.seeded_start` without reordering).

    Parameters
    ----------
    corpus : Corpus
        The public text, over its own words.
    vocabulary : sequence of str
        The agreed vocabulary (V words, in column order).
    n_topics : int
        K.
    alpha, eta : float
        The LDA's document-topic and topic-word priors.
    seed : int
        The run's public seed.
    source : str
        What the refusals call the corpus.
    sweeps : int
        Gibbs sweeps.
    mass : float or None
        Pseudo-counts per topic (``dplda.public-weight``); None: the public corpus' evidence.
    clip : float
        The run's clip norm ``C`` (the evidence's clipping).
    e_step_iterations : int
        Most gamma iterations of the evidence's E-step.
    seeds : SeedPrior, optional
        Seed words (guided topics) over ``vocabulary``.

    Returns
    -------
    numpy.ndarray
        ``(K, V)`` float64 initial ``lambda``.

    Raises
    ------
    UserInputError
        When the corpus shares no word with the vocabulary, or holds over it fewer than ``K`` documents or
        fewer than :data:`~flower_topics.data.public_corpus.PUBLIC_TOKENS_PER_TOPIC` x ``K`` tokens (one line).
    """
    public = over_vocabulary(corpus, vocabulary)
    check_public_size(public, n_topics, source=source, vocabulary_size=len(vocabulary))
    topic_word = fit_lda(public, n_topics, alpha=alpha, beta=eta, n_iter=sweeps, seed=seed, seeds=seeds)
    if mass is not None:
        start = svi.distribution_lambda(topic_word, mass=mass)
        return start if seeds is None else seeded_start(start, seeds, reorder=False)
    prior = eta if seeds is None else seeds.matrix(eta)
    return prior + public_evidence(topic_word, svi.document_counts(public), alpha=alpha, clip=clip,
                                            e_step_iterations=e_step_iterations)
