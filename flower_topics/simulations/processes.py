"""Flower's processes on this machine: free loopback ports, and stopping a process and everything it started by PID.

A SuperLink or SuperNode started here starts processes of its own (SuperExec, ``flwr-simulation``,
Ray's workers), some in sessions of their own; :func:`stop` stops the whole tree by PID, and
:func:`_sigterm_exits` turns a SIGTERM into ``SystemExit(143)`` while processes are held, so that
the clean-up runs.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it, parents before children (Linux ``/proc``; elsewhere ``[pid]``).

    Flower's SuperLink and SuperNodes start their SuperExec, ServerApp and ClientApp
    processes in sessions of their own, so a process group does not hold them all.
    """
    children: dict[int, list[int]] = {}
    if not Path("/proc").is_dir():  # not Linux: only the process itself is known
        return [pid]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, frontier = [pid], [pid]
    while frontier:
        below = [child for parent in frontier for child in children.get(parent, []) if child not in found]
        found += below
        frontier = below
    return found


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen, timeout: float) -> None:
    """Wait until something listens on ``127.0.0.1:port``; fail if ``process`` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args[0]} exited with status {process.returncode} before listening")
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listened on 127.0.0.1:{port} within {timeout:.0f} s")


def _started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot, ``/proc/<pid>/stat``), or None once it is gone or a
    zombie: with the PID it names one process, never a later one that reuses the number."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else int(fields[19])


def _still_running(processes: dict[int, int | None]) -> dict[int, int]:
    """Those of ``processes`` (PID: start time from :func:`_started`) that are still the same running processes."""
    return {pid: started for pid, started in processes.items() if started is not None and _started(pid) == started}


def stop(process: subprocess.Popen, grace: float = 10.0) -> None:
    """Stop ``process``, its process group and every process below it, by PID: SIGTERM, then SIGKILL after
    ``grace`` seconds.

    Flower's SuperLink and SuperNodes start their SuperExec, ServerApp (``flwr-simulation``, with Ray's
    processes below it) and ClientApp processes in sessions of their own: stopping the group alone left a run
    that was interrupted going on without its SuperLink. So the processes below ``process`` are listed first,
    and those still there once the group is gone are stopped as well.
    """
    if process.poll() is not None:
        return
    below = {pid: _started(pid) for pid in process_tree(process.pid)[1:]}
    try:
        os.killpg(process.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=grace)
    for signum in (signal.SIGTERM, signal.SIGKILL):
        below = _still_running(below)
        for pid in below:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while below and time.monotonic() < deadline:
            time.sleep(0.1)
            below = _still_running(below)
        if not below:
            return


@contextmanager
def _sigterm_exits() -> Iterator[None]:
    """While the block runs (in the main thread), SIGTERM raises ``SystemExit(143)`` instead of ending this
    process at once, so that the block's ``finally`` clauses stop the processes it started (the SIGTERM of a
    job scheduler or of ``timeout`` otherwise left a SuperLink and its whole run behind). Elsewhere, and for a
    caller that handles SIGTERM itself, nothing changes."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def exit_on_sigterm(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # once: a second SIGTERM does not cut the clean-up short
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, exit_on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
