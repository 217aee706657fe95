"""Privacy mechanisms (local randomizers, noise) and their accounting."""

from flower_topics.privacy.composition import PrivacySpent, compose, per_tuple_budget
from flower_topics.privacy.word_randomizers import (HM, KRR, MECHANISMS, RRP, TailToUniformKRR, TruncatedKRR,
                                                   deserted_sets, rrp_eta, truncated_domain, word_randomizer)
from flower_topics.privacy.zipf import ZipfFit, zipf_fit

__all__ = ["HM", "KRR", "MECHANISMS", "RRP", "PrivacySpent", "TailToUniformKRR", "TruncatedKRR", "compose",
           "deserted_sets", "per_tuple_budget", "rrp_eta", "truncated_domain", "word_randomizer", "ZipfFit",
           "zipf_fit"]
