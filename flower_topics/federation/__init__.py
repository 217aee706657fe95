"""The federation: the ServerApp and ClientApp, and the stages they run between them.

:mod:`~flower_topics.federation.server_app` and :mod:`~flower_topics.federation.client_app`
are the two Flower apps (``pyproject.toml`` names them); the vocabulary agreement
(:mod:`~flower_topics.federation.vocabulary_agreement`) runs before round 1; a party keeps
its state on its own disk (:mod:`~flower_topics.federation.party_state`); its side of every request,
built from its node config and its own state, never from the message
(:mod:`~flower_topics.federation.party_side`); the grids that
collect replies as they arrive (:mod:`~flower_topics.federation.grids`); and what the
ServerApp prints (:mod:`~flower_topics.federation.console`).
"""
