"""The cryptography of the secure sum, from well-kept libraries; only the Shamir arithmetic is ours.

- Key agreement: ECDH on NIST P-384 (``cryptography``), the shared secret through HKDF-SHA256:
  Flower's :func:`~flwr.common.secure_aggregation.crypto.symmetric_encryption.generate_shared_key`.
- Authenticated encryption of the Shamir shares between two parties: Fernet (AES-128-CBC with
  HMAC-SHA256), Flower's ``encrypt`` / ``decrypt``.
- Secret sharing: Shamir over the field of the prime ``2^521 - 1``
  (:mod:`~flower_topics.secure_sum.shamir`; a mask seed or a P-384 private scalar is one
  field element).
- Masks: AES-256 in counter mode (``cryptography``) keyed by HKDF-SHA256 of the mask seed.
  Flower's own ``pseudo_rand_gen`` is not used: it folds a seed to 32 bits and draws from
  numpy's Mersenne Twister, so a server could search all 2^32 seeds of a mask.
"""

from __future__ import annotations

import numpy as np
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from flwr.common.secure_aggregation.crypto.symmetric_encryption import (
    decrypt,
    encrypt,
    generate_shared_key,
)

__all__ = [
    "decrypt",
    "encrypt",
    "from_scalar",
    "load_private",
    "mask",
    "new_private_key",
    "private_bytes",
    "private_scalar",
    "public_bytes",
    "shared_key",
]

CURVE = ec.SECP384R1()


def new_private_key() -> ec.EllipticCurvePrivateKey:
    """A fresh P-384 private key (OS entropy)."""
    return ec.generate_private_key(CURVE)


def public_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    """The DER SubjectPublicKeyInfo of ``key``'s public key."""
    return key.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def private_bytes(key: ec.EllipticCurvePrivateKey) -> bytes:
    """``key`` as unencrypted DER PKCS#8 (kept in the party's own state, or Shamir-shared)."""
    return key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def load_private(data: bytes) -> ec.EllipticCurvePrivateKey:
    """The private key of :func:`private_bytes`."""
    key = serialization.load_der_private_key(data, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("not an elliptic-curve private key")
    return key


def private_scalar(key: ec.EllipticCurvePrivateKey) -> int:
    """``key``'s private scalar (below the P-384 group order, so one Shamir field element)."""
    return key.private_numbers().private_value


def from_scalar(value: int) -> ec.EllipticCurvePrivateKey:
    """The P-384 private key of the scalar ``value`` (:func:`private_scalar`'s inverse)."""
    return ec.derive_private_key(value, CURVE)


def shared_key(private: ec.EllipticCurvePrivateKey, peer_public: bytes) -> bytes:
    """The 32-byte key (urlsafe base64) both ends of ECDH derive: ``shared_key(a, B) == shared_key(b, A)``."""
    public = serialization.load_der_public_key(peer_public)
    if not isinstance(public, ec.EllipticCurvePublicKey) or public.curve.name != CURVE.name:
        raise ValueError("the peer's public key is not a P-384 key")
    return generate_shared_key(private, public)


def mask(seed: bytes, context: bytes, size: int) -> np.ndarray:
    """``size`` pseudo-random uint64 from ``seed``: AES-256-CTR keyed by HKDF-SHA256(seed, info=context)."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"flower-topics secure sum|" + context).derive(seed)
    stream = Cipher(algorithms.AES(key), modes.CTR(b"\x00" * 16)).encryptor()
    return np.frombuffer(stream.update(b"\x00" * (8 * size)) + stream.finalize(), dtype=np.uint64).copy()
