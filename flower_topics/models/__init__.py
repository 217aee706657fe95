"""The math shared by clients, strategies and centralized runners."""

from flower_topics.models.lda import CollapsedGibbs, fit_lda, topic_word_distribution

__all__ = ["CollapsedGibbs", "fit_lda", "topic_word_distribution"]
