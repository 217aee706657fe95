"""The ClientApp's per-message timings (``FLOWER_TOPICS_TIMINGS``): one JSON line a message, nothing unset."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from flower_topics.federation import message_timing

ROOT = Path(__file__).resolve().parents[1]

A_PROCESS_THAT_WAITS_THEN_ANSWERS = r"""
import time
time.sleep(0.6)  # the process's start, before its handler (as Python and Flower's runtime are)
from flower_topics.federation import message_timing
started = message_timing.begin()
with message_timing.stage("data"):
    time.sleep(0.2)
with message_timing.stage("compute"):
    sum(i * i for i in range(300_000))
with message_timing.stage("data"):
    time.sleep(0.1)
message_timing.record("lda", started)
"""


def test_a_line_counts_from_the_process_start_and_adds_up_each_stage(tmp_path):
    out = tmp_path / "timings.jsonl"
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", A_PROCESS_THAT_WAITS_THEN_ANSWERS], cwd=ROOT, timeout=120,
                              env={"PYTHONPATH": str(ROOT), message_timing.TIMINGS_ENV: str(out)},
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 2 and lines[0]["pid"] != lines[1]["pid"]  # appended, one line a process
    for line in lines:
        assert line["message"] == "lda"
        assert 0.3 <= line["stages"]["data"] < 0.3 + 2.0  # both data blocks, added
        assert line["stages"]["compute"] > 0
        assert line["handler"] >= line["stages"]["data"] + line["stages"]["compute"] - 1e-3
        assert line["before_handler"] >= 0.6 - 0.02  # /proc's start time has 10 ms ticks
        assert abs(line["since_start"] - line["before_handler"] - line["handler"]) < 0.02
        assert line["cpu"] > 0 and abs(line["time"] - time.time()) < 120


def test_nothing_is_written_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(message_timing.TIMINGS_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    started = message_timing.begin()
    with message_timing.stage("data"):
        pass
    message_timing.record("lda", started)
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_cannot_be_written_costs_no_reply(tmp_path, monkeypatch):
    monkeypatch.setenv(message_timing.TIMINGS_ENV, str(tmp_path / "no-such-folder" / "timings.jsonl"))
    message_timing.record("lda", message_timing.begin())  # no exception
