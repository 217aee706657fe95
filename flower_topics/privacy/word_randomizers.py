"""Local randomizers for the word of an update tuple (FedLDA, Wang, Tong and Shi, AAAI 2020).

Each randomizer takes the words of a batch of tuples ``(w, k_old, k_new)`` and returns
perturbed words (the topics are not perturbed, as in the paper's Algorithm 3). All
are vectorized over the batch and draw from a :class:`numpy.random.Generator`. Each
also gives its exact output distribution for one input word, so that tests compare
sampled frequencies with it and check the LDP ratio bound.

- :class:`RRP`, Randomized Response with Priori (Algorithm 3, eta from Theorem 1).
- :class:`KRR`, k-ary randomized response over the whole vocabulary (Kairouz, Oh and
  Viswanath 2014), the paper's baseline.
- :class:`TruncatedKRR`, kRR over the truncated vocabulary (the most frequent words
  carrying ``1 - delta`` of the mass), the paper's t-kRR baseline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from flower_topics.categorical import draw_categorical


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
        replace = rng.random(words.size) < self.eta
        other = rng.integers(0, self.size - 1, size=words.size)
        other += other >= words  # uniform over the domain without the true word
        return np.where(replace, other, words)

    def output_distribution(self, word: int) -> np.ndarray:
        """Exact ``Pr[A(word) = v]``."""
        dist = np.full(self.size, self.eta / (self.size - 1))
        dist[word] = 1.0 - self.eta
        return dist


@dataclass(frozen=True)
class TruncatedKRR:
    """t-kRR: kRR over the truncated vocabulary, eps-LDP.

    The truncated vocabulary ``T`` holds the most frequent words (by the marginal word
    distribution ``prior``) that carry ``1 - delta`` of its mass. A word outside ``T``
    is first mapped to a uniform word of ``T``, then kRR over ``T`` runs; both steps
    keep eps-LDP (the second is eps-LDP on ``T``, the first is input-independent
    within the tail), so the guarantee is pure eps with a domain of ``|T|`` words.
    """

    epsilon: float
    delta: float
    prior: np.ndarray

    @property
    def domain(self) -> np.ndarray:
        """Word ids of ``T``, most frequent first."""
        order = np.argsort(-self.prior, kind="stable")
        mass = np.cumsum(self.prior[order]) / self.prior.sum()
        return order[: int(np.searchsorted(mass, 1.0 - self.delta - 1e-12) + 1)]

    def _krr(self) -> KRR:
        return KRR(self.epsilon, int(self.domain.size))

    @property
    def eta(self) -> float:
        """Probability that a word of ``T`` is replaced."""
        return self._krr().eta

    def perturb(self, words: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Perturb ``words``."""
        domain = self.domain
        position = np.full(self.prior.size, -1, dtype=np.int64)
        position[domain] = np.arange(domain.size)
        pos = position[np.asarray(words, dtype=np.int64)]
        outside = pos < 0
        pos[outside] = rng.integers(0, domain.size, size=int(outside.sum()))
        return domain[self._krr().perturb(pos, rng)]

    def output_distribution(self, word: int) -> np.ndarray:
        """Exact ``Pr[A(word) = v]``."""
        domain, krr = self.domain, self._krr()
        position = {int(w): i for i, w in enumerate(domain)}
        if word in position:
            on_domain = krr.output_distribution(position[word])
        else:
            on_domain = np.mean([krr.output_distribution(i) for i in range(domain.size)], axis=0)
        dist = np.zeros(self.prior.size)
        dist[domain] = on_domain
        return dist
