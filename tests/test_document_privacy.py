"""Every method's privacy report on the same unit: one document, the whole run (issue 19, item 3).

Hand-computed values: FTM's L x eps, PC-TD's Gaussian at the document's L2 sensitivity through
Opacus directly, DP-SGD's and DP-SVI's whole-run figures, and "none" with its reason where
there is no bound.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord
from opacus.accountants.analysis.rdp import compute_rdp, get_privacy_spent

from flower_topics.federation.vocabulary_agreement import Agreement
from flower_topics.run.config import parse_run_config
from flower_topics.methods import get_method
from flower_topics.privacy.document_level import (
    EXAMPLE_LENGTHS,
    gaussian_document_epsilon,
    laplace_document_epsilon,
    unit_count_sensitivity,
)
from flower_topics.privacy.gaussian import DEFAULT_ORDERS
from flower_topics.privacy.privacy_report import NoDocumentGuarantee, PrivacyReport
from flower_topics.privacy.set_union import privacy_summary
from flower_topics.federation.server_app import RoundRecorder
from flower_topics.strategies.pctd import PCTD
from flower_topics.strategies.fedlda import FedLDA
from flower_topics.strategies.base import RoundTraffic
from flower_topics.strategies.dplda import DPLDA
from flower_topics.wire.dplda import DPLDASettings
from flower_topics.wire.fedlda import COUNTS_KEY, TUPLES_KEY, FedLDASettings
from flower_topics.wire.pctd import STATISTIC_KEY, PCTDSettings
from tests.flower_harness import FixedNodesGrid, as_server, reply_content, reply_from, vocabulary
from tests.test_ntm_federated import _strategy as ntm_strategy


def _per_document(eps: float, delta: float, **extra) -> PrivacyReport:
    return PrivacyReport(mechanism="m", unit="document", accountant="a", rounds=1, epsilon_round=eps,
                         delta_round=delta, epsilon=eps, delta=delta, guarantee="g", document_epsilon=eps,
                         document_delta=delta, document_guarantee="training", **extra)


def _vocabulary_release(eps: float = 0.5, delta: float = 1e-6) -> PrivacyReport:
    return PrivacyReport(**privacy_summary(eps, delta, 20, "gaussian"))


def _opacus_epsilon(noise_multiplier: float, rounds: int, delta: float) -> float:
    """Opacus directly: T Gaussian releases (q = 1) at ``noise_multiplier`` (std / L2 sensitivity)."""
    rdp = compute_rdp(q=1.0, noise_multiplier=noise_multiplier, steps=rounds, orders=list(DEFAULT_ORDERS))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(get_privacy_spent(orders=list(DEFAULT_ORDERS), rdp=rdp, delta=delta)[0])


# ----------------------------------------------------------------------------- the record


def test_the_document_fields_are_written_and_checked():
    report = _per_document(2.0, 1e-6)
    row = report.to_dict()
    assert (row["document_epsilon"], row["document_delta"], row["document_guarantee"]) == (2.0, 1e-6, "training")
    assert report.summary().endswith("whole run per document: eps 2, delta 1e-06")
    with pytest.raises(ValueError, match="together"):
        PrivacyReport(mechanism="m", unit="token", accountant="a", document_epsilon=1.0)
    with pytest.raises(ValueError, match="delta of 1 is no guarantee"):
        PrivacyReport(mechanism="m", unit="token", accountant="a", document_epsilon=1.0, document_delta=1.0)
    none = PrivacyReport.no_mechanism(rounds=2, reason="counts sent as they are")
    assert none.document_epsilon is None and none.document_guarantee == "none: counts sent as they are"
    assert none.to_dict()["document_epsilon"] is None


def test_a_per_document_release_composes_into_the_document_figure_by_basic_composition():
    run = _per_document(2.0, 1e-6).with_release(_vocabulary_release(0.5, 2e-6))
    assert run.document_epsilon == pytest.approx(2.5) and run.document_delta == pytest.approx(3e-6)
    assert "basic composition" in run.document_guarantee and run.epsilon == pytest.approx(2.5)


def test_a_per_token_mechanism_gets_no_document_figure_from_a_per_document_release():
    token = PrivacyReport(mechanism="gaussian", unit="token", accountant="a", rounds=3, epsilon_round=1.0,
                          delta_round=1e-5, epsilon=3.0, delta=1e-5, document_guarantee="none: per token")
    run = token.with_release(_vocabulary_release())
    assert run.document_epsilon is None and run.document_guarantee == "none: per token"
    # and a per-token release removes the bound a per-document report had
    mixed = _per_document(2.0, 1e-6).with_release(token)
    assert mixed.document_epsilon is None and mixed.document_guarantee.startswith("none: the gaussian release is "
                                                                                  "per token")
    # a run without a mechanism stays without a document bound when a private vocabulary is added
    plain = PrivacyReport.no_mechanism(rounds=1, reason="exact counts").with_release(_vocabulary_release())
    assert plain.epsilon == 0.5 and plain.document_epsilon is None and "exact counts" in plain.document_guarantee


def test_an_unaccounted_release_voids_the_document_figure_and_says_what_it_was():
    run = _per_document(2.0, 1e-6).without_document_guarantee("the union vocabulary agreement")
    assert run.document_epsilon is None and run.document_delta is None
    assert run.document_guarantee.startswith("none: the union vocabulary agreement is not accounted (without it: "
                                             "eps 2")
    already = PrivacyReport.no_mechanism(reason="exact counts").without_document_guarantee("X")
    assert already.document_guarantee == "none: exact counts; also X is not accounted"


def test_a_report_carries_the_absent_guarantee_typed_and_writes_it_as_text():
    report = PrivacyReport(mechanism="m", unit="token", accountant="a", document_guarantee=NoDocumentGuarantee("why"))
    assert report.document_guarantee == "none: why" and report.to_dict()["document_guarantee"] == "none: why"
    assert report.absent_guarantee == NoDocumentGuarantee("why")
    assert _per_document(2.0, 1e-6).absent_guarantee is None
    assert PrivacyReport.from_dict(report.to_dict()).absent_guarantee == NoDocumentGuarantee("why")


def test_an_unaccounted_evaluation_leaves_no_document_figure_and_gives_the_training_alone():
    fields = PrivacyReport.document_fields(1.23456, 1e-5, "training", "federated evaluation")
    assert fields == {"document_guarantee": NoDocumentGuarantee(
        "federated evaluation is not accounted (training alone: eps 1.235, delta 1e-05 per document)")}
    assert PrivacyReport.document_fields(1.5, 1e-5, "training", None) == {
        "document_epsilon": 1.5, "document_delta": 1e-5, "document_guarantee": "training"}


def test_an_agreement_mode_is_typed_and_written_as_its_text():
    from flower_topics.wire.agreement import AgreementMode

    modes = [AgreementMode.of(value) for value in ("union", "private", "/srv/vocabulary.txt")]
    assert modes == [AgreementMode.UNION, AgreementMode.PRIVATE, AgreementMode.FILE]
    agreement = Agreement(vocabulary=("a", "b"), mode="private", nodes=2, bytes_sent=0, bytes_received=0, seconds=0.0)
    assert agreement.mode is AgreementMode.PRIVATE
    assert type(agreement.summary()["mode"]) is str and agreement.state()["mode"] == "private"
    assert Agreement.from_state(agreement.state(), ("a", "b")).mode is AgreementMode.PRIVATE
    with pytest.raises(ValueError, match="'public' is not a valid AgreementMode"):
        Agreement(vocabulary=("a", "b"), mode="public", nodes=2, bytes_sent=0, bytes_received=0, seconds=0.0)


@pytest.mark.parametrize("mode, expect_bound", [("union", False), ("private", True), ("file", True)])
def test_the_server_voids_the_document_figure_after_a_union_agreement(mode, expect_bound):
    class Strategy:
        prevalence_parties = 0  # no prevalence release

        def privacy_report(self):
            return _per_document(2.0, 1e-6)

    agreement = Agreement(vocabulary=("a", "b"), mode=mode, nodes=2, bytes_sent=0, bytes_received=0, seconds=0.0,
                          privacy=_vocabulary_release(0.5, 1e-6) if mode == "private" else None)
    recorder = RoundRecorder.__new__(RoundRecorder)
    recorder.strategy, recorder.agreement = Strategy(), agreement
    report = recorder.privacy()
    assert report.has_document_guarantee == expect_bound
    if mode == "private":
        assert report.document_epsilon == pytest.approx(2.5)
    if mode == "union":
        assert "union vocabulary agreement" in report.document_guarantee


# ----------------------------------------------------------------------------- per-token methods


def test_ftm_gives_a_document_of_l_tokens_l_times_eps_and_no_bound_for_unbounded_length():
    config = parse_run_config({"method": "ftm", "ftm.epsilon": 11.0})
    strategy = get_method("ftm").build_strategy(config, vocabulary(30))
    report = strategy.privacy_report()
    assert report.document_epsilon is None and report.document_guarantee.startswith("none: ")
    assert report.details["document_epsilon_at_length"] == {"10": 110.0, "100": 1100.0, "1000": 11000.0}
    assert laplace_document_epsilon(11.0, 106) == pytest.approx(1166.0)


def test_pctd_unit_count_sensitivity_is_the_l2_norm_of_the_worst_documents_counts():
    # no word repeats in a unit: every N_uw is 0 or 1, so ||N||_2^2 = L
    assert unit_count_sensitivity(100, "ngram", 3, distinct_words=True) == pytest.approx(10.0)
    # 3-word units, each one word three times: 33 units of count 3 and one of count 1
    assert unit_count_sensitivity(100, "ngram", 3) == pytest.approx(math.sqrt(33 * 9 + 1))
    counts = np.zeros((34, 5))
    counts[:33, 0], counts[33, 1] = 3, 1
    assert unit_count_sensitivity(100, "ngram", 3) == pytest.approx(np.linalg.norm(counts))
    assert unit_count_sensitivity(100, "sentence") == 100.0  # one sentence, one word repeated
    with pytest.raises(ValueError):
        unit_count_sensitivity(0, "ngram")


def _pctd_round(strategy: PCTD, server_round: int) -> None:
    arrays = strategy.initial_arrays()
    (msg,) = strategy.configure_train(server_round, arrays, ConfigRecord({"seed": 1}), FixedNodesGrid([5]))
    reply = reply_content("pctd", {STATISTIC_KEY: np.ones((2, 3), dtype=np.float32)})
    strategy.aggregate_train(server_round, [reply_from(5, msg, reply)])


def test_pctd_reports_a_documents_epsilon_at_its_l2_sensitivity_and_no_bound_for_the_run():
    as_server()
    strategy = PCTD(vocabulary(3), PCTDSettings(n_topics=2, sigma=0.25, unit="ngram", ngram=3), seed=0)
    for server_round in (1, 2, 3, 4):
        _pctd_round(strategy, server_round)
    report = strategy.privacy_report()
    assert report.unit == "token" and report.document_epsilon is None
    assert report.document_guarantee.startswith("none: ") and "sqrt(L)" in report.document_guarantee
    distinct, worst = (report.details["document_epsilon_at_length_distinct_words"],
                       report.details["document_epsilon_at_length"])
    assert set(distinct) == {str(n) for n in EXAMPLE_LENGTHS}
    for n in EXAMPLE_LENGTHS:  # Opacus at noise multiplier sigma / Delta, Delta the document's L2 change
        assert distinct[str(n)] == pytest.approx(_opacus_epsilon(0.25 / math.sqrt(n), 4, 1e-5), rel=1e-9)
        assert worst[str(n)] == pytest.approx(
            _opacus_epsilon(0.25 / unit_count_sensitivity(n, "ngram", 3), 4, 1e-5), rel=1e-9)
        assert worst[str(n)] > distinct[str(n)] > report.epsilon
    # a token is the document of length 1
    assert gaussian_document_epsilon(0.25, 4, 1e-5, 1.0) == pytest.approx(report.epsilon)


# ----------------------------------------------------------------------------- per-document methods


def test_plain_lda_and_fedlda_have_no_document_guarantee_and_say_why():
    config = parse_run_config({"method": "lda"})
    lda = get_method("lda").build_strategy(config, vocabulary(5)).privacy_report()
    assert lda.document_epsilon is None and lda.document_guarantee.startswith("none: no privacy mechanism")
    as_server()
    fedlda = FedLDA(vocabulary(3), FedLDASettings(n_topics=2, alpha=0.1, mechanism="rrp", epsilon=7.5, delta=0.1,
                                                  gamma=1.0), beta=0.5, seed=0)
    counts = ArrayRecord({COUNTS_KEY: Array(np.array([[9, 1, 0], [0, 1, 9]], dtype=np.int64))})
    for server_round in (1, 2):  # one tuple a document a round (test_strategy_fedlda.py: 0.64 per tuple)
        (msg,) = fedlda.configure_train(server_round, counts, ConfigRecord(), FixedNodesGrid([5]))
        tuples = reply_content("fedlda", {TUPLES_KEY: np.array([[0, 0, 1]], dtype=np.int32)},
                               {"num-documents": 2, "max-tuples-per-document": 1})
        fedlda.aggregate_train(server_round, [reply_from(5, msg, tuples)])
    report = fedlda.privacy_report()
    assert report.unit == "document" and report.delta == 1.0  # 2 rounds x 0.64 per tuple, capped
    assert report.document_epsilon is None and "over 1 tuple(s) a document and 2 round(s) to delta 1 per document " \
        "(no guarantee even for the words alone)" in report.document_guarantee
    assert "topics leave unperturbed" in report.document_guarantee
    assert f"delta {report.details['delta_per_tuple']:.3g}" in report.document_guarantee
    krr = FedLDA(vocabulary(3), FedLDASettings(n_topics=2, alpha=0.1, mechanism="krr", epsilon=2.0), beta=0.5, seed=0)
    krr.configure_train(1, counts, ConfigRecord(), FixedNodesGrid([5]))
    pure = krr.privacy_report()  # the word's kRR is pure, but the topics are not perturbed: still none
    assert pure.details["delta_per_tuple"] == 0.0 and pure.document_epsilon is None


def test_ntm_without_dp_has_none_and_with_dp_the_training_epsilon_only_when_evaluation_is_off():
    plain, _, _ = ntm_strategy(**{"ntm.dp": False})
    assert plain.privacy_report().document_guarantee.startswith("none: ntm.dp=false")
    strategy, _, grid = ntm_strategy()
    strategy.start(grid, strategy.initial_arrays(), num_rounds=2)
    report = strategy.privacy_report()
    trained = max(strategy.party_epsilon.values())
    assert trained > 0 and report.document_epsilon == trained and report.document_delta == strategy.ntm.dp_delta
    assert "document count" in report.document_guarantee
    evaluated, _, grid = ntm_strategy(**{"federated-eval": True})
    evaluated.start(grid, evaluated.initial_arrays(), num_rounds=1)
    voided = evaluated.privacy_report()
    assert voided.document_epsilon is None and voided.document_guarantee.startswith("none: federated evaluation")
    assert voided.details["training_document_epsilon"] == voided.epsilon > 0


def test_dplda_reports_its_whole_run_figure_as_the_document_figure():
    from flower_topics.privacy.accountants import Budget
    from tests.accounting import pld_epsilon as rounds_epsilon

    as_server()
    settings = DPLDASettings(n_topics=2, alpha=0.1, sample_rate=0.5, clip=1.0, noise_multiplier=2.0, epsilon=3.0,
                             delta=1e-5)
    strategy = DPLDA(vocabulary(4), settings, budget=Budget(3.0, 1e-5, 0.5, 1e-6), seed=0)
    for server_round in (1, 2, 3):  # three rounds in which parties were asked to release
        strategy.traffic[server_round] = RoundTraffic(nodes_sampled=2)
    report = strategy.privacy_report()
    assert report.rounds == 3
    assert report.document_epsilon == report.epsilon == pytest.approx(rounds_epsilon(2.0, 0.5, 3, 1e-5 - 1e-6))
    assert report.document_delta == pytest.approx(1e-5 - 1e-6)
    run = report.with_release(_vocabulary_release(0.5, 1e-6))  # what the ServerApp composes in
    assert run.document_epsilon == pytest.approx(report.epsilon + 0.5) and run.document_delta == pytest.approx(1e-5)


def test_no_document_guarantee_is_one_typed_reason_written_as_before():
    absent = NoDocumentGuarantee("no privacy mechanism")
    assert str(absent) == "none: no privacy mechanism"
    assert NoDocumentGuarantee.parse(str(absent)) == absent
    assert NoDocumentGuarantee.parse("every training round (PLD)") is None
    report = PrivacyReport.no_mechanism(reason="counts sent in the clear")
    assert report.document_guarantee == "none: counts sent in the clear"
    voided = report.without_document_guarantee("the union vocabulary agreement")
    assert NoDocumentGuarantee.parse(voided.document_guarantee) == NoDocumentGuarantee(
        "counts sent in the clear; also the union vocabulary agreement is not accounted")
