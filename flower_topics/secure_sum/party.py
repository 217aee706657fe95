"""The party's side of the secure sum: keys, shares, masking, unmasking, over a key epoch of rounds.

Every function takes the party's own ``context.state`` (a RecordDict kept by its SuperNode;
the private keys and seeds below never leave it except as Shamir shares encrypted to the
other parties) and its node id. A key epoch of ``R`` rounds starts with the ``keys`` stage:
one X25519 key pair to encrypt shares and, for each round of the epoch, its own mask key
pair and its own self-mask seed, all from OS entropy; the ``shares`` stage Shamir-shares
every round's seed and mask key at once. Each round uses only its own key pair and seed, so
what one round's ``unmask`` reveals (the round's seeds of the alive parties, the round's mask
keys of the dropped ones) says nothing about another round's masks.

A party refuses, with one line, what an honest server would never ask: a tolerance ``T``
below its own bound (``least_tolerance``), a key list without its own keys, fewer
participants than the threshold, a party listed as both alive and
dropped, and any stage out of order or twice: a request of another round or epoch (a
replayed or reordered message), ``keys`` for a round not after its last, a second
``shares``, mask, ``check`` or ``unmask`` in one round (a server asking twice could collect
both kinds of shares of one party). It reveals shares only for the survivor set it signed in
``check``, and only when :func:`~flower_topics.secure_sum.protocol.check_quorum` parties of
the epoch's listing signed that same set (Bonawitz et al. 2017's consistency check): a server
showing different parties different dropouts cannot gather both kinds of shares of a party.
It masks in a later round of an epoch only if it answered the ``unmask`` of the round just
before and that round had every participant alive and none dropped: otherwise the server may have rebuilt some party's mask key (*burned* it), and the
epoch is over for this party (the next round must start a new epoch with ``keys``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, RecordDict
from flwr.common.secure_aggregation.secaggplus_utils import (
    share_keys_plaintext_concat,
    share_keys_plaintext_separate,
)

from flower_topics.errors import UserInputError
from flower_topics.privacy.party_policy import SecureFacts
from flower_topics.secure_sum import crypto, shamir
from flower_topics.secure_sum.graph import round_graph
from flower_topics.secure_sum.protocol import (
    MAX_EPOCH,
    SecureSumSettings,
    check_quorum,
    listing_digest,
    mask_context,
    pair_sign,
    self_context,
    survivors_statement,
)

STATE = "secure-sum-state"
#: The stage a party must have answered last before each stage of a round.
_AFTER = {"shares": "keys", "mask": "shares", "check": "mask", "unmask": "check"}
_KEY = crypto.PUBLIC_KEY_BYTES
_SHARE = shamir.SHARE_BYTES


def _ids(values: Any) -> list[int]:
    return [int(v) for v in values]


def _record(state: RecordDict, server_round: int, stage: str) -> ConfigRecord:
    """The party's epoch record, if ``server_round`` is its current round or a later round of its epoch."""
    if STATE not in state.config_records:
        raise UserInputError(f"secure sum: '{stage}' for round {server_round}, but this party has no keys "
                             f"(it missed the 'keys' stage)")
    record = state[STATE]
    current, first = int(record["round"]), int(record["epoch"])
    if current > server_round:
        raise UserInputError(f"secure sum: refused '{stage}' for round {server_round}: this party is in round "
                             f"{current} (a replayed or reordered message)")
    if current < server_round and (stage not in ("train", "mask") or server_round >= first + int(record["rounds"])
                                   or str(record["stage"]) not in ("unmask", "mask")):
        raise UserInputError(f"secure sum: '{stage}' for round {server_round}, but this party has no keys for it "
                             f"(it missed the 'keys' stage)")
    return record


def _state(state: RecordDict, server_round: int, stage: str) -> ConfigRecord:
    """This round's record, after checking that ``stage`` comes next (each stage once, in order; the caller
    sets ``record["stage"]`` once the request has passed its own checks)."""
    record = _record(state, server_round, stage)
    last = str(record["stage"])
    if int(record["round"]) < server_round:  # a later round of the epoch: only a mask, after a clean unmask
        if int(record["round"]) != server_round - 1 or last != "unmask" or not bool(record["clean"]):
            raise UserInputError(f"secure sum: refused to mask in round {server_round} with the keys of the epoch of "
                                 f"round {int(record['epoch'])}: this party did not see round {server_round - 1} "
                                 f"end with every party alive, so keys of this epoch may have been rebuilt by the "
                                 f"server (a new epoch needs 'keys')")
        return record
    if last == stage:
        raise UserInputError(f"secure sum: this party already answered '{stage}' in round {server_round}")
    if last != _AFTER[stage]:
        raise UserInputError(f"secure sum: refused '{stage}' in round {server_round}: this party's last stage was "
                             f"'{last}' (a replayed or reordered message)")
    return record


def _settings(record: ConfigRecord) -> SecureSumSettings:
    return SecureSumSettings(bits=int(record["bits"]), tolerance=int(record["tolerance"]), epoch=int(record["rounds"]))


def _slot(record: ConfigRecord, server_round: int) -> int:
    """The index of ``server_round`` in the record's epoch (its key pair and seed)."""
    return server_round - int(record["epoch"])


def advertise_keys(state: RecordDict, node_id: int, request: Mapping[str, Any],
                   least_tolerance: int = 0) -> dict[str, Any]:
    """Stage ``keys``: a new key epoch from ``round``: the key pair for the shares, and a mask key pair per round.

    ``least_tolerance`` is the party's own collusion bound (its node config's ``secure-tolerance``):
    a request whose tolerance ``T`` is lower is refused, since ``T`` sets the party's share of the
    noise. A larger ``T`` is accepted: it only adds noise and lowers the Shamir threshold to
    ``n - T > T``; the consistency check's quorum stays at least the one of the party's own bound.

    Returns ``c-pk`` (one DER X25519 public key), ``s-pk`` (the epoch's ``R`` mask public
    keys, one after the other) and ``sig-pk`` (a raw Ed25519 public key: it signs the epoch's
    survivor sets in ``check``).
    """
    server_round, participants = int(request["round"]), _ids(request["participants"])
    if STATE in state.config_records and int(state[STATE]["round"]) >= server_round:
        raise UserInputError(f"secure sum: refused 'keys' for round {server_round}: this party already sent keys "
                             f"for round {int(state[STATE]['round'])} (a replayed or reordered message)")
    rounds = int(request.get("epoch-rounds", 1))
    if not 1 <= rounds <= MAX_EPOCH:
        raise UserInputError(f"secure sum: a key epoch of {rounds} rounds, the most is {MAX_EPOCH}")
    settings = SecureSumSettings(bits=int(request["bits"]), tolerance=int(request["tolerance"]), epoch=rounds)
    if settings.tolerance < least_tolerance:
        raise UserInputError(f"secure sum: refused 'keys' with tolerance {settings.tolerance}: below the least "
                             "this party accepts (its node config's secure-tolerance)")
    if node_id not in participants or len(set(participants)) != len(participants):
        raise UserInputError("secure sum: the participant list does not name this party exactly once")
    problem = settings.check_parties(len(participants))
    if problem:
        raise UserInputError(problem)
    c_key, s_keys = crypto.new_private_key(), [crypto.new_private_key() for _ in range(rounds)]
    sig_sk, sig_pk = crypto.signing_key()
    state[STATE] = ConfigRecord({  # replaces any earlier epoch: its keys are never used again
        "round": server_round, "epoch": server_round, "rounds": rounds,
        "bits": settings.bits, "tolerance": settings.tolerance, "least-tolerance": least_tolerance,
        "participants": [str(p) for p in participants],
        "c-sk": crypto.private_bytes(c_key), "s-sk": [crypto.private_bytes(k) for k in s_keys],
        "sig-sk": sig_sk, "sig-own": sig_pk, "stage": "keys", "clean": False,
    })
    return {"c-pk": crypto.public_bytes(c_key), "s-pk": b"".join(crypto.public_bytes(k) for k in s_keys),
            "sig-pk": sig_pk}


def share_keys(state: RecordDict, node_id: int, request: Mapping[str, Any]) -> dict[str, Any]:
    """Stage ``shares``: Shamir shares of the epoch's self-mask seeds and mask keys, encrypted to each neighbour.

    The neighbours and the threshold are the epoch's graph
    (:func:`~flower_topics.secure_sum.graph.round_graph` of its first round), which the party
    derives itself from the key listing, the number of participants and the tolerance of its
    own ``keys`` stage. One ciphertext per neighbour carries its share of every round's seed
    and of every round's mask key.
    """
    server_round = int(request["round"])
    record = _state(state, server_round, "shares")
    nodes, c_pks, s_pks = _ids(request["nodes"]), list(request["c-pk"]), list(request["s-pk"])
    sig_pks = [bytes(b) for b in request["sig-pk"]]
    settings = _settings(record)
    rounds = settings.epoch
    c_key = crypto.load_private(bytes(record["c-sk"]))
    s_keys = [crypto.load_private(bytes(k)) for k in record["s-sk"]]
    if not (len(nodes) == len(c_pks) == len(s_pks) == len(sig_pks)) or len(set(nodes)) != len(nodes) \
            or any(len(bytes(b)) != rounds * _KEY for b in s_pks) \
            or any(len(b) != crypto.SIGNING_KEY_BYTES for b in sig_pks):
        raise UserInputError("secure sum: the key list is malformed")
    if node_id not in nodes or bytes(c_pks[nodes.index(node_id)]) != crypto.public_bytes(c_key) \
            or bytes(s_pks[nodes.index(node_id)]) != b"".join(crypto.public_bytes(k) for k in s_keys) \
            or sig_pks[nodes.index(node_id)] != bytes(record["sig-own"]):
        raise UserInputError("secure sum: the key list does not carry this party's own keys")
    participants = len(_ids(record["participants"]))
    if not set(nodes) <= set(_ids(record["participants"])):
        raise UserInputError("secure sum: the key list names parties that were not sampled")
    survivors = settings.threshold(participants)
    if len(nodes) < survivors:
        raise UserInputError(f"secure sum: {len(nodes)} parties shared keys, the threshold is {survivors}")
    graph = round_graph(server_round, participants, settings.tolerance, nodes,
                        [bytes(b) for b in c_pks], [bytes(b) for b in s_pks])
    holders = graph.holders(node_id)
    xs = [graph.x(h) for h in holders]
    seeds = [os.urandom(32) for _ in range(rounds)]
    seed_shares = [shamir.split(int.from_bytes(seed, "big"), graph.threshold, xs) for seed in seeds]
    key_shares = [shamir.split(crypto.private_scalar(k), graph.threshold, xs) for k in s_keys]
    destinations, ciphertexts, channel_keys = [], [], []
    for i, peer in enumerate(holders):
        plain = share_keys_plaintext_concat(node_id, peer, b"".join(shamir.encode(s[i]) for s in seed_shares),
                                            b"".join(shamir.encode(k[i]) for k in key_shares))
        if peer == node_id:
            own = plain
            continue
        channel_keys.append(crypto.shared_key(c_key, bytes(c_pks[nodes.index(peer)])))
        destinations.append(str(peer))
        ciphertexts.append(crypto.encrypt(channel_keys[-1], plain))
    record["stage"] = "shares"
    record["self-seeds"] = seeds
    record["nodes"] = [str(n) for n in nodes]
    record["neighbours"] = destinations  # sorted, with the Fernet key shared with each in "channel-keys"
    record["channel-keys"] = channel_keys
    record["threshold"] = graph.threshold
    record["c-pk"] = [bytes(b) for b in c_pks]
    record["s-pk"] = [bytes(b) for b in s_pks]
    record["sig-pk"] = sig_pks
    record["listing"] = listing_digest(server_round, nodes, [bytes(b) for b in c_pks], [bytes(b) for b in s_pks],
                                       sig_pks)
    record["own-share"] = own
    return {"destinations": destinations, "ciphertexts": ciphertexts}


def _open_shares(record: ConfigRecord, node_id: int, request: Mapping[str, Any]) -> None:
    """The epoch's first mask: open the neighbours' forwarded shares (each must open and be addressed here)."""
    senders = _ids(request["senders"])
    ciphertexts = [bytes(c) for c in request["ciphertexts"]]
    neighbours = set(_ids(record["neighbours"]))
    if len(senders) != len(ciphertexts) or not set(senders) <= neighbours or len(set(senders)) != len(senders):
        raise UserInputError("secure sum: the forwarded shares do not come from this party's neighbours")
    if len(senders) + 1 < int(record["threshold"]):
        raise UserInputError("secure sum: fewer parties than the threshold completed the share stage")
    channel = dict(zip(_ids(record["neighbours"]), record["channel-keys"], strict=True))
    opened = []
    for sender, ciphertext in zip(senders, ciphertexts, strict=True):
        opened.append(crypto.decrypt(bytes(channel[sender]), ciphertext))
        src, dst, _, _ = share_keys_plaintext_separate(opened[-1])
        if (src, dst) != (sender, node_id):
            raise UserInputError("secure sum: a forwarded share is addressed to another party")
    record["senders"] = [str(s) for s in senders]
    record["opened"] = opened  # the shares addressed to this party, in this party's own state only


def mask_update(state: RecordDict, node_id: int, request: Mapping[str, Any], values: np.ndarray) -> np.ndarray:
    """Stage 3 (inside the training reply): ``values`` (int64) plus the round's self mask and pairwise masks, mod 2^bits.

    ``request`` is the round record of the training message: its round and key epoch and, in
    the epoch's first round, the senders and ciphertexts of the shares addressed to this
    party. Pairwise masks are added with every neighbour whose shares arrived (they can be
    removed if it drops out later), each from this round's mask key pair of the two parties
    and the round. A party masks once a round, and in a later round of the epoch only after a
    clean ``unmask`` of the previous one.
    """
    server_round = int(request["round"])
    record = _state(state, server_round, "mask")
    if int(request.get("epoch", server_round)) != int(record["epoch"]):
        raise UserInputError(f"secure sum: refused to mask in round {server_round}: the message names the key "
                             f"epoch of round {int(request.get('epoch', server_round))}, this party's is of round "
                             f"{int(record['epoch'])} (a replayed or reordered message)")
    settings = _settings(record)
    nodes = _ids(record["nodes"])
    values = np.asarray(values)
    if not np.issubdtype(values.dtype, np.integer):
        raise TypeError("the secure sum adds integers only")
    limit = settings.limit(len(nodes))
    if values.size and int(np.abs(values).max()) > limit:
        raise UserInputError(f"secure sum: an entry of this party's update, {int(np.abs(values).max())}, exceeds "
                             f"{limit}, the most that {len(nodes)} parties can add modulo 2^{settings.bits} without "
                             f"wrapping; use a larger secure-aggregation-bits")
    if int(record["round"]) == server_round:
        _open_shares(record, node_id, request)
    record["round"], record["stage"], record["clean"] = server_round, "mask", False
    slot = _slot(record, server_round)
    s_key = crypto.load_private(bytes(record["s-sk"][slot]))
    masked = settings.reduce(values.ravel().astype(np.int64))
    masked += crypto.mask(bytes(record["self-seeds"][slot]), self_context(server_round, node_id), values.size,
                          settings.bits)
    for peer in _ids(record["senders"]):
        s_pk = bytes(record["s-pk"][nodes.index(peer)])[slot * _KEY:(slot + 1) * _KEY]
        pair = crypto.mask(crypto.shared_key(s_key, s_pk), mask_context(server_round, node_id, peer), values.size,
                           settings.bits)
        if pair_sign(node_id, peer) > 0:
            masked += pair
        else:
            masked -= pair
    return settings.reduce(masked).astype(settings.wire_dtype)


def _lists(record: ConfigRecord, node_id: int, request: Mapping[str, Any]) -> tuple[list[int], set[int]]:
    """The request's alive list (sorted) and dropped set, after the checks an honest server's lists pass."""
    alive, dropped = _ids(request["alive"]), set(_ids(request["dropped"]))
    settings = _settings(record)
    senders = set(_ids(record.get("senders", [])))
    survivors = settings.threshold(len(_ids(record["participants"])))
    nodes = set(_ids(record.get("nodes", [])))
    mine = (set(alive) | dropped) & (set(_ids(record.get("neighbours", []))) | {node_id})
    if len(set(alive)) != len(alive) or set(alive) & dropped or node_id not in alive \
            or not set(alive) | dropped <= nodes or not mine <= senders | {node_id}:
        raise UserInputError("secure sum: the alive and dropped lists are inconsistent")
    if len(alive) < survivors:
        raise UserInputError(f"secure sum: {len(alive)} parties alive, the threshold is {survivors}")
    return sorted(alive), dropped


def check_survivors(state: RecordDict, node_id: int, request: Mapping[str, Any]) -> dict[str, Any]:
    """Stage ``check``: this party's Ed25519 signature of the round's alive set, once a round.

    The statement (:func:`~flower_topics.secure_sum.protocol.survivors_statement`) names the
    epoch's key listing, the round and the alive parties; the party keeps the set it signed
    and will reveal shares in ``unmask`` for that set only.
    """
    server_round = int(request["round"])
    record = _state(state, server_round, "check")
    alive, _ = _lists(record, node_id, request)
    record["stage"] = "check"
    record["signed"] = [str(n) for n in alive]
    statement = survivors_statement(bytes(record["listing"]), server_round, alive)
    return {"signature": crypto.sign(bytes(record["sig-sk"]), statement)}


def _check_signatures(record: ConfigRecord, server_round: int, alive: list[int], request: Mapping[str, Any]) -> None:
    """That the request carries the quorum's valid signatures, from distinct alive parties, on the set this party signed."""
    if alive != _ids(record["signed"]):
        raise UserInputError(f"secure sum: refused 'unmask' in round {server_round}: its alive list is not the one "
                             f"this party signed (the server showed parties different survivor sets)")
    nodes = _ids(record["nodes"])
    signers, signatures = _ids(request["signers"]), [bytes(s) for s in request["signatures"]]
    quorum = max(check_quorum(len(nodes), _settings(record).tolerance),
                 check_quorum(len(nodes), int(record["least-tolerance"])))
    if len(signers) != len(signatures) or len(set(signers)) != len(signers) or not set(signers) <= set(alive) \
            or len(signers) < quorum:
        raise UserInputError(f"secure sum: refused 'unmask' in round {server_round}: it carries {len(signatures)} "
                             f"signatures of the survivor set, this party needs {quorum} by distinct alive parties")
    statement = survivors_statement(bytes(record["listing"]), server_round, alive)
    keys = dict(zip(nodes, record["sig-pk"], strict=True))
    for signer, signature in zip(signers, signatures, strict=True):
        if not crypto.verify(bytes(keys[signer]), signature, statement):
            raise UserInputError(f"secure sum: refused 'unmask' in round {server_round}: node {signer}'s signature "
                                 f"of the survivor set does not verify")


def unmask(state: RecordDict, node_id: int, request: Mapping[str, Any]) -> dict[str, Any]:
    """Stage ``unmask``: this party's shares of its alive holders' round seeds and of its dropped neighbours' round keys.

    ``alive`` and ``dropped`` are the round's lists (every party whose shares went out):
    ``alive`` must be the set this party signed in ``check``, and ``signers`` and
    ``signatures`` must hold :func:`~flower_topics.secure_sum.protocol.check_quorum` valid
    signatures of it by distinct alive parties of the epoch's listing. The party answers for
    itself and the neighbours whose shares it holds, never both kinds for one party, and once
    a round; the shares are those of this round's seed and mask key only. A round with a
    party dropped or a participant missing ends the epoch for this party.
    """
    server_round = int(request["round"])
    record = _state(state, server_round, "unmask")
    alive, dropped = _lists(record, node_id, request)
    _check_signatures(record, server_round, alive, request)
    participants = set(_ids(record["participants"]))
    mine = (set(alive) | dropped) & (set(_ids(record.get("neighbours", []))) | {node_id})
    record["stage"] = "unmask"
    record["clean"] = not dropped and set(alive) == participants  # else the epoch is over: keys may be burned
    low, high = _slot(record, server_round) * _SHARE, (_slot(record, server_round) + 1) * _SHARE
    shares_of, seed_shares, key_shares = [], [], []
    opened = {node_id: bytes(record["own-share"])}
    opened.update({sender: bytes(plain) for sender, plain in zip(_ids(record["senders"]), record["opened"],
                                                                 strict=True)})
    living = set(alive)
    for peer in sorted(mine):
        _, _, seed_share, key_share = share_keys_plaintext_separate(opened[peer])
        shares_of.append(str(peer))
        seed_shares.append(seed_share[low:high] if peer in living else b"")
        key_shares.append(key_share[low:high] if peer in dropped else b"")
    return {"nodes": shares_of, "seed-shares": seed_shares, "key-shares": key_shares}


def answer(state: RecordDict, node_id: int, request: Mapping[str, Any], least_tolerance: int = 0) -> dict[str, Any]:
    """The reply to a secure-sum query message (stage ``keys``, ``shares``, ``check`` or ``unmask``), with its stage
    and round; ``least_tolerance``: the party's own collusion bound (:func:`advertise_keys`)."""
    stages = {"shares": share_keys, "check": check_survivors, "unmask": unmask}
    stage = str(request.get("stage", ""))
    if stage == "keys":
        reply = advertise_keys(state, node_id, request, least_tolerance)
    elif stage in stages:
        reply = stages[stage](state, node_id, request)
    else:
        raise UserInputError(f"secure sum: unknown stage {stage!r}")
    return {**reply, "stage": stage, "round": int(request["round"])}


def round_facts(state: RecordDict, server_round: int, federation_size: int = 0, least_tolerance: int = 0) -> SecureFacts:
    """What this party's local step needs to know of the round, from the facts it checked itself.

    ``noise_share``: the share of the central noise it adds. With a federation size of ``N`` told to the
    party out of band, ``1 / (n - T)`` for ``n = min(N, listed participants)`` and ``T`` the larger of the
    tolerance its ``keys`` stage accepted and its own ``least_tolerance`` (a ``keys`` stage below it was
    refused), so that any ``n - T`` shares carry the whole noise; participants the server lists
    beyond ``N`` (fake parties) do not lower it. Without a federation size (0), the whole noise (1): the
    server's participant list alone never sets it. ``entry_limit``: the largest magnitude an entry of its
    update may have so that the sum of the listed participants cannot wrap modulo ``2^bits``.
    """
    record = _record(state, server_round, "train")
    settings = _settings(record)
    parties = len(_ids(record["participants"]))
    tolerance = max(settings.tolerance, least_tolerance, int(record["least-tolerance"]))
    share = 1.0 / max(1, min(parties, federation_size) - tolerance) if federation_size > 0 else 1.0
    return SecureFacts(noise_share=share, entry_limit=settings.limit(parties))
