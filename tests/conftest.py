"""Shared test settings: the corpus cache of simulated shares lives in this session's temporary folder
(inherited by the processes tests start), never in the user's ``~/.cache``."""

from __future__ import annotations

import os

import pytest

from flower_topics.data.corpus_cache import CACHE_ENV


@pytest.fixture(autouse=True, scope="session")
def corpus_cache_in_session_tmp(tmp_path_factory):
    """Point ``FLOWER_TOPICS_CACHE_DIR`` at a session folder unless the caller set it."""
    if CACHE_ENV in os.environ:
        yield
        return
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("corpus-cache"))
    try:
        yield
    finally:
        os.environ.pop(CACHE_ENV, None)
