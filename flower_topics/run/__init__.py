"""The files of a run: its config, its checkpoint, its outputs, and what is made from them.

The run config is parsed and validated once (:mod:`~flower_topics.run.config`); the ServerApp
writes a checkpoint every round (:mod:`~flower_topics.run.checkpoint`) and the outputs at the
end (:mod:`~flower_topics.run.outputs`); ``flower-topics export`` and ``report`` read them
(:mod:`~flower_topics.run.exports`, :mod:`~flower_topics.run.report_page`).
"""
