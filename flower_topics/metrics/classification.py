"""Label-based scores of document-topic proportions (docs/architecture.md, "Metric definitions")."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


def clustering_scores(theta: np.ndarray, labels: Sequence[object] | np.ndarray) -> dict[str, float]:
    """NMI and purity of the clustering ``argmax_k theta_dk`` against labels.

    Each document's cluster is its most probable topic (ties to the lower topic).
    ``"nmi"`` is scikit-learn's ``normalized_mutual_info_score`` (arithmetic-mean
    normalization); ``"purity"`` is ``sum over clusters of the count of the
    cluster's most frequent label, divided by the number of documents``. Both are
    computed from the cluster-by-label contingency table by
    :func:`contingency_scores`, which federated evaluation shares.

    Parameters
    ----------
    theta : np.ndarray
        ``(D, K)`` document-topic proportions.
    labels : sequence
        The label of each of the ``D`` documents.

    Returns
    -------
    dict
        ``{"nmi": float, "purity": float}``.
    """
    theta = np.asarray(theta, dtype=np.float64)
    labels = np.asarray(labels, dtype=object)
    if theta.ndim != 2 or theta.shape[0] != labels.shape[0] or theta.shape[0] == 0:
        raise ValueError("theta must be a non-empty (D, K) matrix with one label per row")
    clusters = theta.argmax(axis=1)
    _, label_ids = np.unique(labels.astype(str), return_inverse=True)
    n_labels = int(label_ids.max()) + 1
    contingency = np.bincount(clusters * n_labels + label_ids, minlength=theta.shape[1] * n_labels)
    return contingency_scores(contingency.reshape(theta.shape[1], n_labels))


def contingency_scores(contingency: np.ndarray) -> dict[str, float]:
    """NMI and purity of a clustering from its cluster-by-label contingency table.

    The one implementation behind :func:`clustering_scores` (pooled) and
    :func:`flower_topics.metrics.pooled_sums.nmi_purity_from_contingency` (tables
    summed over parties). ``"nmi"`` is exactly scikit-learn's
    ``normalized_mutual_info_score(labels, clusters)`` with its default arithmetic-mean
    normalization, computed from the table: empty rows and columns (clusters or
    labels no document has) are dropped, as scikit-learn only sees the values
    present; 1.0 when one cluster and one label remain; otherwise the mutual
    information (as ``sklearn.metrics.mutual_info_score`` computes it on the table) divided by the
    mean of the two marginal entropies (0.0 when the mutual information is 0).
    ``"purity"`` is the sum over clusters of the count of the cluster's most
    frequent label, divided by the number of documents.

    Parameters
    ----------
    contingency : np.ndarray
        ``(K, L)`` non-negative integer counts: documents of cluster ``k`` with label ``l``.

    Returns
    -------
    dict
        ``{"nmi": float, "purity": float}``.

    Raises
    ------
    ValueError
        If the table is not 2-D, has negative entries, or counts no document.
    """
    table = np.asarray(contingency)
    if table.ndim != 2:
        raise ValueError(f"the contingency table must be a 2-D matrix, got shape {table.shape}")
    if not np.issubdtype(table.dtype, np.integer) and not np.array_equal(table, np.round(table)):
        raise ValueError("the contingency table must hold integer counts")
    table = table.astype(np.int64)
    if np.any(table < 0) or table.sum() == 0:
        raise ValueError("the contingency table must be non-negative and count at least one document")
    purity = table.max(axis=1).sum() / table.sum()
    present = table[table.sum(axis=1) > 0][:, table.sum(axis=0) > 0]
    return {"nmi": _nmi(present.T), "purity": float(purity)}


def _nmi(table: np.ndarray) -> float:
    """scikit-learn's arithmetic NMI from a labels-by-clusters table without empty rows or columns.

    The mutual information is ``sum_ij p_ij log(p_ij / (p_i p_j))`` over the non-zero cells, clipped
    at 0, as ``sklearn.metrics.mutual_info_score(contingency=table)`` computes it (tests check the
    two agree); written here because importing ``sklearn.metrics`` takes over a second, as long as
    a whole BBC run's evaluations.
    """
    if table.shape[0] == table.shape[1] == 1:
        return 1.0
    total = float(table.sum())
    rows, cols = np.nonzero(table)
    joint = table[rows, cols].astype(np.float64)
    outer = table.sum(axis=1)[rows].astype(np.float64) * table.sum(axis=0)[cols].astype(np.float64)
    mutual_information = max(0.0, float(np.sum(joint / total * (np.log(joint) + math.log(total) - np.log(outer)))))
    if mutual_information == 0:
        return 0.0
    normalizer = np.mean([_entropy(table.sum(axis=1)), _entropy(table.sum(axis=0))])
    return float(mutual_information / normalizer)


def _entropy(counts: np.ndarray) -> float:
    """Entropy (nats) of a labeling from its positive value counts, as scikit-learn computes it."""
    if counts.size == 1:
        return 0.0
    pi = counts.astype(np.float64)
    pi_sum = np.sum(pi)
    return float(-np.sum((pi / pi_sum) * (np.log(pi) - math.log(pi_sum))))


def classification_f1(
    theta_train: np.ndarray,
    labels_train: Sequence[object] | np.ndarray,
    theta_test: np.ndarray,
    labels_test: Sequence[object] | np.ndarray,
    *,
    seed: int = 0,
) -> float:
    """Macro-F1 of a logistic regression on theta (train on train, test on test).

    docs/architecture.md: "macro-F1 of a logistic regression on theta (train on the training
    documents, test on the test documents)". The classifier is scikit-learn's
    ``LogisticRegression(max_iter=1000, random_state=seed)`` on the raw theta
    features; the F1 is macro-averaged over the labels present in the test labels
    or the predictions, a label never predicted scoring an F1 of 0.

    Parameters
    ----------
    theta_train, theta_test : np.ndarray
        ``(D_train, K)`` and ``(D_test, K)`` document-topic proportions.
    labels_train, labels_test : sequence
        Labels of the training and test documents.
    seed : int, default 0
        ``random_state`` of the classifier.

    Returns
    -------
    float
        Macro-F1 on the test documents.

    Raises
    ------
    ValueError
        If the training labels hold fewer than two classes or a set is empty.
    """
    y_train = np.asarray(labels_train, dtype=object).astype(str)
    y_test = np.asarray(labels_test, dtype=object).astype(str)
    if np.unique(y_train).size < 2:
        raise ValueError("the training documents need at least two distinct labels for the classifier")
    if y_test.size == 0:
        raise ValueError("there are no test documents to classify")
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import f1_score

    classifier = LogisticRegression(max_iter=1000, random_state=seed)
    classifier.fit(np.asarray(theta_train, dtype=np.float64), y_train)
    predicted = classifier.predict(np.asarray(theta_test, dtype=np.float64))
    return float(f1_score(y_test, predicted, average="macro", zero_division=0.0))
