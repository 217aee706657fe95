"""A pytest plugin that fails a test which reads a file beside the repository instead of one it ships.

Tests read only what the repository ships (the embedded corpus, the synthetic generator, ``tests/fixtures``)
and what they write themselves. A read of a corpus from a folder beside the checkout (a sibling ``shared``
or ``data`` folder) passes on the machine that has it and fails on a fresh clone; this guard makes it fail everywhere.

An audit hook (``sys.addaudithook``) sees every ``open`` (``open``, ``io.open``, ``os.open``, imports) and every
folder listing (``os.listdir``, ``os.scandir``) in the test process. A path is recorded when it lies under the
repository's parent folder but outside the repository, and is none of: the Python installation and its
site-packages (a virtual environment beside the checkout), the temporary folder, a hidden entry of the parent
folder (``~/.cache``, ``~/.config`` of a checkout in the home folder), the parent folder itself (a listing or a
directory handle of it holds no sibling's data; libraries make them in a full run) or, where the parent is ``/``,
the system's own folders. A test with recorded reads (since the previous test's end: its module fixtures included) fails at
its teardown, naming them. Processes the tests start are not watched.
"""

from __future__ import annotations

import os
import site
import sys
import sysconfig
import tempfile
import traceback
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The system's folders, allowed where the repository's parent is the filesystem root.
SYSTEM = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/nix", "/opt", "/proc", "/root",
          "/run", "/sbin", "/snap", "/srv", "/sys", "/tmp", "/usr", "/var")
EVENTS = frozenset({"open", "os.listdir", "os.scandir"})


def _variants(path: str | os.PathLike[str]) -> set[str]:
    """``path`` as written (absolute) and with its links resolved."""
    absolute = os.path.abspath(path)
    return {absolute, os.path.realpath(absolute)}


class ReadGuard:
    """Records reads under ``watched`` outside ``root`` and outside every ``allowed`` folder."""

    def __init__(self, root: Path, watched: Path, allowed: list[str]):
        self.root = {p + os.sep for p in _variants(root)}
        self.watched = {p.rstrip(os.sep) + os.sep for p in _variants(watched)}
        # an allowed folder above the watched one (a checkout in a temporary folder's subfolder) would allow every
        # read beside the repository: it is allowed except below the watched folder
        self.allowed = tuple(sorted({p.rstrip(os.sep) + os.sep for a in allowed for p in _variants(a)}))
        self.above = tuple(a for a in self.allowed if any(w.startswith(a) and w != a for w in self.watched))
        self.reads: list[str] = []
        self.where: dict[str, str] = {}  # a recorded path: the code that read it (the innermost frames)
        self.active = False

    def check(self, path: object) -> None:
        """Record ``path`` if it is a read this guard forbids."""
        if isinstance(path, bytes):
            path = os.fsdecode(path)
        elif isinstance(path, os.PathLike):
            path = os.fspath(path)
        if not isinstance(path, str):  # a file descriptor
            return
        absolute = os.path.abspath(path)
        candidate = absolute + os.sep
        if candidate.startswith(tuple(self.root)):
            return
        if candidate.startswith(self.allowed) and not (candidate.startswith(self.above)
                                                       and candidate.startswith(tuple(self.watched))):
            return
        for watched in self.watched:
            below = candidate[len(watched):]
            if candidate.startswith(watched) and below and not below.startswith("."):  # a sibling's file or folder
                self.reads.append(absolute)
                if absolute not in self.where:
                    frames = traceback.extract_stack()[:-2][-4:]  # the guard's own frames (check, hook) left out
                    self.where[absolute] = " < ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}"
                                                      for f in reversed(frames))
                return

    def hook(self, event: str, args: tuple) -> None:
        if self.active and event in EVENTS and args:
            self.check(args[0])

    def take(self) -> list[str]:
        """The reads recorded since the last call (in order, each once), forgotten."""
        reads, self.reads = list(dict.fromkeys(self.reads)), []
        return reads

    def described(self, reads: list[str]) -> str:
        """``reads`` with the code that read each (forgotten here)."""
        return "; ".join(f"{path} (by {self.where.pop(path, '?')})" for path in reads)


def default_guard(root: Path = ROOT) -> ReadGuard:
    """The guard of a checkout at ``root``: its parent watched, the installation and temporary folders allowed."""
    allowed = [sys.prefix, sys.base_prefix, sys.exec_prefix, tempfile.gettempdir(), *site.getsitepackages()]
    allowed += [site.getusersitepackages(), *(p for p in sysconfig.get_paths().values())]
    if root.parent == Path(root.anchor):
        allowed += SYSTEM
    return ReadGuard(root, root.parent, allowed)


GUARD = default_guard()


_installed = False


def pytest_configure(config) -> None:
    global _installed
    if not _installed:  # an audit hook stays for the process' life
        sys.addaudithook(GUARD.hook)
        _installed = True
    GUARD.active = True


def pytest_unconfigure(config) -> None:
    GUARD.active = False


@pytest.fixture(autouse=True)
def no_reads_beside_the_repository():
    """Fail the test at teardown if it (or a fixture set up for it) read a file beside the repository."""
    yield
    reads = GUARD.take()
    if reads:
        pytest.fail(f"read {len(reads)} path(s) outside the repository {ROOT} (tests read only what it ships: "
                    f"the embedded corpus, the synthetic corpus, tests/fixtures): {GUARD.described(reads[:5])}",
                    pytrace=False)
