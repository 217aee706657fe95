"""What every method's party side shares: the shape of a local step, and the
"last applied round" protocol.

A method's client module exposes one :class:`LocalStep`: the dataclass of what the party
keeps between rounds (``context.state`` in Flower; typed fields, :mod:`flower_topics.clients.state`), the
function that runs one round on the party's documents, and, for a method whose replies
can go through secure aggregation, the check that its reply fits the secure sum's range.
The ClientApp routes a ``train.<method>`` message to :meth:`LocalStep.train`; the step
never sees the run config, only what the strategy sent.

The last-applied-round protocol (methods whose replies are changes against the server's
counts: ``lda``, ``fedlda``). The server tells each party the round of its last applied
reply. The party keeps the state its last applied reply put on the server (``applied``)
and the state its last reply would put there (``pending``, from round ``pending_round``);
:func:`acknowledge` moves ``pending`` to ``applied`` when the server applied it and drops
it otherwise, so the party always conditions on what the server really holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord

from flower_topics.clients.state import field_types
from flower_topics.data.corpus import Corpus
from flower_topics.errors import UserInputError
from flower_topics.privacy.ledger import Release
from flower_topics.privacy.party_policy import NO_PARTY, PartyFacts, SecureFacts

Update = tuple[dict[str, np.ndarray], dict[str, int | float]]
"""A local step's reply: arrays for the ``update`` record and numbers for ``metrics``."""


def no_secure_limit(corpus: Corpus, config: ConfigRecord, secure: SecureFacts) -> str | None:
    """The default :attr:`LocalStep.secure_headroom`: nothing to check."""
    return None


def unaccounted(config: ConfigRecord, corpus: Corpus) -> tuple[Release, ...] | None:
    """The default :attr:`LocalStep.accounted`: a round whose release has no document-level accounting (None)."""
    return None


def plain_prevalence(theta: np.ndarray, index: np.ndarray, n_periods: int, config: ConfigRecord, state: Any,
                     seed: int, party: PartyFacts = NO_PARTY) -> tuple[np.ndarray, tuple[Release, ...] | None]:
    """The default :attr:`LocalStep.prevalence`: the exact table of summed topic shares, with no document-level
    accounting (a method without a privacy mechanism releases its prevalence as it releases its rounds)."""
    from flower_topics.metrics.prevalence import period_totals

    return period_totals(theta, index, n_periods)[0], None


@dataclass(frozen=True)
class LocalStep:
    """A method's party side.

    Parameters
    ----------
    state : type
        Dataclass of what the party keeps between rounds; every field has a default and declares
        a numpy array, int, float, bool or str, or one of them ``| None``
        (:data:`flower_topics.clients.state.SUPPORTED`); another type is refused when the step is defined.
    run : callable
        ``run(arrays, config, corpus, state, seed, party) -> (arrays, metrics)``: one round on
        the party's training documents, given the message's :class:`~flwr.app.ArrayRecord`
        and :class:`~flwr.app.ConfigRecord` (the server's request) and, beside them, the party's
        own side (:class:`~flower_topics.privacy.party_policy.PartyFacts`: its policy, its account
        of the run's releases, its secure-sum facts); updates ``state`` in place.
    secure_headroom : callable, default no check
        ``secure_headroom(corpus, config, secure) -> reason or None``: in a secure-sum round,
        given the party's own facts of it (:class:`~flower_topics.privacy.party_policy.SecureFacts`:
        its entry limit and its share of the noise), why this party's reply could exceed the most it
        may add without the sum wrapping, or None.
    accounted : callable, default none
        ``accounted(config, corpus) -> releases or None``: what one round with this config releases of the
        party's documents, as its accountant composes it (:class:`~flower_topics.privacy.ledger.Release`), or
        None when the release has no document-level accounting. A party that keeps a privacy ledger
        (node config ``privacy-ledger``) records these before the reply leaves, and refuses a round whose
        release is not accounted.
    prevalence : callable, default the exact table
        ``prevalence(theta, index, n_periods, config, state, seed, party) -> (table, releases or None)``: what
        leaves the party of its topic prevalence (:mod:`flower_topics.federation.party_prevalence`), given
        its dated documents' topic shares (``D x K``), each one's period position and the request's
        config; ``table`` is ``K x T`` (an integer table is sent as it is under secure aggregation, a real
        one in the request's units). A method with a mechanism adds its noise here, checks its own budget
        and may update ``state``.
    """

    state: type
    run: Callable[[ArrayRecord, ConfigRecord, Corpus, Any, int, PartyFacts], Update]
    secure_headroom: Callable[[Corpus, ConfigRecord, SecureFacts], str | None] = no_secure_limit
    accounted: Callable[[ConfigRecord, Corpus], tuple[Release, ...] | None] = unaccounted
    prevalence: Callable[[np.ndarray, np.ndarray, int, ConfigRecord, Any, int, PartyFacts],
                         tuple[np.ndarray, tuple[Release, ...] | None]] = plain_prevalence

    def __post_init__(self) -> None:
        field_types(self.state)  # refuses, in one line, a state field that could not be kept between rounds

    def train(self, arrays: ArrayRecord, config: ConfigRecord, corpus: Corpus, state: Any, seed: int,
              party: PartyFacts = NO_PARTY) -> Update:
        """One round (:attr:`run`), refused in one line before anything is computed when it is a secure-sum
        round whose range could not hold the reply (:attr:`secure_headroom`).

        Raises
        ------
        UserInputError
            The reply could wrap the secure sum.
        """
        if party.secure is not None and (problem := self.secure_headroom(corpus, config, party.secure)):
            raise UserInputError(problem)
        return self.run(arrays, config, corpus, state, seed, party)


class Acknowledged(Protocol):
    """A client state with the fields of the last-applied-round protocol."""

    applied: np.ndarray | None
    pending: np.ndarray | None
    pending_round: int


def acknowledge(state: Acknowledged, last_applied_round: int,
                also: Sequence[tuple[str, str]] = ()) -> np.ndarray | None:
    """The state the server holds for this party, given its last applied round (0 = none).

    Moves ``pending`` to ``applied`` when ``last_applied_round`` is the pending reply's round,
    forgets ``applied`` when the server has applied nothing, and clears ``pending``; the
    same for each ``(applied, pending)`` pair of field names in ``also``.
    """
    applied_now = bool(state.pending_round) and last_applied_round == state.pending_round
    for applied, pending in (("applied", "pending"), *also):
        if applied_now:
            setattr(state, applied, getattr(state, pending))
        elif last_applied_round == 0:
            setattr(state, applied, None)
        setattr(state, pending, None)
    state.pending_round = 0
    return state.applied
