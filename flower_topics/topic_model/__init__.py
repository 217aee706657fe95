"""A trained model: the model file (``model.npz``) and the topic mixtures of documents under it.

:class:`~flower_topics.topic_model.model_file.TopicModel` is what every method writes and every
scorer, export and report reads; :mod:`~flower_topics.topic_model.document_topics` folds in the
topic mixtures of documents under a model, on the party that holds them.
"""

from flower_topics.topic_model.model_file import TopicModel, load_model, save_model

__all__ = ["TopicModel", "load_model", "save_model"]
