"""The privacy report of an ``ntm`` run: none without DP; with DP-SGD, the largest epsilon a party reported
(its own RDP accountant), or under secure aggregation the parties' accountant run by the server."""

from __future__ import annotations

from typing import Mapping

from flower_topics.privacy.accountants import RDPAccountant
from flower_topics.privacy.privacy_report import PrivacyReport
from flower_topics.wire.ntm import NTMSettings

ACCOUNTANT = "RDP (opacus), per party"

#: What an ``ntm`` run's document-level figure covers (DP-SGD, federated evaluation off).
DOCUMENT_GUARANTEE = (
    "the training rounds' DP-SGD per document (add/remove one document of a party; the largest epsilon a party "
    "reported); the vocabulary is composed in when it is accounted ('private') or public (a file); federated "
    "evaluation is off. A party's reported epsilon (a function of q = batch-size / D) tells the server its number "
    "of documents D, which add/remove adjacency counts as private: read the figure for a party whose document "
    "count is public")
#: The same under secure aggregation (no party's epsilon reaches the server).
SECURE_DOCUMENT_GUARANTEE = (
    "the training rounds' DP-SGD per document (add/remove one document of a party), accounted by the server with "
    "the parties' RDP accountant for every round sent at the largest sample rate a party may have (batch-size / "
    "ntm.min-documents, or 1); the vocabulary is composed in when it is accounted ('private') or public (a file); "
    "federated evaluation is off")


def privacy_report(settings: NTMSettings, *, rounds: int, secure: bool, party_epsilon: Mapping[int, float],
                   first_epsilon: Mapping[int, float], epsilon_before: float, evaluation: str | None) -> PrivacyReport:
    """The run's report after ``rounds`` rounds released.

    Parameters
    ----------
    settings : NTMSettings
        The run's settings (DP-SGD's noise, clipping, delta and steps).
    rounds : int
        Rounds in which the parties were asked to release, lost ones included.
    secure : bool
        Whether the rounds were summed by secure aggregation (no party's epsilon reaches the server).
    party_epsilon, first_epsilon : Mapping
        Node id -> the largest and the first epsilon it reported since the last resume.
    epsilon_before : float
        The largest epsilon reported before the last resume (basic composition).
    evaluation : str, optional
        The federated evaluation as a release outside every accountant (it voids the document guarantee).
    """
    if not settings.dp:
        what = ("the round's sum of the parties' gradients (or weights) is computed without noise; the server sees "
                "only that sum (secure aggregation)" if secure else
                "each party's gradients (or weights) are sent without noise")
        return PrivacyReport.no_mechanism(rounds=rounds, reason=f"ntm.dp=false (the paper's method): {what}")
    steps = 1 if settings.sync == "minibatch" else settings.local_steps
    if secure:
        return secure_report(settings, rounds, steps, evaluation)
    epsilon = epsilon_before + max(party_epsilon.values(), default=0.0)
    document = PrivacyReport.document_fields(epsilon, settings.dp_delta, DOCUMENT_GUARANTEE, evaluation)
    return PrivacyReport(
        mechanism="gaussian (DP-SGD)", unit="document", accountant=ACCOUNTANT, rounds=rounds,
        epsilon_round=max(first_epsilon.values(), default=0.0), delta_round=settings.dp_delta,
        epsilon=epsilon, delta=settings.dp_delta,
        guarantee="(eps, delta)-DP per document of a party (add/remove), DP-SGD with Poisson sampling at "
                  "q = batch-size / D_l, per-document clipping and Gaussian noise; each party's epsilon from "
                  "its own RDP accountant, the largest reported here (the server cannot check it)",
        **document,
        details={"noise_multiplier": settings.noise_multiplier, "max_grad_norm": settings.max_grad_norm,
                 "dp_steps_per_round": steps, "parties_reporting": len(party_epsilon),
                 "training_document_epsilon": epsilon})


def rdp_epsilon(settings: NTMSettings, sample_rate: float, steps: int) -> float:
    """Epsilon at ``dp-delta`` of ``steps`` DP-SGD steps at ``sample_rate`` (the parties' ``"rdp"`` accountant)."""
    accountant = RDPAccountant()
    accountant.step(noise_multiplier=settings.noise_multiplier, sample_rate=sample_rate, steps=steps)
    return accountant.get_epsilon(settings.dp_delta)


def secure_sample_rate(settings: NTMSettings) -> float:
    """Under secure aggregation with DP, the largest sample rate any party may have: ``batch-size /
    min-documents``, capped at 1 (1 when ``min-documents`` is 0)."""
    return 1.0 if settings.min_documents == 0 else min(1.0, settings.batch_size / settings.min_documents)


def secure_report(settings: NTMSettings, rounds: int, steps: int, evaluation: str | None) -> PrivacyReport:
    """With DP under secure aggregation: the parties' RDP accountant, run by the server.

    Every round the server sent (lost ones included: ``rounds``) counts ``steps`` DP-SGD
    steps for every party, each a Gaussian mechanism of noise multiplier ``sigma`` with
    Poisson sampling at ``q = batch-size / min-documents`` (capped at 1; 1 when
    ``min-documents`` is 0). RDP grows with ``q`` and with the steps, so this bounds the
    epsilon every party's own accountant reaches (a party with fewer documents refused).
    """
    q = secure_sample_rate(settings)
    epsilon = rdp_epsilon(settings, q, rounds * steps) if rounds else 0.0
    document = PrivacyReport.document_fields(epsilon, settings.dp_delta, SECURE_DOCUMENT_GUARANTEE, evaluation)
    return PrivacyReport(
        mechanism="gaussian (DP-SGD)", unit="document", accountant="RDP (opacus), run by the server at the "
        "largest sample rate a party may have", rounds=rounds,
        epsilon_round=rdp_epsilon(settings, q, steps), delta_round=settings.dp_delta,
        epsilon=epsilon, delta=settings.dp_delta,
        guarantee="(eps, delta)-DP per document of a party (add/remove), DP-SGD with Poisson sampling, "
                  "per-document clipping and Gaussian noise at every party; accounted for every party at "
                  f"q = {q:.4g} (batch-size / ntm.min-documents, capped at 1), which bounds each party's own "
                  "accountant; each party adds the full noise, so it does not rely on the secure sum",
        **document,
        details={"noise_multiplier": settings.noise_multiplier, "max_grad_norm": settings.max_grad_norm,
                 "dp_steps_per_round": steps, "sample_rate": q, "min_documents": settings.min_documents,
                 "training_document_epsilon": epsilon,
                 "secure_aggregation": "the server sees only each round's sum of the parties' weighted updates "
                                       f"(clipped to {settings.secure_clip:g} per coordinate, quantized to 1/"
                                       f"{settings.quantum:g}), of their weights and clipped counts; no party's "
                                       "epsilon, batch or document count"})
