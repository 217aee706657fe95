"""The wire protocols: one module per method (record keys, dtypes, shapes, settings and
options), below both the client and the strategy of the method, plus what every method
shares (:mod:`flower_topics.wire.protocol`) and what a method's wire module declares
(:mod:`flower_topics.wire.method_wire`).

These modules import numpy and Flower's record types only, so that importing a method's
protocol never imports torch, opacus or sentence-transformers.
"""
