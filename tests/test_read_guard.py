"""Tests read only what the repository ships: the guard (tests/read_guard.py) fails a test that reads beside it,
and no test file names a folder beside the repository."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.read_guard import GUARD, ROOT, ReadGuard, default_guard

SIBLING = ROOT.parent / "shared"  # where the benchmark corpora live on the developers' machines


def test_the_guard_records_reads_beside_the_repository_only(tmp_path):
    guard = ReadGuard(tmp_path / "repo", tmp_path, [str(tmp_path / "venv")])
    for path in (tmp_path / "repo" / "tests" / "fixtures" / "docs.csv", tmp_path / "venv" / "lib" / "x.py",
                 tmp_path / ".cache" / "numba", 3, "/usr/lib/python3/os.py"):
        guard.check(path)
    assert guard.take() == []
    guard.check(tmp_path)  # the parent folder itself (a listing of it): no sibling's data
    guard.check(tmp_path / "corpora" / "corpus.jsonl")
    guard.check(os.fsencode(tmp_path / "repo-data"))  # a sibling whose name starts with the repository's
    assert guard.take() == [str(tmp_path / "corpora" / "corpus.jsonl"), str(tmp_path / "repo-data")]
    assert guard.take() == []


def test_a_checkout_below_a_temporary_folder_still_watches_its_siblings(tmp_path):
    """An allowed folder above the checkout's parent (a clone in ``/tmp/work/flower-topics``) does not allow the
    checkout's siblings; what it holds elsewhere stays allowed."""
    guard = ReadGuard(tmp_path / "work" / "repo", tmp_path / "work", [str(tmp_path)])
    guard.check(tmp_path / "pytest-of-someone" / "x.txt")
    guard.check(tmp_path / "work" / "repo" / "README.md")
    assert guard.take() == []
    guard.check(tmp_path / "work" / "corpora" / "corpus.jsonl")
    assert guard.take() == [str(tmp_path / "work" / "corpora" / "corpus.jsonl")]


def test_a_checkout_at_the_filesystem_root_allows_the_systems_folders():
    guard = default_guard(Path("/flower-topics"))
    for path in ("/usr/share/zoneinfo/UTC", "/etc/hosts", "/proc/self/status", "/flower-topics/README.md",
                 tempfile.gettempdir() + "/x"):
        guard.check(path)
    assert guard.take() == []
    guard.check("/data/BBC_News/corpus.tsv")
    assert guard.take() == ["/data/BBC_News/corpus.tsv"]


def test_this_process_records_a_read_of_the_sibling_folder():
    """The guard of this test session sees an ``open`` (even of a file that is not there) and a listing."""
    probe = SIBLING / "datasets" / "probe-of-the-read-guard.jsonl"
    with pytest.raises(OSError):
        open(probe, encoding="utf-8")  # noqa: SIM115
    with pytest.raises(OSError):
        os.listdir(SIBLING / "no-such-folder-of-the-read-guard")
    reads = GUARD.take()  # taken: this test does not fail
    assert reads == [str(probe), str(SIBLING / "no-such-folder-of-the-read-guard")]
    assert GUARD.described(reads).count("test_read_guard.py:") == 2  # each names the line that read it


def test_a_test_that_reads_beside_the_repository_fails(tmp_path):
    """A test session with the guard (as tests/conftest.py loads it): the test that opens a file in the sibling
    ``shared`` folder fails at its teardown, naming the path; the one reading a file the repository ships passes."""
    (tmp_path / "conftest.py").write_text("from tests.read_guard import *  # noqa: F403\n", encoding="utf-8")
    (tmp_path / "test_inner.py").write_text(
        "from pathlib import Path\n"
        f"ROOT = Path({str(ROOT)!r})\n"
        f"SIBLING_CORPUS = {str(SIBLING / 'datasets' / 'BBC_News' / 'corpus.tsv')!r}\n"
        "def test_reads_a_sibling_corpus():\n"
        "    try:\n"
        "        open(SIBLING_CORPUS).close()\n"
        "    except OSError:\n"
        "        pass\n"
        "def test_reads_a_shipped_fixture():\n"
        "    assert (ROOT / 'tests' / 'fixtures' / 'docs.jsonl').read_text()\n", encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           "test_inner.py"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out
    assert "2 passed, 1 error" in out, out  # the call passes; its teardown is the error
    assert "ERROR at teardown of test_reads_a_sibling_corpus" in out, out
    assert str(SIBLING / "datasets" / "BBC_News" / "corpus.tsv") in out, out


# names of a folder beside the checkout, as a test file could spell them
BESIDE = re.compile(r"\.\./shared|shared/+datasets|[\"']shared[\"']\s*/\s*[\"']datasets[\"']|parents\[2\]")


def test_no_test_file_names_a_folder_beside_the_repository():
    spelled = [f"{path.relative_to(ROOT)}:{n}" for path in sorted((ROOT / "tests").rglob("*.py"))
               for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1) if BESIDE.search(line)]
    assert spelled == []
    # each way of spelling it is caught (the examples are split so that this file does not spell them)
    for example in ("parents[" "2] / 'data'", "'../" "shared/x'", "'shared/" "datasets/M10'",
                    "'shared' / " "'datasets'", "ROOT.parent / \"shared\" / " "\"datasets\" / \"M10\""):
        assert BESIDE.search(example), example
