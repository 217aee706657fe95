"""What the secure sum's messages carry, and the arithmetic modulo ``2^bits`` (shared by both ends).

A round of secure aggregation has five steps in the first round of a *key epoch* and three
(the training message, ``check`` and ``unmask``) in its later rounds; all but the training
message are Flower query messages of type :data:`MESSAGE_TYPE` with a
:data:`~flower_topics.wire.protocol.CONFIG` record whose ``stage`` is one of the following.
Every request and every reply carries the ``stage`` and the ``round``; either end refuses,
with one line, one of another round or out of order (a replayed or reordered message).

``keys`` (an epoch's first round)
    server -> each sampled party: the round, the participants, ``bits``, the tolerance ``T``
    and ``epoch-rounds`` ``R``. Reply: fresh X25519 public keys: ``c-pk`` to encrypt shares,
    ``s-pk`` the ``R`` mask keys, one per round of the epoch, one after the other; and
    ``sig-pk``, a fresh Ed25519 public key that signs the epoch's survivor sets.
``shares`` (an epoch's first round)
    server -> each party that answered: everyone's public keys (``nodes``, ``c-pk``,
    ``s-pk``, ``sig-pk``), from which every party derives the epoch's graph
    (:mod:`~flower_topics.secure_sum.graph`). Reply: for each neighbour, a Fernet ciphertext
    of its Shamir shares (threshold ``t``) of this party's ``R`` self-mask seeds and ``R``
    mask private keys.

The third step is the method's own ``train.<method>`` message: it carries a
:data:`ROUND_RECORD` ConfigRecord with the round, the epoch (its first round) and, in the
epoch's first round, the ciphertexts addressed to the party; the party replies with one
array, :data:`MASKED_KEY`, its integer update plus the round's masks, modulo ``2^bits``.

``check`` (every round)
    server -> the parties whose masked update arrived: who is ``alive`` and who ``dropped``
    out. Reply: ``signature``, this party's Ed25519 signature of :func:`survivors_statement`
    (the epoch's key listing, the round and the alive list); a party signs once a round.
``unmask`` (every round)
    server -> the parties that signed: the same lists, and the ``signers`` and
    ``signatures`` of :func:`check_quorum` parties on that very statement. Reply: the shares
    it holds (its own and its neighbours') of each alive party's self-mask seed of the round
    and of each dropped party's mask key of the round (never both for one party; a party
    answers ``unmask`` once per round, and only for the list it signed).

What the server learns: the public keys, the ciphertexts (it holds no key to open them), the
masked vectors (uniform modulo ``2^bits`` to it) and, after ``unmask``, the sum over the
alive parties and nothing else, as long as at most ``T`` parties collude with it, the graph
is not bad, and it relays every party's keys as the party sent them (Bonawitz et al. 2017,
SecAgg, with the complete graph and its consistency check; Bell et al. 2020, SecAgg+, with
the sparse one). The ``check`` stage is what stops a server that shows different parties
different survivor sets: two statements that each carry :func:`check_quorum` signatures share
more than ``T`` signers when ``n > 3T`` (``n - 2T`` otherwise), so one honest party would have
signed both.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from flwr.app import MessageType

from flower_topics.wire.protocol import ArraySpec, ReplySpec

MESSAGE_TYPE = f"{MessageType.QUERY}.secure_sum"
ROUND_RECORD = "secure-sum"
MASKED_KEY = "masked-sum"
STAGES = ("keys", "shares", "check", "unmask")
#: The most rounds one key epoch may serve (a party keeps a key pair and a seed per round).
MAX_EPOCH = 100


@dataclass(frozen=True)
class SecureSumSettings:
    """The run's secure-sum settings.

    Parameters
    ----------
    bits : int
        The sum lives in the integers modulo ``2^bits`` (16 to 64).
    tolerance : int
        ``T``: parties of a round that may drop out after masking or collude with the
        server. A round of ``n`` parties needs ``n - T`` survivors and ``T < n / 2``;
        Shamir's threshold is ``t = n - T`` with the complete graph, and the graph's own
        ``t`` with a sparse one (:func:`~flower_topics.secure_sum.graph.design`).
    epoch : int
        ``R``: the rounds one key agreement serves (a *key epoch*). The ``keys`` and
        ``shares`` stages run in an epoch's first round only, with one key pair and one
        self-mask seed per round of the epoch; a round with another set of parties, a
        dropout, or past ``R`` rounds starts a new epoch. 1: every round agrees keys.
    """

    bits: int = 32
    tolerance: int = 1
    epoch: int = 1

    def __post_init__(self) -> None:
        if not 16 <= self.bits <= 64:
            raise ValueError("bits must be in [16, 64]")
        if self.tolerance < 0:
            raise ValueError("tolerance must be >= 0")
        if not 1 <= self.epoch <= MAX_EPOCH:
            raise ValueError(f"epoch must be in [1, {MAX_EPOCH}]")

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> SecureSumSettings:
        """The settings of a validated run config."""
        return cls(bits=int(config["secure-aggregation-bits"]), tolerance=int(config["secure-aggregation-tolerance"]),
                   epoch=int(config.get("secure-aggregation-epoch", 1)))

    def threshold(self, parties: int) -> int:
        """The survivors a round of ``parties`` participants needs (Shamir's ``t`` with the complete graph)."""
        return parties - self.tolerance

    def check_parties(self, parties: int) -> str | None:
        """Why ``parties`` participants cannot run a secure round, or None."""
        if parties < 2:
            return "secure aggregation needs at least 2 parties in a round"
        if 2 * self.tolerance >= parties:
            return (f"secure aggregation: tolerance {self.tolerance} needs more than {2 * self.tolerance} parties in "
                    f"a round, {parties} sampled")
        return None

    def limit(self, parties: int) -> int:
        """The largest magnitude one party's integer entry may have, so that no sum of ``parties`` wraps."""
        return ((1 << (self.bits - 1)) - 1) // parties

    @property
    def wire_dtype(self) -> type:
        """uint32 up to 32 bits, else uint64."""
        return np.uint32 if self.bits <= 32 else np.uint64

    def reduce(self, values: np.ndarray) -> np.ndarray:
        """``values`` (any integers, or uint64 after wrapping additions) modulo ``2^bits`` as uint64."""
        out = np.asarray(values).astype(np.uint64, copy=False)  # two's complement: int64 -> uint64 is mod 2^64
        return out if self.bits == 64 else out & np.uint64((1 << self.bits) - 1)

    def centered(self, residues: np.ndarray) -> np.ndarray:
        """The residues modulo ``2^bits`` as int64 in ``[-2^(bits-1), 2^(bits-1))``."""
        residues = self.reduce(residues)
        if self.bits == 64:
            return residues.view(np.int64)
        signed = residues.astype(np.int64)
        return np.where(signed >= (1 << (self.bits - 1)), signed - (1 << self.bits), signed)


def masked_spec(spec: ReplySpec, secure: SecureSumSettings) -> ReplySpec:
    """What a reply is under secure aggregation: one masked integer vector of all of ``spec``'s arrays, no metrics,
    and the entries of ``spec``'s config record (public labels of what was summed), if it has any."""
    size = sum(int(np.prod(a.shape)) for a in spec.arrays.values())
    return ReplySpec(spec.method, {MASKED_KEY: ArraySpec("integer", (size,), 0, 2.0 ** secure.bits,
                                                         what="masked update modulo 2^bits")},
                     metrics=(), max_bytes=8 * size + (1 << 16), config=spec.config)


def quantize(values: np.ndarray, quantum: float, limit: int, rng: np.random.Generator) -> np.ndarray:
    """Real ``values`` as integers in units of ``1 / quantum``, for a secure sum.

    Each entry times ``quantum`` is rounded up with probability its fractional part and down
    otherwise (unbiased: the expected integer is ``quantum x value``), then clipped to
    ``[-limit, limit]`` so that no sum can wrap. ``rng`` should be the party's secret
    randomness when ``values`` carry privacy noise (the rounding is then post-processing).
    """
    scaled = np.asarray(values, dtype=np.float64) * quantum
    low = np.floor(scaled)
    rounded = low + (rng.random(scaled.shape) < scaled - low)
    return np.clip(rounded, -limit, limit).astype(np.int64)


def pair_sign(me: int, other: int) -> int:
    """+1 if ``me < other`` else -1: the pairwise masks of ``me`` and ``other`` cancel in the sum."""
    return 1 if me < other else -1


def mask_context(server_round: int, a: int, b: int) -> bytes:
    """The HKDF info of the pairwise mask of ``a`` and ``b`` (the same for both) in ``server_round``."""
    low, high = sorted((a, b))
    return f"round {server_round} pair {low} {high}".encode()


def self_context(server_round: int, node: int) -> bytes:
    """The HKDF info of ``node``'s self mask in ``server_round``."""
    return f"round {server_round} self {node}".encode()


def check_quorum(parties: int, tolerance: int) -> int:
    """The signatures a survivor set needs, of the ``n`` parties of the epoch's key listing.

    ``q = min(n - T, floor((n + T) / 2) + 1)``: two sets that each carry ``q`` signatures share
    at least ``2q - n`` signers, and an honest party signs one set a round, so they cannot both
    stand unless ``2q - n`` parties collude: more than ``T`` when ``n > 3T`` (then ``q`` is the
    second term), ``n - 2T`` (at least 1) otherwise, where ``q = n - T`` keeps the ``T``
    dropouts the round is meant to survive. A round needs ``q`` live parties after masking.
    """
    return min(parties - tolerance, (parties + tolerance) // 2 + 1)


def listing_digest(first_round: int, nodes: Sequence[int], c_pks: Sequence[bytes], s_pks: Sequence[bytes],
                   sig_pks: Sequence[bytes]) -> bytes:
    """SHA-256 of a key epoch's first round and of every party's id and three public keys, in the listing's order."""
    digest = hashlib.sha256(b"flower-topics secure sum listing|" + str(first_round).encode())
    for node, *keys in zip(nodes, c_pks, s_pks, sig_pks, strict=True):
        for part in (str(node).encode(), *map(bytes, keys)):
            digest.update(len(part).to_bytes(4, "big") + part)
    return digest.digest()


def survivors_statement(listing: bytes, server_round: int, alive: Sequence[int]) -> bytes:
    """What a party signs in the ``check`` stage: the epoch's :func:`listing_digest`, the round and the alive set."""
    return (b"flower-topics secure sum survivors|" + bytes(listing) + b"|" + str(server_round).encode() + b"|"
            + ",".join(str(n) for n in sorted(set(alive))).encode())
