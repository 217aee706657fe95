"""Privacy mechanisms (local randomizers, noise) and their accounting."""

from flower_topics.privacy.composition import PrivacySpent, compose, per_tuple_budget
from flower_topics.privacy.word_randomizers import KRR, RRP, TruncatedKRR, deserted_sets, rrp_eta
from flower_topics.privacy.zipf import ZipfFit, zipf_fit

__all__ = ["KRR", "RRP", "PrivacySpent", "TruncatedKRR", "compose", "deserted_sets", "per_tuple_budget", "rrp_eta",
           "ZipfFit", "zipf_fit"]
