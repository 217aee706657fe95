"""The ClientApp pickles by reference.

Flower's simulation engine pickles the ClientApp with every message it hands a party's Ray actor, which
unpickles it. Its handlers are instances of a module-level class and a built-in method's spec pickles as
its name, so the standard pickle (which cannot pickle a closure, a lambda or code) round-trips every
built-in method's handler, and what travels holds no function's code. (A method of one's own, registered
in the launching process only, travels as its parts; tests/test_e2e_flower.py runs with one registered.)
"""

from __future__ import annotations

import pickle

from flower_topics.federation import client_app
from flower_topics.federation.client_app import Handler
from flower_topics.methods import BUILT_IN, METHODS


def test_every_built_in_handler_round_trips_through_the_standard_pickle():
    handlers = {key: handler for key, handler in client_app.app._registered_funcs.items()
                if not key.startswith("train.") or key.removeprefix("train.") in BUILT_IN}
    assert len(handlers) > len(BUILT_IN)
    for key, handler in handlers.items():
        copy = pickle.loads(pickle.dumps(handler))
        assert isinstance(copy, Handler), key
    for name in BUILT_IN:
        step = pickle.loads(pickle.dumps(client_app.app._registered_funcs[f"train.{name}"])).step
        assert step.func is client_app.local_round and step.args[0] is METHODS[name]  # the registry's own object


def test_a_built_in_spec_travels_as_its_name():
    for spec in (METHODS[name] for name in BUILT_IN):
        data = pickle.dumps(spec)
        assert pickle.loads(data) is spec
        assert spec.title.encode() not in data  # none of its parts: only the name to look up
