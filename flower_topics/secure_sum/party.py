"""The party's side of the secure sum: keys, shares, masking, unmasking.

Every function takes the party's own ``context.state`` (a RecordDict kept by its SuperNode;
the private keys and seeds below never leave it except as Shamir shares encrypted to the
other parties) and its node id. Each round starts from fresh keys and a fresh self-mask seed
from OS entropy. A party refuses, with one line, what an honest server would never ask: a
key list without its own keys, fewer participants than the threshold, a party listed as
both alive and dropped, and any stage out of order or twice: a request of another round (a
replayed or reordered message), ``keys`` for a round not after its last, a second
``shares``, mask or ``unmask`` in one round (a server asking twice could collect both kinds
of shares of one party).
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
from flower_topics.secure_sum import crypto, shamir
from flower_topics.secure_sum.graph import round_graph
from flower_topics.secure_sum.protocol import (
    SecureSumSettings,
    mask_context,
    pair_sign,
    self_context,
)

STATE = "secure-sum-state"
#: The stage a party must have answered last before each stage of a round.
_AFTER = {"shares": "keys", "mask": "shares", "unmask": "mask"}


def _ids(values: Any) -> list[int]:
    return [int(v) for v in values]


def _record(state: RecordDict, server_round: int, stage: str) -> ConfigRecord:
    if STATE not in state.config_records:
        raise UserInputError(f"secure sum: '{stage}' for round {server_round}, but this party has no keys "
                             f"(it missed the 'keys' stage)")
    record = state[STATE]
    if int(record["round"]) < server_round:
        raise UserInputError(f"secure sum: '{stage}' for round {server_round}, but this party has no keys for it "
                             f"(it missed the 'keys' stage)")
    if int(record["round"]) > server_round:
        raise UserInputError(f"secure sum: refused '{stage}' for round {server_round}: this party is in round "
                             f"{int(record['round'])} (a replayed or reordered message)")
    return record


def _state(state: RecordDict, server_round: int, stage: str) -> ConfigRecord:
    """This round's record, after checking that ``stage`` comes next (each stage once, in order; the caller
    sets ``record["stage"]`` once the request has passed its own checks)."""
    record = _record(state, server_round, stage)
    last = str(record["stage"])
    if last == stage:
        raise UserInputError(f"secure sum: this party already answered '{stage}' in round {server_round}")
    if last != _AFTER[stage]:
        raise UserInputError(f"secure sum: refused '{stage}' in round {server_round}: this party's last stage was "
                             f"'{last}' (a replayed or reordered message)")
    return record


def _settings(record: ConfigRecord) -> SecureSumSettings:
    return SecureSumSettings(bits=int(record["bits"]), tolerance=int(record["tolerance"]))


def advertise_keys(state: RecordDict, node_id: int, request: Mapping[str, Any]) -> dict[str, Any]:
    """Stage ``keys``: fresh key pairs for the round; returns the two public keys."""
    server_round, participants = int(request["round"]), _ids(request["participants"])
    if STATE in state.config_records and int(state[STATE]["round"]) >= server_round:
        raise UserInputError(f"secure sum: refused 'keys' for round {server_round}: this party already sent keys "
                             f"for round {int(state[STATE]['round'])} (a replayed or reordered message)")
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
        "stage": "keys",
    })
    return {"c-pk": crypto.public_bytes(c_key), "s-pk": crypto.public_bytes(s_key)}


def share_keys(state: RecordDict, node_id: int, request: Mapping[str, Any]) -> dict[str, Any]:
    """Stage ``shares``: Shamir shares of a fresh self-mask seed and of the mask key, encrypted to each neighbour.

    The neighbours and the threshold are the round's graph
    (:func:`~flower_topics.secure_sum.graph.round_graph`), which the party derives itself from
    the key listing, the number of participants and the tolerance of its own ``keys`` stage.
    """
    server_round = int(request["round"])
    record = _state(state, server_round, "shares")
    nodes, c_pks, s_pks = _ids(request["nodes"]), list(request["c-pk"]), list(request["s-pk"])
    settings = _settings(record)
    c_key, s_key = crypto.load_private(bytes(record["c-sk"])), crypto.load_private(bytes(record["s-sk"]))
    if not (len(nodes) == len(c_pks) == len(s_pks)) or len(set(nodes)) != len(nodes):
        raise UserInputError("secure sum: the key list is malformed")
    if node_id not in nodes or bytes(c_pks[nodes.index(node_id)]) != crypto.public_bytes(c_key) \
            or bytes(s_pks[nodes.index(node_id)]) != crypto.public_bytes(s_key):
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
    seed = os.urandom(32)
    seed_shares = shamir.split(int.from_bytes(seed, "big"), graph.threshold, xs)
    key_shares = shamir.split(crypto.private_scalar(s_key), graph.threshold, xs)
    destinations, ciphertexts, channel_keys = [], [], []
    for peer, seed_share, key_share in zip(holders, seed_shares, key_shares, strict=True):
        plain = share_keys_plaintext_concat(node_id, peer, shamir.encode(seed_share), shamir.encode(key_share))
        if peer == node_id:
            own = plain
            continue
        channel_keys.append(crypto.shared_key(c_key, bytes(c_pks[nodes.index(peer)])))
        destinations.append(str(peer))
        ciphertexts.append(crypto.encrypt(channel_keys[-1], plain))
    record["stage"] = "shares"
    record["self-seed"] = seed
    record["nodes"] = [str(n) for n in nodes]
    record["neighbours"] = destinations  # sorted, with the Fernet key shared with each in "channel-keys"
    record["channel-keys"] = channel_keys
    record["threshold"] = graph.threshold
    record["c-pk"] = [bytes(b) for b in c_pks]
    record["s-pk"] = [bytes(b) for b in s_pks]
    record["own-share"] = own
    return {"destinations": destinations, "ciphertexts": ciphertexts}


def mask_update(state: RecordDict, node_id: int, request: Mapping[str, Any], values: np.ndarray) -> np.ndarray:
    """Stage 3 (inside the training reply): ``values`` (int64) plus the self mask and the pairwise masks, mod 2^bits.

    ``request`` is the round record of the training message: the senders and ciphertexts of
    the shares addressed to this party. Pairwise masks are added with every neighbour whose
    shares arrived (they can be removed if it drops out later). A party masks once a round.
    """
    server_round = int(request["round"])
    record = _state(state, server_round, "mask")
    settings = _settings(record)
    senders = _ids(request["senders"])
    ciphertexts = [bytes(c) for c in request["ciphertexts"]]
    nodes, neighbours = _ids(record["nodes"]), set(_ids(record["neighbours"]))
    if len(senders) != len(ciphertexts) or not set(senders) <= neighbours or len(set(senders)) != len(senders):
        raise UserInputError("secure sum: the forwarded shares do not come from this party's neighbours")
    if len(senders) + 1 < int(record["threshold"]):
        raise UserInputError("secure sum: fewer parties than the threshold completed the share stage")
    values = np.asarray(values)
    if not np.issubdtype(values.dtype, np.integer):
        raise TypeError("the secure sum adds integers only")
    limit = settings.limit(len(nodes))
    if values.size and int(np.abs(values).max()) > limit:
        raise UserInputError(f"secure sum: an entry of this party's update, {int(np.abs(values).max())}, exceeds "
                             f"{limit}, the most that {len(nodes)} parties can add modulo 2^{settings.bits} without "
                             f"wrapping; use a larger secure-aggregation-bits")
    s_key = crypto.load_private(bytes(record["s-sk"]))
    channel = dict(zip(_ids(record["neighbours"]), record["channel-keys"], strict=True))
    opened = []
    for sender, ciphertext in zip(senders, ciphertexts, strict=True):  # check now that every share opens and is ours
        opened.append(crypto.decrypt(bytes(channel[sender]), ciphertext))
        src, dst, _, _ = share_keys_plaintext_separate(opened[-1])
        if (src, dst) != (sender, node_id):
            raise UserInputError("secure sum: a forwarded share is addressed to another party")
    record["stage"] = "mask"
    masked = settings.reduce(values.ravel().astype(np.int64))
    masked += crypto.mask(bytes(record["self-seed"]), self_context(server_round, node_id), values.size, settings.bits)
    for peer in senders:
        s_pk = bytes(record["s-pk"][nodes.index(peer)])
        pair = crypto.mask(crypto.shared_key(s_key, s_pk), mask_context(server_round, node_id, peer), values.size,
                           settings.bits)
        if pair_sign(node_id, peer) > 0:
            masked += pair
        else:
            masked -= pair
    record["senders"] = [str(s) for s in senders]
    record["opened"] = opened  # the shares addressed to this party, in this party's own state only
    return settings.reduce(masked).astype(settings.wire_dtype)


def unmask(state: RecordDict, node_id: int, request: Mapping[str, Any]) -> dict[str, Any]:
    """Stage ``unmask``: this party's shares of its alive holders' seeds and of its dropped neighbours' mask keys.

    ``alive`` and ``dropped`` are the round's lists (every party whose shares went out); the
    party answers for itself and the neighbours whose shares it holds, never both kinds for
    one party, and once a round.
    """
    server_round = int(request["round"])
    record = _state(state, server_round, "unmask")
    alive, dropped = set(_ids(request["alive"])), set(_ids(request["dropped"]))
    settings = _settings(record)
    senders = set(_ids(record.get("senders", [])))
    survivors = settings.threshold(len(_ids(record["participants"])))
    nodes = _ids(record.get("nodes", []))
    mine = (alive | dropped) & (set(_ids(record.get("neighbours", []))) | {node_id})
    if alive & dropped or node_id not in alive or not (alive | dropped) <= set(nodes) or not mine <= senders | {node_id}:
        raise UserInputError("secure sum: the unmask request's alive and dropped lists are inconsistent")
    if len(alive) < survivors:
        raise UserInputError(f"secure sum: {len(alive)} parties alive, the threshold is {survivors}")
    record["stage"] = "unmask"
    shares_of, seed_shares, key_shares = [], [], []
    opened = {node_id: bytes(record["own-share"])}
    opened.update({sender: bytes(plain) for sender, plain in zip(_ids(record["senders"]), record["opened"],
                                                                 strict=True)})
    for peer in sorted(mine):
        _, _, seed_share, key_share = share_keys_plaintext_separate(opened[peer])
        shares_of.append(str(peer))
        seed_shares.append(seed_share if peer in alive else b"")
        key_shares.append(key_share if peer in dropped else b"")
    return {"nodes": shares_of, "seed-shares": seed_shares, "key-shares": key_shares}


def answer(state: RecordDict, node_id: int, request: Mapping[str, Any]) -> dict[str, Any]:
    """The reply to a secure-sum query message (stage ``keys``, ``shares`` or ``unmask``), with its stage and round."""
    stages = {"keys": advertise_keys, "shares": share_keys, "unmask": unmask}
    stage = str(request.get("stage", ""))
    if stage not in stages:
        raise UserInputError(f"secure sum: unknown stage {stage!r}")
    return {**stages[stage](state, node_id, request), "stage": stage, "round": int(request["round"])}


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
    record = _record(state, server_round, "train")
    settings = _settings(record)
    parties = len(_ids(record["participants"]))
    return {NOISE_SHARE: 1.0 / settings.threshold(parties), ENTRY_LIMIT: settings.limit(parties)}
