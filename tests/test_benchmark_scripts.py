"""Every benchmark script the docs' figures come from is valid Python and answers ``--help``.

Benchmarks are commands, not tests, so nothing else runs them; a broken import in one would
otherwise surface only when someone reproduces a figure. ``--help`` needs only the ``test``
extra: a script that runs an optional library (tomotopy, the ``bench`` extra) imports it when it
runs.
"""

from __future__ import annotations

import py_compile
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if "__main__" in p.read_text(encoding="utf-8"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_benchmark_script_compiles(script):
    py_compile.compile(str(script), doraise=True)


def test_every_benchmark_script_answers_help():
    broken = []
    for script in SCRIPTS:
        done = subprocess.run([sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True, text=True,
                              timeout=120, check=False)
        if done.returncode != 0 or "usage:" not in done.stdout:
            broken.append(f"{script.name}: {(done.stderr.strip().splitlines() or ['no usage'])[-1]}")
    assert not broken, broken
