"""One document's words as a small block of topic columns, for the per-document mixture kernels.

The fold-in EM (:func:`flower_topics.metrics.inference.fold_in`) and the SVI E-step
(:func:`flower_topics.models.svi.e_step`) both iterate, for one document at a time, the same two
steps over its words' rows of a ``V x K`` topic matrix: each word's weight ``n_dw / sum_k
theta_k m_wk`` and the weighted sum ``acc_k = sum_w weight_w m_wk``. The rows are gathered once
into a block (zero rows pad it to a multiple of 4) that every iteration reuses, and both steps
work on four words at a time: four independent sums over topics, then one pass over the topics
adding the four words. The sums over topics may be reassociated (numba ``fastmath`` reassoc and
contract only: NaN, infinities and signed zeros keep their IEEE meaning), which vectorizes them.
``benchmarks/bench_evaluation.py`` measures it against one word at a time.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True, nogil=True)
def longest_document(indptr: np.ndarray) -> int:  # pragma: no cover - compiled
    """The most words a document of ``indptr`` (a CSR row pointer) has: a block of ``longest + 3`` rows and a
    weight buffer of as many hold any of them with its padding. (The kernels allocate them themselves: arrays
    made in the kernel vectorize better than arrays returned from a call.)"""
    longest = 0
    for d in range(indptr.size - 1):
        longest = max(longest, indptr[d + 1] - indptr[d])
    return longest


@njit(cache=True, nogil=True)
def gather_block(matrix_t: np.ndarray, indices: np.ndarray, start: int, n_local: int, block: np.ndarray
                 ) -> int:  # pragma: no cover - compiled
    """Copy the rows ``matrix_t[indices[start + i]]`` of one document's ``n_local`` words into ``block``, zero the
    padding rows up to a multiple of 4, and return that padded length."""
    n_padded = (n_local + 3) // 4 * 4
    for i in range(n_local):
        block[i] = matrix_t[indices[start + i]]
    for i in range(n_local, n_padded):
        block[i] = 0.0
    return n_padded


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, inline="always")  # SIMD sums over topics
def word_weights(block: np.ndarray, n_padded: int, counts: np.ndarray, start: int, theta: np.ndarray,
                 weight: np.ndarray) -> None:  # pragma: no cover - compiled
    """``weight_i = counts[start + i] / sum_k theta_k block[i, k]``, four words at a time; a word whose sum is 0
    (a padding row, or a word of probability 0 under ``theta``) gets weight 0 and its count is not read."""
    for i in range(0, n_padded, 4):
        p0 = p1 = p2 = p3 = 0.0
        for k in range(theta.size):
            r = theta[k]
            p0 += r * block[i, k]
            p1 += r * block[i + 1, k]
            p2 += r * block[i + 2, k]
            p3 += r * block[i + 3, k]
        weight[i] = counts[start + i] / p0 if p0 > 0.0 else 0.0
        weight[i + 1] = counts[start + i + 1] / p1 if p1 > 0.0 else 0.0
        weight[i + 2] = counts[start + i + 2] / p2 if p2 > 0.0 else 0.0
        weight[i + 3] = counts[start + i + 3] / p3 if p3 > 0.0 else 0.0


@njit(cache=True, nogil=True, fastmath={"reassoc", "contract"}, inline="always")  # SIMD sums over topics
def weighted_sum(block: np.ndarray, n_padded: int, weight: np.ndarray, acc: np.ndarray
                 ) -> None:  # pragma: no cover - compiled
    """``acc_k = sum_i weight_i block[i, k]``, four rows a pass over the topics."""
    acc[:] = 0.0
    for i in range(0, n_padded, 4):
        w0, w1, w2, w3 = weight[i], weight[i + 1], weight[i + 2], weight[i + 3]
        for k in range(acc.size):
            acc[k] += w0 * block[i, k] + w1 * block[i + 1, k] + w2 * block[i + 2, k] + w3 * block[i + 3, k]
