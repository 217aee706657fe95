"""A party's lifetime privacy ledger: every accounted release of its documents, over all runs, on its own disk.

A party that sets ``privacy-ledger`` in its node config keeps one file that records every
accounted release of a run on its documents before the release leaves it (run id, the run's
ledger session, the release's number in that session, method, mechanism and its parameters,
the documents' fingerprint). :func:`compose` composes all releases of the same documents with
the accountant that calibrates ``dplda`` (:mod:`flower_topics.privacy.accountants`): the
Poisson-subsampled Gaussian releases of every run in one PLD, the Skellam releases (secure
aggregation) in one Skellam RDP per sensitivity, and releases that carry their own
``(eps, delta)`` (the ``private`` vocabulary) by basic composition, as a run's own report
composes them. Releases of different accountants (a Gaussian run and a Skellam run) are
composed with each other by basic composition at an even split of what is left of delta.

:func:`record` adds releases under a lock, refusing (one line) any that would take the
composed total over the cap; a release already recorded (same run, session, number and
parameters: a message answered again after a restart) is counted once. The file is one JSON
document whose ``checksum`` is the SHA-256 of its entries; it is replaced atomically (a
temporary file in the same folder, fsync, ``os.replace``) and created readable by its owner
only (mode 0600). A file that does not parse, or whose checksum does not match, is damaged:
every release is refused until it is restored; it is never reset.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import secrets
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from flower_topics.errors import UserInputError
from flower_topics.options import Option, at_least, in_range
from flower_topics.privacy.accountants import create_accountant

FORMAT = "flower-topics privacy ledger"
VERSION = 1
#: The mechanisms a ledger composes, with the registered accountant of each (a release that carries its own
#: ``(eps, delta)`` is composed by basic composition and has none).
ACCOUNTANTS: Mapping[str, str] = {"gaussian": "pld", "skellam": "skellam"}
APPROX_DP = "approx-dp"
#: Relative slack of the cap check (the composition is computed in floating point).
CAP_SLACK = 1e-9

#: Node-config keys of the ledger (``flower-supernode --node-config``).
LEDGER_OPTIONS: Mapping[str, Option] = {
    "privacy-ledger": Option("", "a file on this party where every accounted release of its documents is recorded "
                             "before it leaves, over all runs; with lifetime-epsilon its cap ('' = off)"),
    "lifetime-epsilon": Option(0.0, "privacy-ledger: the cap on the epsilon per document of all runs on the same "
                               "documents composed; a release over it is refused whatever the server asks",
                               at_least(0)),
    "lifetime-delta": Option(1e-5, "privacy-ledger: the delta at which the cap is checked",
                             in_range(0, 1, low_open=True, high_open=True)),
}


@dataclass(frozen=True)
class Release:
    """One accounted release of a party's documents, as the ledger composes it.

    Parameters
    ----------
    mechanism : str
        ``"gaussian"`` (Poisson-subsampled Gaussian, PLD), ``"skellam"`` (Poisson-subsampled Skellam, RDP), or
        ``"approx-dp"`` (a release with its own ``(epsilon, delta)``, basic composition).
    noise_multiplier, sample_rate : float
        ``sigma`` and ``q`` of a Gaussian or Skellam release.
    steps : int
        How many such releases (>= 1).
    sensitivity : float
        A Skellam release's L2 sensitivity in integer units.
    epsilon, delta : float
        An ``approx-dp`` release's guarantee per document.
    """

    mechanism: str
    noise_multiplier: float = 0.0
    sample_rate: float = 1.0
    steps: int = 1
    sensitivity: float = 0.0
    epsilon: float = 0.0
    delta: float = 0.0

    def __post_init__(self) -> None:
        if self.mechanism == APPROX_DP:
            ok = math.isfinite(self.epsilon) and self.epsilon >= 0 and 0 <= self.delta < 1
        elif self.mechanism in ACCOUNTANTS:
            ok = (self.noise_multiplier > 0 and 0 < self.sample_rate <= 1 and self.steps >= 1
                  and (self.mechanism != "skellam" or self.sensitivity >= 1))
        else:
            ok = False
        if not ok or int(self.steps) != self.steps:
            raise ValueError(f"not a release a ledger composes: {self}")

    def fields(self) -> dict[str, Any]:
        """Its parameters as JSON values (only those of its mechanism)."""
        keep = {APPROX_DP: ("epsilon", "delta"), "gaussian": ("noise_multiplier", "sample_rate", "steps"),
                "skellam": ("noise_multiplier", "sample_rate", "steps", "sensitivity")}[self.mechanism]
        values = asdict(self)
        return {"mechanism": self.mechanism, **{key: values[key] for key in keep}}

    @classmethod
    def from_fields(cls, fields: Mapping[str, Any]) -> Release:
        """The release of an entry's fields (inverse of :meth:`fields`)."""
        names = ("noise_multiplier", "sample_rate", "steps", "sensitivity", "epsilon", "delta")
        kinds = {"steps": int}
        return cls(str(fields["mechanism"]), **{n: kinds.get(n, float)(fields[n]) for n in names if n in fields})


@dataclass(frozen=True)
class Entry:
    """One recorded release: who made it, on which documents, and what it was.

    Parameters
    ----------
    run : int
        The Flower run id.
    session : str
        The party's ledger session of that run (random, drawn once per run and kept in its state).
    number : int
        The release's number in the session (0, 1, ...).
    method : str
        The method (or ``vocabulary`` for the agreement stage).
    documents : str
        The documents' fingerprint: runs on different documents are composed separately.
    release : Release
        The mechanism and its parameters.
    """

    run: int
    session: str
    number: int
    method: str
    documents: str
    release: Release

    def to_json(self) -> dict[str, Any]:
        """The entry as it is written."""
        return {"run": self.run, "session": self.session, "number": self.number, "method": self.method,
                "documents": self.documents, **self.release.fields()}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> Entry:
        """The entry of a written object (raises KeyError, TypeError or ValueError for a bad one)."""
        return cls(int(value["run"]), str(value["session"]), int(value["number"]), str(value["method"]),
                   str(value["documents"]), Release.from_fields(value))


@dataclass(frozen=True)
class Ledger:
    """A ledger file's content.

    Parameters
    ----------
    entries : tuple of Entry
        Every recorded release, in the order recorded.
    epsilon, delta : float
        The cap the owning party last set (0: none recorded yet).
    """

    entries: tuple[Entry, ...] = ()
    epsilon: float = 0.0
    delta: float = 0.0

    def fingerprints(self) -> tuple[str, ...]:
        """The documents' fingerprints it holds, in the order first recorded."""
        return tuple(dict.fromkeys(e.documents for e in self.entries))

    def spent(self, documents: str, delta: float) -> float:
        """Epsilon per document at ``delta`` of every release of ``documents`` (:func:`compose`)."""
        return compose([e.release for e in self.entries if e.documents == documents], delta)


def new_session() -> str:
    """A fresh ledger session id (OS entropy): names one run of one party in the ledger."""
    return secrets.token_hex(8)


def compose(releases: Iterable[Release], delta: float) -> float:
    """Epsilon per document at ``delta`` of ``releases`` composed (``inf`` when their deltas leave nothing).

    The Gaussian releases are composed in one PLD (the accountant that calibrates ``dplda``), the Skellam ones in
    one Skellam RDP per sensitivity, and the ``approx-dp`` ones by basic composition, as
    :meth:`~flower_topics.privacy.accountants.base.Accountant.spend` composes them. With releases of one
    accountant the result is that accountant's ``get_epsilon(delta)``; with several, their epsilons at an even
    split of the delta the ``approx-dp`` releases leave are added (basic composition).

    Parameters
    ----------
    releases : iterable of Release
    delta : float
        In (0, 1).
    """
    if not 0 < delta < 1:
        raise ValueError("delta must be in (0, 1)")
    spends: list[tuple[float, float]] = []
    groups: dict[tuple[str, float], list[Release]] = {}
    for release in releases:
        if release.mechanism == APPROX_DP:
            spends.append((release.epsilon, release.delta))
        else:
            groups.setdefault((release.mechanism, release.sensitivity), []).append(release)
    spent_eps, spent_delta = sum(e for e, _ in spends), sum(d for _, d in spends)
    if not groups:
        return spent_eps if spent_delta <= delta else math.inf
    if spent_delta >= delta:
        return math.inf
    accountants = []
    for (mechanism, sensitivity), members in sorted(groups.items()):
        options = {"sensitivity": sensitivity} if mechanism == "skellam" else {}
        accountant = create_accountant(ACCOUNTANTS[mechanism], **options)
        for r in members:
            accountant.step(noise_multiplier=r.noise_multiplier, sample_rate=r.sample_rate, steps=r.steps)
        accountants.append(accountant)
    if len(accountants) == 1:
        for eps, dlt in spends:
            accountants[0].spend(eps, dlt)
        return float(accountants[0].get_epsilon(delta))
    share = (delta - spent_delta) / len(accountants)
    return spent_eps + sum(float(a.steps_epsilon(share)) for a in accountants)


def _checksum(entries: Sequence[Mapping[str, Any]]) -> str:
    text = json.dumps(list(entries), sort_keys=True, separators=(",", ":"), allow_nan=False)
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def damaged(path: Path, why: str) -> UserInputError:
    """The one line a damaged ledger gives."""
    return UserInputError(f"privacy-ledger {path} is damaged ({why}): every release is refused until it is restored "
                          "from a backup; it is never reset",
                          reply="privacy-ledger: this party's ledger is damaged; every release is refused")


def read_ledger(path: str | os.PathLike[str]) -> Ledger:
    """The ledger at ``path``, verified; an empty one when no file is there.

    Raises
    ------
    UserInputError
        One line: the file cannot be read, does not parse, is not a ledger, or its checksum does not match.
    """
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Ledger()
    except OSError as exc:
        raise UserInputError(f"privacy-ledger {path}: cannot read it ({exc.strerror or exc})",
                             reply="privacy-ledger: this party cannot read its ledger") from exc
    try:
        document = json.loads(raw.decode("utf-8"))
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise damaged(path, "not a flower-topics privacy ledger")
        if document.get("version") != VERSION:
            raise damaged(path, f"version {document.get('version')!r}, this flower-topics reads {VERSION}")
        written = document["entries"]
        if not isinstance(written, list) or document.get("checksum") != _checksum(written):
            raise damaged(path, "its checksum does not match its entries")
        entries = tuple(Entry.from_json(e) for e in written)
        cap = document.get("cap", {})
        return Ledger(entries, float(cap.get("epsilon", 0.0)), float(cap.get("delta", 0.0)))
    except UserInputError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise damaged(path, f"{type(exc).__name__}: {str(exc)[:80]}") from exc


def write_ledger(path: str | os.PathLike[str], ledger: Ledger) -> None:
    """Replace the file at ``path`` with ``ledger``, atomically, mode 0600 (a temporary file in the same folder,
    fsync, ``os.replace``, fsync of the folder): a reader sees the old file or the new one, never part of one.

    Raises
    ------
    OSError
        When the folder cannot be written (the temporary file is removed).
    """
    path = Path(path)
    entries = [e.to_json() for e in ledger.entries]
    document = {"format": FORMAT, "version": VERSION, "cap": {"epsilon": ledger.epsilon, "delta": ledger.delta},
                "entries": entries, "checksum": _checksum(entries)}
    data = json.dumps(document, indent=1, allow_nan=False).encode("utf-8") + b"\n"
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        raise
    with contextlib.suppress(OSError):  # the rename itself, on disk (not every file system opens folders)
        folder = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(folder)
        finally:
            os.close(folder)


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``<path>.lock`` (parties in one process or several sharing a ledger)."""
    descriptor = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            import fcntl
        except ImportError:  # no POSIX locks here: one writer at a time is the user's to arrange
            yield
            return
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(descriptor, fcntl.LOCK_UN)
    finally:
        os.close(descriptor)


def check_writable(path: str | os.PathLike[str]) -> None:
    """Refuse, in one line, a ledger path this party could not write (its folder, or the file), or a damaged ledger.

    Raises
    ------
    UserInputError
    """
    path = Path(path)
    problem = None
    if path.is_dir():
        problem = "it is a folder; name a file"
    elif not path.parent.is_dir():
        problem = f"its folder {path.parent} does not exist"
    else:
        try:  # the test a write makes: a new file in the same folder
            probe = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.probe")
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.unlink(probe)
        except OSError as exc:
            problem = f"cannot write in {path.parent} ({exc.strerror or exc})"
        if problem is None and path.exists() and not os.access(path, os.R_OK):
            problem = "cannot read it"
    if problem:
        raise UserInputError(f"privacy-ledger {path}: {problem}; name a file this party can write "
                             "(node config privacy-ledger)", reply="privacy-ledger: this party cannot write its ledger")
    read_ledger(path)


def record(path: str | os.PathLike[str], entries: Sequence[Entry], *, epsilon: float, delta: float) -> float:
    """Record ``entries`` (releases about to leave) unless that takes their documents past the cap.

    Under a lock: the ledger is read and verified, the entries already in it (same run, session, number, method,
    documents and parameters) are left out, the rest composed with every earlier release of the same documents
    (:func:`compose` at ``delta``), and written (:func:`write_ledger`) only when the total is within ``epsilon``.
    A release recorded but never sent (a crash after this call) is over-counted, never under-counted.

    Parameters
    ----------
    path : path
        The ledger file.
    entries : sequence of Entry
        The releases; every one of the same documents.
    epsilon, delta : float
        The cap: epsilon per document at ``delta``.

    Returns
    -------
    float
        The documents' epsilon at ``delta`` with these releases.

    Raises
    ------
    UserInputError
        One line: the ledger is damaged or cannot be written, or the releases would take the total past the cap.
    """
    path = Path(path)
    try:
        with _locked(path):
            ledger = read_ledger(path)
            known = {json.dumps(e.to_json(), sort_keys=True) for e in ledger.entries}
            new = [e for e in dict.fromkeys(entries) if json.dumps(e.to_json(), sort_keys=True) not in known]
            documents = {e.documents for e in entries}
            if len(documents) > 1:
                raise ValueError("one record() is of one set of documents")
            if not documents:
                return 0.0
            fingerprint = documents.pop()
            before = ledger.spent(fingerprint, delta)
            after = compose([e.release for e in (*ledger.entries, *new) if e.documents == fingerprint], delta)
            if after > epsilon * (1 + CAP_SLACK):
                raise UserInputError(
                    f"privacy-ledger {path}: this release would take these documents to eps {after:.4g} per document "
                    f"at delta {delta:g} over all runs, past the lifetime cap {epsilon:g} (spent so far: eps "
                    f"{before:.4g}); refused",
                    reply="privacy-ledger: this release would take this party's documents past the lifetime cap; "
                          "refused")  # the cap and the spend of other runs stay on the party
            if new or (ledger.epsilon, ledger.delta) != (epsilon, delta):
                write_ledger(path, Ledger((*ledger.entries, *new), epsilon, delta))
            return after
    except OSError as exc:
        raise UserInputError(f"privacy-ledger {path}: cannot write it ({exc.strerror or exc}); nothing was "
                             "released", reply="privacy-ledger: this party cannot write its ledger; nothing was "
                                               "released") from exc
