"""Shared test settings: the corpus cache of simulated shares lives in this session's temporary folder
(inherited by the processes tests start), never in the user's ``~/.cache``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from examples.expected_counts import SPEC as EXAMPLE_METHOD
from flower_topics.data.corpus_cache import CACHE_ENV
from flower_topics.methods import register_method
# A test that reads a file beside the repository (a corpus in a sibling folder) fails: tests read what it ships
from tests.read_guard import no_reads_beside_the_repository, pytest_configure, pytest_unconfigure  # noqa: F401

# The worked example of docs/adding-a-method.md, registered before any test module is collected: every test
# parametrized over the registry's methods runs it as it runs the built-in ones.
register_method(EXAMPLE_METHOD)


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


@pytest.fixture(scope="session")
def app_dir(tmp_path_factory) -> Path:
    """A copy of the Flower app (``pyproject.toml``, ``README.md`` and the package) to ``flwr run``.

    ``flwr run .`` walks every file under the app's folder (``os.walk`` and a path resolution each) before it
    filters them into the FAB: in a checkout with the README's ``.venv`` and ``runs/`` inside, 61,000 files and
    about 8 s of CPU for every run a test submits. The copy is made once per worker, from the working tree.
    """
    root = Path(__file__).resolve().parents[1]
    app = tmp_path_factory.mktemp("app")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(root / name, app / name)
    shutil.copytree(root / "flower_topics", app / "flower_topics", ignore=shutil.ignore_patterns("__pycache__"))
    return app


#: Test files that start real SuperLink/SuperNode processes on the deployment engine: the longest files of the
#: suite (4 to 8 minutes each). Under the README's test command (``pytest -n 2 --dist loadfile
#: --no-loadscope-reorder``: whole files to each worker, in collection order) they come first, so that they start
#: at once, one on each worker, and the other files fill in around them. (Until 2026-11-26 they were meant to share
#: one worker through ``--dist loadgroup``; with pytest 9.2 xdist 3.8's loadgroup silently stopped grouping,
#: pytest-dev/pytest-xdist#1386, and they had in fact run side by side, split test by test.)
DEPLOYMENT_FILES = ("test_deployment_faults.py", "test_deployment_tls.py")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """The deployment files' tests first (faults, then TLS); every other test keeps its place."""
    def rank(item) -> int:
        name = item.nodeid.split("::")[0].rsplit("/", 1)[-1]
        return DEPLOYMENT_FILES.index(name) if name in DEPLOYMENT_FILES else len(DEPLOYMENT_FILES)

    items.sort(key=rank)
