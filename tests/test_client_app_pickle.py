"""The ClientApp pickles by reference.

Flower's simulation engine pickles the ClientApp with every message it hands a party's Ray actor, which
unpickles it. Its handlers are instances of a module-level class and a registered method's spec pickles as
its name, so the standard pickle (which cannot pickle a closure, a lambda or code) round-trips the whole
app, and what travels holds no function's code.
"""

from __future__ import annotations

import pickle

from flower_topics.federation import client_app
from flower_topics.federation.client_app import Handler
from flower_topics.methods import METHODS


def test_the_client_app_round_trips_through_the_standard_pickle():
    data = pickle.dumps(client_app.app)
    app = pickle.loads(data)
    assert set(app._registered_funcs) == set(client_app.app._registered_funcs)
    for name, handler in app._registered_funcs.items():
        assert isinstance(handler, Handler), name
    for spec in METHODS.values():
        step = app._registered_funcs[f"train.{spec.name}"].step
        assert step.func is client_app.local_round and step.args[0] is spec  # the registry's own object


def test_a_registered_spec_travels_as_its_name():
    for spec in METHODS.values():
        data = pickle.dumps(spec)
        assert pickle.loads(data) is spec
        assert spec.title.encode() not in data  # none of its parts: only the name to look up
