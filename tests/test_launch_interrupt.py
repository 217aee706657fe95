"""An interrupted ``flower-topics simulate`` on Flower's engine leaves no process behind.

Flower's SuperLink starts its SuperExec, the ServerApp's ``flwr-simulation`` and Ray's processes in
sessions of their own. Before, Ctrl-C (SIGINT) stopped the SuperLink but left the ServerApp and Ray's
eight processes running, and a SIGTERM (a job scheduler's, ``timeout``'s) left all eleven.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flower_topics.simulations import processes
from flower_topics.simulations.processes import _started, _still_running, process_tree

TINY = ["--dataset", "synthetic", "--set", "synthetic-nodes=2", "--set", "synthetic-topics=4",
        "--set", "synthetic-shared-topics=2", "--set", "synthetic-vocab-size=50", "--set", "synthetic-docs-per-node=25",
        "--set", "synthetic-doc-min-length=20", "--set", "synthetic-doc-max-length=30"]


def _command(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


@pytest.mark.timeout(300)
@pytest.mark.parametrize("signum, status", [pytest.param(signal.SIGINT, 130, id="SIGINT"),
                                           pytest.param(signal.SIGTERM, 143, id="SIGTERM")])
def test_an_interrupted_simulation_stops_every_process_it_started(tmp_path, signum, status):
    cli = str(Path(sys.executable).with_name("flower-topics"))
    process = subprocess.Popen([cli, "simulate", "--method", "lda", *TINY, "--clients", "2", "--topics", "4",
                                "--rounds", "5000", "--engine", "flower", "--out", str(tmp_path / "run")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "FLWR_HOME": str(tmp_path / "flwr-home")})
    below: dict[int, int | None] = {}
    try:
        deadline = time.monotonic() + 180
        while not any("ClientAppActor" in _command(pid) for pid in below):  # the parties are training
            assert process.poll() is None, process.stderr.read()
            assert time.monotonic() < deadline, "the run did not start within 180 s"
            time.sleep(0.5)
            below = {pid: _started(pid) for pid in process_tree(process.pid)[1:]}
        roles = " ".join(_command(pid) for pid in below)
        assert all(role in roles for role in ("flower-superlink", "flwr-simulation", "raylet"))
        process.send_signal(signum)
        assert process.wait(timeout=180) == status  # a loaded machine stops Ray slowly
        deadline = time.monotonic() + 30
        left = below
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = _still_running(left)
        assert not left, [_command(pid)[:80] for pid in left]
    finally:  # whatever the test found still running is stopped by its PID
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in _still_running(below):
            os.kill(pid, signal.SIGKILL)


def test_stop_works_without_proc(monkeypatch):
    """Where there is no /proc (macOS), the process tree is the process alone and stop() still stops it by PID."""
    monkeypatch.setattr(processes.Path, "is_dir", lambda self: False)
    assert process_tree(os.getpid()) == [os.getpid()]
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    processes.stop(child, grace=10)
    assert child.poll() is not None
