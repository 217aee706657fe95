"""Flower strategies, one per method (the aggregation side): ``flower_topics.strategies.<method>``.

Each is a :class:`flwr.serverapp.strategy.Strategy` (a
:class:`~flower_topics.strategies.base.TopicStrategy`) and can be plugged into any ServerApp
that runs the package's ClientApp (see the README, "Plugging a strategy into your own
ServerApp")::

    from flower_topics.federation.vocabulary_agreement import agree_vocabulary
    from flower_topics.strategies.fedlda import FedLDA
    from flower_topics.wire.fedlda import FedLDASettings

    vocabulary = agree_vocabulary(grid, context.run_config).vocabulary
    strategy = FedLDA(vocabulary, FedLDASettings(n_topics=20, alpha=0.1), beta=0.01)
    result = strategy.start(grid, strategy.initial_arrays(), num_rounds=100)

The registry (:data:`flower_topics.methods.METHODS`) names each method's strategy class;
each lives in its method's own module, so that importing one strategy does not import
what another needs (PC-TD's accountant imports torch through opacus).
"""
