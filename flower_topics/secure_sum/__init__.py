"""Secure aggregation on Flower's message API: the server learns only the sum of a round's updates.

SecAgg+ (Bell et al., CCS 2020): SecAgg (Bonawitz et al., CCS 2017) over a sparse random
graph, the complete one where the sparse degree would not be smaller. Built from Flower's own
primitives (:mod:`flwr.common.secure_aggregation`: ECDH key agreement, Fernet) and AES-CTR
masks: :mod:`~flower_topics.secure_sum.protocol` (messages and arithmetic modulo ``2^bits``),
:mod:`~flower_topics.secure_sum.graph` (who masks with whom, and the graph's parameters),
:mod:`~flower_topics.secure_sum.party` (the party's stages), :mod:`~flower_topics.secure_sum.server`
(the server's relay and unmasking), :mod:`~flower_topics.secure_sum.shamir` (secret sharing)
and :mod:`~flower_topics.secure_sum.crypto`.
"""

from flower_topics.secure_sum.protocol import (
    MASKED_KEY,
    MESSAGE_TYPE,
    ROUND_RECORD,
    SecureSumSettings,
)

__all__ = ["MASKED_KEY", "MESSAGE_TYPE", "ROUND_RECORD", "SecureSumSettings"]
