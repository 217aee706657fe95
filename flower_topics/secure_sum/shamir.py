"""Shamir secret sharing over the prime field of ``p = 2^521 - 1``, with Python's C integers.

A secret is one field element (a 32-byte mask seed or an X25519 private key, both below
``p``). :func:`split` draws the ``t - 1`` random coefficients of a polynomial ``f`` with
``f(0) = secret`` from OS entropy (:func:`secrets.randbelow`) and hands holder ``x`` the
share ``(x, f(x))``; any ``t`` shares give ``f(0)`` by Lagrange interpolation at 0, and
``t - 1`` shares are equally likely under every secret. :class:`Combiner` keeps the
Lagrange coefficients of each set of holders it has seen, so the server, which rebuilds
many secrets from the same holders, computes them once.

Neither ``cryptography`` nor Flower ships a fast Shamir: Flower's
(:mod:`flwr.common.secure_aggregation.crypto.shamir`, pycryptodome's GF(2^128) in pure
Python, 16-byte blocks) took most of the server's time at 50 parties.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence

__all__ = ["PRIME", "SHARE_BYTES", "Combiner", "combine", "decode", "encode", "split"]

#: The field's modulus, the Mersenne prime 2^521 - 1.
PRIME = (1 << 521) - 1
_X_BYTES, _Y_BYTES = 4, 66
#: The length of an encoded share: the holder's x (4 bytes) and f(x) (66 bytes), big-endian.
SHARE_BYTES = _X_BYTES + _Y_BYTES


def split(secret: int, threshold: int, holders: Sequence[int], prime: int = PRIME) -> list[tuple[int, int]]:
    """Shares ``(x, f(x))`` of ``secret`` for each x in ``holders``; any ``threshold`` of them rebuild it.

    Parameters
    ----------
    secret : int
        In ``[0, prime)``.
    threshold : int
        ``t``, in ``[1, len(holders)]``.
    holders : sequence of int
        Distinct x coordinates in ``[1, prime)`` (0 would be the secret itself).
    prime : int
        The field's modulus (a prime; tests use small ones).
    """
    _check_points(holders, prime)
    if not 0 <= secret < prime:
        raise ValueError("the secret is not a field element")
    if not 1 <= threshold <= len(holders):
        raise ValueError(f"threshold {threshold} with {len(holders)} holders")
    coefficients = [secret] + [secrets.randbelow(prime) for _ in range(threshold - 1)]
    return [(x, evaluate(coefficients, x, prime)) for x in holders]


def evaluate(coefficients: Sequence[int], x: int, prime: int = PRIME) -> int:
    """``sum_i coefficients[i] x^i mod prime`` (Horner)."""
    value = 0
    for c in reversed(coefficients):
        value = (value * x + c) % prime
    return value


def lagrange_at_zero(xs: Sequence[int], prime: int = PRIME) -> list[int]:
    """The weights ``l_j`` with ``f(0) = sum_j l_j f(x_j)`` for every polynomial of degree below ``len(xs)``."""
    _check_points(xs, prime)
    weights = []
    for j, xj in enumerate(xs):
        numerator, denominator = 1, 1
        for m, xm in enumerate(xs):
            if m != j:
                numerator = numerator * xm % prime
                denominator = denominator * (xm - xj) % prime
        weights.append(numerator * pow(denominator, -1, prime) % prime)
    return weights


def combine(shares: Iterable[tuple[int, int]], prime: int = PRIME) -> int:
    """The secret of ``shares`` (at least the threshold's number of them, from distinct holders)."""
    return Combiner(prime).combine(shares)


class Combiner:
    """Rebuilds secrets, computing the Lagrange weights once per set of holders.

    Parameters
    ----------
    prime : int
        The field's modulus.
    """

    def __init__(self, prime: int = PRIME) -> None:
        self.prime = prime
        self._weights: dict[tuple[int, ...], list[int]] = {}

    def combine(self, shares: Iterable[tuple[int, int]]) -> int:
        """``f(0)`` from the shares ``(x, f(x))``: all of them are used, so pass exactly ``t``."""
        shares = list(shares)
        xs = tuple(x for x, _ in shares)
        if any(not 0 <= y < self.prime for _, y in shares):
            raise ValueError("a share's value is not a field element")
        if xs not in self._weights:
            self._weights[xs] = lagrange_at_zero(xs, self.prime)
        return sum(w * y for w, (_, y) in zip(self._weights[xs], shares)) % self.prime


def encode(share: tuple[int, int]) -> bytes:
    """A share as :data:`SHARE_BYTES` bytes."""
    x, y = share
    return x.to_bytes(_X_BYTES, "big") + y.to_bytes(_Y_BYTES, "big")


def decode(data: bytes) -> tuple[int, int]:
    """The share of :func:`encode`; a wrong length or a value outside the field is refused."""
    if len(data) != SHARE_BYTES:
        raise ValueError(f"a share is {SHARE_BYTES} bytes, not {len(data)}")
    x, y = int.from_bytes(data[:_X_BYTES], "big"), int.from_bytes(data[_X_BYTES:], "big")
    if x == 0 or y >= PRIME:
        raise ValueError("a share outside the field")
    return x, y


def _check_points(xs: Sequence[int], prime: int) -> None:
    if not xs:
        raise ValueError("no shares")
    if len(set(xs)) != len(xs):
        raise ValueError("two shares from the same holder")
    if any(not 0 < x < prime for x in xs):
        raise ValueError("a holder's x must be in [1, p)")
