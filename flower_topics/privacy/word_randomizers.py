"""Local randomizers for the word of an update tuple (FedLDA, Wang, Tong and Shi, AAAI 2020).

Each randomizer takes the words of a batch of tuples ``(w, k_old, k_new)`` and returns
perturbed words (the topics are not perturbed, as in the paper's Algorithm 3). All
are vectorized over the batch and draw from a :class:`numpy.random.Generator`. Each
also gives its exact output distribution for one input word, so that tests compare
sampled frequencies with it and check the LDP ratio bound.

- :class:`RRP`, Randomized Response with Priori (Algorithm 3, eta from Theorem 1).
- :class:`KRR`, k-ary randomized response over the whole vocabulary (Kairouz, Oh and
  Viswanath 2014), the paper's baseline.
- :class:`TruncatedKRR`, the paper's t-kRR baseline ("truncated kRR which truncates the
  vocabulary set with the same delta based on kRR", Section 6): kRR over the most
  frequent words carrying ``1 - delta`` of the mass; a word of the tail is sent as is
  (the failure event, prior mass ``delta``).
- :class:`TailToUniformKRR`, a pure eps-LDP variant of t-kRR: a tail word is first
  replaced by a uniform word of the truncated vocabulary.
- :class:`HM`, the hybrid mechanism of Wang et al. (ICDE 2019, "Collecting and Analyzing
  Multidimensional Data with Local Differential Privacy"), the paper's other baseline,
  applied to a word's rank by a public prior.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import numpy as np

from flower_topics.numeric.categorical import draw_categorical


def rrp_eta(epsilon: float, delta: float, gamma: float) -> float:
    """eta of Theorem 1: ``1 / (delta delta0 e^eps + 1)``, ``delta0 = delta - (delta^(-1/gamma) + 1)^(-gamma)``.

    ``gamma = inf`` gives the limit ``delta0 = delta``, i.e. ``eta = 1 / (delta^2 e^eps + 1)``,
    which is the eta the paper's experiments used (about 5% of words perturbed at eps 7.5
    with delta 0.1), while ``gamma = 1`` gives 0.378 at eps 7.5.
    """
    if epsilon <= 0 or not 0 < delta < 1 or gamma < 1:
        raise ValueError("need epsilon > 0, 0 < delta < 1 and gamma >= 1")
    delta0 = delta if math.isinf(gamma) else delta - (delta ** (-1.0 / gamma) + 1.0) ** (-gamma)
    return 1.0 / (delta * delta0 * math.exp(epsilon) + 1.0)


def truncated_domain(prior: np.ndarray, delta: float) -> np.ndarray:
    """Word ids of the truncated vocabulary ``T``, most frequent first.

    ``T`` is the shortest prefix of the words ranked by ``prior`` (largest first, ties to
    the lower id) whose mass is at least ``1 - delta`` of the total; the rest, the tail,
    carries at most ``delta``.
    """
    prior = np.asarray(prior, dtype=float)
    order = np.argsort(-prior, kind="stable")
    mass = np.cumsum(prior[order]) / prior.sum()
    return order[: int(np.searchsorted(mass, 1.0 - delta - 1e-12) + 1)]


def deserted_sets(phi: np.ndarray, delta: float) -> np.ndarray:
    """Boolean ``(K, V)`` mask of each topic's deserted set Phi^r_k (Section 5).

    Words are ranked by phi_k, largest first (ties to the lower column); the deserted
    set is the longest tail of that ranking whose mass is at most ``delta``.
    """
    order = np.argsort(-phi, axis=1, kind="stable")
    tail_mass = np.cumsum(np.take_along_axis(phi, order, axis=1)[:, ::-1], axis=1)[:, ::-1]
    mask = np.zeros(phi.shape, dtype=bool)
    np.put_along_axis(mask, order, tail_mass <= delta + 1e-12, axis=1)
    return mask


@dataclass(frozen=True)
class RRP:
    """Randomized Response with Priori (Algorithm 3).

    With probability ``1 - eta`` the word is kept. Otherwise a topic ``k'`` is drawn
    from the document's theta and a word ``w'`` from phi_k'; ``w'`` replaces the word
    unless it lies in the deserted set of ``k'`` (mass ``delta``).

    Theorem 1 states ``(eps, 2 delta)``-LDP per tuple for ``eta`` from :func:`rrp_eta`,
    assuming Zipf-distributed topic-word proportions. The bound cannot hold for an
    input word that every topic deserts (no other input can produce it), so it covers
    only words with enough prior mass; see :meth:`output_distribution`.

    Parameters
    ----------
    epsilon : float
        Budget per tuple.
    delta : float
        Mass of each topic's deserted set; the guarantee's delta is ``2 delta``.
    gamma : float
        The constant of Theorem 1 (>= 1; ``inf`` reproduces the paper's experiments).
    """

    epsilon: float
    delta: float
    gamma: float = 1.0

    @property
    def eta(self) -> float:
        """Probability of replacing a word (Theorem 1)."""
        return rrp_eta(self.epsilon, self.delta, self.gamma)

    @property
    def claimed_delta(self) -> float:
        """The delta of the paper's guarantee, ``2 delta``."""
        return 2.0 * self.delta

    def perturb(self, words: np.ndarray, docs: np.ndarray, theta: np.ndarray, phi: np.ndarray,
                rng: np.random.Generator) -> np.ndarray:
        """Perturb ``words`` (one per tuple).

        Parameters
        ----------
        words : np.ndarray
            The tuples' words.
        docs : np.ndarray
            Each tuple's document: its row of ``theta``.
        theta : np.ndarray
            ``(D, K)`` document-topic proportions.
        phi : np.ndarray
            ``(K, V)`` topic-word distribution.
        rng : numpy.random.Generator
            Randomness.
        """
        words = np.asarray(words, dtype=np.int64)
        out = words.copy()
        idx = np.flatnonzero(rng.random(words.size) < self.eta)
        if idx.size:
            topics = draw_categorical(np.cumsum(theta, axis=1), np.asarray(docs)[idx], rng)
            candidates = draw_categorical(np.cumsum(phi, axis=1), topics, rng)
            kept_out = deserted_sets(phi, self.delta)[topics, candidates]
            out[idx] = np.where(kept_out, words[idx], candidates)
        return out

    def output_distribution(self, word: int, theta: np.ndarray, phi: np.ndarray) -> np.ndarray:
        """Exact ``Pr[A(word) = v]`` for every ``v`` (theta: one document's distribution)."""
        truncated = np.where(deserted_sets(phi, self.delta), 0.0, phi)
        dist = self.eta * (theta @ truncated)
        dist[word] += (1.0 - self.eta) + self.eta * float(theta @ (phi.sum(axis=1) - truncated.sum(axis=1)))
        return dist


@dataclass(frozen=True)
class KRR:
    """k-ary randomized response over a domain of ``size`` words: eps-LDP.

    Keeps the word with probability ``e^eps / (e^eps + size - 1)``, otherwise reports
    one of the other ``size - 1`` words uniformly.
    """

    epsilon: float
    size: int

    @property
    def eta(self) -> float:
        """Probability of replacing a word."""
        return (self.size - 1) / (math.exp(self.epsilon) + self.size - 1)

    def perturb(self, words: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Perturb ``words`` (ids in ``[0, size)``)."""
        words = np.asarray(words, dtype=np.int64)
        if self.size == 1:
            return words.copy()  # a one-word domain: nothing to replace it with
        replace = rng.random(words.size) < self.eta
        other = rng.integers(0, self.size - 1, size=words.size)
        other += other >= words  # uniform over the domain without the true word
        return np.where(replace, other, words)

    def output_distribution(self, word: int) -> np.ndarray:
        """Exact ``Pr[A(word) = v]``."""
        dist = np.full(self.size, self.eta / (self.size - 1))
        dist[word] = 1.0 - self.eta
        return dist


def _positions(domain: np.ndarray, size: int) -> np.ndarray:
    """Position of each of ``size`` word ids in ``domain`` (-1 outside)."""
    position = np.full(size, -1, dtype=np.int64)
    position[domain] = np.arange(domain.size)
    return position


@dataclass(frozen=True)
class _KRROnTruncatedDomain:
    """kRR over the truncated vocabulary ``T`` (:func:`truncated_domain`): what both t-kRRs share."""

    epsilon: float
    delta: float
    prior: np.ndarray

    @cached_property
    def domain(self) -> np.ndarray:
        """Word ids of ``T``, most frequent first."""
        return truncated_domain(self.prior, self.delta)

    def _krr(self) -> KRR:
        return KRR(self.epsilon, int(self.domain.size))

    def _positions(self, words: np.ndarray | int) -> np.ndarray:
        """Position of each word in ``T`` (-1 outside)."""
        return _positions(self.domain, np.asarray(self.prior).size)[words]

    @property
    def eta(self) -> float:
        """Probability that a word of ``T`` is replaced."""
        return self._krr().eta


@dataclass(frozen=True)
class TruncatedKRR(_KRROnTruncatedDomain):
    """t-kRR, the paper's truncated kRR baseline (Section 6): eps-LDP on ``T`` only.

    The truncated vocabulary ``T`` (:func:`truncated_domain`) holds the most frequent
    words by the public word marginal ``prior`` (e.g. phi's), carrying ``1 - delta`` of
    its mass: "truncated kRR which truncates the vocabulary set with the same delta
    based on kRR". A word of ``T`` goes through kRR over ``T``: kept with probability
    ``e^eps / (e^eps + |T| - 1)``, else a uniform other word of ``T``. A word of the
    tail (prior mass at most ``delta``) is sent unperturbed: that is the failure event
    of probability ``delta`` under the prior, which is why "with a larger delta, i.e.
    a larger failure probability, the performance of t-kRR improves significantly"
    (a larger delta shrinks ``T``, so kRR keeps its words more often).

    Guarantee: for two input words of ``T`` the ratio bound holds with ``e^eps`` and no
    delta. For a tail word it does not hold at all: the tail word is output as itself
    with probability 1 and never by any other input, so the set-level delta between
    a tail word and any other word is 1. The ``delta`` is a prior probability of the
    failure event, not the delta of (eps, delta)-LDP for every pair of inputs;
    :class:`TailToUniformKRR` is the pure eps-LDP alternative.

    Parameters
    ----------
    epsilon : float
        Budget per word (of ``T``).
    delta : float
        Prior mass left out of ``T``.
    prior : np.ndarray
        ``(V,)`` public word marginal (need not be normalised).

    Its ``eta`` is the probability that a word of ``T`` is replaced (a tail word never
    is): a word drawn from the prior is replaced with probability ``eta * (1 - tail_mass)``.
    """

    @property
    def tail_mass(self) -> float:
        """Prior mass of the words outside ``T`` (at most ``delta``): the failure probability."""
        prior = np.asarray(self.prior, dtype=float)
        return float(1.0 - prior[self.domain].sum() / prior.sum())

    def perturb(self, words: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Perturb ``words``: kRR over ``T`` for words of ``T``, tail words unchanged."""
        words = np.asarray(words, dtype=np.int64)
        pos = self._positions(words)
        inside = pos >= 0
        out = words.copy()
        out[inside] = self.domain[self._krr().perturb(pos[inside], rng)]
        return out

    def output_distribution(self, word: int) -> np.ndarray:
        """Exact ``Pr[A(word) = v]``: kRR over ``T``, or a point mass on a tail word."""
        dist = np.zeros(np.asarray(self.prior).size)
        pos = int(self._positions(word))
        if pos < 0:
            dist[word] = 1.0
        else:
            dist[self.domain] = self._krr().output_distribution(pos)
        return dist


@dataclass(frozen=True)
class TailToUniformKRR(_KRROnTruncatedDomain):
    """kRR over the truncated vocabulary with tail words mapped into it: pure eps-LDP.

    A variant of the paper's t-kRR (:class:`TruncatedKRR`) with no failure event. The
    truncated vocabulary ``T`` (:func:`truncated_domain`) holds the most frequent words
    (by the marginal word distribution ``prior``) that carry ``1 - delta`` of its mass.
    A word outside ``T`` is first mapped to a uniform word of ``T``, then kRR over
    ``T`` runs; both steps keep eps-LDP (the second is eps-LDP on ``T``, the first is
    input-independent within the tail, and its output distribution is a mixture of
    those of ``T``'s words), so the guarantee is pure eps with a domain of ``|T|``
    words, for every pair of input words. Tail words are never reported.

    Parameters
    ----------
    epsilon : float
        Budget per word.
    delta : float
        Prior mass left out of ``T``.
    prior : np.ndarray
        ``(V,)`` public word marginal (need not be normalised).
    """

    def perturb(self, words: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Perturb ``words``."""
        domain = self.domain
        pos = self._positions(np.asarray(words, dtype=np.int64))
        outside = pos < 0
        pos[outside] = rng.integers(0, domain.size, size=int(outside.sum()))
        return domain[self._krr().perturb(pos, rng)]

    def output_distribution(self, word: int) -> np.ndarray:
        """Exact ``Pr[A(word) = v]``."""
        domain = self.domain
        dist = np.zeros(np.asarray(self.prior).size)
        pos = int(self._positions(word))
        if pos >= 0:
            dist[domain] = self._krr().output_distribution(pos)
        else:  # the average of kRR's rows: uniform over T
            dist[domain] = 1.0 / domain.size
        return dist


HM_EPSILON_STAR = 0.61
"""Below this budget HM uses Duchi et al.'s mechanism only (Wang et al. 2019, eps* ~ 0.61)."""


@dataclass(frozen=True)
class PiecewiseMechanism:
    """The Piecewise Mechanism (PM) of Wang et al. (ICDE 2019) on a number ``t`` in ``[-1, 1]``: eps-LDP.

    ``C = (e^(eps/2) + 1) / (e^(eps/2) - 1)``, ``l(t) = (C + 1)/2 t - (C - 1)/2``, ``r(t) = l(t) + C - 1``.
    The output ``y`` in ``[-C, C]`` has density ``p = (e^eps - e^(eps/2)) / (2 e^(eps/2) + 2)`` on
    ``[l(t), r(t)]`` and ``p / e^eps`` on the rest of ``[-C, C]``.

    Parameters
    ----------
    epsilon : float
        Budget (> 0).
    """

    epsilon: float

    @property
    def bound(self) -> float:
        """``C``: the outputs lie in ``[-C, C]``."""
        half = math.exp(self.epsilon / 2.0)
        return (half + 1.0) / (half - 1.0)

    def piece(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(l(t), r(t))``, the interval of the higher density for input ``t``."""
        c = self.bound
        left = (c + 1.0) / 2.0 * np.asarray(t, dtype=float) - (c - 1.0) / 2.0
        return left, left + c - 1.0

    def levels(self) -> tuple[float, float]:
        """The two density levels, ``(p, p / e^eps)``."""
        half = math.exp(self.epsilon / 2.0)
        high = (math.exp(self.epsilon) - half) / (2.0 * half + 2.0)
        return high, high / math.exp(self.epsilon)

    def density(self, t: np.ndarray, y: np.ndarray) -> np.ndarray:
        """The output density at ``y`` for input ``t`` (broadcast; 0 outside ``[-C, C]``)."""
        y = np.asarray(y, dtype=float)
        left, right = self.piece(t)
        high, low = self.levels()
        c = self.bound
        return np.where((y < -c) | (y > c), 0.0, np.where((y >= left) & (y <= right), high, low))

    def cdf(self, t: np.ndarray, y: np.ndarray) -> np.ndarray:
        """``Pr[PM(t) <= y]`` (broadcast): the integral of :meth:`density`."""
        left, right = self.piece(t)
        high, low = self.levels()
        c = self.bound
        return low * (np.clip(y, -c, c) + c) + (high - low) * (np.clip(y, left, right) - left)

    def sample(self, t: np.ndarray, centre: np.ndarray, u: np.ndarray) -> np.ndarray:
        """Outputs for inputs ``t`` from uniform draws ``centre`` (which piece) and ``u`` (where in it)."""
        c = self.bound
        half = math.exp(self.epsilon / 2.0)
        left, right = self.piece(t)
        # uniform on [l, r] w.p. e^(eps/2) / (e^(eps/2) + 1), else uniform on [-C, l) U (r, C]
        # (total length C + 1; the first l + C of it lie left of l).
        outer = (c + 1.0) * u
        return np.where(centre < half / (half + 1.0), left + (c - 1.0) * u,
                        np.where(outer < left + c, outer - c, right + (outer - (left + c))))


@dataclass(frozen=True)
class DuchiMechanism:
    """Duchi, Jordan and Wainwright's one-dimensional mechanism on ``t`` in ``[-1, 1]``: eps-LDP.

    ``y = +-C_D`` with ``C_D = (e^eps + 1) / (e^eps - 1)`` and ``Pr[y = C_D] = 1/2 + t (e^eps - 1) / (2 e^eps + 2)``.

    Parameters
    ----------
    epsilon : float
        Budget (> 0).
    """

    epsilon: float

    @property
    def bound(self) -> float:
        """``C_D``: the outputs are ``+-C_D``."""
        e = math.exp(self.epsilon)
        return (e + 1.0) / (e - 1.0)

    def plus_probability(self, t: np.ndarray) -> np.ndarray:
        """``Pr[y = C_D]`` for input ``t``."""
        e = math.exp(self.epsilon)
        return 0.5 + np.asarray(t, dtype=float) * (e - 1.0) / (2.0 * e + 2.0)

    def sample(self, t: np.ndarray, plus: np.ndarray) -> np.ndarray:
        """Outputs for inputs ``t`` from uniform draws ``plus``."""
        return np.where(plus < self.plus_probability(t), self.bound, -self.bound)


@dataclass(frozen=True)
class HM:
    """HM, the hybrid mechanism of Wang et al. (ICDE 2019), on a word's rank: eps-LDP.

    HM perturbs a number ``t`` in ``[-1, 1]``. With probability ``beta`` it runs the
    Piecewise Mechanism (PM), otherwise Duchi et al.'s one-dimensional mechanism
    (Duchi, Jordan and Wainwright 2014/2018), both at the full ``eps``::

        beta = 1 - e^(-eps/2)   if eps > eps* = 0.61,   else beta = 0.

    PM: ``C = (e^(eps/2) + 1) / (e^(eps/2) - 1)``, ``l(t) = (C + 1)/2 t - (C - 1)/2``,
    ``r(t) = l(t) + C - 1``. The output ``y`` in ``[-C, C]`` has the piecewise-uniform
    density ``p = (e^eps - e^(eps/2)) / (2 e^(eps/2) + 2)`` on ``[l(t), r(t)]`` (mass
    ``e^(eps/2) / (e^(eps/2) + 1)``) and ``p / e^eps`` on the rest of ``[-C, C]``; the
    ratio of densities for two inputs is at most ``e^eps``.

    Duchi: ``y = +-C_D`` with ``C_D = (e^eps + 1) / (e^eps - 1)`` and
    ``Pr[y = C_D] = 1/2 + t (e^eps - 1) / (2 e^eps + 2)``.

    Applying it to words (the FedLDA paper does not say how it did). Words are ranked
    by the public ``prior``, largest first (ties to the lower id); the word of rank
    ``r`` in ``[0, V - 1]`` is the number ``t = 2 r / (V - 1) - 1``. The output ``y`` is
    mapped back to the nearest rank, ``round((y + 1)(V - 1) / 2)`` (halves up) clipped to
    ``[0, V - 1]``, and then to that rank's word. This is post-processing of an
    eps-LDP output, so the word mechanism is eps-LDP (delta 0) for every pair of
    words. Consequences of this choice: PM reports a word of similar prior rank;
    ``C_D > 1``, so Duchi's branch always reports the most frequent (rank 0) or the
    rarest (rank ``V - 1``) word; and the clipping piles PM's mass beyond ``[-1, 1]``
    onto those two words too.

    Parameters
    ----------
    epsilon : float
        Budget per word (> 0).
    prior : np.ndarray
        ``(V,)`` public word marginal defining the ranks (V >= 2).
    """

    epsilon: float
    prior: np.ndarray

    def __post_init__(self) -> None:
        if not self.epsilon > 0 or np.asarray(self.prior).size < 2:
            raise ValueError("need epsilon > 0 and at least two words")

    @property
    def size(self) -> int:
        """V, the number of words."""
        return int(np.asarray(self.prior).size)

    @property
    def beta(self) -> float:
        """Probability of running PM (else Duchi's mechanism)."""
        return 1.0 - math.exp(-self.epsilon / 2.0) if self.epsilon > HM_EPSILON_STAR else 0.0

    @property
    def pm(self) -> PiecewiseMechanism:
        """Its Piecewise Mechanism, at the full ``eps``."""
        return PiecewiseMechanism(self.epsilon)

    @property
    def duchi(self) -> DuchiMechanism:
        """Its Duchi mechanism, at the full ``eps``."""
        return DuchiMechanism(self.epsilon)

    @property
    def order(self) -> np.ndarray:
        """Word ids by rank (most frequent first)."""
        return np.argsort(-np.asarray(self.prior, dtype=float), kind="stable")

    @property
    def ranks(self) -> np.ndarray:
        """Rank of each word id."""
        ranks = np.empty(self.size, dtype=np.int64)
        ranks[self.order] = np.arange(self.size)
        return ranks

    def rank_value(self, rank: np.ndarray) -> np.ndarray:
        """``t = 2 r / (V - 1) - 1``, the number HM perturbs for rank ``r``."""
        return 2.0 * np.asarray(rank, dtype=float) / (self.size - 1) - 1.0

    def _edges(self) -> np.ndarray:
        """``V + 1`` edges in ``y`` of the ranks' bins: ``-C``, the midpoints, ``C``."""
        v, c = self.size, self.pm.bound
        mids = (2.0 * np.arange(v - 1) + 1.0) / (v - 1) - 1.0
        return np.concatenate(([-c], mids, [c]))

    def to_rank(self, y: np.ndarray) -> np.ndarray:
        """Nearest rank of HM outputs ``y`` (halves up), clipped to ``[0, V - 1]``."""
        v = self.size
        return np.clip(np.floor((np.asarray(y) + 1.0) * (v - 1) / 2.0 + 0.5), 0, v - 1).astype(np.int64)

    def perturb_values(self, t: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """HM on numbers ``t`` in ``[-1, 1]``: outputs ``y`` in ``[-C, C]``."""
        t = np.asarray(t, dtype=float)
        use_pm, centre, u, plus = (rng.random(t.size) for _ in range(4))
        return np.where(use_pm < self.beta, self.pm.sample(t, centre, u), self.duchi.sample(t, plus))

    def perturb(self, words: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Perturb ``words``: HM on their ranks, mapped back to the nearest rank's word."""
        t = self.rank_value(self.ranks[np.asarray(words, dtype=np.int64)])
        return self.order[self.to_rank(self.perturb_values(t, rng))]

    def rank_distribution(self, t: float) -> np.ndarray:
        """Exact distribution of the output rank for input ``t``: PM integrated over each bin plus Duchi's atoms."""
        beta = self.beta
        dist = beta * np.diff(self.pm.cdf(t, self._edges()))
        plus = float(self.duchi.plus_probability(t))
        dist[0] += (1.0 - beta) * (1.0 - plus)   # -C_D < -1: rank 0
        dist[-1] += (1.0 - beta) * plus          # +C_D > 1: rank V - 1
        return dist

    def output_distribution(self, word: int) -> np.ndarray:
        """Exact ``Pr[A(word) = v]``."""
        dist = np.empty(self.size)
        dist[self.order] = self.rank_distribution(float(self.rank_value(self.ranks[word])))
        return dist

    def keep_probabilities(self) -> np.ndarray:
        """``Pr[A(w) = w]`` for every word ``w`` (only each rank's own bin, O(V))."""
        v, beta = self.size, self.beta
        rank = np.arange(v)
        t, edges = self.rank_value(rank), self._edges()
        keep = beta * (self.pm.cdf(t, edges[1:]) - self.pm.cdf(t, edges[:-1]))
        plus = self.duchi.plus_probability(t)
        keep[0] += (1.0 - beta) * (1.0 - plus[0])
        keep[-1] += (1.0 - beta) * plus[-1]
        out = np.empty(v)
        out[self.order] = keep
        return out

    @property
    def eta(self) -> float:
        """Probability that a word drawn from ``prior`` is reported as another word.

        HM has no single replacement probability (it depends on the word's rank); this
        is its prior-weighted average, ``sum_w prior(w) (1 - Pr[A(w) = w])``.
        """
        prior = np.asarray(self.prior, dtype=float)
        return float(prior @ (1.0 - self.keep_probabilities()) / prior.sum())


#: The word randomizers FedLDA offers, by run-config name.
MECHANISMS = ("rrp", "krr", "tkrr", "tkrr-uniform-tail", "hm", "none")
WordRandomizer = RRP | KRR | TruncatedKRR | TailToUniformKRR | HM


class RandomizerSettings(Protocol):
    """What a round's randomizer is made of (``FedLDASettings`` of :mod:`flower_topics.wire.fedlda`)."""

    mechanism: str
    epsilon: float
    delta: float
    gamma: float


def round_randomizer(settings: RandomizerSettings, phi: np.ndarray) -> WordRandomizer | None:
    """The word randomizer of a round with ``settings`` on ``phi`` (None without a mechanism), the same on every
    party and on the server (:func:`word_randomizer`)."""
    return word_randomizer(settings.mechanism, epsilon=settings.epsilon, delta=settings.delta, gamma=settings.gamma,
                           phi=phi)


def word_randomizer(mechanism: str, *, epsilon: float, delta: float, gamma: float, phi: np.ndarray
                    ) -> WordRandomizer | None:
    """The randomizer called ``mechanism`` for a round on ``phi`` (None for ``"none"``).

    The baselines that need a public word ranking (t-kRR, its uniform-tail variant, HM)
    take phi's word marginal averaged over topics: every party and the server hold phi.
    """
    if mechanism == "rrp":
        return RRP(epsilon, delta, gamma)
    if mechanism == "krr":
        return KRR(epsilon, phi.shape[1])
    prior = np.asarray(phi, dtype=np.float64).mean(axis=0)
    if mechanism == "tkrr":
        return TruncatedKRR(epsilon, delta, prior)
    if mechanism == "tkrr-uniform-tail":
        return TailToUniformKRR(epsilon, delta, prior)
    if mechanism == "hm":
        return HM(epsilon, prior)
    if mechanism == "none":
        return None
    raise ValueError(f"mechanism must be one of {', '.join(MECHANISMS)}")
