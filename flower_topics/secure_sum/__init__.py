"""Secure aggregation on Flower's message API: the server learns only the sum of a round's updates.

SecAgg (Bonawitz et al., CCS 2017) with the complete graph, built from Flower's own primitives
(:mod:`flwr.common.secure_aggregation`: ECDH key agreement, Fernet, Shamir) and AES-CTR masks:
:mod:`~flower_topics.secure_sum.protocol` (messages and arithmetic modulo ``2^bits``),
:mod:`~flower_topics.secure_sum.party` (the party's stages), :mod:`~flower_topics.secure_sum.server`
(the server's relay and unmasking) and :mod:`~flower_topics.secure_sum.crypto`.
"""

from flower_topics.secure_sum.protocol import (
    MASKED_KEY,
    MESSAGE_TYPE,
    ROUND_RECORD,
    SecureSumSettings,
)

__all__ = ["MASKED_KEY", "MESSAGE_TYPE", "ROUND_RECORD", "SecureSumSettings"]
