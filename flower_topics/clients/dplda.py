"""Party side of ``dplda``: one DP-SVI release per round (Park, Foulds, Chaudhuri and Welling 2016).

Each round the party (Park et al. 2016, Algorithm 1, the steps inside one iteration):

1. includes each of its training documents independently with probability ``q`` (Poisson
   sampling, the premise of the amplification the accountant uses), with its secret randomness;
2. runs the E-step of online LDA against the global ``lambda`` for the included documents
   (:func:`flower_topics.models.svi.e_step`; Hoffman, Blei and Bach 2010, eqs. 2-3);
3. scales each document's expected-count statistic ``s_d = n_dw phi_dwk`` to L2 norm at most
   ``C`` and sums them;
4. adds ``N(0, (sigma C)^2)`` to every one of the ``K x V`` cells, with its secret randomness,
   and sends that one matrix.

Under secure aggregation (``secure-aggregation=true``) step 3 also scales each document's
statistic by ``quantum`` and rounds it to integers (:func:`flower_topics.models.svi.e_step`),
and step 4 adds the party's share of Skellam noise, ``Sk((sigma C quantum)^2 / (n - T))``
per cell (:mod:`flower_topics.privacy.skellam_mechanism`), with ``n`` and ``T`` from the party's own
secure-sum state; the secure sum masks the integers before they leave (the ClientApp).

Nothing else leaves the party: not the number of documents sampled or held, not theta, not a
metric. The randomness of steps 1 and 4 is drawn fresh for every release from the party's
secret seed (OS entropy, or its ``secret-seed`` mixed with a per-run nonce) and its own
release counter (never from the round number the server sends, so
that a server that repeats a round cannot get the same noise twice).

The party keeps its own accountant: every release it made in this run as it was made (sigma,
q, and plain or secure with its sensitivity in integer units). It refuses a release (BAD_INPUT,
one line) that would take its own document-level epsilon, composed with what its vocabulary
release spent (its own account, :class:`~flower_topics.privacy.party_policy.PartyAccount`), over the
run's target or over its own cap (node config ``max-epsilon``, its
:class:`~flower_topics.privacy.party_policy.PartyPolicy`), whatever the server's arithmetic says;
settings no honest server sends (a ``dplda.quantum`` below 1); and a round whose expected sample
``q x documents`` is below one document. Over several runs on the same documents, a
party with a privacy ledger (node config ``privacy-ledger``) records each release (:func:`accounted`)
before it leaves and caps all runs together (:mod:`flower_topics.federation.party_ledger`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord

from flower_topics.clients.base import LocalStep, Update
from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError
from flower_topics.models import svi
from flower_topics.privacy import dplda_calibration as calibration
from flower_topics.privacy import guard
from flower_topics.privacy.ledger import APPROX_DP, Release, compose
from flower_topics.privacy.party_policy import NO_PARTY, PartyFacts, SecureFacts
from flower_topics.privacy.skellam_mechanism import largest_entry, skellam_noise
from flower_topics.wire import dplda as wire


@dataclass
class DPLDAClientState:
    """What a party keeps between rounds (``context.state``).

    Parameters
    ----------
    releases : np.ndarray
        ``n x 4``: each release it made, as made: its noise multiplier, its sampling rate, its sensitivity in
        integer units (0 for a plain Gaussian release) and whether it was secure (1) or plain (0).
    prevalence : int
        1 once it released its topic prevalence in this run (there is one such release a run).
    guard : np.ndarray
        ``0 x 8`` or ``1 x 8``: what its own budget guard established (:mod:`flower_topics.privacy.guard`), a
        :class:`GuardMemo`'s :meth:`~GuardMemo.row` (``secure, sigma, q, delta, sensitivity units, budget,
        largest count known to fit, smallest known not to``); each message's process starts from it, so that a
        run computes a few epsilons, not one per message.
    """

    releases: np.ndarray = field(default_factory=lambda: np.zeros((0, RELEASE_COLUMNS)))
    prevalence: int = 0
    guard: np.ndarray = field(default_factory=lambda: np.zeros((0, GUARD_COLUMNS)))


#: Columns of :attr:`DPLDAClientState.guard`: the guard's question (kind and budget), then its two bounds.
GUARD_COLUMNS = 8


@dataclass(frozen=True)
class GuardMemo:
    """What the party's budget guard established for one question (:mod:`flower_topics.privacy.guard`), kept between
    messages as the one row of :attr:`DPLDAClientState.guard` (:meth:`row`, :meth:`read`).

    Parameters
    ----------
    secure : bool
        Whether the releases are Skellam (secure aggregation) or Gaussian.
    noise_multiplier, sample_rate : float
        ``sigma`` and ``q`` of every release.
    delta : float
        The delta its epsilons are computed at.
    sensitivity_units : float
        The releases' L2 sensitivity in integer units.
    budget : float
        The epsilon the releases may spend.
    fits : int
        The largest count of releases known to fit (0: none known).
    over : float
        The smallest count known not to (inf: none known).
    """

    secure: bool
    noise_multiplier: float
    sample_rate: float
    delta: float
    sensitivity_units: float
    budget: float
    fits: int = 0
    over: float = math.inf

    @property
    def kind(self) -> tuple[bool, float, float, float, float]:
        """What the releases' epsilon depends on besides their count (the guard's ``kind``)."""
        return self.secure, self.noise_multiplier, self.sample_rate, self.delta, self.sensitivity_units

    @property
    def question(self) -> tuple[float, ...]:
        """The question its bounds answer, as numbers: the kind and the budget."""
        return (float(self.secure), *self.kind[1:], self.budget)

    def row(self) -> np.ndarray:
        """As the state keeps it: ``1 x GUARD_COLUMNS`` floats, the question then the two bounds."""
        return np.array([[*self.question, self.fits, self.over]])

    @classmethod
    def read(cls, kept: np.ndarray) -> "GuardMemo | None":
        """The memo a state's :attr:`DPLDAClientState.guard` keeps, or None when it keeps none."""
        if kept.shape != (1, GUARD_COLUMNS):
            return None
        secure, sigma, rate, delta, units, budget, fits, over = (float(value) for value in kept[0])
        return cls(bool(secure), sigma, rate, delta, units, budget, int(fits), over)
#: Columns of :attr:`DPLDAClientState.releases`: sigma, q, sensitivity units (0 plain), secure (1) or plain (0).
RELEASE_COLUMNS = 4


def parse_settings(config: ConfigRecord) -> wire.DPLDASettings:
    """The server's settings, or one line saying why the party will not use them (a missing key, a value out of
    its range, a ``dplda.quantum`` below 1)."""
    try:
        settings = wire.DPLDASettings.from_record(config)
    except (KeyError, TypeError, ValueError) as exc:
        raise UserInputError(f"dplda: the server's settings are not valid ({exc})") from None
    if not settings.quantum >= 1:
        raise UserInputError(f"dplda: the server's dplda.quantum {settings.quantum:g} is below 1 (an integer unit "
                             "finer than an expected count); refused")
    return settings


def release_row(settings: wire.DPLDASettings, sigma: float, rate: float) -> list[float]:
    """One row of :attr:`DPLDAClientState.releases`: a release at ``sigma`` and ``rate`` made with ``settings``."""
    return [sigma, rate, settings.sensitivity_units if settings.secure else 0.0, float(settings.secure)]


def as_releases(rows: np.ndarray) -> list[Release]:
    """The rows of :attr:`DPLDAClientState.releases` as the releases a ledger composes, equal rows as one."""
    values, counts = (np.unique(rows, axis=0, return_counts=True) if len(rows) else (rows, []))
    return [Release("skellam" if secure else "gaussian", float(sigma), float(rate), steps=int(n),
                    sensitivity=float(units) if secure else 0.0)
            for (sigma, rate, units, secure), n in zip(values, counts)]


def check_lambda(lam: np.ndarray, settings: wire.DPLDASettings, n_words: int) -> np.ndarray:
    """The server's ``lambda`` as float64, or one line saying why the party cannot use it."""
    if lam.shape != (settings.n_topics, n_words):
        raise UserInputError(f"the server's topic parameters have shape {lam.shape}, expected "
                             f"({settings.n_topics}, {n_words})")
    lam = np.asarray(lam, dtype=np.float64)
    if not np.all(np.isfinite(lam)) or not np.all(lam > 0):
        raise UserInputError("the server's topic parameters must be finite and positive")
    return lam


def release(corpus: Corpus, lam: np.ndarray, settings: wire.DPLDASettings, rng: np.random.Generator
            ) -> np.ndarray:
    """One noisy statistic: Poisson sample, E-step, per-document clipping, sum, Gaussian noise.

    Parameters
    ----------
    corpus : Corpus
        The party's training documents.
    lam : np.ndarray
        ``K x V`` global topic parameters.
    settings : DPLDASettings
        ``q``, ``C``, ``sigma``, alpha and the E-step iterations.
    rng : np.random.Generator
        The party's secret randomness (sampling and noise).

    Returns
    -------
    np.ndarray
        ``K x V`` float64: the clipped sum plus ``N(0, (sigma C)^2)`` per cell.
    """
    included = np.flatnonzero(rng.random(corpus.n_docs) < settings.sample_rate)
    counts = svi.sampled_counts(corpus, included)
    statistic = svi.e_step(lam, counts, alpha=settings.alpha, clip=settings.clip,
                           max_iter=settings.e_step_iterations).statistic
    return statistic + rng.normal(0.0, settings.noise_multiplier * settings.clip, size=statistic.shape)


def secure_release(corpus: Corpus, lam: np.ndarray, settings: wire.DPLDASettings, rng: np.random.Generator,
                   noise_share: float) -> np.ndarray:
    """One integer statistic for the secure sum: Poisson sample, E-step, clipping, integer rounding, Skellam share.

    Returns
    -------
    np.ndarray
        ``K x V`` int64: the sum of the sampled documents' rounded statistics (each of L2
        norm at most ``C x quantum``) plus ``Sk(noise_share (sigma C quantum)^2)`` per cell.
    """
    included = np.flatnonzero(rng.random(corpus.n_docs) < settings.sample_rate)
    counts = svi.sampled_counts(corpus, included)
    statistic = svi.e_step(lam, counts, alpha=settings.alpha, clip=settings.clip,
                           max_iter=settings.e_step_iterations, quantum=settings.quantum, rng=rng).statistic
    variance = noise_share * (settings.noise_multiplier * settings.sensitivity_units) ** 2
    return np.rint(statistic).astype(np.int64) + skellam_noise(statistic.shape, variance, rng)


def secure_headroom(settings: wire.DPLDASettings, n_docs: int, noise_share: float, limit: int) -> str | None:
    """Why this party's update could wrap the secure sum, or None.

    A cell of its update is at most ``C x quantum`` per document it holds plus its noise,
    which exceeds 40 standard deviations (plus 100) with probability below ``2^-60``
    (:func:`~flower_topics.privacy.skellam_mechanism.largest_entry`).
    """
    noise_sd = np.sqrt(noise_share) * settings.noise_multiplier * settings.sensitivity_units
    largest = largest_entry(settings.sensitivity_units * n_docs, noise_sd)
    if largest <= limit:
        return None
    return (f"secure sum: with {n_docs} training documents an entry of this party's update could reach "
            f"{largest:.3g}, over {limit}, what this round's parties can add without wrapping; use a larger "
            f"secure-aggregation-bits or a smaller dplda.quantum")


def spending_over_cap(releases: np.ndarray, settings: wire.DPLDASettings, before_eps: float, before_delta: float,
                      cap: float, state: DPLDAClientState | None = None) -> float | None:
    """The party's epsilon per document after ``releases`` (rows of :attr:`DPLDAClientState.releases`, the new
    one last), composed with what its vocabulary release spent, when that is over ``cap``; else None.

    Every release is composed as it was made: a Gaussian release in the PLD, a Skellam one in the RDP of its own
    sensitivity (:func:`flower_topics.privacy.ledger.compose`), whatever today's settings are.

    With ``state``, the guard starts from what it established at the party's earlier messages of this run
    (:attr:`DPLDAClientState.guard`, used only for exactly the same question) and keeps there what it knows now.
    """
    limit, delta = cap * (1.0 + 1e-9), settings.delta - before_delta
    if np.any(releases != release_row(settings, settings.noise_multiplier, settings.sample_rate)):
        spent = compose([Release(APPROX_DP, epsilon=before_eps, delta=before_delta), *as_releases(releases)],
                        settings.delta)
        return spent if spent > limit else None
    # every release at these settings' (sigma, q): one self-composed event
    epsilon_of = lambda n: calibration.rounds_epsilon(settings, n, delta)  # noqa: E731
    budget = limit - before_eps
    asked = GuardMemo(settings.secure, settings.noise_multiplier, settings.sample_rate, delta,
                      settings.sensitivity_units, budget)
    kept = None if state is None else GuardMemo.read(state.guard)
    if kept is not None and kept.question == asked.question:
        guard.remember_bounds(asked.kind, budget, kept.fits, kept.over)
    fits = guard.within_budget(epsilon_of, len(releases), budget, kind=asked.kind)
    if state is not None:
        known_fits, known_over = guard.known_bounds(asked.kind, budget)
        state.guard = dataclasses.replace(asked, fits=known_fits, over=known_over).row()
    if fits:
        return None  # known without a new epsilon (privacy/guard.py)
    spent = before_eps + epsilon_of(len(releases))
    return spent if spent > limit else None


def _limits(party: PartyFacts, settings: wire.DPLDASettings) -> tuple[float, float, float]:
    """What this party's vocabulary release spent (eps, delta; its own account) and its cap: the run's target, or
    its node config's ``max-epsilon`` when lower (its policy)."""
    before_eps, before_delta = party.account.vocabulary_spent
    own = party.policy.max_epsilon
    cap = settings.epsilon if own <= 0 else min(settings.epsilon, own)
    if before_delta >= settings.delta:
        raise UserInputError(f"the vocabulary release spent delta {before_delta:g}, the run's target is "
                             f"{settings.delta:g}")
    return before_eps, before_delta, cap


def local_step(arrays: ArrayRecord, config: ConfigRecord, corpus: Corpus, state: DPLDAClientState,
               seed: int, party: PartyFacts = NO_PARTY) -> Update:
    """One round of ``dplda``: the noisy statistic of this party's Poisson sample, nothing else.

    ``config`` is the server's request; ``party`` is this party's side (its cap, its account, its secure-sum
    facts), never read from the request."""
    settings = parse_settings(config)
    lam = check_lambda(arrays[wire.LAMBDA_KEY].numpy(), settings, corpus.n_words)
    expected = settings.sample_rate * corpus.n_docs
    if expected < 1.0:
        raise UserInputError(f"this party has {corpus.n_docs} training documents: with sample rate "
                             f"{settings.sample_rate:g} a round samples {expected:.2f} on average (< 1)")
    before_eps, before_delta, cap = _limits(party, settings)
    releases = np.vstack([state.releases.reshape(-1, RELEASE_COLUMNS),
                          [release_row(settings, settings.noise_multiplier, settings.sample_rate)]])
    if state.prevalence:
        raise UserInputError("this party released its topic prevalence, the run's last release: it trains no more")
    if settings.secure and party.secure is None:
        raise UserInputError("dplda with secure aggregation: the training message carries no secure-sum round "
                             "(this party will not send an unmasked statistic with a share of the noise)")
    spent = spending_over_cap(releases, settings, before_eps, before_delta, cap, state)
    if spent is not None:
        raise UserInputError(f"this release would take the party to eps {spent:.4g} per document, over its cap "
                             f"{cap:g} (after {len(state.releases)} releases); it releases no more in this run",
                             reply="this release would take the party over its privacy cap; it releases no more "
                                   "in this run")
    rng = np.random.default_rng(np.random.SeedSequence([seed, len(state.releases)]))
    if settings.secure:
        statistic = secure_release(corpus, lam, settings, rng, party.secure.noise_share)
        state.releases = releases
        return {wire.STATISTIC_KEY: statistic}, {}
    noisy = release(corpus, lam, settings, rng)
    state.releases = releases
    return {wire.STATISTIC_KEY: noisy.astype(np.float32)}, {}


def _secure_headroom(corpus: Corpus, config: ConfigRecord, secure: SecureFacts) -> str | None:
    """:func:`secure_headroom` from a training message's settings and the party's own facts of its round."""
    return secure_headroom(parse_settings(config), corpus.n_docs, secure.noise_share, secure.entry_limit)


def accounted(config: ConfigRecord, corpus: Corpus) -> tuple[Release, ...]:
    """What one round releases, as the run's accountant composes it: a Poisson-subsampled Gaussian (PLD), or under
    secure aggregation the Skellam of the whole round's noise (its RDP, per sensitivity in integer units)."""
    settings = parse_settings(config)
    if settings.secure:
        return (Release("skellam", settings.noise_multiplier, settings.sample_rate,
                        sensitivity=settings.sensitivity_units),)
    return (Release("gaussian", settings.noise_multiplier, settings.sample_rate),)


def integer_shares(theta: np.ndarray, units: float, rng: np.random.Generator) -> np.ndarray:
    """Each document's topic shares in integer units under secure aggregation: ``theta x units``, each cell rounded
    up with probability its fractional part, else down; a row whose rounded L2 norm exceeds ``units`` is rounded
    down instead, so that every row keeps L2 norm at most ``units`` (as :func:`flower_topics.models.svi.e_step`
    encodes a round's statistic)."""
    scaled = np.asarray(theta, dtype=np.float64) * units
    low = np.floor(scaled)
    up = low + (rng.random(scaled.shape) < scaled - low)
    within = np.sqrt(np.einsum("ij,ij->i", up, up)) <= units
    return np.where(within[:, None], up, low).astype(np.int64)


def prevalence_release(theta: np.ndarray, index: np.ndarray, n_periods: int, config: ConfigRecord,
                       state: DPLDAClientState, seed: int, party: PartyFacts = NO_PARTY
                       ) -> tuple[np.ndarray, tuple[Release, ...]]:
    """``dplda``'s prevalence release: the table of summed topic shares plus the party's noise, once a run.

    Adding or removing one document changes one period's column by its topic shares, whose L2 norm is at
    most 1: the party adds ``N(0, sigma_p^2)`` to every cell, or under secure aggregation encodes each
    document's shares in the rounds' integer units (:func:`integer_shares`, L2 at most ``C x quantum``) and
    adds its share of ``Sk((sigma_p C quantum)^2)``. The party composes it with every release it made in the
    run, in the run's accountant, and refuses it over the target or its cap.

    Raises
    ------
    UserInputError
        A request without noise, a second release, or one that would spend over the cap (one line).
    """
    from flower_topics.metrics.prevalence import period_totals

    settings = parse_settings(config)
    sigma = float(config.get(wire.PREVALENCE_NOISE, 0.0))
    if not sigma > 0:
        raise UserInputError("dplda: the prevalence request carries no noise; this party sends no exact table")
    if state.prevalence:
        raise UserInputError("dplda: this party already released its topic prevalence in this run")
    if settings.secure and party.secure is None:
        raise UserInputError("dplda with secure aggregation: the prevalence request carries no secure-sum round")
    before_eps, before_delta, cap = _limits(party, settings)
    rows = np.vstack([state.releases.reshape(-1, RELEASE_COLUMNS), [release_row(settings, sigma, 1.0)]])
    spent = spending_over_cap(rows, settings, before_eps, before_delta, cap)
    if spent is not None:
        raise UserInputError(f"the prevalence release would take the party to eps {spent:.4g} per document, over its "
                             f"cap {cap:g} (after {len(state.releases)} round releases); it is not sent",
                             reply="the prevalence release would take the party over its privacy cap; it is not "
                                   "sent")
    rng = np.random.default_rng(np.random.SeedSequence([seed, len(state.releases), PREVALENCE_STREAM]))
    if settings.secure:
        units = settings.sensitivity_units
        table = period_totals(integer_shares(theta, units, rng), index, n_periods)[0].astype(np.int64)
        variance = party.secure.noise_share * (sigma * units) ** 2
        largest = largest_entry(units * theta.shape[0], np.sqrt(variance))
        if largest > party.secure.entry_limit:
            raise UserInputError(f"secure sum: an entry of this party's prevalence table could reach {largest:.3g}, "
                                 f"over {party.secure.entry_limit}; use a larger secure-aggregation-bits")
        noisy, release = table + skellam_noise(table.shape, variance, rng), Release("skellam", sigma, 1.0,
                                                                                   sensitivity=units)
    else:
        table = period_totals(theta, index, n_periods)[0]
        noisy, release = table + rng.normal(0.0, sigma, size=table.shape), Release("gaussian", sigma, 1.0)
    state.prevalence = 1
    return noisy, (release,)


#: Mixed into the prevalence release's randomness: a stream no round's seed takes.
PREVALENCE_STREAM = 0x70726576

#: The party side of ``dplda``.
STEP = LocalStep(state=DPLDAClientState, run=local_step, secure_headroom=_secure_headroom, accounted=accounted,
                 prevalence=prevalence_release)
