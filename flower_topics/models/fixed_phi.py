"""Topic sampling conditioned on a fixed topic-word matrix phi (FedLDA's local sampling).

In FedLDA (Wang, Tong and Shi 2020, Section 3 and Algorithm 1) a user samples new
topics for its words from the current global phi^(t) and its own theta, with the
document-topic proportions collapsed::

    p(z_ij = k | .) ∝ (m_ik^(-ij) + alpha) phi_k,w

Two samplers with this target (:data:`SAMPLERS`, chosen by
:meth:`FixedPhiSampler.sweep`'s ``method``), both compiled with numba and driven by
uniforms drawn from a :class:`numpy.random.Generator`:

- ``"gibbs"``: exact Gibbs draw from the conditional, O(K) per token.
- ``"mh"``: Metropolis-Hastings with a word proposal ``q_w(k) ∝ phi_k,w``
  drawn from per-word alias tables and a document proposal ``q_d(k) ∝ m_ik + alpha``
  drawn from the document's own assignments (Li et al. 2014, AliasLDA; Yuan et al.
  2015, LightLDA), alternated, O(1) per token.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from flower_topics.data.corpus import Corpus
from flower_topics.models.samplers import SAMPLERS

__all__ = ["SAMPLERS", "FixedPhiSampler", "build_alias_tables"]


@njit(cache=True)
def build_alias_tables(weights):  # pragma: no cover - numba
    """Walker/Vose alias tables of every row of ``weights`` (V x K, non-negative, rows not all zero).

    Returns ``(prob, alias)``: draw ``k = floor(u1 K)``, keep it if ``u2 < prob[w, k]``,
    else take ``alias[w, k]``.
    """
    n_rows, n_cols = weights.shape
    prob = np.ones((n_rows, n_cols))
    alias = np.empty((n_rows, n_cols), dtype=np.int32)
    scaled = np.empty(n_cols)
    small = np.empty(n_cols, dtype=np.int64)
    large = np.empty(n_cols, dtype=np.int64)
    for w in range(n_rows):
        total = 0.0
        for k in range(n_cols):
            total += weights[w, k]
            alias[w, k] = k
        n_small = 0
        n_large = 0
        for k in range(n_cols):
            scaled[k] = weights[w, k] * n_cols / total
            if scaled[k] < 1.0:
                small[n_small] = k
                n_small += 1
            else:
                large[n_large] = k
                n_large += 1
        while n_small > 0 and n_large > 0:
            n_small -= 1
            s = small[n_small]
            n_large -= 1
            g = large[n_large]
            prob[w, s] = scaled[s]
            alias[w, s] = g
            scaled[g] -= 1.0 - scaled[s]
            if scaled[g] < 1.0:
                small[n_small] = g
                n_small += 1
            else:
                large[n_large] = g
                n_large += 1
    return prob, alias


@njit(cache=True, nogil=True)
def _gibbs_kernel(tokens, doc_ids, z, dk, phi_wk, uniforms):  # pragma: no cover - numba
    n_topics = phi_wk.shape[1]
    p = np.empty(n_topics)
    for i in range(tokens.shape[0]):
        w = tokens[i]
        d = doc_ids[i]
        dk[d, z[i]] -= 1.0
        total = 0.0
        for k in range(n_topics):
            p[k] = dk[d, k] * phi_wk[w, k]
            total += p[k]
        remaining = uniforms[i] * total
        k = 0
        while k < n_topics - 1 and remaining >= p[k]:
            remaining -= p[k]
            k += 1
        z[i] = k
        dk[d, k] += 1.0


@njit(cache=True, nogil=True)
def _mh_kernel(tokens, doc_ids, doc_ptr, z, dk, phi_wk, prob, alias, alpha, uniforms):  # pragma: no cover
    """Per token: one word-proposal step, then one document-proposal step (6 uniforms)."""
    n_topics = phi_wk.shape[1]
    k_alpha = n_topics * alpha
    for i in range(tokens.shape[0]):
        w = tokens[i]
        d = doc_ids[i]
        s = z[i]
        dk[d, s] -= 1.0  # dk now holds m_dk^(-i) + alpha
        # word proposal t ~ phi_t,w: accept with (m_dt + alpha) / (m_ds + alpha)
        t = int(uniforms[i, 0] * n_topics)
        if uniforms[i, 1] >= prob[w, t]:
            t = alias[w, t]
        if t != s and uniforms[i, 2] * dk[d, s] < dk[d, t]:
            s = t
        # document proposal t ~ m_dt (current token included) + alpha: a random token's topic, or uniform
        length = doc_ptr[d + 1] - doc_ptr[d]
        pick = uniforms[i, 3] * (length + k_alpha)
        if pick < length:
            t = z[doc_ptr[d] + int(pick)]
            if doc_ptr[d] + int(pick) == i:
                t = s  # the current token's own (possibly just moved) topic
        else:
            t = int(uniforms[i, 4] * n_topics)
        if t != s and uniforms[i, 5] * phi_wk[w, s] < phi_wk[w, t]:
            # q(t | s) ∝ m_dt^(-i) + [t = s] + alpha counts the token at its current topic, so the
            # reverse move's q(s | t) ∝ m_ds^(-i) + alpha and pi(t) q(s|t) / (pi(s) q(t|s)) = phi_tw / phi_sw
            s = t
        z[i] = s
        dk[d, s] += 1.0


class FixedPhiSampler:
    """Topic assignments of one corpus, resampled against a fixed phi each round.

    Parameters
    ----------
    corpus : Corpus
        The documents (one client's).
    n_topics : int
        Number of topics K.
    alpha : float
        Symmetric document-topic prior.
    seed : int or numpy.random.Generator
        Source of all randomness.
    z : numpy.ndarray, optional
        Starting topics; drawn uniformly when omitted.
    """

    def __init__(self, corpus: Corpus, n_topics: int, alpha: float, seed: int | np.random.Generator,
                 z: np.ndarray | None = None) -> None:
        if n_topics < 1 or not alpha > 0:
            raise ValueError("n_topics must be >= 1 and alpha > 0")
        self.corpus = corpus
        self.alpha = float(alpha)
        self.n_topics = int(n_topics)
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        if z is None:
            z = self.rng.integers(0, n_topics, size=corpus.n_tokens, dtype=np.int32)
        self.z = np.ascontiguousarray(z, dtype=np.int32)
        if self.z.shape != (corpus.n_tokens,) or (self.z.size and (self.z.min() < 0 or self.z.max() >= n_topics)):
            raise ValueError(f"z must hold one topic in [0, {n_topics}) per token")
        self._doc_ids = corpus.doc_ids

    def doc_topic_counts(self) -> np.ndarray:
        """``(D, K)`` int32 counts m_dk of the current assignments."""
        counts = np.zeros((self.corpus.n_docs, self.n_topics), dtype=np.int32)
        np.add.at(counts, (self._doc_ids, self.z), 1)
        return counts

    def theta(self) -> np.ndarray:
        """``(D, K)`` document-topic proportions (m_dk + alpha) / (n_d + K alpha)."""
        m = self.doc_topic_counts() + self.alpha
        return m / m.sum(axis=1, keepdims=True)

    def sweep(self, phi: np.ndarray, method: str = "gibbs", n_sweeps: int = 1) -> None:
        """Resample every token's topic against ``phi`` (``(K, V)``, rows distributions).

        Parameters
        ----------
        phi : numpy.ndarray
            The fixed topic-word matrix; entries must be positive (smoothed).
        method : {"gibbs", "mh"}
            Exact Gibbs (O(K) per token) or alias Metropolis-Hastings (O(1)).
        n_sweeps : int
            Number of passes.
        """
        if phi.shape != (self.n_topics, self.corpus.n_words):
            raise ValueError(f"phi must have shape {(self.n_topics, self.corpus.n_words)}, got {phi.shape}")
        if not np.all(phi > 0):
            raise ValueError("phi must be strictly positive (smooth it with beta)")
        if method not in SAMPLERS:
            raise ValueError(f"method must be one of {', '.join(SAMPLERS)}")
        phi_wk = np.ascontiguousarray(phi.T, dtype=np.float64)
        dk = self.doc_topic_counts() + self.alpha
        if method == "mh":
            prob, alias = build_alias_tables(phi_wk)
        for _ in range(n_sweeps):
            if method == "gibbs":
                _gibbs_kernel(self.corpus.tokens, self._doc_ids, self.z, dk, phi_wk,
                              self.rng.random(self.corpus.n_tokens))
            else:
                _mh_kernel(self.corpus.tokens, self._doc_ids, self.corpus.doc_ptr, self.z, dk, phi_wk, prob,
                           alias, self.alpha, self.rng.random((self.corpus.n_tokens, 6)))
