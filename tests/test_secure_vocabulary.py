"""The private vocabulary agreement under secure aggregation: bounded counts by hand, the central cut by
hand, the release against its (eps, delta) by sampling, and a whole agreement whose parties send only
masked vectors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.sparse as sp

from flower_topics.errors import UserInputError
from flower_topics.privacy import secure_vocabulary
from flower_topics.privacy import skellam_mechanism as skellam
from tests import accounting
from tests.test_dplda import _exceedance


def test_a_party_counts_each_document_once_per_candidate_and_at_most_delta0_candidates():
    words = ("apple", "zzz", "banana", "cherry")  # the party's own words; "zzz" is no candidate
    candidates = ("banana", "apple", "cherry", "date")
    doc_term = sp.csr_matrix(np.array([[3, 1, 0, 0],    # apple (x3), zzz
                                       [1, 0, 2, 0],    # apple, banana
                                       [0, 5, 0, 0]]))  # zzz only
    counts = secure_vocabulary.party_counts(doc_term, words, candidates, 5, np.random.default_rng(0))
    np.testing.assert_array_equal(counts, [1, 2, 0, 0])  # banana 1 document, apple 2, cherry 0, date 0
    busy = sp.csr_matrix(np.ones((200, 4)))  # every document holds all 3 candidates; Delta_0 = 2 keeps 2 each
    counts = secure_vocabulary.party_counts(busy, words, candidates, 2, np.random.default_rng(1))
    assert counts.sum() == 400 and counts[3] == 0 and counts[:3].min() > 100  # a uniform choice among the three


def test_the_central_cut_by_hand():
    candidates = ("a", "b", "c", "d", "e")
    noisy = np.array([10, 3, 7, 40, -2])
    # variance 4 over 5 candidates: Sk(4) exceeds 2 with probability 0.100 <= 1/5 and 1 with 0.218 > 1/5, so the
    # cut is 3 (scipy's Skellam law); min-df 5 raises it to 5; max-df 30 drops d
    assert secure_vocabulary.noise_cut(4.0, 5) == 3.0
    assert secure_vocabulary.kept_words(candidates, noisy, 4.0, min_df=2, max_df=30, max_vocab=None) == ("a", "b", "c")
    assert secure_vocabulary.kept_words(candidates, noisy, 4.0, min_df=5, max_df=30, max_vocab=None) == ("a", "c")
    assert secure_vocabulary.kept_words(candidates, noisy, 0.25, min_df=2, max_df=1e9, max_vocab=2) == ("a", "d")


def test_the_default_candidates_are_the_tokenizers_lowercase_words():
    words = secure_vocabulary.public_candidates()
    assert len(words) == 21719 and "the" in words and "network" in words
    assert all(w.isalpha() and w.islower() and len(w) >= 2 for w in words)


def test_a_release_respects_its_bound_and_a_weaker_noise_fails_the_check():
    """Adding one document with Delta_0 = 4 candidates moves the released counts by the indicator of those
    candidates; the projection on it must meet (eps, delta) on every half-line (the party adds all the noise)."""
    eps, delta, max_words = 2.0, 1e-3, 4
    candidates = tuple(f"w{i}" for i in range(6))
    one = sp.csr_matrix(np.array([[1, 1, 1, 1, 0, 0]]))
    direction = np.array([1, 1, 1, 1, 0, 0]) / 2.0

    counts = secure_vocabulary.party_counts(one, candidates, candidates, max_words, np.random.default_rng(4))
    np.testing.assert_array_equal(counts, [1, 1, 1, 1, 0, 0])  # 4 candidates, Delta_0 = 4: all of them, every time

    def violations(variance: float, n: int = 20000) -> float:
        rng = np.random.default_rng(5)
        with_doc = (counts + skellam.skellam_noise((n, 6), variance, rng)) @ direction
        without = skellam.skellam_noise((n, 6), variance, rng) @ direction
        bound = accounting.skellam_epsilon(math.sqrt(variance / max_words), 1.0, 1, delta, math.sqrt(max_words))
        assert bound <= eps * 1.0001 or variance < reference
        thresholds = np.quantile(np.concatenate([with_doc, without]), np.linspace(0.5, 0.995, 40))
        lo1, _ = _exceedance(with_doc, thresholds, 0.999)
        _, up0 = _exceedance(without, thresholds, 0.999)
        return float((lo1 - (np.exp(eps) * up0 + delta)).max())

    reference = secure_vocabulary.noise_variance(eps, delta, max_words)
    assert violations(reference) <= 0.0
    assert violations(reference / 16) > 0.05


def test_a_secure_private_agreement_sends_only_masked_counts_and_finds_more_words(tmp_path):
    from flower_topics.federation.vocabulary_agreement import agree_vocabulary
    from flower_topics.federation.client_app import agreed_documents, data_config, make_client_app
    from flower_topics.simulations.inprocess import InProcessGrid
    from tests.test_trust_boundary import BASE, write_corpus
    from tests.wire_audit import Audit, party_sizes

    files = [write_corpus(tmp_path / f"{i}.jsonl", ["pets", "money", "space"], 120, seed=i) for i in range(3)]
    found = {}
    for secure in (False, True):
        config = {**BASE, "method": "dplda", "federated-eval": False, "vocabulary": "private",
                  "vocabulary-epsilon": 2.0, "vocabulary-delta": 1e-6, "dplda.epsilon": 3.0,
                  "secure-aggregation": secure, "vocabulary-candidates": str(_candidates(tmp_path))}
        audit = Audit()
        grid = InProcessGrid(audit.wrap(make_client_app(config)), [{"dataset": str(f)} for f in files], config)
        try:
            agreement = agree_vocabulary(grid, config)
            found[secure] = agreement.vocabulary
        except UserInputError as exc:  # without secure aggregation few words clear each party's own threshold
            assert not secure and "too few words" in str(exc)
            found[secure] = ()
            continue
        seen = audit.check(party_sizes(lambda context: agreed_documents(context, data_config(config))))
        assert seen["query.candidates"] == 3 and (not secure or seen["query.secure_sum"] == 12)  # 3 parties: keys, shares, check, unmask
    assert set(found[True]) <= set(secure_vocabulary.public_candidates(str(_candidates(tmp_path))))
    assert len(found[True]) > len(found[False])
    assert agreement.privacy.epsilon == 2.0 and "Skellam" in agreement.privacy.accountant


def _candidates(tmp_path):
    from tests.test_trust_boundary import TOPICS

    path = tmp_path / "candidates.txt"
    path.write_text("\n".join([w for label in TOPICS for w in TOPICS[label]] + ["unused", "neverseen"]) + "\n")
    return path
