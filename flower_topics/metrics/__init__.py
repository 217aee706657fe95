"""Evaluation metrics of docs/architecture.md ("Metric definitions"), one implementation for all.

Perplexity by document completion, NPMI and UMass coherence, topic diversity,
topic similarity to known topics, and label-based clustering and classification
scores, each a function of a ``topic_word`` matrix and documents
(:func:`flower_topics.evaluation.evaluate_model` computes them all for a model).
"""

from flower_topics.metrics.classification import classification_f1, clustering_scores
from flower_topics.metrics.coherence import CoherenceResult, npmi_coherence, umass_coherence
from flower_topics.metrics.diversity import topic_diversity
from flower_topics.metrics.inference import align_corpus, fold_in, infer_theta, top_word_indices
from flower_topics.metrics.perplexity import PerplexityResult, completion_split, perplexity
from flower_topics.metrics.similarity import SimilarityResult, align_topics, topic_similarity_score

__all__ = [
    "CoherenceResult",
    "PerplexityResult",
    "SimilarityResult",
    "align_corpus",
    "align_topics",
    "classification_f1",
    "clustering_scores",
    "completion_split",
    "fold_in",
    "infer_theta",
    "npmi_coherence",
    "perplexity",
    "top_word_indices",
    "topic_diversity",
    "topic_similarity_score",
]
