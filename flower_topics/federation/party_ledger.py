"""A party's lifetime budget at the ClientApp: its privacy ledger (:mod:`flower_topics.privacy.ledger`) in use.

With ``privacy-ledger`` in its node config (and ``lifetime-epsilon``, ``lifetime-delta``) a
party records every accounted release of a run on its documents in that file before the
reply leaves, composes all runs on the same documents, and refuses (a one-line error reply,
one log line) a release that would take them past the cap, whatever the server asks:

- a training round: the releases its method's local step declares
  (:attr:`~flower_topics.clients.base.LocalStep.accounted`), recorded by
  :func:`record_round` once the reply is computed and before it is returned;
- the ``private`` vocabulary agreement: its ``(eps, delta)``;
- a release with no document-level accounting (a method without one, the ``union`` agreement,
  federated evaluation's sums): refused, since no cap could hold it.

At its first message of a run (before round 1) the party checks that it can write the ledger,
that the ledger is intact, and that the cap holds one whole run of the run config on its own
(:attr:`~flower_topics.methods.MethodSpec.planned_releases`). It keeps a ledger session in
``context.state`` (a random id and its release counter, written to its ``state-dir`` with the
rest): a message answered again after a restart records the same entry, counted once.

The documents' fingerprint is the SHA-256 of the bytes of the party's corpus (a file, or every
file under a folder with its relative path), whatever the reading options, which the server
sets: a run cannot get a fresh budget by reading the same file another way. In a simulation
it is the run config's dataset, whole (every share of it composed together), or for the
synthetic generator its options.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flwr.app import ConfigRecord, Context, Message

from flower_topics.data.embedded import resolve_dataset
from flower_topics.data.node_data import node_options
from flower_topics.data.readers import expand_path
from flower_topics.errors import UserInputError
from flower_topics.methods import METHODS
from flower_topics.options import coerce
from flower_topics.privacy import ledger
from flower_topics.privacy.ledger import APPROX_DP, LEDGER_OPTIONS, Entry, Release
from flower_topics.wire.protocol import CONFIG

#: Where a party keeps its ledger session of the run in ``context.state``.
LEDGER_STATE = "privacy-ledger"
#: The method name the ledger gives the vocabulary agreement's release.
VOCABULARY = "vocabulary"


@dataclass(frozen=True)
class LedgerSettings:
    """A party's ledger and cap, from its node config.

    Parameters
    ----------
    path : Path
        The ledger file.
    epsilon, delta : float
        The lifetime cap per document.
    """

    path: Path
    epsilon: float
    delta: float


def ledger_settings(node_config: Mapping[str, Any]) -> LedgerSettings | None:
    """The node config's ledger, validated; None without ``privacy-ledger``.

    Raises
    ------
    UserInputError
        A bad value, or a ledger without ``lifetime-epsilon`` (one line).
    """
    options = {key: coerce(key, value, LEDGER_OPTIONS[key], source="node-config")
               for key, value in node_config.items() if key in LEDGER_OPTIONS}
    path = str(options.get("privacy-ledger", "")).strip()
    if not path:
        return None
    epsilon = float(options.get("lifetime-epsilon", 0.0))
    if epsilon <= 0:
        raise UserInputError("node config privacy-ledger needs lifetime-epsilon > 0, the cap on all runs on this "
                             "party's documents composed (and lifetime-delta, default 1e-5)")
    return LedgerSettings(expand_path(path), epsilon, float(options.get("lifetime-delta",
                                                                         LEDGER_OPTIONS["lifetime-delta"].default)))


def documents_fingerprint(node_config: Mapping[str, Any], config: Mapping[str, Any]) -> str:
    """The fingerprint of this party's documents (see the module docstring)."""
    options = node_options(node_config)
    dataset = str(options.get("dataset") or config.get("dataset", ""))
    if dataset == "synthetic" and not options.get("dataset"):
        # synthetic-dates off makes the same documents as before the option existed: the same fingerprint
        items = sorted((str(k), str(v)) for k, v in config.items() if (str(k).startswith("synthetic-") or k == "seed")
                       and not (k == "synthetic-dates" and not str(v).strip()))
        return "synthetic:" + hashlib.sha256(repr(items).encode("utf-8")).hexdigest()
    return "sha256:" + _content_hash(str(expand_path(resolve_dataset(dataset))))


_HASHES: dict[tuple[Any, ...], str] = {}


def _content_hash(path: str) -> str:
    """SHA-256 of a file's bytes, or of every file under a folder (relative path, size, bytes), sorted; kept per
    process while no file's size or modification time changes."""
    root = Path(path)
    try:
        files = sorted(p for p in root.rglob("*") if p.is_file()) if root.is_dir() else [root]
        stamp = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
        if stamp not in _HASHES:
            digest = hashlib.sha256()
            for p in files:
                digest.update(f"{p.relative_to(root) if root.is_dir() else ''}\0{p.stat().st_size}\0".encode())
                with p.open("rb") as handle:
                    while chunk := handle.read(1 << 20):
                        digest.update(chunk)
            if len(_HASHES) >= 16:
                _HASHES.pop(next(iter(_HASHES)))
            _HASHES[stamp] = digest.hexdigest()
        return _HASHES[stamp]
    except OSError as exc:
        raise UserInputError(f"privacy-ledger: cannot read this party's corpus {path} to fingerprint it "
                             f"({exc.strerror or exc})") from exc


def _planned_spend(run_config: Mapping[str, Any], delta: float) -> tuple[str, float] | None:
    """``(method, epsilon)`` one whole run of ``run_config`` spends at ``delta``, or None when not known."""
    from flower_topics.run.config import OPTIONS, defaults

    spec = METHODS.get(str(run_config.get("method", "")))
    if spec is None:
        return None
    try:
        config = defaults()
        config.update({key: coerce(key, value, OPTIONS[key]) for key, value in run_config.items() if key in OPTIONS})
        planned = spec.planned_releases(config)
    except (UserInputError, ValueError, KeyError):
        return None  # a run config the server itself refuses
    return None if planned is None else (spec.name, ledger.compose(planned, delta))


def open_session(context: Context, config: Mapping[str, Any], run_config: Mapping[str, Any],
                 settings: LedgerSettings) -> ConfigRecord:
    """This party's ledger session of the run; at its first message (before round 1) the checks: the ledger can
    be written and is intact, and the cap holds one whole run of ``run_config``.

    Raises
    ------
    UserInputError
        One line for each.
    """
    if LEDGER_STATE in context.state.config_records:
        return context.state[LEDGER_STATE]
    ledger.check_writable(settings.path)
    planned = _planned_spend(run_config, settings.delta)
    if planned is not None and planned[1] > settings.epsilon * (1 + ledger.CAP_SLACK):
        raise UserInputError(
            f"lifetime-epsilon {settings.epsilon:g} is below what one run of {planned[0]} with this run config spends "
            f"on this party's documents (eps {planned[1]:.4g} at lifetime-delta {settings.delta:g}); raise "
            "lifetime-epsilon in the node config or lower the run's epsilon",
            reply=f"this party's lifetime privacy cap is below what one run of {planned[0]} with this run config "
                  "spends on its documents: refused")
    context.state[LEDGER_STATE] = ConfigRecord({"session": ledger.new_session(), "count": 0,
                                                "documents": documents_fingerprint(context.node_config, config)})
    return context.state[LEDGER_STATE]


def record_round(context: Context, config: Mapping[str, Any], method: str,
                 releases: Sequence[Release] | None, what: str | None = None) -> None:
    """Record ``releases`` of this party's documents before they leave (nothing without a ledger).

    Parameters
    ----------
    context : Context
        The party's context (node config, run id, state).
    config : Mapping
        The validated data options of the run.
    method : str
        The method that releases (or :data:`VOCABULARY`).
    releases : sequence of Release, or None
        What leaves; None: a release with no document-level accounting.
    what : str, optional
        The release in words, for the refusal of an unaccounted one.

    Raises
    ------
    UserInputError
        One line: an unaccounted release, a damaged or unwritable ledger, or a release past the cap.
    """
    settings = ledger_settings(context.node_config)
    if settings is None:
        return
    if releases is None:
        what = what or f"a {method} round"
        raise UserInputError(f"this party keeps a privacy ledger (privacy-ledger {settings.path}) and {what} has no "
                             "document-level accounting: refused",
                             reply=f"this party keeps a privacy ledger and {what} has no document-level accounting: "
                                   "refused")
    session = open_session(context, config, dict(context.run_config), settings)
    count = int(session["count"])
    entries = [Entry(int(context.run_id), str(session["session"]), count + i, method, str(session["documents"]),
                     release) for i, release in enumerate(releases)]
    ledger.record(settings.path, entries, epsilon=settings.epsilon, delta=settings.delta)
    context.state[LEDGER_STATE] = ConfigRecord({**dict(session), "count": count + len(entries)})


def guarded(step: Callable[[Message, Context, Mapping[str, Any]], Message], msg: Message, context: Context,
            config: Mapping[str, Any], run_config: Mapping[str, Any]) -> Message:
    """``step(msg, context, config)`` under this party's ledger: the first-message checks, the vocabulary
    agreement's release recorded, unaccounted releases refused (training rounds record their own:
    :func:`record_round`). Without ``privacy-ledger``, ``step`` as it is.

    Raises
    ------
    UserInputError
        One line, before ``step`` runs where that can be known.
    """
    settings = ledger_settings(context.node_config)
    if settings is None:
        return step(msg, context, config)
    open_session(context, config, run_config, settings)
    kind = msg.metadata.message_type
    if kind.startswith("evaluate"):
        record_round(context, config, "evaluation", None, "federated evaluation (its sums carry no noise)")
    if kind == "query.candidates":
        request = msg.content[CONFIG]
        if str(request["mode"]) != "private":
            record_round(context, config, VOCABULARY, None,
                         "the union vocabulary agreement (every word with its exact document frequency)")
        reply = step(msg, context, config)
        if not reply.has_error():
            record_round(context, config, VOCABULARY, (Release(APPROX_DP, epsilon=float(request["epsilon"]),
                                                               delta=float(request["delta"])),))
        return reply
    return step(msg, context, config)


__all__ = ["LEDGER_STATE", "LedgerSettings", "documents_fingerprint", "guarded", "ledger_settings", "open_session",
           "record_round"]