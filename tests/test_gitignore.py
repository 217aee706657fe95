"""What the documented commands write, run from the repository root, is ignored by git.

The README's and docs' commands are read for the paths they write (``--out PATH``,
``output-dir='$PWD/PATH'``, ``mkdir -p DIR``, ``--database PATH``) and each relative
one, with the files the launcher and the report write on their own (the private SuperLink's
``.flwr-home/``, a failed run's saved log, ``report.html``), must be ignored: a user who
follows the docs from a checkout leaves ``git status`` clean.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: A path a documented command writes, relative to where it runs.
WRITTEN = re.compile(r"(?:--out|--database|mkdir -p)\s+(?:\"|')?([^\s`\"')\]]+)|output-dir='(?:\$PWD/)?([^']+)'")
#: Files the commands write besides the paths they are given (private SuperLink's home, a failed run's saved
#: log, the report page).
IMPLIED = (".flwr-home/config.toml", ".flwr-home/logs/run-1.log", "runs/quickstart/flower-run.log",
           "runs/bbc/report.html", "report.html")


def documented_outputs() -> list[str]:
    """The relative paths the documented commands write (placeholders, absolute and ``..`` paths left out)."""
    found = set()
    for doc in DOCS:
        for match in WRITTEN.finditer(doc.read_text(encoding="utf-8")):
            path = (match.group(1) or match.group(2)).rstrip(".,;:")
            if not path or path.startswith(("/", "~", "..", "$", "<", "-")) or re.fullmatch(r"[A-Z_0-9]+", path):
                continue
            found.add(path)
    return sorted(found)


def test_the_docs_name_outputs_to_check():
    outputs = documented_outputs()
    assert {"theta.csv", "export/gensim", "runs/quickstart", "certs", "keys"} <= set(outputs), outputs


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_every_documented_output_is_ignored_by_git():
    paths = [*documented_outputs(), *IMPLIED]
    # a path that does not exist yet may be a file (theta.csv) or a folder (certs): either it or a file in it
    asked = [name for path in paths for name in (path, f"{path}/file")]
    out = subprocess.run(["git", "check-ignore", "--no-index", "--stdin", "-z", "-v", "-n"], cwd=ROOT,
                         input="\0".join(asked) + "\0", capture_output=True, text=True, timeout=60)
    fields = out.stdout.split("\0")
    ignored = {fields[i + 3] for i in range(0, len(fields) - 3, 4) if fields[i]}
    not_ignored = [path for path in paths if path not in ignored and f"{path}/file" not in ignored]
    assert not_ignored == [], f"add to .gitignore: {not_ignored}"
