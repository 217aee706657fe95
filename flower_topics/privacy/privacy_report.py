"""The privacy report every strategy gives: one typed record for every method.

Each round the ServerApp writes :meth:`PrivacyReport.to_dict` into ``metrics.jsonl``
and the model's metadata, and prints :meth:`PrivacyReport.summary` on the console: the
cumulative figure with its unit, so that the console and the files never disagree.

Every report states two things side by side: the guarantee on the unit the method's paper
uses (``unit``, ``epsilon``, ``delta``: one token for PC-TD and FTM, one document for FedLDA,
DP-SGD and DP-SVI) and the guarantee on the unit a data-protection officer signs
(``document_epsilon``, ``document_delta``, ``document_guarantee``): adding or removing one
document of one party, over the whole run, every release that depends on the party's
documents composed. Where no such bound exists (no mechanism, a per-token mechanism and
documents of unbounded length, a delta of 1, a release nobody accounts for), the document
figures are None and ``document_guarantee`` is a :class:`NoDocumentGuarantee`'s text:
``"none: "`` and why.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Literal, Mapping

Unit = Literal["none", "token", "document", "party"]


@dataclass(frozen=True)
class NoDocumentGuarantee:
    """There is no document-level bound, and why; written in a report as ``"none: <reason>"``.

    Parameters
    ----------
    reason : str
        Why no (eps, delta) bounds adding or removing one document of a party.
    """

    reason: str
    #: How the text of a ``document_guarantee`` without a document-level bound begins.
    PREFIX: ClassVar[str] = "none: "

    def __str__(self) -> str:
        return f"{self.PREFIX}{self.reason}"

    @classmethod
    def unaccounted(cls, release: str, without: str = "") -> "NoDocumentGuarantee":
        """No bound because ``release`` of the party's documents is outside every accountant; ``without``: what the
        bound would be without it (written in parentheses after the reason)."""
        return cls(f"{release} is not accounted" + (f" ({without})" if without else ""))

    @classmethod
    def parse(cls, document_guarantee: str) -> "NoDocumentGuarantee | None":
        """The absent guarantee a report's ``document_guarantee`` text states, or None when it states a bound."""
        if document_guarantee.startswith(cls.PREFIX):
            return cls(document_guarantee.removeprefix(cls.PREFIX))
        return None


@dataclass(frozen=True)
class PrivacyReport:
    """What a run has spent so far, and on what.

    Parameters
    ----------
    mechanism : str
        The randomizer (``"none"`` without one).
    unit : {"none", "token", "document", "party"}
        Whose presence the guarantee hides: one token (a word occurrence), one
        document, or one party's whole data.
    accountant : str
        How the rounds are composed (e.g. basic composition, RDP).
    rounds : int
        Rounds in which the unit's data was released.
    epsilon_round, delta_round : float or None
        The guarantee of one round's release.
    epsilon, delta : float or None
        The guarantee over every round so far (None without a mechanism).
    guarantee : str
        The guarantee as the paper states it, and what it assumes.
    document_epsilon, document_delta : float or None
        The whole run's guarantee for adding or removing one document of a party, every
        release that depends on its documents composed; None where there is none.
    document_guarantee : str or NoDocumentGuarantee
        What the document figures cover (which releases, which accountant, whom it holds
        against), or a :class:`NoDocumentGuarantee` (kept as its text, ``"none: "`` and why there is no
        document-level bound, what the files hold; :attr:`absent_guarantee` reads it back).
    details : Mapping
        Method-specific figures (e.g. eta, the number of tuples per document, the RDP
        order), written flat beside the fields above.
    """

    mechanism: str
    unit: Unit
    accountant: str
    rounds: int = 0
    epsilon_round: float | None = None
    delta_round: float | None = None
    epsilon: float | None = None
    delta: float | None = None
    guarantee: str = ""
    document_epsilon: float | None = None
    document_delta: float | None = None
    document_guarantee: str = ""
    details: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.document_guarantee, NoDocumentGuarantee):
            object.__setattr__(self, "document_guarantee", str(self.document_guarantee))
        if (self.document_epsilon is None) != (self.document_delta is None):
            raise ValueError("document_epsilon and document_delta are given together or not at all")
        if self.document_epsilon is not None:
            if not (self.document_epsilon >= 0 and 0 <= self.document_delta <= 1):
                raise ValueError("document_epsilon must be >= 0 and document_delta in [0, 1]")
            if self.document_delta >= 1:
                raise ValueError("a document_delta of 1 is no guarantee: give None and say why in document_guarantee")
            if self.absent_guarantee is not None:
                raise ValueError("a document-level figure with a 'none' document_guarantee")

    @classmethod
    def no_mechanism(cls, rounds: int = 0, reason: str = "no privacy mechanism", **details: Any) -> "PrivacyReport":
        """The report of a run without a privacy mechanism (``reason``: what is sent instead)."""
        return cls(mechanism="none", unit="none", accountant="none (no privacy mechanism)", rounds=rounds,
                   guarantee="none", document_guarantee=NoDocumentGuarantee(reason), details=details)

    @property
    def absent_guarantee(self) -> NoDocumentGuarantee | None:
        """Why there is no document-level bound, when :attr:`document_guarantee` states there is none."""
        return NoDocumentGuarantee.parse(self.document_guarantee)

    @staticmethod
    def document_fields(epsilon: float, delta: float, guarantee: str, unaccounted: str | None) -> dict[str, Any]:
        """A report's document-level fields: ``epsilon`` and ``delta`` per document under ``guarantee``, or, when
        ``unaccounted`` names a release of the party's documents outside every accountant (the federated
        evaluation), no bound, with the training's figure alone in the reason."""
        if unaccounted is not None:
            return dict(document_guarantee=NoDocumentGuarantee.unaccounted(
                unaccounted, f"training alone: eps {epsilon:.4g}, delta {delta:g} per document"))
        return dict(document_epsilon=epsilon, document_delta=delta, document_guarantee=guarantee)

    @property
    def has_document_guarantee(self) -> bool:
        """Whether the whole run has a document-level (eps, delta) bound."""
        return self.document_epsilon is not None

    def document_figure(self) -> tuple[float, float] | None:
        """This release's own (eps, delta) per document: the document fields, or the main ones when the unit is
        ``document`` and no document fields were given; None when it gives no document-level bound.

        A per-token release implies no per-document bound (a document holds any number of
        tokens). A per-party release is not read as one here either (no method has one; under
        replace-one-party adjacency it would imply one, under add/remove-a-party only at twice the eps).
        """
        if self.document_epsilon is not None:
            return self.document_epsilon, self.document_delta
        if (self.unit == "document" and not self.document_guarantee and self.epsilon is not None
                and self.delta is not None and self.delta < 1):
            return self.epsilon, self.delta
        return None

    def without_document_guarantee(self, release: str) -> "PrivacyReport":
        """This report with an unaccounted release of the party's documents (e.g. the ``union`` vocabulary)
        composed in: no document-level bound is left, and the guarantee says which release voids it."""
        if self.has_document_guarantee:
            absent = NoDocumentGuarantee.unaccounted(release, f"without it: eps {self.document_epsilon:.4g}, delta "
                                                              f"{self.document_delta:.3g}: {self.document_guarantee}")
        else:
            unaccounted, before = NoDocumentGuarantee.unaccounted(release), self.absent_guarantee
            previous = before.reason if before is not None else self.document_guarantee
            absent = NoDocumentGuarantee(f"{previous}; also {unaccounted.reason}") if previous else unaccounted
        return dataclasses.replace(self, document_epsilon=None, document_delta=None, document_guarantee=absent)

    def to_dict(self) -> dict[str, Any]:
        """The fields, with ``details`` written flat beside them (a detail never overrides a field)."""
        fields = asdict(self)
        details = fields.pop("details")
        clashes = set(details) & set(fields)
        if clashes:
            raise ValueError(f"privacy details {sorted(clashes)} clash with the report's fields")
        return {**fields, **{k: _plain(v) for k, v in details.items()}}

    def with_release(self, other: "PrivacyReport | None") -> "PrivacyReport":
        """This report with one more release of the same data composed in (e.g. the private vocabulary).

        With the same unit the guarantees add up by basic composition; with another unit
        (a per-token mechanism and a per-document release) they are reported side by side
        in ``details`` and the guarantee says so, since neither bound implies the other.

        The document-level figures compose on their own: a per-document release (the
        ``private`` vocabulary) adds its (eps, delta) to this report's document figures by
        basic composition (Dwork and Roth 2014, Theorem 3.16); a release without a
        per-document bound (per token, or per party) leaves none, and where this report has
        none (e.g. a per-token mechanism) the release's bound does not create one.
        """
        if other is None or other.epsilon is None:
            return self
        document = self._compose_document(other)
        if self.epsilon is None or self.unit == other.unit:
            return dataclasses.replace(
                self, mechanism=f"{self.mechanism} + {other.mechanism}" if self.epsilon is not None else other.mechanism,
                unit=other.unit if self.epsilon is None else self.unit,
                epsilon_round=0.0 if self.epsilon is None else self.epsilon_round,
                delta_round=0.0 if self.epsilon is None else self.delta_round,
                accountant=(f"{self.accountant} + {other.mechanism}, basic composition" if self.epsilon is not None
                            else other.accountant),
                epsilon=(self.epsilon or 0.0) + other.epsilon, delta=(self.delta or 0.0) + other.delta,
                guarantee=f"{self.guarantee}; plus {other.guarantee}" if self.epsilon is not None else other.guarantee,
                details={**self.details, "release_epsilon": other.epsilon, "release_delta": other.delta},
                **document)
        return dataclasses.replace(
            self, guarantee=f"{self.guarantee}; separately, per {other.unit}: {other.guarantee}",
            details={**self.details, f"release_epsilon_per_{other.unit}": other.epsilon,
                     f"release_delta_per_{other.unit}": other.delta}, **document)

    def _compose_document(self, other: "PrivacyReport") -> dict[str, Any]:
        """The document fields after composing ``other`` in (see :meth:`with_release`)."""
        theirs = other.document_figure()
        if not self.has_document_guarantee:
            return {}
        if theirs is None:
            return dict(document_epsilon=None, document_delta=None,
                        document_guarantee=NoDocumentGuarantee(
                            f"the {other.mechanism} release is per {other.unit}, which implies no per-document bound "
                            f"(without it: eps {self.document_epsilon:.4g}, delta {self.document_delta:.3g})"))
        delta = self.document_delta + theirs[1]
        if delta >= 1:
            return dict(document_epsilon=None, document_delta=None,
                        document_guarantee=NoDocumentGuarantee(f"composed delta {delta:.3g} >= 1"))
        return dict(document_epsilon=self.document_epsilon + theirs[0], document_delta=delta,
                    document_guarantee=f"{self.document_guarantee}; plus the {other.mechanism} release "
                                       f"(eps {theirs[0]:.4g}, delta {theirs[1]:.3g}), basic composition")

    def summary(self) -> str:
        """One line: the cumulative epsilon and delta with their unit, and the whole run's per-document figure."""
        if self.epsilon is None:
            return f"no privacy mechanism ({self.rounds} rounds)"
        document = (f"eps {self.document_epsilon:.4g}, delta {self.document_delta:.3g}" if self.has_document_guarantee
                    else "none")
        return (f"eps {self.epsilon:.4g}, delta {self.delta:.3g} per {self.unit} after {self.rounds} "
                f"round(s) ({self.accountant}; one round: eps {self.epsilon_round:.4g}); "
                f"whole run per document: {document}")

    def round_summary(self) -> str:
        """A few words for a round's console line: the whole run's per-document epsilon so far, else the method's
        own on its unit, else ``no privacy mechanism``. The accountant, the deltas, one round's figure and whether
        there is a per-document bound are in :meth:`summary`, which the console says once, at the end of the run."""
        if self.has_document_guarantee:
            return f"eps {self.document_epsilon:.4g} per document"
        if self.epsilon is None:
            return "no privacy mechanism"
        return f"eps {self.epsilon:.4g} per {self.unit}"

    def statements(self) -> list[tuple[str, str]]:
        """The report in words, for a person: ``(what, statement)`` pairs, the whole run's per-document figure first.

        Returns
        -------
        list of (str, str)
            ``"whole run, per document"`` (eps and delta for adding or removing one document of one party,
            and what the figure covers, or ``none: <reason>``), ``"as the method states it"`` (the guarantee
            on the method's own unit over the rounds so far, and one round's), and ``"mechanism"``.
        """
        if self.has_document_guarantee:
            document = (f"eps {self.document_epsilon:.4g}, delta {self.document_delta:.3g} for adding or removing "
                        f"one document of one party, over the whole run: {self.document_guarantee}")
        else:
            document = self.document_guarantee or str(NoDocumentGuarantee("no document-level bound was reported"))
        if self.epsilon is None:
            method = f"no privacy mechanism: what the parties send is not randomized ({self.rounds} rounds)"
        else:
            delta = f", delta {self.delta:.3g}" if self.delta is not None else ""
            one = (f"; one round: eps {self.epsilon_round:.4g}" if isinstance(self.epsilon_round, (int, float))
                   else "")
            method = (f"eps {self.epsilon:.4g}{delta} per {self.unit} after {self.rounds} round(s) "
                      f"({self.accountant}{one})" + (f": {self.guarantee}" if self.guarantee else ""))
        return [("whole run, per document", document), ("as the method states it", method),
                ("mechanism", self.mechanism)]

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "PrivacyReport":
        """The report that :meth:`to_dict` wrote (a model's metadata, a ``metrics.jsonl`` line): the fields by
        name, every other key back into ``details``.

        Raises
        ------
        ValueError
            When a field is missing or the values break the report's rules.
        """
        names = {f.name for f in dataclasses.fields(cls)} - {"details"}
        values = {key: (math.inf if value in ("inf", "Infinity") else value) for key, value in values.items()}
        known = {key: value for key, value in values.items() if key in names}
        try:
            return cls(**known, details={key: value for key, value in values.items() if key not in names})
        except TypeError as exc:
            raise ValueError(f"not a privacy report: {exc}") from None


def _plain(value: Any) -> Any:
    """JSON-friendly: infinities as strings."""
    return str(value) if isinstance(value, float) and math.isinf(value) else value
