"""FTM party computation: private sufficient statistics, private Metropolis-Hastings, topic-wise normalization.

Federated Topic Modeling (Jiang, Song, Tong, Wu, Zhao, Xu and Yang, CIKM 2019), Section 3.1
and Algorithm 1. Pure math, no Flower.

Private sufficient statistics (Section 3.1.1, eq. 8-10)
--------------------------------------------------------
The sampler touches the corpus only through each token's one-hot count vector
``n_di`` (length V, eq. 8). Each is privatized *once* (eq. 9-10) and then thresholded
(Section 3.1.2, strategy 2)::

    n^_diw' = n_diw' + Y_w',   Y_w' ~ Laplace(1/eps)   for all V words w',
    n^_diw' := 0               where n^_diw' <= tau.

:func:`privatize_tokens` draws this *exactly* without materializing V-length vectors:

- the token's own word: ``1 + Laplace(1/eps)``, kept if ``> tau``;
- the other ``V - 1`` words are i.i.d. ``Laplace(1/eps)``, each survives with
  ``p = P(Y > tau) = exp(-tau eps) / 2`` (``tau >= 0``), so the number of survivors is
  ``Binomial(V - 1, p)``; given that number, their positions are a uniform subset of the
  other words (exchangeability; drawn by Floyd's algorithm) and their values are i.i.d.
  ``tau + Exponential(1/eps)`` (the Laplace tail beyond ``tau >= 0`` is exponential and
  memoryless).

The result, :class:`NoisyStatistics`, is a CSR matrix over tokens (row ``i`` = token ``i``
of the corpus, in ``Corpus.tokens`` order): word ids and positive values. Its expected
number of entries per token is ``(V - 1) exp(-tau eps) / 2 + P(1 + Y > tau)``, the paper's
``O(V / (2 e^{tau eps}))`` cost per token (Section 3.1.2). :func:`privatize_tokens_dense`
is the naive draw (N x V), kept for tests.

Privacy. Each count entry goes through the Laplace mechanism with sensitivity 1, which is
eps-DP under the paper's include/exclude adjacency of one entry (Section 3.1.1); thresholding
and everything downstream (the sampler, the reply) is post-processing. Measured per token,
changing a token's word moves two entries (one 1 -> 0, one 0 -> 1), i.e. 2 eps; and the number
of vectors per document (each document's length) is not randomized. The statistics are drawn
once and reused in every round (Algorithm 1, first-iteration branch), so rounds do not compose.

**Randomness.** Every function that draws takes a :class:`numpy.random.Generator` that the
*caller* provides. For the privacy mechanism it must be seeded from OS entropy or a node-local
secret, never from a run-config seed the server knows (docs/architecture.md, trust boundary).

Private Metropolis-Hastings (Section 3.1.2, Algorithm 1, eq. 11-16)
------------------------------------------------------------------
Target, per token (eq. 6 with eq. 8 on the privatized statistics, Phi drawn, theta collapsed)::

    p(z_di = k | .) ∝ (C^DK_dk(-di) + alpha) exp(sum_w' n^_diw' log phi_kw')

Per local iteration (:meth:`PrivateMHSampler.run`): Phi is drawn from its Dirichlet posterior
(eq. 7); every token gets one doc-topic proposal step (eq. 11, acceptance eq. 13) then one
word-topic proposal step (eq. 14, acceptance eq. 16), both with O(1) proposal draws; one pass
over the token's sparse noisy vector gives the privatized log-likelihood of the current and of
both proposed topics. The chain on (z, Phi) alternates Phi ~ p(Phi | z) and MH steps that leave
p(z_di | z_-di, Phi) invariant, so its z-marginal is the collapsed posterior given the privatized
statistics (tests check this by enumeration).

How C^KW is formed from the privatized vectors (the paper leaves it implicit)::

    C^KW_kw' = sum over tokens di with z_di = k of n^_diw'

i.e. each token adds its whole noisy vector to its topic's row. Why: (1) eq. 8 privatized is
``prod_w' phi_kw'^{n^_diw'}``, which is conjugate to the Dirichlet prior, so the exact
conditional of phi_k given z is ``Dirichlet(beta + sum_{z_di=k} n^_di)``: these are the
sufficient statistics eq. 7 needs (with eps = inf they reduce to the usual word counts); (2) the
paper states that no original data is exposed to the sampling algorithm, so the true word of a
token may not be counted, and the local model sent out is composed from C^KW (Algorithm 1, last
line): counting true words would publish un-noised counts.

Proposals and acceptance (where we depart from the letter of eq. 13-16, and why):

- Doc-topic proposal (eq. 11), ``q_d(t) ∝ C^DK_dt + alpha`` with the *current* counts (the token
  itself included), drawn in O(1) as "the topic of a uniformly chosen token of d, or a uniform
  topic with probability K alpha / (n_d + K alpha)" (the same distribution an alias table of
  eq. 11 samples, without building D tables). The exact MH ratio evaluates the reverse
  proposal at the reverse state, where the token sits at t: ``q_d(s | t) ∝ C^_ds + alpha``; with
  ``q_d(t | s) ∝ C^_dt + alpha`` the ratio of eq. 12 reduces to ``P^(w|t, Phi) / P^(w|s, Phi)``.
  Eq. 13 as printed evaluates the reverse proposal with the token still at s (``C_ds = C^_ds + 1``),
  which biases the chain by the factor ``(C^_ds + 1 + alpha) / (C^_ds + alpha)``.
- Word-topic proposal (eq. 14) is indexed by "the word" of a token, which the sampler never
  sees. It uses the token's *proxy word*: the entry of its noisy vector with the largest value
  (post-processing; with eps = inf, or eps large as in the paper's eps = 11, the true word with
  high probability). A token with an empty noisy vector has a flat likelihood and proposes
  uniformly. The table over topics is, by default (``word_proposal="phi"``), ``q_w(t) ∝ phi_tw``
  with the Phi drawn this iteration from ``Dirichlet(C^KW + beta)``, i.e. a draw around eq. 14's
  ``(C^KW_tw + beta) / sum_w' (C^KW_tw' + beta)`` (its posterior mean). Phi is part of the chain's
  state and fixed during the sweep, so the proposal is exact. ``word_proposal="counts"`` builds it
  from eq. 14 literally, on the C^KW of the start of the sweep (the token's own old assignment
  included): stale like LightLDA's and not exactly invariant (on the 5-token test corpus its
  visits stay at total variation 0.08 from the exact posterior; the bias shrinks with a token's
  share of C^KW, unmeasured on real corpora).
  Acceptance: ``pi(t) q_w(s) / (pi(s) q_w(t))`` with ``pi(k) = (C^_dk + alpha) P^(w|k, Phi)``.
  Eq. 16 as printed has the same factor ``(C_zw + beta)(sum_w' ...)`` in numerator and
  denominator (a typesetting slip); the ratio above is the MH ratio of eq. 15 with q_w.

Initialization (Algorithm 1): first round, topics uniformly at random; later rounds, from the
K_p x V model the master composed (Algorithm 3): each token's topic is drawn from the alias table
of its proxy word's column of that model (``q(k) ∝ model[k, proxy]``).

Scale of the noise (measured on BBC News, V = 2949, 267k tokens, K = 20, alpha 0.1, beta 0.01):
at the paper's default eps = 11, tau = 0.2 a token keeps 164 entries, of noisy mass 47.5 against
1 for its own word; the privatized likelihood is then dominated by noise words, which favours
topics with flat phi, and the chain concentrates the tokens: 11 of 20 topics hold more than 1%
of the tokens after 40 iterations (17 at eps 11, tau 0.5 or eps 20, tau 0.2; 20 at eps 40 or
without noise). This is the method as specified, not a sampler defect (the sampler matches the
exact posterior of the privatized statistics).

Topic-wise normalization (Section 3.1.3)
----------------------------------------
The reply is the row-normalized K_p x V matrix (:func:`topic_wise_normalize`), computed from
``C^KW + beta``, i.e. exactly the matrix eq. 14 builds its alias tables from ("M_p and M^_p
result in exactly the same alias tables").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit

from flower_topics.models.fixed_phi import build_alias_tables
from flower_topics.models.topic_word import normalize_rows

_INDEX_DTYPE = np.int32
_VALUE_DTYPE = np.float32
_BLOCK_ENTRIES = 1 << 22  # noise entries drawn per block (bounds temporary memory)


# --------------------------------------------------------------------------- private statistics
def survival_probability(epsilon: float, tau: float) -> float:
    """``P(Laplace(1/eps) > tau) = exp(-tau eps) / 2`` for ``tau >= 0``: one zero entry survives.

    ``epsilon = inf`` gives 0 (no noise).
    """
    _check_privacy_args(epsilon, tau)
    if math.isinf(epsilon):
        return 0.0
    return 0.5 * math.exp(-tau * epsilon)


def own_word_survival_probability(epsilon: float, tau: float) -> float:
    """``P(1 + Laplace(1/eps) > tau)``: the token's own word keeps a nonzero entry."""
    _check_privacy_args(epsilon, tau)
    if math.isinf(epsilon):
        return 1.0 if tau < 1.0 else 0.0
    if tau <= 1.0:
        return 1.0 - 0.5 * math.exp(-(1.0 - tau) * epsilon)
    return 0.5 * math.exp(-(tau - 1.0) * epsilon)


def expected_noisy_nbytes(n_tokens: int, n_words: int, epsilon: float, tau: float) -> float:
    """Expected memory (bytes) of :func:`privatize_tokens`'s output for ``n_tokens`` tokens.

    ``(n_tokens + 1) * 8`` (row offsets) ``+ n_tokens * 4`` (proxy words) ``+ E[nnz] * 8``
    (``int32`` word id and ``float32`` value per entry), with
    ``E[nnz] = n_tokens ((V - 1) p + P(1 + Y > tau))`` (:func:`survival_probability`).
    """
    per_token = (n_words - 1) * survival_probability(epsilon, tau) + own_word_survival_probability(epsilon, tau)
    entry = np.dtype(_INDEX_DTYPE).itemsize + np.dtype(_VALUE_DTYPE).itemsize
    return (n_tokens + 1) * 8 + n_tokens * 4 + n_tokens * per_token * entry


def _check_privacy_args(epsilon: float, tau: float) -> None:
    if not epsilon > 0:
        raise ValueError(f"epsilon must be > 0 (inf for no noise), got {epsilon}")
    if not (tau >= 0 and math.isfinite(tau)):
        raise ValueError(f"tau must be finite and >= 0, got {tau}")


@dataclass(frozen=True)
class NoisyStatistics:
    """Privatized, thresholded count vectors of a corpus's tokens (CSR over tokens).

    Row ``i`` (token ``i`` in corpus order) holds the words ``indices[indptr[i]:indptr[i+1]]``
    with values ``values[...]`` (all ``> tau``); every other entry of ``n^_di`` is 0. Entries of a
    row are not sorted; no word appears twice in a row.

    Parameters
    ----------
    indptr : numpy.ndarray
        ``int64``, length ``n_tokens + 1``.
    indices : numpy.ndarray
        ``int32`` word ids.
    values : numpy.ndarray
        ``float32`` noisy counts.
    proxy : numpy.ndarray
        ``int32`` per token: the word with the largest value in its row (first such entry),
        -1 for an empty row. Used by the word-topic proposal.
    n_words : int
        Vocabulary size V.
    epsilon, tau : float
        The mechanism's parameters.
    """

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    proxy: np.ndarray
    n_words: int
    epsilon: float
    tau: float

    @property
    def n_tokens(self) -> int:
        """Number of tokens (rows)."""
        return int(self.indptr.size - 1)

    @property
    def nnz(self) -> int:
        """Number of stored (surviving) entries."""
        return int(self.indices.size)

    @property
    def nbytes(self) -> int:
        """Memory of the stored arrays in bytes (offsets, word ids, values, proxy words)."""
        return int(self.indptr.nbytes + self.indices.nbytes + self.values.nbytes + self.proxy.nbytes)

    def to_csr(self) -> sp.csr_matrix:
        """The statistics as a ``scipy.sparse`` matrix ``(n_tokens, V)`` (float64)."""
        return sp.csr_matrix((self.values.astype(np.float64), self.indices, self.indptr),
                             shape=(self.n_tokens, self.n_words))


@njit(cache=True, nogil=True)
def _fill_noisy_rows(words, counts, own_values, tau, uniforms, noise_values, n_words,
                     indptr, indices, values, proxy, row0, stamp):  # pragma: no cover - numba
    """Fill rows ``row0 .. row0 + len(words)`` of the CSR output (offsets already in ``indptr``).

    Survivor positions among the ``V - 1`` other words by Floyd's algorithm (a uniform
    ``counts[i]``-subset, one uniform each, O(1) membership through ``stamp``).
    """
    n_other = n_words - 1
    u_pos = 0
    for b in range(words.shape[0]):
        row = row0 + b
        own = words[b]
        out = indptr[row]
        best = -1
        best_value = -np.inf
        if own_values[b] > tau:
            indices[out] = own
            values[out] = own_values[b]
            best = own
            best_value = own_values[b]
            out += 1
        m = counts[b]
        mark = row + 1  # stamp[x] == mark: position x is already chosen for this row
        for j in range(n_other - m, n_other):
            t = int(uniforms[u_pos] * (j + 1))
            if t > j:
                t = j
            if stamp[t] == mark:
                t = j
            stamp[t] = mark
            word = t + 1 if t >= own else t
            v = noise_values[u_pos]
            indices[out] = word
            values[out] = v
            if v > best_value:
                best_value = v
                best = word
            out += 1
            u_pos += 1
        proxy[row] = best


def privatize_tokens(tokens: np.ndarray, n_words: int, epsilon: float, tau: float,
                     rng: np.random.Generator) -> NoisyStatistics:
    """Privatize and threshold every token's one-hot count vector (eq. 9-10; Algorithm 1, line 4).

    Exact sparse draw of ``max-threshold(n_di + Laplace(1/eps)^V, tau)`` per token; see the module
    docstring for the construction. Cost O(n_tokens + nnz), memory :func:`expected_noisy_nbytes`.

    Parameters
    ----------
    tokens : numpy.ndarray
        Word id of each token (``Corpus.tokens``).
    n_words : int
        Vocabulary size V (>= 2).
    epsilon : float
        Laplace budget per count entry (> 0); ``inf`` gives the plain one-hot vectors.
    tau : float
        Threshold (>= 0): entries ``<= tau`` are set to 0. Negative thresholds are refused: almost
        all V entries would survive and the survivors' law is no longer a shifted exponential.
    rng : numpy.random.Generator
        The mechanism's randomness, provided by the caller and seeded from OS entropy or a
        node-local secret, never from the run config.

    Returns
    -------
    NoisyStatistics
    """
    _check_privacy_args(epsilon, tau)
    if n_words < 2:
        raise ValueError("n_words must be >= 2")
    tokens = np.ascontiguousarray(tokens, dtype=np.int32)
    if tokens.size and (tokens.min() < 0 or tokens.max() >= n_words):
        raise ValueError("token ids must lie in [0, n_words)")
    n = tokens.size
    if math.isinf(epsilon):
        keep = 1.0 > tau
        indptr = np.arange(n + 1, dtype=np.int64) if keep else np.zeros(n + 1, dtype=np.int64)
        return NoisyStatistics(
            indptr=indptr,
            indices=tokens.astype(_INDEX_DTYPE) if keep else np.zeros(0, _INDEX_DTYPE),
            values=np.ones(n if keep else 0, dtype=_VALUE_DTYPE),
            proxy=tokens.astype(np.int32) if keep else np.full(n, -1, np.int32),
            n_words=int(n_words), epsilon=float(epsilon), tau=float(tau))
    return _privatize_sparse(tokens, int(n_words), float(epsilon), float(tau), survival_probability(epsilon, tau),
                             rng)


def _privatize_sparse(tokens: np.ndarray, n_words: int, epsilon: float, tau: float, p_survive: float,
                      rng: np.random.Generator) -> NoisyStatistics:
    """The sparse draw with an explicit survival probability (tests pass a wrong one on purpose)."""
    n = tokens.size
    scale = 1.0 / epsilon
    counts = rng.binomial(n_words - 1, p_survive, size=n).astype(np.int64)
    own_values = (1.0 + rng.laplace(0.0, scale, size=n)).astype(_VALUE_DTYPE)
    row_sizes = counts + (own_values > tau)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(row_sizes, out=indptr[1:])
    indices = np.empty(int(indptr[-1]), dtype=_INDEX_DTYPE)
    values = np.empty(int(indptr[-1]), dtype=_VALUE_DTYPE)
    proxy = np.empty(n, dtype=np.int32)
    stamp = np.zeros(n_words, dtype=np.int64)
    per_token = 1.0 + (n_words - 1) * p_survive
    block = max(1, int(_BLOCK_ENTRIES / per_token))
    above_tau = np.nextafter(_VALUE_DTYPE(tau), _VALUE_DTYPE(np.inf))  # float32 rounding must keep values > tau
    for start in range(0, n, block):
        stop = min(n, start + block)
        m = int(counts[start:stop].sum())
        uniforms = rng.random(m)
        noise_values = np.maximum((tau + rng.exponential(scale, size=m)).astype(_VALUE_DTYPE), above_tau)
        _fill_noisy_rows(tokens[start:stop], counts[start:stop], own_values[start:stop], np.float32(tau),
                         uniforms, noise_values, n_words, indptr, indices, values, proxy, start, stamp)
    return NoisyStatistics(indptr=indptr, indices=indices, values=values, proxy=proxy, n_words=n_words,
                           epsilon=epsilon, tau=tau)


def privatize_tokens_dense(tokens: np.ndarray, n_words: int, epsilon: float, tau: float,
                           rng: np.random.Generator) -> np.ndarray:
    """Naive reference draw of eq. 9-10 plus thresholding: ``(n_tokens, V)`` dense float64.

    For tests and tiny V only: draws ``V`` Laplace variables per token.
    """
    _check_privacy_args(epsilon, tau)
    tokens = np.asarray(tokens, dtype=np.int64)
    out = np.zeros((tokens.size, n_words))
    out[np.arange(tokens.size), tokens] = 1.0
    if not math.isinf(epsilon):
        out += rng.laplace(0.0, 1.0 / epsilon, size=out.shape)
    out[out <= tau] = 0.0
    return out


# --------------------------------------------------------------------------- private MH
@njit(cache=True, nogil=True)
def _private_mh_kernel(indptr, indices, values, proxy, doc_of, doc_ptr, z, dk, log_phi_wk, word_prob, word_alias,
                       log_q_word, alpha, uniforms):  # pragma: no cover - numba
    """One sweep: per token a doc-proposal step (eq. 11-13) then a word-proposal step (eq. 14-16).

    ``dk`` holds the live ``C^DK + alpha``; ``word_prob`` / ``word_alias`` are the word-topic alias
    tables (V x K) and ``log_q_word`` their normalized log probabilities. 6 uniforms per token.
    """
    n_topics = log_phi_wk.shape[1]
    k_alpha = n_topics * alpha
    for i in range(indptr.shape[0] - 1):
        d = doc_of[i]
        s = z[i]
        # doc-topic proposal, q_d(t) ∝ C^DK_dt + alpha (token i counted at s):
        # the topic of a random token of d, or a uniform topic
        length = doc_ptr[d + 1] - doc_ptr[d]
        pick = uniforms[i, 0] * (length + k_alpha)
        if pick < length:
            t1 = z[doc_ptr[d] + int(pick)]  # token i itself gives t1 = s
        else:
            t1 = min(int(uniforms[i, 1] * n_topics), n_topics - 1)
        # word-topic proposal from the proxy word's alias table (uniform for an empty row)
        pw = proxy[i]
        t2 = min(int(uniforms[i, 2] * n_topics), n_topics - 1)
        if pw >= 0 and uniforms[i, 3] >= word_prob[pw, t2]:
            t2 = word_alias[pw, t2]
        dk[d, s] -= 1.0  # now C^_ds + alpha (statistics of token i removed)
        # privatized log-likelihoods, eq. 8: sum_w' n^_w' log phi_kw', for s, t1, t2 in one pass
        ls = 0.0
        l1 = 0.0
        l2 = 0.0
        for j in range(indptr[i], indptr[i + 1]):
            w = indices[j]
            v = values[j]
            ls += v * log_phi_wk[w, s]
            l1 += v * log_phi_wk[w, t1]
            l2 += v * log_phi_wk[w, t2]
        # eq. 12-13, reverse proposal at the reverse state: ratio P^(w|t1) / P^(w|s)
        if t1 != s:
            r = l1 - ls
            if r >= 0.0 or uniforms[i, 4] < math.exp(r):
                s = t1
                ls = l1
        # eq. 15-16: pi(t) q_w(s) / (pi(s) q_w(t)), pi(k) = (C^_dk + alpha) P^(w|k)
        if t2 != s:
            r = (math.log(dk[d, t2]) + l2) - (math.log(dk[d, s]) + ls)
            if pw >= 0:
                r += log_q_word[pw, s] - log_q_word[pw, t2]
            if r >= 0.0 or uniforms[i, 5] < math.exp(r):
                s = t2
        z[i] = s
        dk[d, s] += 1.0


@njit(cache=True, nogil=True)
def _topic_word_counts(indptr, indices, values, z, n_topics, n_words):  # pragma: no cover - numba
    """C^KW_kw' = sum over tokens with z = k of their noisy values at w'."""
    ckw = np.zeros((n_topics, n_words))
    for i in range(indptr.shape[0] - 1):
        k = z[i]
        for j in range(indptr[i], indptr[i + 1]):
            ckw[k, indices[j]] += values[j]
    return ckw


def topic_wise_normalize(counts: np.ndarray, beta: float = 0.0) -> np.ndarray:
    """Topic-wise normalization (Section 3.1.3): rows of ``counts + beta`` scaled to sum to 1.

    The package's shared row normalizer (:func:`flower_topics.models.topic_word.normalize_rows`);
    a row whose total is 0 (only possible with ``beta = 0``) becomes uniform.
    """
    m = np.asarray(counts, dtype=np.float64)
    if np.any(m + beta < 0):
        raise ValueError("counts + beta must be non-negative")
    return normalize_rows(m, beta)


def draw_log_phi(counts: np.ndarray, beta: float, rng: np.random.Generator) -> np.ndarray:
    """``log phi_k`` with ``phi_k ~ Dirichlet(counts_k + beta)`` for every row (eq. 7), in log space.

    Gamma variables with shape ``a < 1`` are drawn as ``log G(a + 1) + log(U) / a`` (exact), so a
    small beta on an empty column cannot underflow phi to 0 (its log multiplies noisy counts).
    """
    shape = np.asarray(counts, dtype=np.float64) + beta
    small = shape < 1.0
    log_g = np.log(rng.standard_gamma(np.where(small, shape + 1.0, shape)))
    u = rng.random(shape.shape)
    log_g = np.where(small, log_g + np.log(u) / shape, log_g)
    return log_g - _logsumexp_rows(log_g)


class PrivateMHSampler:
    """Private Metropolis-Hastings of one party (Algorithm 1) on its privatized statistics.

    The sampler never reads the party's words: only the noisy statistics and the document
    lengths (``doc_ptr``). State: topic per token ``z``, doc-topic counts, ``C^KW`` (formed from
    the noisy vectors, see the module docstring).

    Parameters
    ----------
    stats : NoisyStatistics
        From :func:`privatize_tokens` (drawn once, reused every round).
    doc_ptr : numpy.ndarray
        Document offsets into the tokens (``Corpus.doc_ptr``), ``doc_ptr[-1] == stats.n_tokens``.
    n_topics : int
        This party's K_p (parties may differ).
    alpha, beta : float
        Symmetric Dirichlet priors (doc-topic, topic-word).
    rng : numpy.random.Generator
        Randomness of the sampler (its output is post-processing of the statistics, but keep it
        node-local like the mechanism's).
    init_model : numpy.ndarray, optional
        The K_p x V local model composed by the master (Algorithm 1, else branch: topics drawn
        from its word-topic alias tables); None for the first round (uniform random topics).
    word_proposal : {"phi", "counts"}
        Table of the word-topic proposal: the drawn Phi (exact, default) or eq. 14 on the counts of the
        start of the sweep (literal, stale); see the module docstring.
    """

    def __init__(self, stats: NoisyStatistics, doc_ptr: np.ndarray, n_topics: int, alpha: float, beta: float,
                 rng: np.random.Generator, init_model: np.ndarray | None = None,
                 word_proposal: str = "phi") -> None:
        if word_proposal not in ("phi", "counts"):
            raise ValueError("word_proposal must be 'phi' or 'counts'")
        self.word_proposal = word_proposal
        if n_topics < 1 or not alpha > 0 or not beta > 0:
            raise ValueError("n_topics must be >= 1, alpha > 0 and beta > 0")
        doc_ptr = np.ascontiguousarray(doc_ptr, dtype=np.int64)
        if doc_ptr.ndim != 1 or doc_ptr[0] != 0 or doc_ptr[-1] != stats.n_tokens or np.any(np.diff(doc_ptr) < 0):
            raise ValueError("doc_ptr must run from 0 to stats.n_tokens, non-decreasing")
        self.stats = stats
        self.doc_ptr = doc_ptr
        self.n_topics = int(n_topics)
        self.alpha = float(alpha)
        self.beta = float(beta)
        self.rng = rng
        n_docs = doc_ptr.size - 1
        self._doc_of = np.repeat(np.arange(n_docs, dtype=np.int32), np.diff(doc_ptr))
        if init_model is None:
            self.z = rng.integers(0, self.n_topics, size=stats.n_tokens).astype(np.int32)
        else:
            self.z = self._init_from_model(np.asarray(init_model, dtype=np.float64))
        self._recount()

    def _init_from_model(self, model: np.ndarray) -> np.ndarray:
        """Algorithm 1, else branch: z_i ~ q(k) ∝ model[k, proxy_i] via alias tables."""
        if model.shape != (self.n_topics, self.stats.n_words):
            expected = (self.n_topics, self.stats.n_words)
            raise ValueError(f"init_model must have shape {expected}, got {model.shape}")
        if not np.all(np.isfinite(model)) or np.any(model < 0):
            raise ValueError("init_model must be finite and non-negative")
        weights = np.ascontiguousarray(model.T)
        weights[weights.sum(axis=1) <= 0] = 1.0  # a word no topic holds: uniform
        prob, alias = build_alias_tables(weights)
        n = self.stats.n_tokens
        u = self.rng.random((n, 2))
        k = np.minimum((u[:, 0] * self.n_topics).astype(np.int64), self.n_topics - 1)
        pw = self.stats.proxy
        has = pw >= 0
        pw_safe = np.where(has, pw, 0)
        drawn = np.where(u[:, 1] < prob[pw_safe, k], k, alias[pw_safe, k])
        return np.where(has, drawn, k).astype(np.int32)

    def _recount(self) -> None:
        dk = np.zeros((self.doc_ptr.size - 1, self.n_topics))
        np.add.at(dk, (self._doc_of, self.z), 1.0)
        self._dk = dk + self.alpha
        self._ckw = _topic_word_counts(self.stats.indptr, self.stats.indices, self.stats.values, self.z,
                                       self.n_topics, self.stats.n_words)

    def topic_word_counts(self) -> np.ndarray:
        """``C^KW`` (K_p x V, float64): per topic the sum of its tokens' noisy vectors."""
        return self._ckw.copy()

    def doc_topic_counts(self) -> np.ndarray:
        """``C^DK`` (D x K_p, float64 holding integers)."""
        return self._dk - self.alpha

    def local_model(self) -> np.ndarray:
        """The reply M^_p (Section 3.1.3): row-normalized ``C^KW + beta``, K_p x V, rows sum to 1."""
        return topic_wise_normalize(self._ckw, self.beta)

    def run(self, n_iterations: int = 1) -> None:
        """Local iterations of Algorithm 1: draw Phi (eq. 7), build the word-topic tables, sweep.

        Each iteration: ``Phi ~ Dirichlet(C^KW + beta)``; word-topic alias tables (from Phi, or from
        eq. 14 on ``C^KW``, see ``word_proposal``); one MH sweep over all tokens (doc proposal then word
        proposal per token); ``C^KW`` recomputed from the noisy vectors.
        """
        stats = self.stats
        for _ in range(n_iterations):
            log_phi = draw_log_phi(self._ckw, self.beta, self.rng)
            if self.word_proposal == "phi":
                log_w = log_phi.T
            else:
                log_w = np.log(topic_wise_normalize(self._ckw, self.beta)).T  # eq. 14
            log_q_word = np.ascontiguousarray(log_w - _logsumexp_rows(log_w))
            word_prob, word_alias = build_alias_tables(np.exp(log_q_word))
            uniforms = self.rng.random((stats.n_tokens, 6))
            log_phi_wk = np.ascontiguousarray(log_phi.T)
            _private_mh_kernel(stats.indptr, stats.indices, stats.values, stats.proxy, self._doc_of, self.doc_ptr,
                               self.z, self._dk, log_phi_wk, word_prob, word_alias, log_q_word, self.alpha, uniforms)
            self._ckw = _topic_word_counts(stats.indptr, stats.indices, stats.values, self.z, self.n_topics,
                                           stats.n_words)


def _logsumexp_rows(m: np.ndarray) -> np.ndarray:
    top = m.max(axis=1, keepdims=True)
    return top + np.log(np.exp(m - top).sum(axis=1, keepdims=True))
