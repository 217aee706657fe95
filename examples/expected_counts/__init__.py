"""``expected_counts``, the method docs/adding-a-method.md walks through: batch variational EM for LDA, whose
parties each send their expected topic-word counts and whose server sums them.

It is not one of the package's methods: it runs where ``register_method(SPEC)`` was called (the tests call it).
"""

from examples.expected_counts import wire
from flower_topics.methods import MethodSpec
from flower_topics.wire.method_wire import MethodWire

SPEC = MethodSpec(wire.METHOD, "Batch variational EM: each party's expected topic-word counts, summed (no privacy)",
                  MethodWire.read(wire), "examples.expected_counts.strategy:ExpectedCounts",
                  "examples.expected_counts.client:STEP", private=False)
