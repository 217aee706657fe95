"""The party's side of the secure sum: keys, shares, masking, unmasking.

Every function takes the party's own ``context.state`` (a RecordDict kept by its SuperNode;
the private keys and seeds below never leave it except as Shamir shares encrypted to the
other parties) and its node id. Each round starts from fresh keys and a fresh self-mask seed
from OS entropy. A party refuses, with one line, what an honest server would never ask: a
key list without its own keys, fewer participants than the threshold, a second ``unmask`` in
one round (a server asking twice could collect both kinds of shares of one party), a party
listed as both alive and dropped.
"""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np
from flwr.app import ConfigRecord, RecordDict
from flwr.common.secure_aggregation.secaggplus_utils import (
    share_keys_plaintext_concat,
    share_keys_plaintext_separate,
)

from flower_topics.errors import UserInputError
from flower_topics.secure_sum import crypto
from flower_topics.secure_sum.protocol import (
    SecureSumSettings,
    mask_context,
    pair_sign,
    self_context,
)

STATE = "secure-sum-state"


def _ids(values: Any) -> list[int]:
    return [int(v) for v in values]


def _state(state: RecordDict, server_round: int) -> ConfigRecord:
    if STATE not in state.config_records or int(state[STATE]["round"]) != server_round:
        raise UserInputError(f"secure sum: this party has no keys for round {server_round} (it missed the 'keys' stage)")
    return state[STATE]


def advertise_keys(state: RecordDict, node_id: int, request: Mapping[str, Any]) -> dict[str, Any]:
    """Stage ``keys``: fresh key pairs for the round; returns the two public keys."""
    server_round, participants = int(request["round"]), _ids(request["participants"])
    settings = SecureSumSettings(bits=int(request["bits"]), tolerance=int(request["tolerance"]))
    if node_id not in participants or len(set(participants)) != len(participants):
        raise UserInputError("secure sum: the participant list does not name this party exactly once")
    problem = settings.check_parties(len(participants))
    if problem:
        raise UserInputError(problem)
    c_key, s_key = crypto.new_private_key(), crypto.new_private_key()
    state[STATE] = ConfigRecord({
        "round": server_round, "bits": settings.bits, "tolerance": settings.tolerance,
        "participants": [str(p) for p in participants],
        "c-sk": crypto.private_bytes(c_key), "s-sk": crypto.private_bytes(s_key),
        "unmasked": False,
    })
    return {"c-pk": crypto.public_bytes(c_key), "s-pk": crypto.public_bytes(s_key)}


def share_keys(state: RecordDict, node_id: int, request: Mapping[str, Any]) -> dict[str, Any]:
    """Stage ``shares``: Shamir shares of a fresh self-mask seed and of the mask key, encrypted to each peer."""
    record = _state(state, int(request["round"]))
    nodes, c_pks, s_pks = _ids(request["nodes"]), list(request["c-pk"]), list(request["s-pk"])
    settings = SecureSumSettings(bits=int(record["bits"]), tolerance=int(record["tolerance"]))
    c_key, s_key = crypto.load_private(bytes(record["c-sk"])), crypto.load_private(bytes(record["s-sk"]))
    if not (len(nodes) == len(c_pks) == len(s_pks)) or len(set(nodes)) != len(nodes):
        raise UserInputError("secure sum: the key list is malformed")
    if node_id not in nodes or bytes(c_pks[nodes.index(node_id)]) != crypto.public_bytes(c_key) \
            or bytes(s_pks[nodes.index(node_id)]) != crypto.public_bytes(s_key):
        raise UserInputError("secure sum: the key list does not carry this party's own keys")
    if not set(nodes) <= set(_ids(record["participants"])):
        raise UserInputError("secure sum: the key list names parties that were not sampled")
    threshold = settings.threshold(len(_ids(record["participants"])))
    if len(nodes) < threshold:
        raise UserInputError(f"secure sum: {len(nodes)} parties shared keys, the threshold is {threshold}")
    seed = os.urandom(32)
    seed_shares = crypto.create_shares(seed, threshold, len(nodes))
    key_shares = crypto.create_shares(crypto.private_bytes(s_key), threshold, len(nodes))
    destinations, ciphertexts = [], []
    for i, (peer, c_pk) in enumerate(zip(nodes, c_pks)):
        plain = share_keys_plaintext_concat(node_id, peer, seed_shares[i], key_shares[i])
        if peer == node_id:
            own = plain
            continue
        destinations.append(str(peer))
        ciphertexts.append(crypto.encrypt(crypto.shared_key(c_key, bytes(c_pk)), plain))
    record["self-seed"] = seed
    record["nodes"] = [str(n) for n in nodes]
    record["c-pk"] = [bytes(b) for b in c_pks]
    record["s-pk"] = [bytes(b) for b in s_pks]
    record["own-share"] = own
    return {"destinations": destinations, "ciphertexts": ciphertexts}


def mask_update(state: RecordDict, node_id: int, request: Mapping[str, Any], values: np.ndarray) -> np.ndarray:
    """Stage 3 (inside the training reply): ``values`` (int64) plus the self mask and the pairwise masks, mod 2^bits.

    ``request`` is the round record of the training message: the senders and ciphertexts of
    the shares addressed to this party. Pairwise masks are added with every party whose
    shares arrived (they can be removed if it drops out later).
    """
    server_round = int(request["round"])
    record = _state(state, server_round)
    settings = SecureSumSettings(bits=int(record["bits"]), tolerance=int(record["tolerance"]))
    senders = _ids(request["senders"])
    ciphertexts = [bytes(c) for c in request["ciphertexts"]]
    nodes = _ids(record["nodes"])
    if len(senders) != len(ciphertexts) or not set(senders) <= set(nodes) or node_id in senders:
        raise UserInputError("secure sum: the forwarded shares do not come from this round's parties")
    if len(senders) + 1 < settings.threshold(len(_ids(record["participants"]))):
        raise UserInputError("secure sum: fewer parties than the threshold completed the share stage")
    values = np.asarray(values)
    if not np.issubdtype(values.dtype, np.integer):
        raise TypeError("the secure sum adds integers only")
    limit = settings.limit(len(nodes))
    if values.size and int(np.abs(values).max()) > limit:
        raise UserInputError(f"secure sum: an entry of this party's update, {int(np.abs(values).max())}, exceeds "
                             f"{limit}, the most that {len(nodes)} parties can add modulo 2^{settings.bits} without "
                             f"wrapping; use a larger secure-aggregation-bits")
    c_key, s_key = crypto.load_private(bytes(record["c-sk"])), crypto.load_private(bytes(record["s-sk"]))
    for sender, ciphertext in zip(senders, ciphertexts):  # check now that every share opens and is ours
        c_pk = bytes(record["c-pk"][nodes.index(sender)])
        src, dst, _, _ = share_keys_plaintext_separate(crypto.decrypt(crypto.shared_key(c_key, c_pk), ciphertext))
        if (src, dst) != (sender, node_id):
            raise UserInputError("secure sum: a forwarded share is addressed to another party")
    masked = settings.reduce(values.ravel().astype(np.int64))
    masked += crypto.mask(bytes(record["self-seed"]), self_context(server_round, node_id), values.size)
    for peer in senders:
        s_pk = bytes(record["s-pk"][nodes.index(peer)])
        pair = crypto.mask(crypto.shared_key(s_key, s_pk), mask_context(server_round, node_id, peer), values.size)
        masked = masked + pair if pair_sign(node_id, peer) > 0 else masked - pair
    record["senders"] = [str(s) for s in senders]
    record["ciphertexts"] = ciphertexts
    return settings.reduce(masked).astype(settings.wire_dtype)


def unmask(state: RecordDict, node_id: int, request: Mapping[str, Any]) -> dict[str, Any]:
    """Stage ``unmask``: this party's shares of the alive parties' seeds and of the dropped parties' mask keys."""
    record = _state(state, int(request["round"]))
    if bool(record["unmasked"]):
        raise UserInputError("secure sum: this party already answered 'unmask' in this round")
    alive, dropped = set(_ids(request["alive"])), set(_ids(request["dropped"]))
    settings = SecureSumSettings(bits=int(record["bits"]), tolerance=int(record["tolerance"]))
    senders = set(_ids(record.get("senders", [])))
    threshold = settings.threshold(len(_ids(record["participants"])))
    if alive & dropped or node_id not in alive or not (alive | dropped) <= senders | {node_id}:
        raise UserInputError("secure sum: the unmask request's alive and dropped lists are inconsistent")
    if len(alive) < threshold:
        raise UserInputError(f"secure sum: {len(alive)} parties alive, the threshold is {threshold}")
    record["unmasked"] = True
    c_key = crypto.load_private(bytes(record["c-sk"]))
    nodes = _ids(record["nodes"])
    shares_of, seed_shares, key_shares = [], [], []
    opened = {node_id: bytes(record["own-share"])}
    for sender, ciphertext in zip(_ids(record["senders"]), record["ciphertexts"]):
        c_pk = bytes(record["c-pk"][nodes.index(sender)])
        opened[sender] = crypto.decrypt(crypto.shared_key(c_key, c_pk), bytes(ciphertext))
    for peer in sorted(alive | dropped):
        _, _, seed_share, key_share = share_keys_plaintext_separate(opened[peer])
        shares_of.append(str(peer))
        seed_shares.append(seed_share if peer in alive else b"")
        key_shares.append(key_share if peer in dropped else b"")
    return {"nodes": shares_of, "seed-shares": seed_shares, "key-shares": key_shares}


def answer(state: RecordDict, node_id: int, request: Mapping[str, Any]) -> dict[str, Any]:
    """The reply to a secure-sum query message (stage ``keys``, ``shares`` or ``unmask``)."""
    stages = {"keys": advertise_keys, "shares": share_keys, "unmask": unmask}
    stage = str(request.get("stage", ""))
    if stage not in stages:
        raise UserInputError(f"secure sum: unknown stage {stage!r}")
    return stages[stage](state, node_id, request)


#: Settings keys a party adds to its training settings in a secure round (from its own secure-sum state).
NOISE_SHARE = "secure-sum.noise-share"
ENTRY_LIMIT = "secure-sum.entry-limit"


def round_facts(state: RecordDict, server_round: int) -> dict[str, float | int]:
    """What this party's local step needs to know of the round, from the facts it checked itself.

    ``noise-share``: the share of the central noise it adds, ``1 / (n - T)`` for the ``n``
    participants and the tolerance ``T`` of its own ``keys`` stage, so that any ``n - T``
    shares carry the whole noise. ``entry-limit``: the largest magnitude an entry of its
    update may have so that the sum cannot wrap modulo ``2^bits``.
    """
    record = _state(state, server_round)
    settings = SecureSumSettings(bits=int(record["bits"]), tolerance=int(record["tolerance"]))
    parties = len(_ids(record["participants"]))
    return {NOISE_SHARE: 1.0 / settings.threshold(parties), ENTRY_LIMIT: settings.limit(parties)}
