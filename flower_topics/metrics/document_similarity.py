"""Document similarity-based score (DSS) of the gFedNTM paper (section 4.1.1, eqs. 4-5).

Calvo-Bartolomé and Arenas-García ("Federated Neural Topic Models") score how well a
model characterizes documents, when their true topic proportions are known (synthetic
corpora), by comparing two document-by-document similarity matrices: one from the true
proportions, one from the model's inferred proportions for the same documents. The two
sets of proportions may live in different topic spaces (``K`` true topics, ``K_model``
inferred ones, in any order): only the similarities between documents are compared.
"""

from __future__ import annotations

import numpy as np


def _check_theta(theta: np.ndarray, name: str) -> np.ndarray:
    rows = np.ascontiguousarray(theta, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[1] < 1:
        raise ValueError(f"{name} must be a (D, K) matrix, got shape {rows.shape}")
    if not np.all(np.isfinite(rows)) or np.any(rows < 0):
        raise ValueError(f"{name} must be finite and non-negative")
    if rows.shape[0] and not np.allclose(rows.sum(axis=1), 1.0, atol=1e-6):
        raise ValueError(f"each row of {name} must sum to 1 (document-topic proportions)")
    return rows


def document_similarities(theta: np.ndarray) -> np.ndarray:
    """Pairwise document similarities ``w_ij = 1 - H^2(theta_i, theta_j)`` (eq. 4).

    With the squared Hellinger distance ``H^2(p, q) = 1 - sum_k sqrt(p_k q_k)``, eq. (4)
    is ``w_ij = sqrt(theta_i)^T sqrt(theta_j)`` (the Bhattacharyya coefficient), in
    ``[0, 1]`` with ``w_ii = 1``.

    Parameters
    ----------
    theta : np.ndarray
        ``(D, K)`` document-topic proportions, rows summing to 1.

    Returns
    -------
    np.ndarray
        ``(D, D)`` symmetric matrix of ``w_ij``.
    """
    root = np.sqrt(_check_theta(theta, "theta"))
    return root @ root.T


def document_similarity_score(true_theta: np.ndarray, theta: np.ndarray, *, block: int = 1024) -> float:
    """DSS: ``(1 / D) sum_i sum_{j != i} |w_ij^(true) - w_ij^(inferred)|`` (eq. 5).

    ``w_ij`` is the similarity of eq. (4) (:func:`document_similarities`), computed from
    the true proportions for ``w^(true)`` and from the model's inferred ones for
    ``w^(inferred)``. Every ordered pair ``(i, j)`` with ``i != j`` counts (each unordered
    pair twice), and the sum is divided by the number of documents ``D``, as in eq. (5);
    the score therefore grows about linearly with ``D``, so compare models on the same
    documents. Smaller is better; 0 means the model reproduces every true similarity.
    The matrices are formed ``block`` rows at a time (memory ``O(block D)``).

    Parameters
    ----------
    true_theta : np.ndarray
        ``(D, K)`` true document-topic proportions (rows summing to 1).
    theta : np.ndarray
        ``(D, K_model)`` inferred proportions of the same documents, in the same order;
        ``K_model`` may differ from ``K``.
    block : int, default 1024
        Rows per block.

    Returns
    -------
    float
        The DSS.

    Raises
    ------
    ValueError
        If the inputs are not proportion matrices over the same number of documents.
    """
    true_root = np.sqrt(_check_theta(true_theta, "true_theta"))
    root = np.sqrt(_check_theta(theta, "theta"))
    n_docs = true_root.shape[0]
    if root.shape[0] != n_docs:
        raise ValueError(f"true_theta has {n_docs} documents but theta has {root.shape[0]}; pass the same documents")
    if n_docs == 0:
        raise ValueError("DSS needs at least one document")
    if block < 1:
        raise ValueError("block must be >= 1")
    total = 0.0
    for start in range(0, n_docs, block):
        stop = min(start + block, n_docs)
        diff = np.abs(true_root[start:stop] @ true_root.T - root[start:stop] @ root.T)
        rows = np.arange(stop - start)
        diff[rows, start + rows] = 0.0  # j != i (both diagonals are 1 up to rounding)
        total += float(diff.sum())
    return total / n_docs


__all__ = ["document_similarities", "document_similarity_score"]
