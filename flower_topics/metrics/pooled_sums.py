"""Metrics as sums over parties (docs/architecture.md, "Stages of a run", 3. Federated evaluation).

Every metric of docs/architecture.md ("Metric definitions") that a server reports from
federated evaluation is a function of sums that each party computes on its own
documents; the server adds the parts and applies the same function the pooled
metrics use, so it reports the pooled numbers without seeing a corpus:

- held-out perplexity: each party's :func:`heldout_loglik` on its held-out
  documents; :func:`pooled_perplexity` of the summed :class:`HeldOut` parts equals
  :func:`flower_topics.metrics.perplexity` on the union of the documents (the
  completion split of a document depends only on the seed and the document, see
  :func:`flower_topics.metrics.completion_split`, and theta is folded in per
  document).
- NPMI and UMass coherence: each party's :func:`cooccurrence` counts over its
  training documents for the words of :func:`coherence_word_ids`; the summed
  :class:`Cooccurrence` goes through :func:`coherence_from_counts`, the same
  function of counts as :func:`flower_topics.metrics.npmi_coherence` and
  :func:`flower_topics.metrics.umass_coherence`.
- NMI and purity of ``argmax theta``: each party's :func:`label_contingency` on its
  held-out documents; :func:`nmi_purity_from_contingency` of the summed table, the
  same function of the table as :func:`flower_topics.metrics.clustering_scores`.

Sums agree with the pooled values up to floating-point summation order (the
perplexity's log-likelihood); the integer counts are exact.

The macro-F1 of a logistic regression on theta has no federated version here: the
classifier is fitted by an iterative optimizer on all training documents' theta at
once, so it is not a function of per-party sums and cannot be reproduced exactly
from them.

The functions are pure numpy and know nothing of Flower; a party calls them on its
own documents (over the model vocabulary, or with ``vocabulary=`` to align them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from flower_topics.data.corpus import Corpus
from flower_topics.metrics.classification import contingency_scores
from flower_topics.metrics.coherence import coherence_from_cooccurrence
from flower_topics.metrics.coherence import coherence_word_ids, cooccurrence_counts
from flower_topics.metrics.inference import align_corpus
from flower_topics.metrics.perplexity import completion_loglik

__all__ = [
    "Cooccurrence",
    "HeldOut",
    "coherence_from_counts",
    "coherence_word_ids",
    "cooccurrence",
    "heldout_loglik",
    "label_contingency",
    "nmi_purity_from_contingency",
    "pooled_perplexity",
]


# ------------------------------------------------------------------- perplexity
@dataclass(frozen=True)
class HeldOut:
    """One party's share of the held-out perplexity; parts add up with ``+``.

    Parameters
    ----------
    loglik : float
        ``sum log p(w | theta_d, phi)`` over the held-out halves of the party's
        documents (``-inf`` when a held-out word has probability 0).
    n_tokens : int
        Number of held-out tokens scored.
    n_oov : int
        Out-of-vocabulary tokens dropped before scoring.
    """

    loglik: float
    n_tokens: int
    n_oov: int

    def __add__(self, other: "HeldOut") -> "HeldOut":
        if not isinstance(other, HeldOut):
            return NotImplemented
        return HeldOut(
            loglik=self.loglik + other.loglik,
            n_tokens=self.n_tokens + other.n_tokens,
            n_oov=self.n_oov + other.n_oov,
        )

    def __radd__(self, other: object) -> "HeldOut":
        if other == 0:  # the start value of the built-in sum()
            return self
        return NotImplemented

    @property
    def perplexity(self) -> float:
        """``exp(-loglik / n_tokens)``; raises ValueError when no token was scored."""
        if self.n_tokens == 0:
            raise ValueError("no held-out token was scored; perplexity is undefined")
        return float(np.exp(-self.loglik / self.n_tokens))


def heldout_loglik(
    topic_word: np.ndarray,
    corpus: Corpus,
    *,
    alpha: float = 0.01,
    n_iter: int = 100,
    seed: int = 0,
    vocabulary: Sequence[str] | None = None,
) -> HeldOut:
    """A party's held-out log-likelihood by document completion.

    Exactly the sums of :func:`flower_topics.metrics.perplexity` (document
    completion as docs/architecture.md defines it, through the same
    :func:`flower_topics.metrics.perplexity.completion_loglik`) on the given
    documents, which are the party's held-out documents. Documents with fewer than 2
    in-vocabulary tokens are skipped; a party with none returns zeros.

    Parameters
    ----------
    topic_word : np.ndarray
        ``(K, V)`` global topic-word matrix, rows summing to 1.
    corpus : Corpus
        The party's held-out documents: over the model vocabulary when
        ``vocabulary`` is None, else over any vocabulary.
    alpha : float, default 0.01
        Fold-in pseudo-count.
    n_iter : int, default 100
        Fold-in EM iterations.
    seed : int, default 0
        Seed of the split into halves (the run's public seed; the same on every party).
    vocabulary : sequence of str, optional
        The model vocabulary (``topic_word`` column order); the documents are aligned
        to it and the dropped tokens counted in ``n_oov``.

    Returns
    -------
    HeldOut
    """
    n_oov = 0
    if vocabulary is not None:
        corpus, n_oov = align_corpus(corpus, vocabulary)
    sums = completion_loglik(topic_word, corpus, seed=seed, alpha=alpha, n_iter=n_iter)
    return HeldOut(loglik=sums.loglik, n_tokens=sums.n_eval_tokens, n_oov=n_oov)


def pooled_perplexity(parts: Iterable[HeldOut]) -> float:
    """``exp(-sum loglik / sum n_tokens)`` over the parties' :class:`HeldOut` parts.

    Parameters
    ----------
    parts : iterable of HeldOut
        One part per party.

    Returns
    -------
    float
        The pooled held-out perplexity.

    Raises
    ------
    ValueError
        If no party scored a token.
    """
    total = HeldOut(0.0, 0, 0)
    for part in parts:
        total = total + part
    return total.perplexity


# -------------------------------------------------------------------- coherence
@dataclass(frozen=True, eq=False)
class Cooccurrence:
    """Document co-occurrence counts of a set of words; parts add up with ``+``.

    Parameters
    ----------
    n_docs : int
        Number of documents counted (empty ones included).
    doc_freq : np.ndarray
        ``(n,)`` int64: number of documents containing each word.
    co_doc_freq : np.ndarray
        ``(n, n)`` int64: number of documents containing both words (symmetric; the
        diagonal equals ``doc_freq``).
    """

    n_docs: int
    doc_freq: np.ndarray
    co_doc_freq: np.ndarray

    def __post_init__(self) -> None:
        doc_freq = np.asarray(self.doc_freq, dtype=np.int64)
        co = np.asarray(self.co_doc_freq, dtype=np.int64)
        if doc_freq.ndim != 1 or co.shape != (doc_freq.size, doc_freq.size):
            raise ValueError(
                f"doc_freq must be (n,) and co_doc_freq (n, n), got {doc_freq.shape} and {co.shape}"
            )
        if self.n_docs < 0:
            raise ValueError(f"n_docs must be >= 0, got {self.n_docs}")
        object.__setattr__(self, "n_docs", int(self.n_docs))
        object.__setattr__(self, "doc_freq", doc_freq)
        object.__setattr__(self, "co_doc_freq", co)

    def __add__(self, other: "Cooccurrence") -> "Cooccurrence":
        if not isinstance(other, Cooccurrence):
            return NotImplemented
        if other.doc_freq.shape != self.doc_freq.shape:
            raise ValueError("cannot add co-occurrence counts over different numbers of words")
        return Cooccurrence(
            n_docs=self.n_docs + other.n_docs,
            doc_freq=self.doc_freq + other.doc_freq,
            co_doc_freq=self.co_doc_freq + other.co_doc_freq,
        )

    def __radd__(self, other: object) -> "Cooccurrence":
        if other == 0:  # the start value of the built-in sum()
            return self
        return NotImplemented


def cooccurrence(
    corpus: Corpus, word_ids: np.ndarray, *, vocabulary: Sequence[str] | None = None
) -> Cooccurrence:
    """A party's document co-occurrence counts of ``word_ids``, each document a set of words.

    Parameters
    ----------
    corpus : Corpus
        The party's coherence reference documents (its training documents): over the
        model vocabulary when ``vocabulary`` is None, else over any vocabulary.
    word_ids : np.ndarray
        ``(n,)`` distinct model columns: the union of all topics' top words
        (:func:`coherence_word_ids`), the same on every party.
    vocabulary : sequence of str, optional
        The model vocabulary; the documents are aligned to it first.

    Returns
    -------
    Cooccurrence
        Counts in the order of ``word_ids``.
    """
    if vocabulary is not None:
        corpus, _ = align_corpus(corpus, vocabulary)
    co = cooccurrence_counts(corpus, word_ids)
    return Cooccurrence(n_docs=corpus.n_docs, doc_freq=np.diag(co).copy(), co_doc_freq=co)


def coherence_from_counts(
    top_ids: np.ndarray, word_ids: np.ndarray, counts: Cooccurrence
) -> tuple[float, float]:
    """NPMI and UMass coherence (means over topics) from summed co-occurrence counts.

    Goes through :func:`flower_topics.metrics.coherence.coherence_from_cooccurrence`, the
    function of counts behind the pooled :func:`flower_topics.metrics.npmi_coherence`
    and :func:`flower_topics.metrics.umass_coherence`: with counts summed over
    parties it returns the pooled scores on the union of their documents.

    Parameters
    ----------
    top_ids : np.ndarray
        ``(K, n)`` each topic's top word ids, rank order (:func:`coherence_word_ids`).
    word_ids : np.ndarray
        ``(m,)`` the word ids ``counts`` is over, including every id of ``top_ids``.
    counts : Cooccurrence
        Counts summed over parties.

    Returns
    -------
    npmi_mean, umass_mean : float

    Raises
    ------
    ValueError
        If no document was counted or the word ids and counts disagree.
    """
    word_ids = np.asarray(word_ids, dtype=np.int64).ravel()
    if counts.doc_freq.size != word_ids.size:
        raise ValueError(f"counts are over {counts.doc_freq.size} words but word_ids has {word_ids.size}")
    if not np.array_equal(np.diag(counts.co_doc_freq), counts.doc_freq):
        raise ValueError("the diagonal of co_doc_freq must equal doc_freq")
    npmi, umass = coherence_from_cooccurrence(top_ids, word_ids, counts.n_docs, counts.co_doc_freq)
    return npmi.mean, umass.mean


# --------------------------------------------------------------------- labels
def label_contingency(
    theta_argmax_or_theta: np.ndarray,
    labels: Sequence[object] | np.ndarray,
    n_topics: int,
    label_names: Sequence[str],
) -> np.ndarray:
    """A party's cluster-by-label table of its held-out documents; tables add up.

    Each document's cluster is ``argmax_k theta_dk`` (ties to the lower topic), as in
    :func:`flower_topics.metrics.clustering_scores`. Only NMI and purity come from
    these tables: the macro-F1 of a logistic regression on theta is not a sum over
    parties and has no federated version.

    Parameters
    ----------
    theta_argmax_or_theta : np.ndarray
        ``(D, K)`` document-topic proportions, or ``(D,)`` integer clusters in
        ``[0, n_topics)``.
    labels : sequence
        The label of each of the ``D`` documents (compared as strings).
    n_topics : int
        Number of topics ``K`` (rows of the table).
    label_names : sequence of str
        All labels, the same list on every party (columns of the table, in order).

    Returns
    -------
    np.ndarray
        ``(K, L)`` int64 counts.

    Raises
    ------
    ValueError
        If the shapes disagree, a cluster lies outside ``[0, n_topics)``, a label is
        not in ``label_names``, or ``label_names`` repeats a name.
    """
    values = np.asarray(theta_argmax_or_theta)
    if values.ndim == 2:
        if values.shape[1] != n_topics:
            raise ValueError(f"theta has {values.shape[1]} columns, expected n_topics = {n_topics}")
        clusters = (
            values.astype(np.float64).argmax(axis=1) if values.shape[0] else np.zeros(0, dtype=np.int64)
        )
    elif values.ndim == 1:
        if values.size and not np.issubdtype(values.dtype, np.integer):
            raise ValueError("a 1-D input must hold integer clusters (argmax theta)")
        clusters = values.astype(np.int64)
    else:
        raise ValueError(f"expected (D, K) theta or (D,) clusters, got shape {values.shape}")
    names = [str(name) for name in label_names]
    column = {name: j for j, name in enumerate(names)}
    if len(column) != len(names):
        raise ValueError("label_names must be distinct")
    label_list = np.asarray(labels, dtype=object).astype(str)
    if label_list.shape != clusters.shape:
        raise ValueError(f"{clusters.size} documents but {label_list.size} labels")
    if clusters.size and (clusters.min() < 0 or clusters.max() >= n_topics):
        raise ValueError(f"clusters must lie in [0, {n_topics})")
    unknown = set(label_list.tolist()) - column.keys()
    if unknown:
        raise ValueError(f"labels not in label_names: {sorted(unknown)}")
    label_ids = np.fromiter((column[name] for name in label_list), dtype=np.int64, count=label_list.size)
    n_labels = len(names)
    counts = np.bincount(clusters * n_labels + label_ids, minlength=n_topics * n_labels)
    return counts.reshape(n_topics, n_labels).astype(np.int64)


def nmi_purity_from_contingency(matrix: np.ndarray) -> tuple[float, float]:
    """NMI and purity from a cluster-by-label table summed over parties.

    Goes through :func:`flower_topics.metrics.classification.contingency_scores`, the
    function of the table behind the pooled
    :func:`flower_topics.metrics.clustering_scores`: scikit-learn's
    ``normalized_mutual_info_score`` (arithmetic mean) and purity, exactly. Labels
    or clusters no document has (zero columns or rows) do not change the scores.

    Parameters
    ----------
    matrix : np.ndarray
        ``(K, L)`` integer counts (:func:`label_contingency`, summed).

    Returns
    -------
    nmi, purity : float
    """
    scores = contingency_scores(matrix)
    return scores["nmi"], scores["purity"]

