"""The (eps, delta)-LDP a word randomizer really gives, from its exact output distribution.

A randomizer ``A`` over words is (eps, delta)-LDP (FedLDA paper, Definition 1, in its
set form) when for every pair of inputs ``w, w'`` and every set ``S`` of outputs
``Pr[A(w) in S] <= e^eps Pr[A(w') in S] + delta``. The smallest such delta for one pair
is the hockey-stick divergence

    delta_eps(w, w') = sum_v max(0, Pr[A(w) = v] - e^eps Pr[A(w') = v]),

and the mechanism's realized delta is its maximum over all ordered pairs.
:func:`pairwise_delta` computes it by brute force from a matrix of output
distributions (``O(V^3)``, for tests and small domains).

RRP (FedLDA, Algorithm 3) has a structure that makes the worst case cost ``O(K V)``.
For a document with proportions theta write ``T = phi`` with each topic's deserted set
zeroed, ``q(v) = sum_k theta_k T[k, v]`` and ``r = sum_k theta_k m_k`` with ``m_k`` the
deserted mass of topic k. Then ``Pr[A(w) = v] = eta q(v) + c [v = w]`` with
``c = 1 - eta + eta r``, the same for every input word. For ``v`` other than ``w`` and
``w'`` both inputs give ``eta q(v)``; at ``v = w'`` the term is negative; only ``v = w``
counts, so

    delta_eps(w, w') = max(0, c - (e^eps - 1) eta q(w))        (whatever w' is),

and the pair's smallest eps at a given delta is
``log(1 + (c - delta) / (eta q(w)))`` when ``c > delta`` (infinite when ``q(w) = 0``).
Both are linear in theta for a fixed eps, so their supremum over every possible
document (theta anywhere in the simplex) is reached at a vertex, a document of one
topic k: ``c = 1 - eta + eta m_k`` and ``q(w) = T[k, w]``. A word that topic k deserts
(``T[k, w] = 0``) is output only by itself, with probability at least ``1 - eta``: no
finite eps covers it below that delta. :func:`rrp_realized` computes these figures for
the supremum over documents (what the server can state for every party without
seeing any theta) or for given documents.

The baselines need no such derivation: kRR, t-kRR with a uniform tail and HM are pure
eps-LDP for every pair (delta 0); the paper's t-kRR sends a tail word as itself, which
no other input produces, so a pair with a tail word has delta 1 (:func:`realized_ldp`;
``tests/test_word_randomizers_baselines.py`` checks all of them against brute force).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from flower_topics.privacy.word_randomizers import (HM, KRR, RRP, TailToUniformKRR, TruncatedKRR, WordRandomizer,
                                                   deserted_sets)


def hockey_stick(p: np.ndarray, q: np.ndarray, epsilon: float) -> float:
    """``sum_v max(0, p(v) - e^eps q(v))``: the set-level delta of two output distributions."""
    return float(np.maximum(0.0, np.asarray(p) - math.exp(epsilon) * np.asarray(q)).sum())


def pairwise_delta(distributions: np.ndarray, epsilon: float) -> np.ndarray:
    """Brute force: ``(V, V)`` matrix of ``delta_eps(w, w')`` from the rows ``Pr[A(w) = .]``.

    Parameters
    ----------
    distributions : np.ndarray
        ``(V_in, V_out)``: row w is the exact output distribution for input w.
    epsilon : float
        The eps at which delta is measured.
    """
    p = np.asarray(distributions, dtype=np.float64)
    return np.maximum(0.0, p[:, None, :] - math.exp(epsilon) * p[None, :, :]).sum(axis=2)


@dataclass(frozen=True)
class RealizedLDP:
    """What one perturbed word really gives.

    Parameters
    ----------
    epsilon : float
        The eps the mechanism was configured with.
    delta : float
        The realized delta at that eps: the worst case over input pairs (and documents).
    target_delta : float
        A delta at which eps is measured (e.g. the one the paper claims).
    epsilon_at_target : float
        The smallest eps for which every pair meets ``target_delta`` (inf if none).
    covered_words : float
        Share of input words ``w`` for which every pair ``(w, .)`` meets
        ``(epsilon, target_delta)``.
    """

    epsilon: float
    delta: float
    target_delta: float
    epsilon_at_target: float
    covered_words: float


def _rrp_terms(phi: np.ndarray, eta: float, deserted_mass: float, theta: np.ndarray | None
               ) -> tuple[np.ndarray, np.ndarray]:
    """``c`` per document (column) and ``eta q(w)`` per (document, word) for the documents considered.

    Without theta the documents are the K single-topic ones (the vertices of the simplex).
    """
    phi = np.asarray(phi, dtype=np.float64)
    truncated = np.where(deserted_sets(phi, deserted_mass), 0.0, phi)
    mass = phi.sum(axis=1) - truncated.sum(axis=1)
    if theta is None:
        return (1.0 - eta + eta * mass)[:, None], eta * truncated
    theta = np.atleast_2d(np.asarray(theta, dtype=np.float64))
    return (1.0 - eta + eta * (theta @ mass))[:, None], eta * (theta @ truncated)


def rrp_pair_deltas(phi: np.ndarray, eta: float, deserted_mass: float, epsilon: float,
                    theta: np.ndarray | None = None) -> np.ndarray:
    """``delta_eps(w, .)`` of RRP for every document considered and input word (see the module docstring).

    Parameters
    ----------
    phi : np.ndarray
        ``(K, V)`` topic-word distribution the mechanism draws from.
    eta : float
        Replacement probability.
    deserted_mass : float
        The mass delta of each topic's deserted set.
    epsilon : float
        The eps at which delta is measured.
    theta : np.ndarray, optional
        ``(D, K)`` documents' proportions; default: the K single-topic documents, whose
        maximum is the supremum over every document.

    Returns
    -------
    np.ndarray
        ``(D, V)`` (or ``(K, V)``): the pair delta of input word w in document d, the same
        for every other input word w'.
    """
    return _pair_deltas(*_rrp_terms(phi, eta, deserted_mass, theta), epsilon)


def rrp_pair_epsilons(phi: np.ndarray, eta: float, deserted_mass: float, target_delta: float,
                      theta: np.ndarray | None = None) -> np.ndarray:
    """The smallest eps at which each (document, input word) meets ``target_delta`` (inf where none)."""
    return _pair_epsilons(*_rrp_terms(phi, eta, deserted_mass, theta), target_delta)


def _pair_deltas(c: np.ndarray, eta_q: np.ndarray, epsilon: float) -> np.ndarray:
    return np.maximum(0.0, c - math.expm1(epsilon) * eta_q)


def _pair_epsilons(c: np.ndarray, eta_q: np.ndarray, target_delta: float) -> np.ndarray:
    excess = np.maximum(0.0, c - target_delta)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(excess > 0, np.log1p(excess / np.where(eta_q > 0, eta_q, 0.0)), 0.0)


def rrp_realized(phi: np.ndarray, eta: float, deserted_mass: float, epsilon: float, target_delta: float,
                 theta: np.ndarray | None = None) -> RealizedLDP:
    """RRP's realized guarantee per word on ``phi``: worst case over input pairs and documents.

    Without ``theta`` the worst case is over every possible document (the supremum, reached
    by single-topic documents); with ``theta`` over the given documents.
    """
    c, eta_q = _rrp_terms(phi, eta, deserted_mass, theta)
    deltas = _pair_deltas(c, eta_q, epsilon)
    return RealizedLDP(epsilon=epsilon, delta=float(deltas.max()), target_delta=target_delta,
                       epsilon_at_target=float(_pair_epsilons(c, eta_q, target_delta).max()),
                       covered_words=float((deltas.max(axis=0) <= target_delta + 1e-12).mean()))


def realized_ldp(randomizer: WordRandomizer, phi: np.ndarray, target_delta: float) -> RealizedLDP:
    """The realized per-word guarantee of any FedLDA randomizer on ``phi``, over every document.

    Parameters
    ----------
    randomizer : RRP, KRR, TruncatedKRR, TailToUniformKRR or HM
        The round's randomizer.
    phi : np.ndarray
        ``(K, V)`` topic-word distribution of the round (RRP draws from it; the baselines
        rank words by its marginal).
    target_delta : float
        The delta at which eps is measured (e.g. the one the paper claims).
    """
    eps = randomizer.epsilon
    if isinstance(randomizer, RRP):
        return rrp_realized(phi, randomizer.eta, randomizer.delta, eps, target_delta)
    if isinstance(randomizer, (KRR, TailToUniformKRR, HM)):
        return RealizedLDP(epsilon=eps, delta=0.0, target_delta=target_delta, epsilon_at_target=eps,
                           covered_words=1.0)
    if isinstance(randomizer, TruncatedKRR):
        inside = randomizer.domain.size / np.asarray(randomizer.prior).size
        tail = inside < 1.0
        return RealizedLDP(epsilon=eps, delta=1.0 if tail else 0.0, target_delta=target_delta,
                           epsilon_at_target=math.inf if tail and target_delta < 1.0 else eps,
                           covered_words=inside)
    raise TypeError(f"no realized guarantee for {type(randomizer).__name__}")
