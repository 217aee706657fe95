"""SecAgg+'s masking graph: which parties mask with, and hold the Shamir shares of, which.

Bell, Bonawitz, Gascon, Lepoint and Raykova (CCS 2020) replace SecAgg's complete graph by a
random Harary graph ``H(n, k)``: the ``n`` parties in a random order around a ring, each
joined to the ``k / 2`` before and the ``k / 2`` after it (``k`` even). A party masks with
its ``k`` neighbours only and Shamir-shares its two secrets among its *holders*, itself and
its neighbours, with a threshold ``t``. Against a server that follows the protocol and
colludes with up to ``T`` parties, and with up to ``T`` dropouts, the sum leaks nothing more
than SecAgg's unless the graph is *bad*:

1. the parties left after removing the corrupt and the dropped ones are disconnected (the
   server would learn each part's sum): a ring lattice loses its connection only when two
   disjoint runs of ``k / 2`` consecutive positions are all removed, so with ``b = 2T``
   removed parties the probability is at most
   ``n (n - k - 1) / 2 x C(n - k, b - k) / C(n, b)``, and 0 when ``k > b``;
2. a party has ``t`` or more corrupt holders (they would give the server both of its
   secrets): the number of corrupt neighbours is hypergeometric (``T`` among ``n - 1``,
   ``k`` drawn); a union bound over the ``n`` parties;
3. a server that tells some holders "alive" and others "dropped" could collect ``t`` shares
   of both secrets of a party with ``c`` corrupt holders when ``k + 1 + c >= 2t``: so
   ``t > (k + 1 + c) / 2`` at the same tail of ``c``, as when the complete graph needs
   ``t > n / 2``.

:func:`design` picks the smallest even ``k`` whose bad-graph probability (1 plus the worse
of 2 and 3) is at most ``2^-SECURITY_BITS`` and the smallest ``t`` that meets 2 and 3, such
that a party lacks ``t`` live holders (a failed round, never a leak) with probability at
most ``2^-CORRECTNESS_BITS``. Where no ``k <= n - 2`` does, the graph is the complete one
with SecAgg's ``t = n - T``. The order around the ring is the SHA-256 of the round and of
every party's fresh public keys (OS entropy), which every party recomputes: the server does
not choose it, as the paper's semi-honest protocol lets it.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property, lru_cache

__all__ = ["CORRECTNESS_BITS", "SECURITY_BITS", "GraphDesign", "RoundGraph", "design", "round_graph"]

#: sigma: a graph is bad with probability at most 2^-40.
SECURITY_BITS = 40
#: eta: a round fails for lack of live holders with probability at most 2^-20.
CORRECTNESS_BITS = 20


@dataclass(frozen=True)
class GraphDesign:
    """The graph's parameters for ``parties`` parties and tolerance ``tolerance``.

    Attributes
    ----------
    parties, tolerance : int
        ``n`` and ``T``.
    degree : int
        ``k``: each party's neighbours (``n - 1`` for the complete graph).
    threshold : int
        ``t``: shares that rebuild a secret, of the ``k + 1`` a party hands out.
    complete : bool
        SecAgg's complete graph (no sparse degree met the bounds).
    log2_disconnected, log2_exposed, log2_unrecoverable : float
        ``log2`` of the bounds on the probabilities that the honest survivors are
        disconnected (1), that some party's secrets are open to the server and its
        colluders (the worse of 2 and 3), and that some party lacks ``t`` live holders;
        ``-inf`` where the event cannot happen.
    """

    parties: int
    tolerance: int
    degree: int
    threshold: int
    complete: bool
    log2_disconnected: float
    log2_exposed: float
    log2_unrecoverable: float

    @property
    def log2_insecure(self) -> float:
        """``log2`` of the bound on the probability that the graph is bad (1 or 2-3)."""
        return _log2_sum(self.log2_disconnected, self.log2_exposed)


def log2_disconnected(parties: int, degree: int, removed: int) -> float:
    """``log2`` of a bound on Pr[``H(n, k)`` minus ``removed`` random parties is disconnected] (1 above)."""
    n, k, b = parties, degree, removed
    if k > b or k >= n - 1:
        return -math.inf
    pairs = math.log(n) + math.log(max(n - k - 1, 1)) - math.log(2)
    one = math.lgamma(b + 1) + math.lgamma(n - k + 1) - math.lgamma(n + 1) - math.lgamma(b - k + 1)
    return min(0.0, (pairs + one) / math.log(2))


def _log2_tail(population: int, marked: int, drawn: int, above: int) -> float:
    """``log2`` Pr[X > above] for X hypergeometric (``marked`` of ``population``, ``drawn`` drawn)."""
    from scipy.stats import hypergeom  # here: a round's ClientApp process needs it only in a secure round

    if above >= min(marked, drawn):
        return -math.inf
    return float(hypergeom.logsf(above, population, marked, drawn)) / math.log(2)


def _log2_sum(*logs: float) -> float:
    top = max(logs)
    return top if top == -math.inf else top + math.log2(sum(2.0 ** (v - top) for v in logs))


@lru_cache(maxsize=256)
def design(parties: int, tolerance: int) -> GraphDesign:
    """The sparse graph's ``k`` and ``t`` for ``parties`` parties, up to ``tolerance`` corrupt and dropped.

    Parameters
    ----------
    parties : int
        ``n`` (at least 2).
    tolerance : int
        ``T``, with ``2T < n``.
    """
    n, T = parties, tolerance
    log_n = math.log2(n)
    for k in range(2, n - 1, 2) if 2 * T < n else ():
        disconnected = log2_disconnected(n, k, 2 * T)
        if disconnected > -SECURITY_BITS - 1:
            continue
        budget = -SECURITY_BITS - 1 - log_n  # per party, for 2 and 3 together
        corrupt = 0  # the smallest c with n Pr[corrupt neighbours > c] below the budget
        while _log2_tail(n - 1, T, k, corrupt) > budget:
            corrupt += 1
        t = max(corrupt + 1, (k + 1 + corrupt) // 2 + 1, 2)
        if t > k:
            continue
        # live holders of a dropped party (T - 1 other dropouts) and of a live one (itself plus neighbours)
        unrecoverable = _log2_sum(_log2_tail(n - 1, T - 1, k, k - t) if T else -math.inf,
                                  _log2_tail(n - 1, T, k, k + 1 - t)) + log_n
        if unrecoverable > -CORRECTNESS_BITS:
            continue
        exposed = max(_log2_tail(n - 1, T, k, t - 1), _log2_tail(n - 1, T, k, 2 * t - k - 2)) + log_n
        return GraphDesign(n, T, k, t, False, disconnected, exposed, unrecoverable)
    return GraphDesign(n, T, n - 1, n - T, True, -math.inf, -math.inf, -math.inf)


@dataclass(frozen=True)
class RoundGraph:
    """One round's graph over the parties that sent keys.

    Attributes
    ----------
    design : GraphDesign
        ``k`` and ``t``.
    threshold : int
        ``t`` (``participants - T`` for the complete graph, as SecAgg).
    neighbours : mapping of int to frozenset of int
        Each party's neighbours (symmetric).
    nodes : tuple of int
        The parties, sorted: party ``nodes[i]``'s shares are evaluated at ``x = i + 1``.
    """

    design: GraphDesign
    threshold: int
    neighbours: Mapping[int, frozenset[int]]
    nodes: tuple[int, ...]

    def holders(self, owner: int) -> list[int]:
        """``owner`` and its neighbours, sorted: who holds a share of its secrets."""
        return sorted(self.neighbours[owner] | {owner})

    def holds(self, holder: int, owner: int) -> bool:
        """Whether ``holder`` holds a share of ``owner``'s secrets."""
        return holder == owner or holder in self.neighbours[owner]

    def x(self, holder: int) -> int:
        """The Shamir abscissa of ``holder``'s shares."""
        return self._abscissa[holder]

    @cached_property
    def _abscissa(self) -> dict[int, int]:
        return {node: i + 1 for i, node in enumerate(self.nodes)}


def graph_seed(server_round: int, nodes: Sequence[int], c_pks: Sequence[bytes], s_pks: Sequence[bytes]) -> bytes:
    """SHA-256 of the round and of every party's id and two public keys, in the listing's order."""
    digest = hashlib.sha256(b"flower-topics secure sum graph|" + str(server_round).encode())
    for node, c_pk, s_pk in zip(nodes, c_pks, s_pks):
        for part in (str(node).encode(), bytes(c_pk), bytes(s_pk)):
            digest.update(len(part).to_bytes(4, "big") + part)
    return digest.digest()


def harary(nodes: Sequence[int], degree: int, seed: bytes) -> dict[int, frozenset[int]]:
    """``H(len(nodes), degree)`` with the ring's order given by SHA-256(seed, node); complete when ``degree >= n - 1``."""
    ring = sorted(nodes, key=lambda node: hashlib.sha256(seed + str(node).encode()).digest())
    m = len(ring)
    if degree >= m - 1:
        return {node: frozenset(set(ring) - {node}) for node in ring}
    half = degree // 2
    around = ring[-half:] + ring + ring[:half]  # ring[i]'s neighbours are around[i : i + half] and around[i + half + 1 : ...]
    return {node: frozenset(around[i:i + half] + around[i + half + 1:i + 2 * half + 1]) for i, node in enumerate(ring)}


def round_graph(server_round: int, participants: int, tolerance: int, nodes: Sequence[int],
                c_pks: Sequence[bytes], s_pks: Sequence[bytes]) -> RoundGraph:
    """The graph every party and the server derive from the ``shares`` stage's key listing.

    Parameters
    ----------
    server_round : int
        The round.
    participants : int
        The round's sampled parties (SecAgg's threshold is ``participants - tolerance``).
    tolerance : int
        ``T``.
    nodes, c_pks, s_pks : sequences
        The parties that sent keys, with their two public keys, in the listing's order.
    """
    plan = design(len(nodes), tolerance)
    threshold = participants - tolerance if plan.complete else plan.threshold
    neighbours = harary(list(nodes), plan.degree, graph_seed(server_round, nodes, c_pks, s_pks))
    return RoundGraph(plan, threshold, neighbours, tuple(sorted(nodes)))
