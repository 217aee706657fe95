"""What a party will do and what it knows: its policy (node config) and its account (its own state).

The server's message is a request; these objects are the party's side, built from what the
party owns and handed to each local step beside the request, never merged into it:

- :class:`PartyPolicy`, from the node config only: the methods it accepts, whether it requires
  a document-level guarantee of every release, its own epsilon cap, whether it keeps a lifetime
  ledger, the federation size it was told out of band and the least secure-sum tolerance it accepts
  (its share of the noise under secure aggregation), plus its method's own node options;
- :class:`PartyAccount`, from ``context.state`` only: every release this party made in the run,
  each with its mechanism and every parameter;
- :class:`SecureFacts`, from the party's own secure-sum state: its share of the noise and the
  largest entry it may add without the sum wrapping.

No number in them comes from the server's message, so none can be lowered by it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from flower_topics.options import Option, at_least
from flower_topics.privacy.ledger import APPROX_DP, Release

#: Node-config keys of a party's policy (``flower-supernode --node-config``).
POLICY_OPTIONS: Mapping[str, Option] = {
    "accept-methods": Option("", "the methods this party answers, comma-separated (e.g. 'dplda'); a request of any "
                             "other method (training, prevalence) is refused ('' = every method)"),
    "require-document-guarantee": Option(False, "this party answers only releases with a document-level guarantee "
                                         "(dplda's rounds and prevalence, the private vocabulary release), each at "
                                         "most once: every other method, the union agreement, federated evaluation "
                                         "and a repeated release are refused"),
    "federation-size": Option(0, "secure aggregation: the number of parties of the federation, told to this party "
                              "out of band; its share of the noise assumes no more parties than this, whatever "
                              "participant list the server sends (0 = num-partitions in a simulation, else the "
                              "full noise)", at_least(0)),
    "secure-tolerance": Option(1, "secure aggregation: the least tolerance T (parties that may collude with the "
                               "server or drop out) this party accepts; a key stage with a lower T is refused, and "
                               "its share of the noise is 1 / (n - T) for the T it accepted (a simulation sets it to "
                               "the run's secure-aggregation-tolerance)", at_least(0)),
}

class ReleaseKind(enum.StrEnum):
    """What a release in a party's account was; its value is what the party's state keeps."""

    #: Its vocabulary release (the agreement's counts or candidates).
    VOCABULARY = "vocabulary"
    #: A training round's reply.
    ROUND = "round"
    #: Its topic-prevalence table.
    PREVALENCE = "prevalence"


#: The release kinds of a party's account (:class:`ReleaseKind`).
VOCABULARY, ROUND, PREVALENCE = ReleaseKind.VOCABULARY, ReleaseKind.ROUND, ReleaseKind.PREVALENCE


@dataclass(frozen=True)
class PartyPolicy:
    """What this party will do, from its node config only.

    Parameters
    ----------
    accept_methods : tuple of str
        The methods it answers (empty: every method).
    document_guarantee : bool
        It answers only releases with a document-level guarantee, each at most once.
    max_epsilon : float
        Its own cap on a run's epsilon per document (0: the run's target).
    ledger : bool
        It keeps a lifetime privacy ledger (``privacy-ledger``).
    federation_size : int
        The federation size it was told out of band (0: unknown, the full noise under secure aggregation).
    tolerance : int
        The least secure-sum tolerance ``T`` it accepts (``secure-tolerance``): parties that may collude with the
        server or drop out of a round.
    options : Mapping
        Its method's own node options and its ``partition-id`` (simulation), validated.
    """

    accept_methods: tuple[str, ...] = ()
    document_guarantee: bool = False
    max_epsilon: float = 0.0
    ledger: bool = False
    federation_size: int = 0
    tolerance: int = 1
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def accepts(self, method: str) -> bool:
        """Whether it answers ``method``'s requests."""
        return not self.accept_methods or method in self.accept_methods

    @property
    def refuses_unaccounted(self) -> bool:
        """Whether a release without document-level accounting is refused (a guarantee or a ledger to keep)."""
        return self.document_guarantee or self.ledger


@dataclass(frozen=True)
class AccountedRelease:
    """One release that left this party, as it was made.

    Parameters
    ----------
    kind : ReleaseKind or str
        :data:`VOCABULARY`, :data:`ROUND` or :data:`PREVALENCE` (a kept value is read back as its kind; another is
        refused with ValueError).
    method : str
        The method that released (``vocabulary`` for the agreement).
    release : Release
        Its mechanism and every parameter (sigma, q, sensitivity units; or its (eps, delta)).
    secure : bool
        Whether it went masked through the secure sum.
    noise_share : float
        The share of the mechanism's noise this party added (1: all of it).
    """

    kind: ReleaseKind
    method: str
    release: Release
    secure: bool = False
    noise_share: float = 1.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", ReleaseKind(self.kind))


@dataclass(frozen=True)
class PartyAccount:
    """What this party has released in this run, from its own state only (oldest first)."""

    releases: tuple[AccountedRelease, ...] = ()

    def of_kind(self, kind: ReleaseKind) -> tuple[AccountedRelease, ...]:
        """Its releases of one kind."""
        return tuple(item for item in self.releases if item.kind == kind)

    @property
    def vocabulary_spent(self) -> tuple[float, float]:
        """``(eps, delta)`` per document its vocabulary release spent (0, 0 when it made none)."""
        spent = [item.release for item in self.of_kind(VOCABULARY) if item.release.mechanism == APPROX_DP]
        return (sum(r.epsilon for r in spent), sum(r.delta for r in spent))


@dataclass(frozen=True)
class SecureFacts:
    """What this party knows of a secure-sum round from its own secure-sum state.

    Parameters
    ----------
    noise_share : float
        The share of the central noise it adds.
    entry_limit : int
        The largest magnitude an entry of its update may have so that the sum cannot wrap.
    """

    noise_share: float
    entry_limit: int


@dataclass(frozen=True)
class PartyFacts:
    """The party's side of one request: its policy, its account and, in a secure-sum round, its secure facts."""

    policy: PartyPolicy = field(default_factory=PartyPolicy)
    account: PartyAccount = field(default_factory=PartyAccount)
    secure: SecureFacts | None = None


#: A party with no policy of its own, nothing released and no secure round (a local step called directly).
NO_PARTY = PartyFacts()

__all__ = ["AccountedRelease", "NO_PARTY", "POLICY_OPTIONS", "PREVALENCE", "PartyAccount", "PartyFacts",
           "PartyPolicy", "ROUND", "ReleaseKind", "SecureFacts", "VOCABULARY"]
