"""The command line: ``flower-topics`` (:mod:`~flower_topics.cli.main`, with the model commands of
:mod:`~flower_topics.cli.model_commands`) and ``flower-topics-superlink`` (:mod:`~flower_topics.cli.superlink`)."""
