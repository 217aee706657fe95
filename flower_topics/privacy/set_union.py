"""Differentially private set union for vocabulary agreement, one party at a time.

Reference: S. Gopi, P. Gulhane, J. Kulkarni, J. H. Shen, M. Shokouhi, S. Yekhanin,
"Differentially Private Set Union", ICML 2020 (PMLR 119:3627-3636; arXiv:2002.09745).

Which variant of the paper this is
----------------------------------
The paper's high-level meta-algorithm (its Algorithm 1: every user contributes a bounded
set of items to a histogram, noise is added to every item of the histogram, only items
whose noisy count exceeds a threshold ``rho`` are released) instantiated with the
**"count" update policy** -- the baseline of Korolova et al. (WWW 2009) and Wilson et al.
(PoPETs 2020) that the paper compares against: each unit contributes at most ``Delta_0``
distinct items, chosen at random, each with weight exactly 1. It is *not* the paper's
weighted baseline (weights ``1/Delta_0`` or ``1/sqrt(Delta_0)``) nor its
contribution-dependent Policy Laplace / Policy Gaussian algorithms (those need the running
histogram of all other users, i.e. a trusted curator). The thresholds below are the
"count" thresholds of the paper, identical to the ``Algorithm.COUNT`` branch of the
authors' reference code (``calculate_threshold`` in ``gen_histogram.py`` of
github.com/heyyjudes/differentially-private-set-union):

- Gaussian: ``sigma`` = analytic Gaussian mechanism (Balle & Wang, ICML 2018, Thm. 8) for
  ``(eps, delta/2)`` and L2 sensitivity ``sqrt(Delta_0)``;
  ``rho = 1 + sigma * Phi^{-1}((1 - delta/2)^(1/Delta_0))``.
- Laplace: ``b = Delta_0 / eps`` (L1 sensitivity ``Delta_0``);
  ``rho = 1 + b * ln(1 / (2 (1 - (1 - delta)^(1/Delta_0))))``.

Two departures from the paper's setting, both deliberate:

1. **Unit of privacy: a document, not a user.** A "user" of the paper is one document here:
   neighbouring datasets differ by adding or removing one document of one party.
2. **Local (per-party) noise and thresholding, no trusted curator.** The paper runs the
   mechanism once on the histogram of *all* users. Here the server is not trusted with raw
   counts, so each party runs the whole mechanism (noise *and* threshold) on its own
   histogram; what a party sends is already ``(eps, delta)``-DP with respect to its
   documents. The server takes the union of the parties' released words and sums their
   noisy counts (post-processing, no further privacy cost; min-df etc. on the summed noisy
   counts are post-processing too). **Cost:** a word must clear ``rho`` inside a single
   party's histogram. A word spread thinly over many parties (say 3 documents in each of
   10 parties, 30 in all) is lost whenever ``rho`` exceeds 3 even though a central
   mechanism would release it; and the summed noise has variance ``K sigma^2`` over the
   ``K`` parties releasing the word. Thresholding the *sum* of noisy party histograms
   instead would not be DP: every party would have to send its noisy count of every word
   it holds, and the mere presence of a key (a word only one document holds) would reveal
   it -- the threshold must act before anything leaves the party.

Derivation of the calibration (per party, document-level, add/remove neighbours)
-------------------------------------------------------------------------------
Let ``H`` be the party's bounded histogram on ``D`` and ``H'`` on ``D' = D + {x}``; the
added document ``x`` contributes ``m <= Delta_0`` distinct words, each with count +1. Split
them into ``K`` (words already in ``supp(H)``) and ``U`` (``t = |U|`` new words, each with
count exactly 1 in ``H'``). The mechanism is ``A(H) = {(w, H_w + Z_w) : H_w + Z_w > rho}``
with independent noise ``Z_w``.

* On the coordinates of ``supp(H)`` the two histograms differ by the indicator of ``K``:
  L2 norm ``sqrt(|K|) <= sqrt(Delta_0)``, L1 norm ``|K| <= Delta_0``. Releasing all noisy
  counts there is the Gaussian mechanism, ``(eps, delta_G)``-DP with ``delta_G = delta/2``
  for the analytic ``sigma`` (Laplace: ``(eps, 0)``-DP with ``b = Delta_0/eps``);
  thresholding is post-processing.
* The words of ``U`` never appear in ``A(H)``; in ``A(H')`` none of them appears (event
  ``E``) with probability ``Pr[E] = F(rho - 1)^t`` where ``F`` is the noise CDF. We ask
  ``1 - Pr[E] <= delta_U`` for every ``t <= Delta_0``; the worst case is ``t = Delta_0``,
  giving ``F(rho - 1) = (1 - delta_U)^(1/Delta_0)``, i.e.
  ``rho = 1 + sigma Phi^{-1}((1 - delta_U)^(1/Delta_0))`` (Gaussian) and, from
  ``Pr[1 + Lap(b) > rho] = exp(-(rho - 1)/b) / 2``,
  ``rho = 1 + b ln(1 / (2 (1 - (1 - delta_U)^(1/Delta_0))))`` (Laplace).
* Combining (as in the paper's proofs, and Wilson et al. Thm. 1): for any output set ``S``,
  ``Pr[A(H') in S] <= Pr[A(H') in S, E] + (1 - Pr[E]) <= e^eps Pr[A(H) in S] + delta_G + delta_U``;
  conversely, with ``q = Pr[B(H') in S]`` for the supp-restricted part ``B`` (independent
  of ``E``), ``Pr[A(H) in S] <= min(1, e^eps q + delta_G) <= e^eps Pr[E] q + delta_G + delta_U``
  (if ``e^eps q <= 1`` the gap ``e^eps q (1 - Pr[E])`` is at most ``delta_U``; otherwise the
  right side already exceeds 1). Hence ``(eps, delta_G + delta_U)``-DP: Gaussian
  ``delta_G = delta_U = delta/2``; Laplace ``delta_G = 0, delta_U = delta``.
* The random choice of which ``Delta_0`` words a long document contributes is made with
  the party's secret rng, independently per document; the guarantee holds for every fixed
  choice, hence for the mixture (joint convexity).
* A word held by a single document of the party is released with probability
  ``1 - (1 - delta/2)^(1/Delta_0) <= delta/(2 Delta_0)`` (Gaussian) or
  ``1 - (1 - delta)^(1/Delta_0) <= delta/Delta_0`` (Laplace). Note that the single-word
  threshold ``1 + sigma Phi^{-1}(1 - delta/2)`` would *not* suffice: a new document holding
  ``Delta_0`` new words would reveal one of them with probability ``~ Delta_0 delta/2``.

The analytic Gaussian ``sigma`` is computed in closed form here (Balle & Wang 2018,
Thm. 8: ``Phi(Delta/(2 sigma) - eps sigma/Delta) - e^eps Phi(-Delta/(2 sigma) - eps sigma/Delta) <= delta``,
solved for ``sigma``). This is the exact privacy profile of the Gaussian mechanism, i.e. the
value Google's ``dp_accounting`` returns for a single Gaussian release
(``dp_accounting.pld.privacy_loss_distribution.from_gaussian_mechanism`` / its
``GaussianPrivacyLoss``); ``dp_accounting`` is not a dependency of this package, so the
tests compare against it only where it is importable.

Caveats: floating-point Laplace/Gaussian samplers are subject to Mironov's (CCS 2012)
least-significant-bit attacks; the guarantee is per release (a party that releases its
vocabulary twice spends twice); the noisy counts, not only the word set, are released.
"""

from __future__ import annotations

import math
from typing import Any, Literal, Sequence

import numpy as np
import scipy.sparse as sp

Noise = Literal["gaussian", "laplace"]

#: How the Gaussian sigma is obtained (the ``accountant`` of the privacy report).
GAUSSIAN_ACCOUNTANT = ("analytic Gaussian mechanism (Balle & Wang 2018, Thm. 8; exact, equals dp_accounting's "
                       "Gaussian PLD), delta/2 for the noise + delta/2 for the threshold")
LAPLACE_ACCOUNTANT = "Laplace mechanism (pure eps), all of delta for the threshold"


# --------------------------------------------------------------------------------------------
# party side: contribution bounding
# --------------------------------------------------------------------------------------------

def _structure(doc_word_sets: sp.spmatrix | sp.sparray | Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """``(indptr, indices)`` of the documents with one entry per distinct (document, word) pair."""
    if sp.issparse(doc_word_sets):
        m = sp.csr_matrix(doc_word_sets)  # no copy when already CSR
        if m.nnz and not np.all(m.data != 0):  # explicit zeros are absent words
            m = m.copy()
            m.eliminate_zeros()
        if not m.has_canonical_format:
            m = m.copy()
            m.sum_duplicates()
        return m.indptr.astype(np.int64), m.indices.astype(np.int64)
    docs = [np.asarray(d).ravel() for d in doc_word_sets]
    lengths = np.fromiter((d.size for d in docs), dtype=np.int64, count=len(docs))
    indices = np.concatenate(docs).astype(np.int64) if lengths.sum() else np.zeros(0, dtype=np.int64)
    if indices.size and indices.min() < 0:
        raise ValueError("word ids must be non-negative integers")
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    n_words = int(indices.max()) + 1 if indices.size else 0
    m = sp.csr_matrix((np.ones(indices.size, dtype=np.int8), indices, indptr), shape=(len(docs), n_words))
    m.sum_duplicates()  # sorted, one entry per (document, word)
    return m.indptr.astype(np.int64), m.indices.astype(np.int64)


def bound_contributions(doc_word_sets: sp.spmatrix | sp.sparray | Sequence[np.ndarray],
                        max_words_per_document: int,
                        rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A party's bounded histogram: each document contributes at most ``Delta_0`` distinct words, once each.

    The "count" contribution policy of Gopi et al. (2020) with a document as the unit: a
    document with more than ``Delta_0`` distinct words contributes a uniformly random subset
    of ``Delta_0`` of them (each subset equally likely, independently per document), chosen
    with the party's secret ``rng``; repeated occurrences of a word in a document count once.

    Parameters
    ----------
    doc_word_sets : scipy.sparse matrix or sequence of int arrays
        One row (CSR/any sparse format; nonzero entries are the words present, their values
        are ignored) or one array of word ids (duplicates allowed) per document.
    max_words_per_document : int
        ``Delta_0 >= 1``.
    rng : numpy.random.Generator
        The party's SECRET generator (seeded from OS entropy or a node-local secret, e.g.
        :func:`secret_rng`), never from the run config: the selection is part of the mechanism.

    Returns
    -------
    word_ids : ndarray of int64, shape (n,)
        Sorted distinct word ids with a positive count.
    counts : ndarray of int64, shape (n,)
        Number of the party's documents that contribute each word.
    """
    delta0 = _check_delta0(max_words_per_document)
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator seeded from a secret (see secret_rng)")
    indptr, words = _structure(doc_word_sets)
    lengths = np.diff(indptr)
    if words.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    long_docs = lengths > delta0
    if long_docs.any():
        # Uniform random Delta_0-subset of each long document: iid U[0,1) keys, keep the Delta_0
        # smallest (argpartition), batched over documents of equal length -- O(total entries).
        chosen = [words[np.repeat(~long_docs, lengths)]]
        long_rows = np.flatnonzero(long_docs)
        long_len = lengths[long_rows]
        order = np.argsort(long_len, kind="stable")
        long_rows, long_len = long_rows[order], long_len[order]
        bounds = np.flatnonzero(np.diff(long_len)) + 1
        for rows, length in zip(np.split(long_rows, bounds), long_len[np.concatenate([[0], bounds])]):
            keys = rng.random((rows.size, int(length)))
            pick = np.argpartition(keys, delta0 - 1, axis=1)[:, :delta0]
            chosen.append(words[indptr[rows][:, None] + pick].ravel())
        words = np.concatenate(chosen)
    return _histogram(words)


def _histogram(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    if words.size == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    top = int(words.max()) + 1
    if top <= 4 * words.size + (1 << 20):
        counts = np.bincount(words, minlength=top)
        ids = np.flatnonzero(counts).astype(np.int64)
        return ids, counts[ids].astype(np.int64)
    ids, counts = np.unique(words, return_counts=True)
    return ids.astype(np.int64), counts.astype(np.int64)


def secret_rng() -> np.random.Generator:
    """A generator seeded from OS entropy (``np.random.default_rng()`` without a seed): for the mechanism only."""
    return np.random.default_rng()


# --------------------------------------------------------------------------------------------
# calibration
# --------------------------------------------------------------------------------------------

def analytic_gaussian_delta(sigma: float, epsilon: float, sensitivity: float = 1.0) -> float:
    """Exact ``delta(eps)`` of the Gaussian mechanism (Balle & Wang 2018, Thm. 8).

    ``Phi(Delta/(2 sigma) - eps sigma/Delta) - e^eps Phi(-Delta/(2 sigma) - eps sigma/Delta)``.
    """
    if not sigma > 0 or not sensitivity > 0 or epsilon < 0:
        raise ValueError("sigma and sensitivity must be > 0, epsilon >= 0")
    from scipy.special import log_ndtr, ndtr  # here: its import is slow, and only this needs it

    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    return float(ndtr(a - b) - math.exp(epsilon + log_ndtr(-a - b)))


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Smallest ``sigma`` for which the Gaussian mechanism is ``(epsilon, delta)``-DP (Balle & Wang 2018).

    Solves :func:`analytic_gaussian_delta` ``= delta`` (decreasing in ``sigma``) to relative
    precision ~1e-12 and returns a value on the safe side (``delta(sigma) <= delta``).
    """
    if not epsilon > 0 or not 0 < delta < 1 or not sensitivity > 0:
        raise ValueError("need epsilon > 0, 0 < delta < 1, sensitivity > 0")
    from scipy.optimize import brentq  # here: its import is slow, and few runs need it

    def excess(log_s: float) -> float:
        return analytic_gaussian_delta(math.exp(log_s), epsilon, 1.0) - delta

    lo, hi = -10.0, 10.0
    while excess(lo) < 0:
        lo -= 10.0
    while excess(hi) > 0:
        hi += 10.0
    log_s = brentq(excess, lo, hi, xtol=1e-14, rtol=1e-14, maxiter=500)
    s = math.exp(log_s)
    while analytic_gaussian_delta(s, epsilon, 1.0) > delta:  # guard against the root's rounding
        s *= 1.0 + 1e-12
    return s * sensitivity


def _check_delta0(max_words_per_document: int) -> int:
    if int(max_words_per_document) != max_words_per_document or max_words_per_document < 1:
        raise ValueError("max_words_per_document must be an integer >= 1")
    return int(max_words_per_document)


def _check_noise(noise: str) -> Noise:
    if noise not in ("gaussian", "laplace"):
        raise ValueError(f"noise must be 'gaussian' or 'laplace', got {noise!r}")
    return noise  # type: ignore[return-value]


def single_document_release_probability(delta: float, max_words_per_document: int,
                                        noise: Noise = "gaussian") -> float:
    """Probability that a word held by one document only is released: ``1 - (1 - delta_U)^(1/Delta_0)``.

    ``delta_U = delta/2`` (Gaussian) or ``delta`` (Laplace); see the module docstring.
    """
    delta0 = _check_delta0(max_words_per_document)
    delta_u = delta / 2.0 if _check_noise(noise) == "gaussian" else delta
    return float(-math.expm1(math.log1p(-delta_u) / delta0))


def calibrate(epsilon: float, delta: float, max_words_per_document: int,
              noise: Noise = "gaussian") -> tuple[float, float]:
    """Noise scale and release threshold for a per-party ``(epsilon, delta)`` guarantee per document.

    Parameters
    ----------
    epsilon : float
        ``> 0``.
    delta : float
        In ``(0, 1)``; Gaussian: half for the noise, half for the threshold; Laplace: all of
        it for the threshold.
    max_words_per_document : int
        ``Delta_0``, the contribution bound used in :func:`bound_contributions`.
    noise : {"gaussian", "laplace"}

    Returns
    -------
    scale : float
        Gaussian: ``sigma`` = analytic Gaussian sigma for ``(eps, delta/2)`` and L2 sensitivity
        ``sqrt(Delta_0)``. Laplace: ``b = Delta_0 / eps`` (L1 sensitivity ``Delta_0``).
    threshold : float
        ``rho``: Gaussian ``1 + sigma Phi^{-1}((1 - delta/2)^(1/Delta_0))``; Laplace
        ``1 + b ln(1 / (2 (1 - (1 - delta)^(1/Delta_0))))`` (Gopi et al. 2020, "count" variant).
    """
    delta0 = _check_delta0(max_words_per_document)
    noise = _check_noise(noise)
    if not epsilon > 0 or not 0 < delta < 1:
        raise ValueError("need epsilon > 0 and 0 < delta < 1")
    p = single_document_release_probability(delta, delta0, noise)  # tail mass allowed per new word
    if noise == "gaussian":
        from scipy.special import ndtri

        sigma = analytic_gaussian_sigma(epsilon, delta / 2.0, math.sqrt(delta0))
        return sigma, 1.0 + sigma * float(-ndtri(p))  # -Phi^{-1}(p) = Phi^{-1}(1 - p), accurate for tiny p
    b = delta0 / epsilon
    if p > 0.5:
        raise ValueError("delta too large for the Laplace threshold (needs rho >= 1)")
    return b, 1.0 + b * math.log(1.0 / (2.0 * p))


# --------------------------------------------------------------------------------------------
# the release
# --------------------------------------------------------------------------------------------

def private_histogram(word_ids: np.ndarray, counts: np.ndarray, scale: float, threshold: float,
                      noise: Noise, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Noise every count, release the words whose noisy count exceeds ``threshold`` (Gopi et al., Alg. 1).

    Parameters
    ----------
    word_ids, counts : ndarray, shape (n,)
        The bounded histogram from :func:`bound_contributions` (distinct ids, counts >= 1).
    scale, threshold : float
        From :func:`calibrate` (``sigma`` or ``b``, and ``rho``).
    noise : {"gaussian", "laplace"}
    rng : numpy.random.Generator
        The party's secret generator.

    Returns
    -------
    released_ids : ndarray of int64
        Word ids whose noisy count is ``> threshold`` (in input order).
    noisy_counts : ndarray of float64
        Their noisy counts (what the server may sum over parties and threshold by min-df).
    """
    noise = _check_noise(noise)
    if not isinstance(rng, np.random.Generator):
        raise TypeError("rng must be a numpy.random.Generator seeded from a secret (see secret_rng)")
    if not scale > 0:
        raise ValueError("scale must be > 0")
    ids = np.asarray(word_ids, dtype=np.int64).ravel()
    c = np.asarray(counts, dtype=np.float64).ravel()
    if ids.shape != c.shape:
        raise ValueError("word_ids and counts must have the same length")
    z = rng.normal(0.0, scale, size=c.size) if noise == "gaussian" else rng.laplace(0.0, scale, size=c.size)
    noisy = c + z
    keep = noisy > threshold
    return ids[keep], noisy[keep]


def release_vocabulary(doc_word_sets: sp.spmatrix | sp.sparray | Sequence[np.ndarray], epsilon: float,
                       delta: float, max_words_per_document: int, rng: np.random.Generator,
                       noise: Noise = "gaussian") -> tuple[np.ndarray, np.ndarray]:
    """A party's whole release: :func:`bound_contributions`, :func:`calibrate`, :func:`private_histogram`."""
    scale, threshold = calibrate(epsilon, delta, max_words_per_document, noise)
    ids, counts = bound_contributions(doc_word_sets, max_words_per_document, rng)
    return private_histogram(ids, counts, scale, threshold, noise, rng)


def merge_releases(releases: Sequence[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Server side (post-processing): union of the parties' released words with their noisy counts summed."""
    if not releases:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
    ids = np.concatenate([np.asarray(r[0], dtype=np.int64) for r in releases])
    vals = np.concatenate([np.asarray(r[1], dtype=np.float64) for r in releases])
    uniq, inv = np.unique(ids, return_inverse=True)
    return uniq, np.bincount(inv, weights=vals, minlength=uniq.size)


def privacy_summary(epsilon: float, delta: float, max_words_per_document: int,
                    noise: Noise = "gaussian") -> dict[str, Any]:
    """Keyword arguments for :class:`flower_topics.privacy.privacy_report.PrivacyReport` (one release, unit: document).

    ``PrivacyReport(**privacy_summary(...))`` gives the report of a party's vocabulary release.
    """
    scale, threshold = calibrate(epsilon, delta, max_words_per_document, noise)
    accountant = GAUSSIAN_ACCOUNTANT if noise == "gaussian" else LAPLACE_ACCOUNTANT
    return {
        "mechanism": f"DP set union (Gopi et al. 2020, count policy, {noise} noise, per-party threshold)",
        "unit": "document",
        "accountant": accountant,
        "rounds": 1,
        "epsilon_round": float(epsilon),
        "delta_round": float(delta),
        "epsilon": float(epsilon),
        "delta": float(delta),
        "guarantee": (f"each party's released vocabulary and noisy counts are ({epsilon:g}, {delta:g})-DP w.r.t. "
                      f"adding/removing one of its documents (each document contributes <= "
                      f"{max_words_per_document} distinct words); the server's union/sum is post-processing"),
        "details": {
            "set_union_noise": noise,
            "set_union_scale": scale,
            "set_union_threshold": threshold,
            "max_words_per_document": int(max_words_per_document),
            "single_document_release_probability": single_document_release_probability(
                delta, max_words_per_document, noise),
        },
    }
