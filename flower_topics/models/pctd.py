"""PC-TD client-side math: semantic units and one private local EM iteration.

Private and Consistent Topic Discovery (Shi, Tong, Su, Jiang, Zhou and Zhang, IEEE
Intelligent Systems 2020; "Federated Topic Discovery: A Semantic Consistent Approach").

Model (section "Model Assumptions"): every document ``d_i`` is cut into *semantic units*
``s_ij``; each unit takes one topic ``z_k ~ p(z|d_i)`` and every position of the unit
draws its word from ``p(w|z_k)``. ``N_ijw`` is the count of word ``w`` in unit ``s_ij``.

One local iteration of a party (Algorithm 1, lines 4-10):

- line 5-6, eq. (4): ``N^_ijw = N_ijw + Omega``, ``Omega ~ N(0, sigma^2)`` independently for
  *every* unit and *every* one of the V words (zeros included), fresh every iteration;
- line 7, eq. (5): ``r^_ijk ∝ p(z_k|d_i) prod_w p(w|z_k)^{N^_ijw}``, computed here in log
  space, ``log r^ = log p(z|d) + N^ log p(w|z)^T`` followed by a log-sum-exp normalization;
- line 8, eq. (7): ``p(z_k|d_i) = sum_j r^_ijk / sum_j sum_k' r^_ijk'``;
- line 9-10, eq. (10): the upload ``M_t(w, z_k) = sum_ij N^_ijw r^_ijk`` (K x V, dense).

Fast exact noise
----------------
Drawing the U x V noise matrix ``E`` is O(U V) and is all the naive implementation does
(:func:`naive_local_em_step`, kept for tests and tiny V). The noise enters only through
two linear maps of ``E``: ``G = E L^T`` in the E-step (``L = log p(w|z)``, K x V) and
``R^T E`` in eq. (10) (``R`` = the U x K responsibilities). The second is *not* independent
of the first, because ``R`` is a nonlinear function of ``G`` (the same ``N^`` feeds lines 7
and 9). Take the thin QR factorization ``L^T = Q T`` (``Q``: V x K orthonormal columns,
``T``: K x K). Since the rows of ``E`` are isotropic ``N(0, sigma^2 I_V)``,

    E = Xi Q^T + E_perp,   Xi = E Q ~ iid N(0, sigma^2) (U x K),   E_perp = E (I - Q Q^T),

with ``Xi`` and ``E_perp`` independent (their cross-covariance is ``sigma^2 Q^T (I - Q Q^T) = 0``).
Then ``G = E L^T = Xi T`` exactly (``E_perp L^T = 0``), so ``R`` depends on ``Xi`` alone, and

    R^T E = (R^T Xi) Q^T + R^T E_perp.

Given ``Xi`` (hence ``R``) the rows of ``E_perp`` are still iid ``N(0, sigma^2 (I - Q Q^T))``, so
``R^T E_perp = W (I - Q Q^T)`` where ``W = R^T E'`` for an independent iid ``E'``; each column
of ``W`` is ``N(0, sigma^2 R^T R)`` independently over the V words, i.e. ``W = sigma B Z`` with
``B B^T = R^T R`` (K x K) and ``Z`` a K x V standard normal matrix. The fast step therefore draws
U K + K V normals instead of U V and its outputs ``(r^, p(z|d), M_t)`` have exactly the joint law
of the naive step's (tests compare the two by their sample means and covariances).

Numerics
--------
``p(w|z)`` must be strictly positive (its log multiplies noise on every word); the server's
normalization (:mod:`flower_topics.models.pctd_server`) guarantees this. The E-step is well
defined for any real, even negative, noisy counts: ``log r^`` is finite whenever ``p(z|d)``
and ``p(w|z)`` are, and the log-sum-exp normalization cannot underflow to 0/0. ``r^`` is a
distribution over topics per unit, so eq. (7) gives a distribution per document (documents
without units keep their previous ``p(z|d)``). The noisy counts in ``M_t`` stay as they are,
negative entries included: the server decides what to do with negative mass.

Scale of the noise: the log-odds of topics k, k' of a unit receive noise of standard
deviation ``sigma ||log p(.|z_k) - log p(.|z_k')||_2`` (over all V words); on BBC News (V = 2949,
K = 20, after 30 noiseless iterations) that norm is about 200, so at the paper's
``sigma = 0.25`` only about a quarter of the units keep their noiseless most likely topic.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp
from scipy.special import logsumexp

from flower_topics.data.corpus import Corpus

_NAIVE_MAX_ENTRIES = 20_000_000


@dataclass(frozen=True)
class SemanticUnits:
    """Semantic units of a corpus and their word counts ``N_ijw``.

    Parameters
    ----------
    counts : scipy.sparse.csr_matrix
        ``(n_units, V)`` float64 counts ``N_ijw``, one row per unit, units grouped by
        document in document order. Every unit holds at least one word.
    unit_doc : np.ndarray
        ``int64`` document index of each unit (non-decreasing).
    n_docs : int
        Number of documents D (documents may have no unit, e.g. empty ones).
    """

    counts: sp.csr_matrix
    unit_doc: np.ndarray
    n_docs: int

    def __post_init__(self) -> None:
        counts = sp.csr_matrix(self.counts, dtype=np.float64)
        counts.sum_duplicates()
        unit_doc = np.ascontiguousarray(self.unit_doc, dtype=np.int64)
        object.__setattr__(self, "counts", counts)
        object.__setattr__(self, "unit_doc", unit_doc)
        if unit_doc.shape != (counts.shape[0],):
            raise ValueError("unit_doc must have one entry per unit")
        if unit_doc.size and (unit_doc[0] < 0 or unit_doc[-1] >= self.n_docs or np.any(np.diff(unit_doc) < 0)):
            raise ValueError("unit_doc must be non-decreasing document indices in [0, n_docs)")

    @property
    def n_units(self) -> int:
        """Number of units U."""
        return int(self.counts.shape[0])

    @property
    def n_words(self) -> int:
        """Vocabulary size V."""
        return int(self.counts.shape[1])

    @property
    def unit_lengths(self) -> np.ndarray:
        """``N_ij``, the number of words of each unit."""
        return np.asarray(self.counts.sum(axis=1)).ravel()

    @property
    def doc_unit_ptr(self) -> np.ndarray:
        """``int64`` offsets, length ``n_docs + 1``: units of document ``d`` are ``[ptr[d], ptr[d + 1])``."""
        ptr = np.zeros(self.n_docs + 1, dtype=np.int64)
        np.cumsum(np.bincount(self.unit_doc, minlength=self.n_docs), out=ptr[1:])
        return ptr


def _units_from_pairs(unit_of: np.ndarray, tokens: np.ndarray, unit_doc: np.ndarray, n_docs: int,
                      n_words: int) -> SemanticUnits:
    """Counts matrix from (unit, token) pairs; ``unit_of`` indexes ``unit_doc``."""
    counts = sp.csr_matrix((np.ones(unit_of.size), (unit_of, tokens)), shape=(unit_doc.size, n_words))
    return SemanticUnits(counts, unit_doc, n_docs)


def ngram_units(corpus: Corpus, n: int = 3, overlapping: bool = False) -> SemanticUnits:
    """Semantic units as windows of ``n`` consecutive words of each document.

    The paper's experiments "consider each three words in these sentences as a semantic
    unit" (n = 3). Its generative process (steps 2-3, eq. 2) generates every word position
    of a document exactly once, inside one unit, so by default the windows do **not**
    overlap: document ``d`` is cut into consecutive chunks ``[0, n), [n, 2n), ...``; the last
    chunk of a document whose length is not a multiple of ``n`` is shorter, and a document
    shorter than ``n`` forms a single unit of its whole length. Empty documents have no unit.

    ``overlapping=True`` instead takes every window ``[s, s + n)``, ``s = 0 .. len - n``
    (stride 1; a document shorter than ``n`` is one unit). Then each word lies in up to
    ``n`` units, so one word's presence changes up to ``n`` counts: the L2 sensitivity of
    the released counts becomes ``sqrt(n)``, not the paper's ``Delta N = 1``.

    Parameters
    ----------
    corpus : Corpus
        The documents.
    n : int
        Window length (>= 1).
    overlapping : bool
        Sliding windows of stride 1 instead of a partition into chunks.

    Returns
    -------
    SemanticUnits
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    lengths = corpus.doc_lengths
    if not overlapping:
        per_doc = -(-lengths // n)  # ceil
        unit_ptr = np.zeros(corpus.n_docs + 1, dtype=np.int64)
        np.cumsum(per_doc, out=unit_ptr[1:])
        doc_ids = corpus.doc_ids
        position = np.arange(corpus.n_tokens, dtype=np.int64) - corpus.doc_ptr[doc_ids]
        unit_of = unit_ptr[doc_ids] + position // n
        unit_doc = np.repeat(np.arange(corpus.n_docs, dtype=np.int64), per_doc)
        return _units_from_pairs(unit_of, corpus.tokens, unit_doc, corpus.n_docs, corpus.n_words)
    per_doc = np.where(lengths >= n, lengths - n + 1, (lengths > 0).astype(np.int64))
    width = np.minimum(lengths, n)
    unit_doc = np.repeat(np.arange(corpus.n_docs, dtype=np.int64), per_doc)
    first = np.zeros(corpus.n_docs + 1, dtype=np.int64)
    np.cumsum(per_doc, out=first[1:])
    starts = corpus.doc_ptr[unit_doc] + np.arange(unit_doc.size, dtype=np.int64) - first[unit_doc]
    offsets = np.arange(n, dtype=np.int64)
    keep = offsets[None, :] < width[unit_doc][:, None]
    unit_of = np.broadcast_to(np.arange(unit_doc.size, dtype=np.int64)[:, None], keep.shape)[keep]
    tokens = corpus.tokens[(starts[:, None] + offsets[None, :])[keep]] if unit_doc.size else corpus.tokens[:0]
    return _units_from_pairs(unit_of, tokens, unit_doc, corpus.n_docs, corpus.n_words)


def chunk_offsets(segment_ptr: np.ndarray, n: int) -> np.ndarray:
    """Offsets that cut every segment into consecutive chunks of ``n`` tokens.

    The paper's units: "we split each document into several sentences. Then, we consider
    each three words in these sentences as a semantic unit." With sentence offsets as
    ``segment_ptr`` the chunks never cross a sentence; with ``doc_ptr`` they are
    :func:`ngram_units`' chunks. The last chunk of a segment may be shorter than ``n``.

    Parameters
    ----------
    segment_ptr : np.ndarray
        Non-decreasing offsets into the tokens, from 0 to ``n_tokens``.
    n : int
        Chunk length (>= 1).

    Returns
    -------
    np.ndarray
        ``int64`` unit offsets for :func:`boundary_units` (every segment offset included).
    """
    if n < 1:
        raise ValueError("n must be >= 1")
    ptr = np.asarray(segment_ptr, dtype=np.int64)
    lengths = np.diff(ptr)
    per_segment = -(-lengths // n)  # ceil
    first = np.repeat(np.cumsum(per_segment) - per_segment, per_segment)
    starts = np.repeat(ptr[:-1], per_segment) + n * (np.arange(first.size, dtype=np.int64) - first)
    return np.union1d(np.append(starts, ptr[-1]), ptr)


def boundary_units(corpus: Corpus, unit_ptr: np.ndarray) -> SemanticUnits:
    """Semantic units given by token-level boundaries (sentences, paragraphs, ...).

    Parameters
    ----------
    corpus : Corpus
        The documents.
    unit_ptr : np.ndarray
        Non-decreasing integer offsets into ``corpus.tokens``, starting at 0 and ending at
        ``corpus.n_tokens``: unit ``j`` is ``tokens[unit_ptr[j]:unit_ptr[j + 1]]``. Units nest
        within documents: every document start ``corpus.doc_ptr`` must be one of the offsets.
        Empty units (repeated offsets) are dropped.

    Returns
    -------
    SemanticUnits
    """
    ptr = np.asarray(unit_ptr, dtype=np.int64)
    if ptr.ndim != 1 or ptr.size < 1 or ptr[0] != 0 or ptr[-1] != corpus.n_tokens or np.any(np.diff(ptr) < 0):
        raise ValueError("unit_ptr must be non-decreasing, start at 0 and end at n_tokens")
    if not np.all(np.isin(corpus.doc_ptr, ptr)):
        raise ValueError("units must nest within documents: every doc_ptr offset must be a unit boundary")
    ptr = np.unique(ptr)  # drops empty units
    starts = ptr[:-1]
    unit_doc = np.searchsorted(corpus.doc_ptr, starts, side="right") - 1
    unit_of = np.repeat(np.arange(starts.size, dtype=np.int64), np.diff(ptr))
    return _units_from_pairs(unit_of, corpus.tokens, unit_doc.astype(np.int64), corpus.n_docs, corpus.n_words)


def random_doc_topic(n_docs: int, n_topics: int, rng: np.random.Generator) -> np.ndarray:
    """Random ``p(z|d)`` (Algorithm 1, line 2): each row drawn from a flat Dirichlet."""
    return rng.dirichlet(np.ones(n_topics), size=n_docs)


def random_topic_word(n_topics: int, n_words: int, rng: np.random.Generator) -> np.ndarray:
    """Random ``p(w|z)`` (Algorithm 1, line 2): each row drawn from a flat Dirichlet, floored at 1e-12.

    The paper lets every party initialize ``p(w|z)`` on its own; topic ``k`` of different
    parties would then be unrelated in the first upload. Draw it from a seed shared by all
    parties (or from the server) so that every party starts from the same topics.
    """
    phi = rng.dirichlet(np.ones(n_words), size=n_topics) + 1e-12
    return phi / phi.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class LocalStep:
    """Result of one local PC-TD iteration (Algorithm 1, lines 4-10).

    Attributes
    ----------
    responsibilities : np.ndarray
        ``(U, K)`` perturbed posteriors ``r^_ijk`` of eq. (5); each row sums to 1.
    doc_topic : np.ndarray
        ``(D, K)`` local ``p(z_k|d_i)`` of eq. (7); each row sums to 1.
    statistic : np.ndarray
        ``(K, V)`` upload ``M_t(w, z_k)`` of eq. (10); noisy, may hold negative entries.
    """

    responsibilities: np.ndarray
    doc_topic: np.ndarray
    statistic: np.ndarray


def _check_params(units: SemanticUnits, topic_word: np.ndarray, doc_topic: np.ndarray, sigma: float):
    phi = np.asarray(topic_word, dtype=np.float64)
    theta = np.asarray(doc_topic, dtype=np.float64)
    if phi.ndim != 2 or phi.shape[1] != units.n_words:
        raise ValueError("topic_word must be (K, V) with V the units' vocabulary size")
    if theta.shape != (units.n_docs, phi.shape[0]):
        raise ValueError("doc_topic must be (n_docs, K)")
    if not np.all(np.isfinite(phi)) or np.any(phi <= 0):
        raise ValueError("topic_word must be finite and strictly positive (its log meets noise on every word)")
    if not np.all(np.isfinite(theta)) or np.any(theta < 0) or np.any(theta.sum(axis=1) <= 0):
        raise ValueError("doc_topic must be finite and non-negative, with positive mass in every row")
    if not sigma >= 0:
        raise ValueError("sigma must be >= 0")
    return phi, theta


def _log_theta(theta: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore"):
        return np.log(theta)


def _normalize_log(log_weights: np.ndarray) -> np.ndarray:
    """Row-wise softmax of log weights (log-sum-exp, no underflow to 0/0).

    Weights below ``e^-700`` times the row's largest are set to exactly 0 rather than left to
    become subnormal numbers (which slow every later product down by orders of magnitude);
    this changes the result by less than float64 rounding.
    """
    log_weights = log_weights - log_weights.max(axis=1, keepdims=True)
    log_weights[log_weights < -700.0] = -np.inf
    np.exp(log_weights, out=log_weights)
    log_weights /= log_weights.sum(axis=1, keepdims=True)
    return log_weights


def _doc_topic(units: SemanticUnits, resp: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """Eq. (7): per document, the sum of its units' r^ over their total; no units: keep ``previous``."""
    ptr = units.doc_unit_ptr
    has_units = ptr[1:] > ptr[:-1]
    theta = np.array(previous, dtype=np.float64, copy=True)
    if resp.shape[0]:
        sums = np.add.reduceat(resp, ptr[:-1][has_units], axis=0)
        theta[has_units] = sums / sums.sum(axis=1, keepdims=True)
    return theta


def _psd_factor(gram: np.ndarray) -> np.ndarray:
    """``B`` with ``B B^T = gram`` for a symmetric PSD matrix (eigenvalues clipped at 0)."""
    vals, vecs = np.linalg.eigh(0.5 * (gram + gram.T))
    return vecs * np.sqrt(np.clip(vals, 0.0, None))


def local_em_step(units: SemanticUnits, topic_word: np.ndarray, doc_topic: np.ndarray, sigma: float,
                  rng: np.random.Generator | int | None = None) -> LocalStep:
    """One private local iteration of PC-TD (Algorithm 1, lines 4-10), exact fast noise.

    Equivalent in distribution to adding ``N(0, sigma^2)`` to all ``U x V`` counts
    (eq. 4, Algorithm 1 line 6) and evaluating eqs. (5), (7) and (10) on them, as
    :func:`naive_local_em_step` does, but draws only ``U K + K V`` normals (derivation in
    the module docstring). ``sigma = 0`` is the exact noiseless EM (eqs. 3, 7 and the
    numerator of eq. 8).

    Parameters
    ----------
    units : SemanticUnits
        The party's units and counts ``N_ijw``.
    topic_word : np.ndarray
        ``(K, V)`` current global ``p(w|z)``, strictly positive.
    doc_topic : np.ndarray
        ``(D, K)`` the party's current ``p(z|d)``.
    sigma : float
        Noise standard deviation (sensitivity ``Delta N = 1``, so also the noise multiplier).
    rng : numpy.random.Generator or int, optional
        Source of the noise (required when ``sigma > 0``).

    Returns
    -------
    LocalStep
    """
    phi, theta = _check_params(units, topic_word, doc_topic, sigma)
    n_topics = phi.shape[0]
    log_phi = np.log(phi)
    counts = units.counts
    log_r = _log_theta(theta)[units.unit_doc] + np.asarray(counts @ log_phi.T)
    noisy = sigma > 0 and units.n_units > 0
    if noisy:
        if rng is None:
            raise ValueError("sigma > 0 needs a random generator or seed")
        rng = np.random.default_rng(rng)
        q, t = np.linalg.qr(log_phi.T)  # L^T = Q T, Q: (V, r) orthonormal, r = min(K, V)
        xi = rng.standard_normal((units.n_units, q.shape[1]))
        xi *= sigma  # Xi = E Q, iid N(0, sigma^2)
        log_r += xi @ t  # G = E L^T = Xi T
    resp = _normalize_log(log_r)
    statistic = np.asarray((counts.T @ resp).T)  # sum_ij N_ijw r^_ijk
    if noisy:
        statistic += (resp.T @ xi) @ q.T  # R^T Xi Q^T
        w = _psd_factor(resp.T @ resp) @ rng.standard_normal((n_topics, units.n_words))
        w *= sigma  # columns ~ N(0, sigma^2 R^T R)
        statistic += w - (w @ q) @ q.T  # R^T E_perp = W (I - Q Q^T)
    return LocalStep(resp, _doc_topic(units, resp, theta), np.ascontiguousarray(statistic))


def naive_local_em_step(units: SemanticUnits, topic_word: np.ndarray, doc_topic: np.ndarray, sigma: float,
                        rng: np.random.Generator | int | None = None) -> LocalStep:
    """Reference implementation of :func:`local_em_step` with the full ``U x V`` noise draw.

    Literally Algorithm 1, lines 5-9: dense ``N^ = N + E`` with ``E ~ N(0, sigma^2)`` on
    every entry (eq. 4), eq. (5) in log space, eq. (7), and eq. (10) as ``r^^T N^``. O(U V)
    memory and time: for tests and small vocabularies only (refuses more than 2e7 entries).
    """
    phi, theta = _check_params(units, topic_word, doc_topic, sigma)
    if units.n_units * units.n_words > _NAIVE_MAX_ENTRIES:
        raise ValueError("naive_local_em_step is for small U x V only")
    noisy_counts = units.counts.toarray()
    if sigma > 0:
        if rng is None:
            raise ValueError("sigma > 0 needs a random generator or seed")
        noisy_counts += sigma * np.random.default_rng(rng).standard_normal(noisy_counts.shape)
    resp = _normalize_log(_log_theta(theta)[units.unit_doc] + noisy_counts @ np.log(phi).T)
    return LocalStep(resp, _doc_topic(units, resp, theta), resp.T @ noisy_counts)


def unit_log_likelihood(units: SemanticUnits, topic_word: np.ndarray, doc_topic: np.ndarray) -> float:
    """Observed-data log-likelihood of the units (eq. 2 marginalized over z, ``p(d_i)`` left out).

    ``sum_ij log sum_k p(z_k|d_i) prod_w p(w|z_k)^{N_ijw}`` on the noiseless counts: the
    quantity the noiseless EM (``sigma = 0``) never decreases.
    """
    phi, theta = _check_params(units, topic_word, doc_topic, 0.0)
    log_joint = _log_theta(theta)[units.unit_doc] + np.asarray(units.counts @ np.log(phi).T)
    return float(logsumexp(log_joint, axis=1).sum()) if units.n_units else 0.0
