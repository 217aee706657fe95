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


#: Test files that start real SuperLink/SuperNode processes on the deployment engine. Under
#: ``pytest -n N --dist loadgroup`` (the README's test command) they share one worker, one
#: after the other, so that two deployments never compete for the CPU (their round timeouts
#: are set for one at a time); every other file is a group of its own, as with ``loadfile``.
SERIAL_DEPLOYMENT_FILES = frozenset({"test_deployment_tls.py", "test_deployment_faults.py"})


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Give each test its file as ``xdist_group``, the deployment files one group together."""
    for item in items:
        path = item.nodeid.split("::")[0]
        name = path.rsplit("/", 1)[-1]
        group = "deployment" if name in SERIAL_DEPLOYMENT_FILES else path
        item.add_marker(pytest.mark.xdist_group(group))
