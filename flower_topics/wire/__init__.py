"""The wire protocols: one module per method (record keys, dtypes, shapes, settings and
options), below both the client and the strategy of the method, plus what every method
shares (:mod:`flower_topics.wire.protocol`) and what a method's wire module declares
(:mod:`flower_topics.wire.method_wire`).

They hold message formats only: how a method's noise is calibrated lives in
:mod:`flower_topics.privacy`, its mechanisms in ``privacy/`` and ``models/``, its console advice
next to its strategy. A wire module imports numpy, Flower's record types and, from the layers
below, only the names and types its settings carry (the sampler, randomizer and padding names
its options accept, the seed prior of guided topics), so that importing a method's protocol never
imports torch, opacus, sentence-transformers or an accountant; the counts' compiled kernels
(numba) are imported on first use (:func:`flower_topics.wire.counts.counts_kernels`).
"""
