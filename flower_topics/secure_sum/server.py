"""The server's side of the secure sum: it relays keys and shares and learns only the sum.

:class:`SecureRound` runs the ``keys`` and ``shares`` stages for a round's sampled parties
(Flower query messages through the strategy's Grid) when the round starts a key epoch,
derives the epoch's graph as the parties do (:mod:`~flower_topics.secure_sum.graph`),
forwards each party the shares of its neighbours in the record its training message must
carry, and, once the masked updates are in, runs ``check`` with the parties whose update
arrived (each signs the alive set; the server keeps the signatures that verify), then
``unmask`` with the signers, handing each the signatures of a quorum
(:func:`~flower_topics.secure_sum.protocol.check_quorum`, never more than the ``n - T``
signers a round needs anyway), and removes the masks: the round's self masks of the alive
parties (from ``t`` shares of each seed) and the pairwise masks that the alive parties share
with neighbours that dropped out after the share stage (from ``t`` shares of each dropped
party's mask key of the round). Fewer than ``n - T`` survivors at any stage, or fewer than
``t`` live holders of a secret, stops the round with one logged line; the caller keeps its
model. A reply whose stage or round is not the one asked (a replayed or reordered message)
is refused with one logged line, as if that party had not answered.

A :class:`KeyEpoch` is what one agreement serves: the participants, their public keys and
the graph, for up to ``R`` rounds (:attr:`SecureSumSettings.epoch`). The next round
continues it (no ``keys`` or ``shares`` stage: a training message, ``check`` and ``unmask``)
only if it samples the same parties, is within the epoch, and the round just before, of the
epoch, ended with every party answering every stage and none dropped; otherwise it starts a
new epoch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from logging import WARNING

import numpy as np
from flwr.app import ConfigRecord, Message, RecordDict
from flwr.common import log
from flwr.serverapp import Grid

from flower_topics.secure_sum import crypto, shamir
from flower_topics.secure_sum.graph import RoundGraph, round_graph
from flower_topics.secure_sum.protocol import (
    MESSAGE_TYPE,
    SecureSumSettings,
    check_quorum,
    listing_digest,
    mask_context,
    pair_sign,
    self_context,
    survivors_statement,
)
from flower_topics.wire.protocol import CONFIG, payload_bytes


class SecureRoundFailed(RuntimeError):
    """Too few parties completed a stage of the round (the message says which and how many)."""


@dataclass
class KeyEpoch:
    """One key agreement and the rounds it serves.

    Attributes
    ----------
    first : int
        The round that agreed the keys (every round's mask keys and seeds are indexed from it).
    rounds : int
        ``R``: it serves rounds ``first`` to ``first + R - 1``.
    participants : tuple of int
        The parties sampled in its first round, sorted.
    public_keys : dict
        Each party's ``(c-pk, s-pk)``: ``s-pk`` is its ``R`` mask public keys, one after the other.
    signing_keys : dict
        Each party's Ed25519 public key (it signs the survivor sets of the epoch's rounds).
    listing : bytes
        The :func:`~flower_topics.secure_sum.protocol.listing_digest` of the epoch's key listing.
    graph : RoundGraph
        The graph of its first round.
    members : set of int
        The parties whose shares went out.
    last_round : int
        The last round it served.
    clean : bool
        Whether ``last_round`` ended with every participant answering every stage and none dropped (only
        then may the next round continue the epoch).
    """

    first: int
    rounds: int
    participants: tuple[int, ...]
    public_keys: dict[int, tuple[bytes, bytes]]
    signing_keys: dict[int, bytes]
    listing: bytes
    graph: RoundGraph
    members: set[int]
    last_round: int
    clean: bool = False

    def continues(self, nodes: Iterable[int], server_round: int) -> bool:
        """Whether ``server_round`` over ``nodes`` may use this epoch's keys."""
        return (self.clean and tuple(sorted(nodes)) == self.participants and self.members == set(self.participants)
                and server_round == self.last_round + 1 and server_round < self.first + self.rounds)

    def mask_key(self, node: int, server_round: int) -> bytes:
        """``node``'s mask public key of ``server_round``."""
        slot = server_round - self.first
        return self.public_keys[node][1][slot * crypto.PUBLIC_KEY_BYTES:(slot + 1) * crypto.PUBLIC_KEY_BYTES]


@dataclass
class SecureRound:
    """One round's secure sum over ``nodes``.

    Parameters
    ----------
    grid : Grid
        Flower's grid.
    nodes : list of int
        The round's sampled parties.
    settings : SecureSumSettings
        Bits and tolerance.
    server_round : int
        The round number (it enters every mask's derivation, and every message carries it).
    timeout : float
        Seconds each stage waits for replies.
    epoch : KeyEpoch, optional
        The previous round's key epoch: continued when it may be
        (:meth:`KeyEpoch.continues`), else a new one starts; :meth:`setup` sets it to the
        round's epoch.
    """

    grid: Grid
    nodes: list[int]
    settings: SecureSumSettings
    server_round: int
    timeout: float
    epoch: KeyEpoch | None = None
    public_keys: dict[int, tuple[bytes, bytes]] = field(default_factory=dict)
    outbox: dict[int, dict[int, bytes]] = field(default_factory=dict)
    graph: RoundGraph | None = None
    agreed: bool = False
    bytes_sent: int = 0
    bytes_received: int = 0

    @property
    def threshold(self) -> int:
        """The survivors a round needs, ``n - T`` for the sampled parties (SecAgg's Shamir ``t``)."""
        return self.settings.threshold(len(self.nodes))

    def _exchange(self, stage: str, requests: dict[int, dict]) -> dict[int, ConfigRecord]:
        messages = []
        for node, stage_entries in requests.items():
            content = RecordDict({CONFIG: ConfigRecord({"stage": stage, "round": self.server_round, **stage_entries})})
            self.bytes_sent += payload_bytes(content)
            messages.append(Message(content=content, message_type=MESSAGE_TYPE, dst_node_id=node))
        answers = {}
        for reply in self.grid.send_and_receive(messages, timeout=self.timeout):
            node = reply.metadata.src_node_id
            if reply.has_error():
                log(WARNING, "round %d: secure sum '%s': node %d: %s", self.server_round, stage, node,
                    reply.error.reason.strip().splitlines()[-1] if reply.error.reason.strip() else reply.error.code)
                continue
            self.bytes_received += payload_bytes(reply.content)
            record = reply.content.config_records.get(CONFIG)
            said = (str(record.get("stage", "")), str(record.get("round", ""))) if record is not None else ("", "")
            if said != (stage, str(self.server_round)) or node not in requests or node in answers:
                log(WARNING, "round %d: secure sum '%s': node %d: refused a reply for stage '%s' of round %s "
                    "(a replayed or reordered message)", self.server_round, stage, node, *said)
                continue
            answers[node] = record
        return answers

    def _need(self, stage: str, have: Iterable[int]) -> None:
        count = len(list(have))
        if count < self.threshold:
            raise SecureRoundFailed(f"round {self.server_round}: secure sum stopped at '{stage}': {count} of "
                                    f"{len(self.nodes)} parties answered, the threshold is {self.threshold}")

    def setup(self) -> dict[int, ConfigRecord]:
        """Stages ``keys`` and ``shares`` when the round starts a key epoch (none when it continues one);
        returns the record each remaining party's training message carries."""
        problem = self.settings.check_parties(len(self.nodes))
        if problem:
            raise SecureRoundFailed(f"round {self.server_round}: {problem}")
        epoch = self.epoch
        if epoch is not None and epoch.continues(self.nodes, self.server_round):
            epoch.last_round, epoch.clean = self.server_round, False
            self.public_keys, self.graph = epoch.public_keys, epoch.graph
            self.outbox = {n: {} for n in sorted(epoch.members)}
            return {n: ConfigRecord({"round": self.server_round, "epoch": epoch.first, "bits": self.settings.bits,
                                     "senders": [], "ciphertexts": []}) for n in self.outbox}
        self.epoch, self.agreed = None, True
        request = {"participants": [str(n) for n in self.nodes], "bits": self.settings.bits,
                   "tolerance": self.settings.tolerance, "epoch-rounds": self.settings.epoch}
        keys = self._exchange("keys", {n: request for n in self.nodes})
        self._need("keys", keys)
        width = self.settings.epoch * crypto.PUBLIC_KEY_BYTES
        self.public_keys = {n: (bytes(r["c-pk"]), bytes(r["s-pk"])) for n, r in keys.items()
                            if len(bytes(r["s-pk"])) == width
                            and len(bytes(r.get("sig-pk", b""))) == crypto.SIGNING_KEY_BYTES}
        for node in sorted(set(keys) - set(self.public_keys)):
            log(WARNING, "round %d: secure sum 'keys': node %d: refused keys of the wrong size (mask keys of %d bytes, "
                "not %d for %d rounds, or no 32-byte signing key)", self.server_round, node,
                len(bytes(keys[node]["s-pk"])), width, self.settings.epoch)
        self._need("keys", self.public_keys)
        order = sorted(self.public_keys)
        c_pks, s_pks = [self.public_keys[n][0] for n in order], [self.public_keys[n][1] for n in order]
        sig_pks = [bytes(keys[n]["sig-pk"]) for n in order]
        self.graph = round_graph(self.server_round, len(self.nodes), self.settings.tolerance, order, c_pks, s_pks)
        listing = {"nodes": [str(n) for n in order], "c-pk": c_pks, "s-pk": s_pks, "sig-pk": sig_pks}
        shares = self._exchange("shares", {n: listing for n in order})
        self._need("shares", shares)
        self.outbox = {n: {} for n in shares}
        for src, reply in shares.items():
            for dst, ciphertext in zip(reply["destinations"], reply["ciphertexts"]):
                if int(dst) in self.outbox and int(dst) in self.graph.neighbours[src]:
                    self.outbox[int(dst)][src] = bytes(ciphertext)
        self.epoch = KeyEpoch(self.server_round, self.settings.epoch, tuple(sorted(self.nodes)), self.public_keys,
                              dict(zip(order, sig_pks)),
                              listing_digest(self.server_round, order, c_pks, s_pks, sig_pks),
                              self.graph, set(self.outbox), self.server_round)
        return {dst: ConfigRecord({"round": self.server_round, "epoch": self.server_round,
                                   "bits": self.settings.bits, "senders": [str(s) for s in inbox],
                                   "ciphertexts": list(inbox.values())})
                for dst, inbox in self.outbox.items()}

    def _check(self, request: dict, alive: list[int]) -> dict[int, bytes]:
        """Stage ``check``: the alive parties' signatures of the alive set, those that verify, by node."""
        epoch = self.epoch
        statement = survivors_statement(epoch.listing, self.server_round, alive)
        signed = {}
        for node, reply in self._exchange("check", {n: request for n in alive}).items():
            if crypto.verify(epoch.signing_keys[node], bytes(reply.get("signature", b"")), statement):
                signed[node] = bytes(reply["signature"])
            else:
                log(WARNING, "round %d: secure sum 'check': node %d: refused a signature of the survivor set that "
                    "does not verify", self.server_round, node)
        self._need("check", signed)  # n - T signers: at least the quorum
        return signed

    def unmask(self, masked: dict[int, np.ndarray]) -> np.ndarray:
        """The sum over the parties in ``masked`` (their masked updates, by node), as centered int64.

        Raises
        ------
        SecureRoundFailed
            When fewer than ``n - T`` masked updates arrived, valid signatures of the alive set
            came back in ``check`` or parties answered ``unmask``, or fewer than ``t`` holders of
            a party's secret answered.
        """
        if self.graph is None or self.epoch is None:
            raise RuntimeError("SecureRound.unmask before setup")
        epoch = self.epoch
        alive = sorted(n for n in masked if n in self.outbox)
        self._need("masked updates", alive)
        dropped = sorted(set(self.outbox) - set(alive))
        request = {"alive": [str(n) for n in alive], "dropped": [str(n) for n in dropped]}
        signed = self._check(request, alive)
        quorum = sorted(signed)[:check_quorum(len(epoch.public_keys), self.settings.tolerance)]
        request |= {"signers": [str(n) for n in quorum], "signatures": [signed[n] for n in quorum]}
        answers = self._exchange("unmask", {n: request for n in sorted(signed)})
        self._need("unmask", answers)
        every_party = not dropped and len(answers) == len(alive) == len(epoch.participants)
        shares: dict[int, list[tuple[int, int]]] = {n: [] for n in self.outbox}
        for holder, reply in answers.items():
            for owner, seed_share, key_share in zip(reply["nodes"], reply["seed-shares"], reply["key-shares"]):
                owner = int(owner)
                wanted = bytes(seed_share) if owner in alive else bytes(key_share) if owner in dropped else b""
                if wanted and self.graph.holds(holder, owner):
                    try:
                        share = shamir.decode(wanted)
                        if share[0] != self.graph.x(holder):
                            raise ValueError("not at the holder's abscissa")
                        shares[owner].append(share)
                    except ValueError as exc:
                        log(WARNING, "round %d: secure sum 'unmask': node %d: a share of node %d refused: %s",
                            self.server_round, holder, owner, exc)
        combiner, threshold = shamir.Combiner(), self.graph.threshold

        def secret(owner: int, what: str) -> int:
            have = sorted(set(shares[owner]))  # the t lowest holders: one set of Lagrange weights for most owners
            if len(have) < threshold or len({x for x, _ in have}) != len(have):
                raise SecureRoundFailed(f"round {self.server_round}: secure sum stopped at 'unmask': {len(have)} "
                                        f"shares of node {owner}'s {what}, the threshold is {threshold}")
            value = combiner.combine(have[:threshold])
            if value >> 256:  # a seed or an X25519 key is 32 bytes: a share was not what its holder was sent
                raise SecureRoundFailed(f"round {self.server_round}: secure sum stopped at 'unmask': the shares of "
                                        f"node {owner}'s {what} do not rebuild a 32-byte secret")
            return value

        size = next(iter(masked.values())).size
        total = np.zeros(size, dtype=np.uint64)
        for node in alive:
            total += np.asarray(masked[node]).astype(np.uint64).ravel()
            seed = secret(node, "self-mask seed").to_bytes(32, "big")
            total -= crypto.mask(seed, self_context(self.server_round, node), size, self.settings.bits)
        for node in dropped:
            key = crypto.from_scalar(secret(node, "mask key"))
            for peer in sorted(self.graph.neighbours[node] & set(alive)):
                pair = crypto.mask(crypto.shared_key(key, epoch.mask_key(peer, self.server_round)),
                                   mask_context(self.server_round, peer, node), size, self.settings.bits)
                # the alive peer added pair_sign(peer, node) * pair; take it out
                if pair_sign(peer, node) > 0:
                    total -= pair
                else:
                    total += pair
        epoch.clean = every_party  # a dropout ends the epoch: the next round agrees new keys
        return self.settings.centered(total)
