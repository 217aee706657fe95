"""Shamir sharing over 2^521 - 1: exact reconstruction, secrecy of t - 1 shares, refusals."""

from __future__ import annotations

import itertools
import os
import random
from collections import Counter

import pytest

from flower_topics.secure_sum import shamir


def test_any_t_of_n_shares_rebuild_the_secret_and_t_minus_1_do_not():
    secret = int.from_bytes(os.urandom(32), "big")
    holders = [3, 5, 8, 13, 21, 34]
    shares = shamir.split(secret, 4, holders)
    combiner = shamir.Combiner()
    for subset in itertools.combinations(shares, 4):
        assert combiner.combine(subset) == secret
    for subset in itertools.combinations(shares, 5):  # more than t also works
        assert combiner.combine(subset) == secret
    for subset in itertools.combinations(shares, 3):  # a random polynomial's value at 0, not the secret
        assert combiner.combine(subset) != secret


def test_a_p384_scalar_and_a_large_threshold():
    secret = shamir.PRIME - 1
    shares = shamir.split(secret, 150, list(range(1, 201)))
    picked = random.Random(0).sample(shares, 150)
    assert shamir.combine(picked) == secret
    assert all(shamir.decode(shamir.encode(s)) == s for s in shares)
    assert {len(shamir.encode(s)) for s in shares} == {shamir.SHARE_BYTES}


@pytest.mark.parametrize("prime, threshold, holders", [(7, 3, [1, 2, 4]), (11, 2, [3, 9]), (5, 4, [1, 2, 3, 4])])
def test_t_minus_1_shares_are_equally_likely_under_every_secret(prime, threshold, holders):
    """Over all polynomials (the random coefficients), the first t - 1 holders' shares are uniform on
    Z_p^(t-1) whatever the secret: they say nothing about it (exact enumeration in a small field)."""
    seen = holders[: threshold - 1]
    for secret in range(prime):
        counts = Counter(
            tuple(shamir.evaluate((secret, *rest), x, prime) for x in seen)
            for rest in itertools.product(range(prime), repeat=threshold - 1)
        )
        assert len(counts) == prime ** (threshold - 1) and set(counts.values()) == {1}


def test_t_minus_1_shares_fit_every_secret():
    """For t - 1 real shares and any candidate secret s, one polynomial of degree t - 1 passes through
    (0, s) and all of them: the holders could be holding shares of any secret."""
    shares = shamir.split(12345, 5, [2, 4, 6, 8, 10])[:4]
    for candidate in (0, 1, 12345, shamir.PRIME - 1):
        points = [(0, candidate), *shares]
        # rebuild the polynomial's value at a fifth point from the five points, then check that
        # the four shares plus that point rebuild the candidate: the five are on one polynomial
        weights_at_1 = _lagrange_at(1, [x for x, _ in points])
        at_1 = sum(w * y for w, (_, y) in zip(weights_at_1, points)) % shamir.PRIME
        assert shamir.combine([*shares, (1, at_1)]) == candidate


def test_shares_come_from_os_entropy(monkeypatch):
    calls = []
    real = shamir.secrets.randbelow
    monkeypatch.setattr(shamir.secrets, "randbelow", lambda n: calls.append(n) or real(n))
    first = shamir.split(7, 3, [1, 2, 3])
    assert calls == [shamir.PRIME, shamir.PRIME]  # t - 1 coefficients, uniform on the field
    assert first != shamir.split(7, 3, [1, 2, 3])


def test_weights_are_computed_once_per_set_of_holders():
    combiner = shamir.Combiner()
    holders = [1, 2, 3, 4]
    for secret in range(20):
        assert combiner.combine(shamir.split(secret, 4, holders)) == secret
    assert len(combiner._weights) == 1


@pytest.mark.parametrize("shares, why", [
    ([(1, 5), (1, 6)], "same holder"),
    ([(0, 5), (1, 6)], "x must be"),
    ([(1, shamir.PRIME), (2, 6)], "not a field element"),
    ([], "no shares"),
])
def test_invalid_or_duplicate_shares_are_refused(shares, why):
    with pytest.raises(ValueError, match=why):
        shamir.combine(shares)


def test_bad_splits_and_encodings_are_refused():
    with pytest.raises(ValueError, match="threshold"):
        shamir.split(1, 4, [1, 2, 3])
    with pytest.raises(ValueError, match="same holder"):
        shamir.split(1, 2, [1, 1, 2])
    with pytest.raises(ValueError, match="field element"):
        shamir.split(shamir.PRIME, 2, [1, 2])
    with pytest.raises(ValueError, match="70 bytes"):
        shamir.decode(b"\x00" * 69)
    with pytest.raises(ValueError, match="outside the field"):
        shamir.decode(b"\x00" * shamir.SHARE_BYTES)


def _lagrange_at(point, xs):
    p = shamir.PRIME
    out = []
    for j, xj in enumerate(xs):
        num, den = 1, 1
        for m, xm in enumerate(xs):
            if m != j:
                num = num * (point - xm) % p
                den = den * (xj - xm) % p
        out.append(num * pow(den, -1, p) % p)
    return out
