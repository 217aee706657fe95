"""The cryptography of the secure sum, from well-kept libraries; only the Shamir arithmetic is ours.

- Key agreement: X25519 (``cryptography``), the shared secret through HKDF-SHA256 (as
  Flower's ``generate_shared_key`` does for its P-384 keys; X25519 is about 15 times faster
  here, and a party does a few of them a round).
- Authenticated encryption of the Shamir shares between two parties: Fernet (AES-128-CBC with
  HMAC-SHA256), Flower's ``encrypt`` / ``decrypt``.
- Secret sharing: Shamir over the field of the prime ``2^521 - 1``
  (:mod:`~flower_topics.secure_sum.shamir`; a mask seed or an X25519 private key is one
  field element).
- Signatures of the survivor set (the ``check`` stage): Ed25519 (``cryptography``), a fresh
  key pair per key epoch.
- Masks: AES-256 in counter mode (``cryptography``) keyed by HKDF-SHA256 of the mask seed.
  Flower's own ``pseudo_rand_gen`` is not used: it folds a seed to 32 bits and draws from
  numpy's Mersenne Twister, so a server could search all 2^32 seeds of a mask.
"""

from __future__ import annotations

import base64

import numpy as np
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric import ed25519, x25519
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from flwr.common.secure_aggregation.crypto.symmetric_encryption import decrypt, encrypt

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
    "sign",
    "signing_key",
    "verify",
]

PrivateKey = x25519.X25519PrivateKey
#: The length of a DER SubjectPublicKeyInfo of an X25519 key.
PUBLIC_KEY_BYTES = 44
#: The lengths of a raw Ed25519 public key and of an Ed25519 signature.
SIGNING_KEY_BYTES, SIGNATURE_BYTES = 32, 64


def new_private_key() -> PrivateKey:
    """A fresh X25519 private key (OS entropy)."""
    return x25519.X25519PrivateKey.generate()


def public_bytes(key: PrivateKey) -> bytes:
    """The DER SubjectPublicKeyInfo of ``key``'s public key (:data:`PUBLIC_KEY_BYTES` bytes)."""
    return key.public_key().public_bytes(serialization.Encoding.DER,
                                         serialization.PublicFormat.SubjectPublicKeyInfo)


def private_bytes(key: PrivateKey) -> bytes:
    """``key``'s 32 raw bytes (kept in the party's own state)."""
    return key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                             serialization.NoEncryption())


def load_private(data: bytes) -> PrivateKey:
    """The private key of :func:`private_bytes`."""
    return x25519.X25519PrivateKey.from_private_bytes(bytes(data))


def private_scalar(key: PrivateKey) -> int:
    """``key``'s 32 bytes as an integer below ``2^256`` (one Shamir field element)."""
    return int.from_bytes(private_bytes(key), "big")


def from_scalar(value: int) -> PrivateKey:
    """The private key of :func:`private_scalar`'s integer."""
    return load_private(value.to_bytes(32, "big"))


def shared_key(private: PrivateKey, peer_public: bytes) -> bytes:
    """The 32-byte Fernet key (urlsafe base64) both ends derive: ``shared_key(a, B) == shared_key(b, A)``.

    X25519 of the two keys through HKDF-SHA256; a peer key that is not X25519 is refused.
    """
    public = serialization.load_der_public_key(bytes(peer_public))
    if not isinstance(public, x25519.X25519PublicKey):
        raise TypeError("the peer's public key is not an X25519 key")
    secret = private.exchange(public)
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"flower-topics secure sum|ecdh").derive(secret)
    return base64.urlsafe_b64encode(derived)


def mask(seed: bytes, context: bytes, size: int, bits: int = 64) -> np.ndarray:
    """``size`` pseudo-random integers modulo ``2^bits`` from ``seed``: AES-256-CTR keyed by HKDF-SHA256(seed,
    info=context), 4 bytes a cell (uint32) when ``bits <= 32``, else 8 (uint64)."""
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=b"flower-topics secure sum|" + context).derive(seed)
    stream = Cipher(algorithms.AES(key), modes.CTR(b"\x00" * 16)).encryptor()
    dtype = np.uint32 if bits <= 32 else np.uint64
    width = np.dtype(dtype).itemsize
    return np.frombuffer(stream.update(b"\x00" * (width * size)) + stream.finalize(), dtype=dtype).copy()


def signing_key() -> tuple[bytes, bytes]:
    """A fresh Ed25519 key pair (OS entropy): its 32 raw private bytes and its 32 raw public bytes."""
    key = ed25519.Ed25519PrivateKey.generate()
    return (key.private_bytes(serialization.Encoding.Raw, serialization.PrivateFormat.Raw,
                              serialization.NoEncryption()),
            key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))


def sign(private: bytes, message: bytes) -> bytes:
    """The Ed25519 signature (64 bytes) of ``message`` under the raw private key ``private``."""
    return ed25519.Ed25519PrivateKey.from_private_bytes(bytes(private)).sign(message)


def verify(public: bytes, signature: bytes, message: bytes) -> bool:
    """Whether ``signature`` is a valid Ed25519 signature of ``message`` under the raw public key ``public``."""
    try:
        ed25519.Ed25519PublicKey.from_public_bytes(bytes(public)).verify(bytes(signature), message)
    except (InvalidSignature, ValueError):
        return False
    return True
