"""Stochastic variational inference for LDA (Hoffman, Blei and Bach, NIPS 2010, "online LDA"),
with the per-document clipping that DP-SVI needs (Park, Foulds, Chaudhuri and Welling 2016).

The global variational parameter is ``lambda`` (``K x V``), the Dirichlet parameters of the
topics: ``q(beta_k) = Dir(lambda_k)``. A document ``d`` has its own ``gamma_d`` (``K``) and
responsibilities ``phi_dwk``; these never leave the party that holds ``d``.

Local step (Hoffman et al. 2010, Algorithm 2, the E-step of eqs. 2-3; Park et al. 2016,
Algorithm 1, "compute the expected sufficient statistics"), for every document of a batch
at once, over the non-zero ``n_dw`` of its document-term matrix:

.. math::

    \\phi_{dwk} \\propto \\exp\\{E_q[\\log\\theta_{dk}] + E_q[\\log\\beta_{kw}]\\}, \\qquad
    \\gamma_{dk} = \\alpha + \\sum_w n_{dw}\\,\\phi_{dwk},

iterated for each document until the mean change of its ``gamma`` is below ``tol``; then each document's expected
sufficient statistic ``s_d[k, w] = n_dw phi_dwk`` (``K x V``, sparse in ``w``).

Clipping (Park et al. 2016, Section 3: the sensitivity of the summed expected sufficient
statistics): each ``s_d`` is scaled to Frobenius norm at most ``C``,
``s_d <- s_d min(1, C / ||s_d||_2)``, so that adding or removing one document changes the
sum ``S = sum_d s_d`` by at most ``C`` in L2 norm. The sum is what a party releases (with
Gaussian noise of standard deviation ``sigma C``; :mod:`flower_topics.clients.dplda`).

Global step (Hoffman et al. 2010, Algorithm 2 and eq. 7; Park et al. 2016, Algorithm 1):
with ``S`` the noisy sum over a Poisson sample in which every document is included with
probability ``q``, ``S / q`` is an unbiased estimate of the full-corpus statistic and

.. math::

    \\tilde\\lambda = \\eta + S / q, \\qquad
    \\lambda \\leftarrow (1 - \\rho_t)\\lambda + \\rho_t\\tilde\\lambda, \\qquad
    \\rho_t = (\\tau_0 + t)^{-\\kappa}.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from numba import njit

from flower_topics.data.corpus import Corpus
from flower_topics.numeric.document_threads import over_documents
from flower_topics.numeric.word_blocks import gather_block, longest_document, weighted_sum, word_weights


@dataclass(frozen=True)
class ExpectedStatistics:
    """The clipped expected sufficient statistics of a batch of documents.

    Parameters
    ----------
    statistic : np.ndarray
        ``K x V`` float64: ``sum_d min(1, C / ||s_d||) s_d``.
    norms : np.ndarray
        The Frobenius norm of each document's ``s_d`` before clipping.
    gamma : np.ndarray
        ``D x K`` variational document-topic parameters.
    clip : float or None
        The clip norm ``C`` (None: not clipped).
    """

    statistic: np.ndarray
    norms: np.ndarray
    gamma: np.ndarray
    clip: float | None

    @property
    def clipped_fraction(self) -> float:
        """Share of the batch's documents whose statistic was scaled down (0 for an empty batch)."""
        if self.clip is None or self.norms.size == 0:
            return 0.0
        return float(np.mean(self.norms > self.clip))


def e_step(lam: np.ndarray, counts: sp.csr_matrix, *, alpha: float, clip: float | None,
           max_iter: int = 100, tol: float = 1e-3, quantum: float | None = None,
           rng: np.random.Generator | None = None, threads: int | None = None) -> ExpectedStatistics:
    """The local E-step of online LDA for a batch of documents, with per-document clipping.

    Parameters
    ----------
    lam : np.ndarray
        ``K x V`` topic Dirichlet parameters (all entries > 0).
    counts : scipy.sparse.csr_matrix
        ``D x V`` document-term counts of the batch.
    alpha : float
        Symmetric document-topic Dirichlet prior, > 0.
    clip : float or None
        ``C``: each document's statistic is scaled to Frobenius norm at most ``C``;
        None leaves it as it is (non-private SVI).
    max_iter : int, default 100
        Most ``gamma`` iterations (Hoffman et al. use 100).
    tol : float, default 1e-3
        A document stops when the mean absolute change of its ``gamma`` falls below it (each
        document on its own, so that its statistic depends on no other document).
    quantum : float, optional
        Integer encoding for secure aggregation: each document's clipped statistic is scaled
        by ``quantum`` and every cell rounded down or up at random (up with probability its
        fractional part, so unbiased); a document whose rounded statistic would exceed
        ``C x quantum`` in L2 norm is rounded down instead (the norm of a non-negative vector
        cannot grow under rounding down). The statistic is then a sum of integer vectors of
        norm at most ``C x quantum``.
    rng : np.random.Generator, optional
        The randomness of the rounding (needed with ``quantum``; the party's secret randomness).
    threads : int, optional
        Threads the documents are split over (a document's gamma and statistic depend on its own
        words only, so the result is the same bits for any number); default numba's thread count
        (the cores, or ``NUMBA_NUM_THREADS``), one for fewer than :data:`flower_topics.numeric.document_threads.PARALLEL_MIN_ENTRIES`
        nonzero counts.

    Returns
    -------
    ExpectedStatistics
    """
    if lam.ndim != 2 or lam.shape[1] != counts.shape[1]:
        raise ValueError(f"lambda has shape {lam.shape}, the counts have {counts.shape[1]} columns")
    if not np.all(lam > 0):
        raise ValueError("lambda must be positive")
    if clip is not None and not clip > 0:
        raise ValueError("the clip norm must be > 0")
    n_topics = lam.shape[0]
    counts = sp.csr_matrix(counts, dtype=np.float64, copy=True)
    counts.sum_duplicates()
    counts.eliminate_zeros()
    n_docs = counts.shape[0]
    beta_t = np.empty((lam.shape[1], n_topics))  # V x K: exp(E[log beta_kw])
    _exp_expected_log_beta_t(lam, lam.sum(axis=1), beta_t)
    gamma = np.empty((n_docs, n_topics))
    entries = np.empty((counts.nnz, n_topics))  # n_dw phi_dwk, clipped
    norms = np.empty(n_docs)
    indptr, indices = counts.indptr.astype(np.int64), counts.indices.astype(np.int64)
    bound = -1.0 if clip is None else float(clip)

    def run(first: int, last: int) -> None:
        lo, hi = indptr[first], indptr[last]
        _e_step_kernel(indptr[first:last + 1] - lo, indices[lo:hi], counts.data[lo:hi], beta_t, float(alpha),
                       int(max_iter), float(tol), bound, gamma[first:last], entries[lo:hi], norms[first:last])

    over_documents(indptr, run, threads)
    if quantum is not None:
        if rng is None:
            raise ValueError("the integer encoding needs the party's randomness (rng)")
        _integer_rounding(entries, indptr, rng.random(entries.shape), float(quantum),
                          -1.0 if clip is None else float(clip * quantum))
    statistic_t = np.zeros((counts.shape[1], n_topics))
    _add_by_word(entries, indices, statistic_t)
    statistic = np.ascontiguousarray(statistic_t.T)
    return ExpectedStatistics(statistic, norms, gamma, clip)


@njit(cache=True, nogil=True)
def _exp_digamma(x: float) -> float:  # pragma: no cover - numba
    """``exp(psi(x))`` for x > 0: the recurrence ``psi(x) = psi(x + 1) - 1 / x`` up to ``y >= 6``, then the
    asymptotic series (Abramowitz and Stegun 6.3.18), ``psi(y) = log(y) + r``, returned as ``y exp(r)`` (one
    ``exp``, no ``log``)."""
    shift = 0.0
    while x < 6.0:
        shift -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    series = f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132)))))
    return x * np.exp(shift - 0.5 / x - series)


#: :func:`_exp_digamma_shifted` serves every ``x`` in ``[SHIFTED_MIN, SHIFTED_MAX]``: below, its ``exp`` argument
#: divided by 256 leaves the Taylor series' reach (``|r| <= 0.4``); above, ``(x + 5)^6`` approaches overflow.
SHIFTED_MIN, SHIFTED_MAX = 0.01, 1e30


@njit(cache=True, nogil=True, error_model="numpy", fastmath={"contract"})
def _exp_digamma_shifted(x, out):  # pragma: no cover - numba
    """``out[k] = exp(psi(x[k]))`` for ``x`` in ``[SHIFTED_MIN, SHIFTED_MAX]``, in a loop LLVM vectorizes.

    The same recurrence and series as :func:`_exp_digamma`, with a fixed shift: ``psi(x) = psi(x + 6) -
    sum_{i<6} 1 / (x + i)``, the sum as one fraction ``S / P`` (``P = prod (x + i)``, ``S`` its derivative), and
    ``exp(t) = (e^(t / 256))^256`` with a degree-12 Taylor polynomial and eight squarings: no branch, no
    library call, no integer, so the loop runs 4 lanes wide (numba's ``error_model="numpy"``: no
    division-by-zero check). Agrees with scipy's digamma to 1e-10 relative (tested, ``tests/test_dplda.py``).
    """
    for k in range(x.size):
        xk = x[k]
        p = 1.0
        s = 0.0
        for i in range(6):
            xi = xk + i
            s = s * xi + p
            p = p * xi
        y = xk + 6.0
        iy = 1.0 / y
        f = iy * iy
        series = f * (1.0 / 12 - f * (1.0 / 120 - f * (1.0 / 252 - f * (1.0 / 240 - f * (1.0 / 132)))))
        r = (-s / p - 0.5 * iy - series) * (1.0 / 256)
        e = 1.0 + r * (1.0 + r * (1.0 / 2 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120 + r * (
            1.0 / 720 + r * (1.0 / 5040 + r * (1.0 / 40320 + r * (1.0 / 362880 + r * (1.0 / 3628800 + r * (
                1.0 / 39916800 + r * (1.0 / 479001600))))))))))))
        for _ in range(8):
            e = e * e
        out[k] = y * e


@njit(cache=True, nogil=True)
def _expected_theta(gamma, theta):  # pragma: no cover - numba
    """``theta[k] = exp(E[log theta_k])`` under ``Dir(gamma)`` up to a common factor: ``exp(psi(gamma_k))``.

    The factor ``exp(-psi(sum gamma))`` is left out: ``phi_dwk`` is normalized over ``k``, so it cancels in
    every quantity the E-step computes. Vectorized whenever ``alpha >= SHIFTED_MIN`` (``gamma >= alpha``;
    :func:`_exp_digamma_into`).
    """
    _exp_digamma_into(gamma, theta)


@njit(cache=True, nogil=True, inline="always")
def _exp_digamma_into(x, out):  # pragma: no cover - numba
    """``out[k] = exp(psi(x[k]))``: :func:`_exp_digamma_shifted` (vectorized) when every ``x[k]`` is in
    ``[SHIFTED_MIN, SHIFTED_MAX]``, else :func:`_exp_digamma` one by one (the range in one pass: the E-step
    calls this for every update of every document)."""
    low, high = np.inf, -np.inf
    for k in range(x.size):
        low = min(low, x[k])
        high = max(high, x[k])
    if low >= SHIFTED_MIN and high <= SHIFTED_MAX:
        _exp_digamma_shifted(x, out)
        return
    for k in range(x.size):
        out[k] = _exp_digamma(x[k])


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})  # SIMD sums over topics
def _gamma_update(block, n_padded, counts, start, theta, weight, acc, new, alpha):  # pragma: no cover - numba
    """``new = alpha + sum_w n_dw phi_dw`` at ``theta`` for one document, without forming ``phi``.

    ``phi_dwk = theta_k beta_wk / norm_w`` with ``norm_w = sum_k theta_k beta_wk``, so
    ``sum_w n_dw phi_dwk = theta_k sum_w (n_dw / norm_w) beta_wk``: the words' weights
    ``n_dw / norm_w``, then ``acc_k = sum_w (n_dw / norm_w) beta_wk`` (:mod:`flower_topics.numeric.word_blocks`;
    Hoffman et al.'s ``exp(E[log theta]) * (n / phinorm) . exp(E[log beta])``).
    """
    word_weights(block, n_padded, counts, start, theta, weight)
    weighted_sum(block, n_padded, weight, acc)
    for k in range(theta.size):
        new[k] = alpha + theta[k] * acc[k]


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"})
def _e_step_kernel(indptr, indices, counts, beta_t, alpha, max_iter, tol, clip, gamma_out, entries_out,
                   norms_out):  # pragma: no cover - compiled
    """Hoffman et al.'s E-step with Park et al.'s clipping, one document after the other (compiled).

    For document ``d`` (its non-zero counts ``indptr[d]:indptr[d + 1]``): gather its words' rows of
    ``beta_t`` into a small block (reused by every update; as the evaluation's fold-in does); start from
    ``gamma = alpha + N_d / K``; update ``gamma <- alpha + sum_w n_dw phi_dw`` with
    ``phi_dwk ~ exp(E[log theta_dk]) exp(E[log beta_kw])`` at most ``max_iter`` times, stopping
    once the mean absolute change of its gamma is below ``tol``; then write its gamma, the
    Frobenius norm of its statistic ``s_d = (n_dw phi_dwk)`` at that gamma (the only pass that
    forms ``phi``) and ``s_d min(1, clip / ||s_d||)`` (``clip < 0``: ``s_d`` as it is).
    """
    n_topics = beta_t.shape[1]
    theta = np.empty(n_topics)
    acc = np.empty(n_topics)
    new = np.empty(n_topics)
    longest = longest_document(indptr)
    block, weight = np.zeros((longest + 3, n_topics)), np.zeros(longest + 3)
    for d in range(indptr.size - 1):
        start, end = indptr[d], indptr[d + 1]
        n_local = end - start
        n_padded = gather_block(beta_t, indices, start, n_local, block)
        gamma = gamma_out[d]
        length = 0.0
        for j in range(start, end):
            length += counts[j]
        for k in range(n_topics):
            gamma[k] = alpha + length / n_topics
        for _ in range(max_iter):
            _expected_theta(gamma, theta)
            _gamma_update(block, n_padded, counts, start, theta, weight, acc, new, alpha)
            change = 0.0
            for k in range(n_topics):
                change += abs(new[k] - gamma[k])
                gamma[k] = new[k]
            if change / n_topics < tol:
                break
        _expected_theta(gamma, theta)
        word_weights(block, n_padded, counts, start, theta, weight)
        squares = 0.0
        for i in range(n_local):
            for k in range(n_topics):
                entry = weight[i] * theta[k] * block[i, k]
                entries_out[start + i, k] = entry
                squares += entry * entry
        norm = np.sqrt(squares)
        norms_out[d] = norm
        if clip >= 0 and norm > clip:
            shrink = clip / norm
            for j in range(start, end):
                for k in range(n_topics):
                    entries_out[j, k] *= shrink


@njit(cache=True, nogil=True)
def _exp_expected_log_beta_t(lam, row_sums, out):  # pragma: no cover - compiled
    """``out[w, k] = exp(E[log beta_kw]) = exp(psi(lambda_kw)) / exp(psi(sum_v lambda_kv))``, word-major (V x K).

    Each topic's row by :func:`_exp_digamma_into` (vectorized for every topic when ``eta >= SHIFTED_MIN``).
    """
    n_topics, n_words = lam.shape
    row = np.empty(n_words)
    for k in range(n_topics):
        total = _exp_digamma(row_sums[k])
        _exp_digamma_into(np.ascontiguousarray(lam[k]), row)
        for w in range(n_words):
            out[w, k] = row[w] / total


@njit(cache=True, nogil=True)
def _add_by_word(entries, indices, out):  # pragma: no cover - compiled
    """``out[w] += entries[j]`` for every ``j`` with ``indices[j] = w``, in the order of ``j`` (the
    document-term matrix's, so that the sum is the same whatever the threads of the E-step)."""
    for j in range(indices.size):
        w = indices[j]
        for k in range(entries.shape[1]):
            out[w, k] += entries[j, k]


@njit(cache=True, nogil=True)
def _integer_rounding(entries, indptr, uniforms, quantum, bound):  # pragma: no cover - compiled
    """:func:`e_step`'s integer encoding in place, document by document: each cell ``x quantum`` rounded up
    when its uniform is below the fractional part, else down; a document whose rounded vector has L2 norm
    above ``bound`` (``< 0``: no bound) is rounded down in every cell instead. The squared norm of an integer
    vector is a sum of integers, exact in any order."""
    n_topics = entries.shape[1]
    for d in range(indptr.size - 1):
        squares = 0.0
        for j in range(indptr[d], indptr[d + 1]):
            for k in range(n_topics):
                scaled = entries[j, k] * quantum
                low = np.floor(scaled)
                value = low + 1.0 if uniforms[j, k] < scaled - low else low
                squares += value * value
        up = bound < 0 or np.sqrt(squares) <= bound
        for j in range(indptr[d], indptr[d + 1]):
            for k in range(n_topics):
                scaled = entries[j, k] * quantum
                low = np.floor(scaled)
                entries[j, k] = low + 1.0 if up and uniforms[j, k] < scaled - low else low


def document_counts(corpus: Corpus) -> sp.csr_matrix:
    """The ``D x V`` float64 document-term counts of a corpus."""
    return sp.csr_matrix(corpus.doc_term_matrix(), dtype=np.float64)


def sampled_counts(corpus: Corpus, included: np.ndarray) -> sp.csr_matrix:
    """:func:`document_counts` of the documents at ``included``: rows of the corpus' counts, built once per
    corpus (a party's sample each round; the same matrix as ``document_counts(corpus.subset(included))``)."""
    return corpus.derived("svi.document_counts", document_counts)[included]


def step_size(t: int, tau0: float, kappa: float) -> float:
    """``rho_t = (tau0 + t)^(-kappa)`` (Hoffman et al. 2010, Section 2.2), ``t`` counted from 0."""
    return float((tau0 + t) ** -kappa)


def natural_gradient_step(lam: np.ndarray, estimate: np.ndarray, rho: float) -> np.ndarray:
    """``(1 - rho) lambda + rho lambda_tilde`` (Hoffman et al. 2010, Algorithm 2)."""
    return (1.0 - rho) * lam + rho * estimate


def public_lambda(average: np.ndarray, noise_variance: float, *, eta: float | np.ndarray, threshold: float,
                  background: float) -> np.ndarray:
    """The topics' public Dirichlet parameters from the noisy running average (post-processing).

    ``eta + T_k + background / (1 - background) * |T_k| u``, where ``T = (average - eta)`` with
    every cell below ``threshold * sqrt(noise_variance)`` set to 0 (negative cells always), ``|T_k|``
    its row sums and ``u`` the normalized positive part of the average's column sums. ``eta`` is a
    number or, with seed words, the ``(K, V)`` prior ``eta_kw``.
    """
    signal = average - eta
    kept = np.where(signal > threshold * np.sqrt(noise_variance), signal, 0.0)
    if background <= 0:
        return eta + kept
    unigram = np.maximum(signal.sum(axis=0), 0.0) + 1e-12
    unigram /= unigram.sum()
    return eta + kept + background / (1.0 - background) * kept.sum(axis=1, keepdims=True) * unigram


def initial_lambda(n_topics: int, n_words: int, seed: int) -> np.ndarray:
    """The public initial ``lambda``: Gamma(100, 1/100) entries (Hoffman et al.'s initialization) from ``seed``."""
    return np.random.default_rng(seed).gamma(100.0, 0.01, size=(n_topics, n_words))


#: Pseudo-count mass of each topic of a public initial ``lambda`` (:func:`embedding_lambda`,
#: :func:`distribution_lambda`): how much the first noisy releases must outweigh the start; with
#: ``rho_t = (tau0 + t)^-kappa`` the start's weight after ``t`` steps is ``prod (1 - rho_s)``.
START_MASS = 1000.0


def distribution_lambda(topic_word: np.ndarray, *, mass: float = START_MASS) -> np.ndarray:
    """A public initial ``lambda`` from topic-word distributions, with the magnitude of :func:`embedding_lambda`.

    Topic ``k`` puts mass ``mass`` on the words in proportion to ``topic_word[k]`` (rows
    normalized here), plus ``1e-3`` per cell, as the embedding start does: a start from
    public documents is forgotten at the same rate as the embedding start.
    """
    rows = np.asarray(topic_word, dtype=np.float64)
    return mass * rows / rows.sum(axis=1, keepdims=True) + 1e-3


def embedding_lambda(embeddings: np.ndarray, n_topics: int, seed: int, *, temperature: float = 0.05,
                     mass: float = START_MASS) -> np.ndarray:
    """A public initial ``lambda`` from word embeddings alone: one topic per k-means cluster of the words.

    The words' embeddings (of a public model, over the public or accounted vocabulary) are
    normalized and clustered into ``n_topics`` clusters (k-means, seeded); topic ``k`` puts
    mass ``mass`` on the words in proportion to ``exp(cos(word, centroid_k) / temperature)``.
    No document enters it, so it costs no privacy; it breaks the topics' symmetry before the
    first noisy release, which a random ``lambda`` leaves to the noise.
    """
    from sklearn.cluster import KMeans

    unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    centers = KMeans(n_topics, n_init=4, random_state=seed).fit(unit).cluster_centers_
    centers /= np.maximum(np.linalg.norm(centers, axis=1, keepdims=True), 1e-12)
    similarity = centers @ unit.T
    weights = np.exp((similarity - similarity.max(axis=1, keepdims=True)) / temperature)
    return mass * weights / weights.sum(axis=1, keepdims=True) + 1e-3
