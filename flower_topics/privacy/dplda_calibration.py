"""How a ``dplda`` run spends its privacy budget: the whole-run target, the calibrated noise, the accountant of its
releases, what a party's ledger plans for one run, and the run-config checks that keep every release accounted.

Everything here follows from the run config (or from the round settings a party receives) alone: no document
and no party's number enters it. The accountants are imported on first use, so that a party whose release is
known to fit (:mod:`flower_topics.privacy.guard`) never imports one.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Mapping, Protocol

from flower_topics.errors import UserInputError
from flower_topics.options import shown

if TYPE_CHECKING:
    from flower_topics.privacy.accountants import Accountant, Budget
    from flower_topics.privacy.ledger import Release


class RoundNoise(Protocol):
    """What the accounting reads of a round's settings (``DPLDASettings`` of :mod:`flower_topics.wire.dplda`)."""

    noise_multiplier: float
    sample_rate: float
    secure: bool

    @property
    def sensitivity_units(self) -> float:
        """The L2 sensitivity in integer units under secure aggregation."""


def check_config(config: Mapping[str, Any]) -> None:
    """What a ``dplda`` run needs before round 1 that no accountant is needed to tell (one line each; whether its
    target can be reached is :func:`check_noise`).

    Raises
    ------
    UserInputError
        With ``vocabulary='union'`` (it publishes every party's words and their exact
        document frequencies, outside any accountant), with ``federated-eval=true`` (the
        parties' evaluation sums are not accounted), when ``dplda.public-corpus`` names no file or folder,
        or when a ``private`` vocabulary spends the whole target.
    """
    if str(config["vocabulary"]) == "union":
        raise UserInputError("dplda needs an accounted vocabulary: vocabulary='private' (accounted) or the path of "
                             "a public vocabulary file; 'union' publishes every party's words with their document "
                             "frequencies")
    if bool(config["federated-eval"]):
        raise UserInputError("dplda: federated-eval=true would release the parties' evaluation sums outside the "
                             "accountant; set federated-eval=false and score the final model with "
                             "`flower-topics evaluate` on documents you may use")
    if str(config.get("prevalence-period", "")) and not str(config["prevalence-from"]).strip():
        raise UserInputError("dplda: prevalence adds noise to every period's cell, so the periods must be public: "
                             "set prevalence-from and prevalence-to (e.g. '2015-01' and '2024-12')")
    from flower_topics.data.readers import FORMATS_HINT, expand_path, path_exists

    public = str(config["dplda.public-corpus"])
    if public and not path_exists(expand_path(public)):
        raise UserInputError(f"dplda.public-corpus {shown(public, 200)} does not exist; pass {FORMATS_HINT} of public "
                             "text the server may read, or '' for none")
    budget(config).for_rounds()


def check_noise(config: Mapping[str, Any]) -> None:
    """That the whole-run target can be reached: the noise multiplier is calibrated (:func:`noise_multiplier`, once
    per process for the same question), which imports the accountant.

    Raises
    ------
    UserInputError
        When no noise in the accountant's range reaches the target (one line).
    """
    noise_multiplier(config)


def budget(config: Mapping[str, Any]) -> "Budget":
    """The run's whole-run target, with what the vocabulary agreement spends on the same documents.

    The ``private`` agreement's (eps, delta) per document follows from the run config alone
    (``vocabulary-epsilon``, ``vocabulary-delta``); a public vocabulary file spends nothing.
    """
    from flower_topics.privacy.accountants import Budget

    private = str(config["vocabulary"]) == "private"
    return Budget(float(config["dplda.epsilon"]), float(config["dplda.delta"]),
                  float(config["vocabulary-epsilon"]) if private else 0.0,
                  float(config["vocabulary-delta"]) if private else 0.0)


def noise_multiplier(config: Mapping[str, Any]) -> float:
    """``sigma`` that spends what the vocabulary leaves of the target over ``num-rounds`` rounds, composed with the
    prevalence release (:func:`prevalence_noise`) when the run asks for one.

    Raises
    ------
    UserInputError
        When the target cannot be reached (one line).
    """
    return _calibrate(*budget(config).for_rounds(), float(config["dplda.sample-rate"]), int(config["num-rounds"]),
                      _units(config), prevalence_noise(config))


def prevalence_noise(config: Mapping[str, Any]) -> float:
    """The noise multiplier of the prevalence release (0 without ``prevalence-period``): one Gaussian (Skellam under
    secure aggregation) of a table to which a document adds its topic shares (L2 norm at most 1, in one period),
    calibrated to ``dplda.prevalence-share`` of what the vocabulary leaves of the target, on its own."""
    if not str(config.get("prevalence-period", "")):
        return 0.0
    epsilon, delta = budget(config).for_rounds()
    return _calibrate(epsilon * float(config["dplda.prevalence-share"]), delta, 1.0, 1, _units(config), 0.0)


def _units(config: Mapping[str, Any]) -> float:
    """The sensitivity in integer units under secure aggregation (``C x quantum``), else 0."""
    return float(config["dplda.clip"]) * float(config["dplda.quantum"]) if bool(config["secure-aggregation"]) else 0.0


def _backend(units: float) -> tuple[str, dict[str, float]]:
    """The registered accountant of the releases and its options: PLD of the subsampled Gaussian, or under secure
    aggregation (``units``: the sensitivity in integer units) RDP of the subsampled Skellam."""
    return ("skellam", {"sensitivity": units}) if units else ("pld", {})


def accountant(settings: RoundNoise) -> "Accountant":
    """A new accountant of this run's releases (:mod:`flower_topics.privacy.accountants`)."""
    from flower_topics.privacy.accountants import create_accountant

    name, options = _backend(settings.sensitivity_units if settings.secure else 0.0)
    return create_accountant(name, **options)


@functools.lru_cache(maxsize=32)
def _calibrate(epsilon: float, delta: float, sample_rate: float, rounds: int, units: float,
               prevalence: float) -> float:
    from flower_topics.privacy.accountants import get_noise_multiplier

    name, options = _backend(units)
    also = ((prevalence, 1.0, 1),) if prevalence else ()
    return get_noise_multiplier(name, target_epsilon=epsilon, target_delta=delta, sample_rate=sample_rate,
                                steps=rounds, also=also, **options)


def rounds_epsilon(settings: RoundNoise, rounds: int, delta: float, prevalence: float = 0.0) -> float:
    """Epsilon at ``delta`` of ``rounds`` releases with these settings (:func:`accountant`), and of the prevalence
    release at noise multiplier ``prevalence`` when it is > 0."""
    spent = accountant(settings)
    spent.step(noise_multiplier=settings.noise_multiplier, sample_rate=settings.sample_rate, steps=rounds)
    if prevalence:
        spent.step(noise_multiplier=prevalence, sample_rate=1.0)
    return spent.get_epsilon(delta)


def planned_releases(config: Mapping[str, Any]) -> tuple[Release, ...]:
    """What one whole run of this run config releases of a party's documents: ``num-rounds`` rounds at the
    calibrated ``sigma`` (Gaussian, or Skellam under secure aggregation) and a ``private`` vocabulary's
    ``(eps, delta)`` (what a party's privacy ledger checks its lifetime cap against before round 1)."""
    from flower_topics.privacy.ledger import APPROX_DP, Release

    sigma, units = noise_multiplier(config), _units(config)
    mechanism = "skellam" if units else "gaussian"
    planned = [Release(mechanism, sigma, float(config["dplda.sample-rate"]), steps=int(config["num-rounds"]),
                       sensitivity=units)]
    prevalence = prevalence_noise(config)
    if prevalence:
        planned.append(Release(mechanism, prevalence, 1.0, sensitivity=units))
    if str(config["vocabulary"]) == "private":
        planned.append(Release(APPROX_DP, epsilon=float(config["vocabulary-epsilon"]),
                               delta=float(config["vocabulary-delta"])))
    return tuple(planned)
