"""The party's side of every request, built from what the party owns, never from the server's message.

A server message is a request. What the party will do (:class:`~flower_topics.privacy.party_policy.PartyPolicy`,
from its node config), what it has released in this run (:class:`~flower_topics.privacy.party_policy.PartyAccount`,
from ``context.state``) and its facts of a secure-sum round (from its own secure-sum state) are built here and
handed to its local step beside the request (:class:`~flower_topics.privacy.party_policy.PartyFacts`).

Before any of it, :func:`check_request` refuses, in one line, a message that carries a key only the party may
set (its ``party.*`` options, ``secure-sum.*`` facts, its policy and ledger keys) and a training or prevalence
request whose settings say secure aggregation but that carries no secure-sum round; and :func:`check_policy`
refuses what the party's policy does not accept.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from flwr.app import ConfigRecord, Context, Message, RecordDict

from flower_topics import secure_sum
from flower_topics.data.node_data import node_options
from flower_topics.data.readers import expand_path
from flower_topics.errors import UserInputError
from flower_topics.methods import METHODS, MethodSpec
from flower_topics.options import coerce
from flower_topics.privacy.ledger import LEDGER_OPTIONS, Release
from flower_topics.run.config import OPTIONS
from flower_topics.privacy.party_policy import (POLICY_OPTIONS, AccountedRelease, PartyAccount, PartyFacts,
                                                PartyPolicy, ReleaseKind)
from flower_topics.wire.protocol import CONFIG

#: Where a party keeps its account of the run's releases in ``context.state``.
ACCOUNT_STATE = "party-account"
#: Where a party that requires a document-level guarantee keeps the rounds it released, per method.
RELEASED_ROUNDS = "party-released-rounds"
#: Key prefixes only the party's side may carry.
PARTY_PREFIXES = ("party.", "secure-sum.")
#: Node-config keys of the party's policy and ledger, and its secret: never a server's to send.
PARTY_KEYS = frozenset({*POLICY_OPTIONS, *LEDGER_OPTIONS, "secret-seed", "max-epsilon"})
#: Message types whose settings decide a release's noise (checked for a secure-sum round when they say secure).
_RELEASES = ("train.", "query.prevalence")


def party_side_keys(content: RecordDict) -> list[str]:
    """The keys of ``content``'s records that only the party's side may set (sorted)."""
    found = {str(key) for record in content.values() for key in record.keys()}
    return sorted(key for key in found if key.startswith(PARTY_PREFIXES) or key in PARTY_KEYS)


def non_finite_keys(content: RecordDict) -> list[str]:
    """The keys of ``content``'s config records holding a number that is not finite where its run-config option
    does not declare one meaningful (sorted): NaN always; an infinity unless its option says ``infinite``."""
    def finite(key: str, value: Any) -> bool:
        option = OPTIONS.get(key)
        for number in (v for v in (value if isinstance(value, list) else [value]) if isinstance(v, float)):
            if math.isnan(number) or (math.isinf(number) and (option is None or not option.infinite
                                                               or (option.check and option.check(number)))):
                return False
        return True

    return sorted(str(key) for record in content.config_records.values() for key, value in record.items()
                  if not finite(str(key), value))


def check_once(party: PartyFacts, kind: ReleaseKind, what: str, release: str) -> None:
    """With ``require-document-guarantee``: refuse, in one line, a second release of ``kind`` (the vocabulary, the
    prevalence table) that ``party``'s account already holds.

    Raises
    ------
    UserInputError
        The release was made before in this run.
    """
    if party.policy.document_guarantee and party.account.of_kind(kind):
        raise UserInputError(f"{what}: this party already released {release} in this run and makes no release twice")


def check_released_round(state: RecordDict, policy: PartyPolicy, method: str, server_round: int) -> None:
    """With ``require-document-guarantee``: refuse, in one line, a ``method`` round this party already released
    (a replayed or repeated request; a release is made once), else remember it as released.

    Raises
    ------
    UserInputError
        The round was released before.
    """
    if not policy.document_guarantee:
        return
    record = state.config_records.get(RELEASED_ROUNDS)
    done = [int(r) for r in record.get(method, [])] if record is not None else []
    if server_round in done:
        raise UserInputError(f"a {method} round {server_round} this party has already released: refused (it "
                             "releases each round once)")
    state[RELEASED_ROUNDS] = ConfigRecord({**(dict(record) if record is not None else {}),
                                           method: [*done, server_round]})


def check_request(msg: Message) -> None:
    """Refuse, in one line, a server message that carries a party-side key, or a training or prevalence request
    whose settings say ``secure-aggregation`` but that carries no secure-sum round.

    Raises
    ------
    UserInputError
        One line naming the first key, or the missing round.
    """
    keys = party_side_keys(msg.content)
    odd = non_finite_keys(msg.content)
    if odd:
        raise UserInputError(f"the server's message carries a non-finite number ({odd[0]!r}): refused")
    if keys:
        raise UserInputError(f"the server's message carries {keys[0]!r}, a key only this party sets (its caps, its "
                             "spending and its share of the noise come from its own settings and state): refused")
    kind = msg.metadata.message_type
    if kind.startswith(_RELEASES) and CONFIG in msg.content.config_records:
        if bool(msg.content[CONFIG].get("secure-aggregation", False)) and \
                secure_sum.ROUND_RECORD not in msg.content.config_records:
            raise UserInputError("the request's settings say secure aggregation but it carries no secure-sum round: "
                                 "this party sends no unmasked release with a share of the noise")


def server_reason(exc: UserInputError, node_config: Mapping[str, Any]) -> str:
    """What a refusal tells the server: the reason only. The error's :attr:`~flower_topics.errors.UserInputError.reply`
    (the sites that know caps, budgets or other runs' spend give one without them), with every path of the party's
    node config (its files, its ledger, its folders) replaced; the party's own log keeps the whole line."""
    reason = exc.reply
    for value in node_config.values():
        if isinstance(value, str) and ("/" in value or "\\" in value):
            for form in sorted({value, str(expand_path(value))}, key=len, reverse=True):
                reason = reason.replace(form, "(a path of this party's)")
    return reason


def party_options(spec: MethodSpec, node_config: Mapping[str, Any]) -> dict[str, Any]:
    """What a local step sees of this party's node config: its ``partition-id`` (simulation) and the
    method's own node options (:attr:`~flower_topics.methods.MethodSpec.node_options`), validated."""
    options = node_options(node_config)
    party = {"partition-id": options["partition-id"]} if "partition-id" in options else {}
    party.update({key: coerce(key, value, spec.node_options[key], source="node-config")
                  for key, value in node_config.items() if key in spec.node_options})
    return party


def party_policy(node_config: Mapping[str, Any], spec: MethodSpec | None = None) -> PartyPolicy:
    """This party's policy, from its node config only.

    Raises
    ------
    UserInputError
        A bad value, or ``accept-methods`` naming a method that is not registered (one line).
    """
    own = {key: coerce(key, value, POLICY_OPTIONS[key], source="node-config")
           for key, value in node_config.items() if key in POLICY_OPTIONS}
    methods = tuple(name.strip() for name in str(own.get("accept-methods", "")).split(",") if name.strip())
    unknown = [name for name in methods if name not in METHODS]
    if unknown:
        raise UserInputError(f"node config accept-methods names {unknown[0]!r}, not a method; registered: "
                             f"{', '.join(METHODS)}")
    size = int(own.get("federation-size", 0))
    if not size and "num-partitions" in node_config:  # a simulated share knows how many shares there are
        size = int(node_options(node_config)["num-partitions"])
    options = party_options(spec, node_config) if spec is not None else {}
    return PartyPolicy(accept_methods=methods, document_guarantee=bool(own.get("require-document-guarantee", False)),
                       max_epsilon=float(options.get("max-epsilon", 0.0)),
                       ledger=bool(str(node_config.get("privacy-ledger", "")).strip()), federation_size=size,
                       tolerance=int(own.get("secure-tolerance", POLICY_OPTIONS["secure-tolerance"].default)),
                       options=MappingProxyType(options))


def check_policy(policy: PartyPolicy, method: str | None, accounted: bool, what: str) -> None:
    """Refuse, in one line, a request of ``method`` (None: of no method) this party's policy does not accept, or (with
    ``require-document-guarantee``) a release without a document-level guarantee (``accounted`` False).

    Raises
    ------
    UserInputError
        One line: the reason only.
    """
    if method is not None and not policy.accepts(method):
        raise UserInputError(f"{what}: this party does not answer {method} requests (its node config's "
                             "accept-methods)")
    if policy.document_guarantee and not accounted:
        raise UserInputError(f"{what}: this party requires a document-level guarantee of every release and this one "
                             "has none: refused")


_COLUMNS = ("kind", "method", "mechanism", "sigma", "q", "sensitivity", "epsilon", "delta", "secure", "share")


def party_account(state: RecordDict) -> PartyAccount:
    """Every release this party made in this run, from its own state."""
    if ACCOUNT_STATE not in state.config_records:
        return PartyAccount()
    record = state[ACCOUNT_STATE]
    rows = zip(*(list(record[name]) for name in _COLUMNS), strict=True)
    return PartyAccount(tuple(
        AccountedRelease(str(kind), str(method),
                         Release(str(mechanism), float(sigma), float(q), sensitivity=float(units),
                                 epsilon=float(eps), delta=float(dlt)), bool(secure), float(share))
        for kind, method, mechanism, sigma, q, units, eps, dlt, secure, share in rows))


def record_release(state: RecordDict, item: AccountedRelease) -> PartyAccount:
    """Add ``item`` to this party's account (before the release leaves); the account after it."""
    account = PartyAccount((*party_account(state).releases, item))
    rows = [(a.kind.value, a.method, a.release.mechanism, a.release.noise_multiplier, a.release.sample_rate,
             a.release.sensitivity, a.release.epsilon, a.release.delta, a.secure, a.noise_share)
            for a in account.releases]
    state[ACCOUNT_STATE] = ConfigRecord({name: [row[i] for row in rows] for i, name in enumerate(_COLUMNS)})
    return account


def party_facts(spec: MethodSpec | None, msg: Message, context: Context) -> PartyFacts:
    """The party's side of ``msg``: its policy, its account and, in a secure-sum round, its own facts of it."""
    policy = party_policy(context.node_config, spec)
    secure = msg.content.config_records.get(secure_sum.ROUND_RECORD)
    facts = None
    if secure is not None:
        from flower_topics.secure_sum import party as secure_party

        facts = secure_party.round_facts(context.state, int(secure["round"]), policy.federation_size,
                                         policy.tolerance)
    return PartyFacts(policy, party_account(context.state), facts)


__all__ = ["ACCOUNT_STATE", "PARTY_KEYS", "PARTY_PREFIXES", "check_policy", "check_once", "check_released_round", "check_request", "non_finite_keys",
           "party_account",
           "party_facts", "party_options", "party_policy", "party_side_keys", "record_release", "server_reason"]
