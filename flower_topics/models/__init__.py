"""The math shared by clients, strategies and centralized runners."""

from flower_topics.models.fixed_phi import FixedPhiSampler, build_alias_tables
from flower_topics.models.lda import CollapsedGibbs, fit_lda, topic_word_distribution

__all__ = ["CollapsedGibbs", "FixedPhiSampler", "build_alias_tables", "fit_lda", "topic_word_distribution"]
