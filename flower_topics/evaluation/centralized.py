"""The one evaluation entry point used by every method, runner and CLI."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError
from flower_topics.metrics.classification import classification_f1, clustering_scores
from flower_topics.metrics.coherence import npmi_coherence, umass_coherence
from flower_topics.metrics.diversity import topic_diversity
from flower_topics.metrics.inference import align_corpus, infer_theta
from flower_topics.metrics.perplexity import perplexity
from flower_topics.metrics.similarity import align_topics, topic_similarity_score
from flower_topics.topic_model.model_file import TopicModel


def evaluate_model(
    model: TopicModel,
    corpus: Corpus,
    *,
    reference: Corpus | None = None,
    truth: tuple[np.ndarray, Sequence[str]] | None = None,
    use_labels: bool = False,
    seed: int = 0,
    alpha: float = 0.01,
    n_iter: int = 100,
) -> dict[str, float | int]:
    """Every metric of docs/architecture.md ("Metric definitions") for ``model`` on ``corpus``.

    The corpus is first put on the model's vocabulary (:func:`align_corpus`). Then:

    - ``"perplexity"``, ``"n_eval_tokens"``, ``"n_oov"``: held-out perplexity by
      document completion on the ``test`` documents (:func:`perplexity`);
      ``n_oov`` counts the test tokens whose word the model does not know.
    - ``"npmi"``, ``"umass"``: coherence of the top 10 words on ``reference`` when
      given, else on the ``train`` and ``val`` documents (:func:`npmi_coherence`,
      :func:`umass_coherence`).
    - ``"diversity"``: :func:`topic_diversity` of the top 25 words.
    - with ``truth``: ``"tss"`` and ``"tss_normalized"``
      (:func:`topic_similarity_score`), after :func:`align_topics` puts the true
      topics on the model's vocabulary (true words the model lacks are dropped
      and the true rows renormalized).
    - with ``use_labels``: theta of every document by :func:`infer_theta`; ``"nmi"``
      and ``"purity"`` of the test documents' ``argmax theta`` against their labels
      (:func:`clustering_scores`), and ``"macro_f1"`` of a logistic regression
      trained on the train+val theta and tested on the test theta
      (:func:`classification_f1`).

    Parameters
    ----------
    model : TopicModel
        The model to score.
    corpus : Corpus
        The full corpus, with a train/val/test split.
    reference : Corpus, optional
        Reference corpus for coherence (any vocabulary; it is aligned too).
    truth : tuple of (np.ndarray, sequence of str), optional
        True topic-word matrix ``(K_true, V_true)`` and its vocabulary.
    use_labels : bool, default False
        Also compute the label scores (the corpus must have labels).
    seed : int, default 0
        Seed of the perplexity split and of the classifier.
    alpha : float, default 0.01
        Fold-in pseudo-count (:func:`infer_theta`).
    n_iter : int, default 100
        Fold-in EM iterations.

    Returns
    -------
    dict
        Metric name to plain Python ``float`` or ``int`` (JSON-serializable).

    Raises
    ------
    ValueError
        If ``corpus.split`` is None (the caller must run ``ensure_split`` first).
    UserInputError
        If the test documents have no document with 2 in-vocabulary tokens, the
        coherence reference is empty, or ``use_labels`` is set on an unlabeled corpus.
    """
    if corpus.split is None:
        raise ValueError("evaluate_model needs a corpus with a train/val/test split; run ensure_split first")
    if use_labels and corpus.labels is None:
        raise UserInputError("label scores were asked for but the corpus has no labels; turn them off")
    phi = model.topic_word
    aligned, _ = align_corpus(corpus, model.vocabulary)
    is_test = corpus.split == "test"
    test_docs = np.flatnonzero(is_test)
    train_docs = np.flatnonzero(~is_test)
    test = aligned.subset(test_docs)
    if not np.any(test.doc_lengths >= 2):
        raise UserInputError(
            "no test document has 2 or more words of the model's vocabulary, so perplexity is undefined; "
            "use a corpus or split with more test documents"
        )
    n_oov = int(corpus.doc_lengths[is_test].sum() - test.n_tokens)
    held_out = perplexity(phi, test, seed=seed, alpha=alpha, n_iter=n_iter, n_oov=n_oov)
    coherence_corpus = aligned.subset(train_docs) if reference is None else align_corpus(reference, model.vocabulary)[0]
    if coherence_corpus.n_docs == 0:
        raise UserInputError("the coherence reference corpus has no documents; pass one with documents")
    metrics: dict[str, float | int] = {
        "perplexity": held_out.perplexity,
        "n_eval_tokens": held_out.n_eval_tokens,
        "n_oov": held_out.n_oov,
        "npmi": npmi_coherence(phi, coherence_corpus).mean,
        "umass": umass_coherence(phi, coherence_corpus).mean,
        "diversity": topic_diversity(phi),
    }
    if truth is not None:
        true_topic_word, true_vocabulary = truth
        similarity = topic_similarity_score(align_topics(true_topic_word, true_vocabulary, model.vocabulary), phi)
        metrics["tss"] = similarity.score
        metrics["tss_normalized"] = similarity.normalized
    if use_labels:
        theta = infer_theta(phi, aligned, alpha=alpha, n_iter=n_iter)
        metrics.update(clustering_scores(theta[test_docs], corpus.labels[test_docs]))
        metrics["macro_f1"] = classification_f1(
            theta[train_docs], corpus.labels[train_docs], theta[test_docs], corpus.labels[test_docs], seed=seed
        )
    return metrics
