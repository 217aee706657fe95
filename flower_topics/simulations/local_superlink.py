"""Run ``flwr run .`` offline, on free loopback ports, and fail loudly when the run fails.

``flwr run`` needs a SuperLink, exits 0 even when the run failed, and by default
lets the SuperLink run ``uv sync`` against the internet. :func:`with_superlink`
(the ``flower-topics-superlink`` command, :mod:`flower_topics.cli.superlink`) takes care of all three: it starts its
own SuperLink (simulation engine) on a free port of 127.0.0.1 with its own
``FLWR_HOME`` and runtime dependency installation disabled, makes it the default
connection, runs the given ``flwr run .`` command, reads the run's final status with
``flwr ls``, and stops the SuperLink by its PID (:mod:`flower_topics.simulations.processes`). The same helpers start the
deployment engine (SuperLink + SuperNodes) in tests.

Before anything starts, the command's ``--run-config`` is read with Flower's own parser
and checked as the ServerApp would (:func:`check_run_config`), and for a simulation its
``dataset`` is read and partitioned as the parties will read it and its ``output-dir``
must not hold a run yet: an unknown key, a bad value, a corpus the parties cannot read or
an output directory in use is one line, ``flower-topics: error: ...``, and exit status 2
(Flower alone says ``[code: 15] Invalid run configuration.``, prints a traceback, or
fails inside the run, once per party). ``--connection NAME`` does the run-config check and
the final-status check for a run on an existing SuperLink (real hosts, docs/real-hosts.md)
and starts nothing.

A failed run's line names only what still works once the command is done: the log of a
run on the private SuperLink is saved before that SuperLink stops (``FLWR_HOME/logs/``),
and ``flwr log`` is suggested only for a run on an existing SuperLink.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

from flower_topics.errors import UserInputError
from flower_topics.simulations.processes import _sigterm_exits, free_port, stop, wait_for_port

CONNECTION = "flower-topics"
#: Flower's own start-up lines that ``flwr run --stream`` prints around a run (dropped unless verbose).
FLOWER_CHATTER = (
    "Using SuperLink:", "Successfully started run", "Starting logstream for run_id", "Starting Flower Simulation",
    "default simulated SuperNodes changed", "simulated SuperNodes)", "To change federation size",
    "flwr federation simulation-config", "Successfully installed ", "FutureWarning: Tip: In future versions of Ray",
    "warnings.warn(", "Manually terminating ClientAppActor",
)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_INFO_PREFIX = re.compile(r"^INFO\s*: {6}")
_RUN_STARTED = re.compile(r"Successfully started run (\d+)")
_ERROR_LINE = re.compile(r"flower-topics: error: (.+)")


def run_config_items(command: Sequence[str]) -> list[str]:
    """The ``--run-config`` / ``-c`` values of a ``flwr run`` command, in order."""
    items: list[str] = []
    for i, arg in enumerate(command):
        if arg in ("--run-config", "-c") and i + 1 < len(command):
            items.append(command[i + 1])
        elif arg.startswith("--run-config="):
            items.append(arg.split("=", 1)[1])
    return items


def check_run_config(command: Sequence[str], app_dir: str | Path = ".", *,
                     local_data: bool = True, num_partitions: int = 1) -> dict[str, Any]:
    """Validate the ``--run-config`` of a ``flwr run`` command as the ServerApp would, before submitting it.

    The values are read with Flower's own parser (``flwr.common.config.parse_config_args``,
    what ``flwr run`` uses), laid over the app's defaults (``[tool.flwr.app.config]`` of
    ``app_dir/pyproject.toml``, flattened as Flower does) and checked by
    :func:`~flower_topics.run.config.parse_run_config`. Flower's SuperLink refuses an unknown
    key with only ``[code: 15] Invalid run configuration.``, and a bad value fails inside
    the ServerApp after the run started; this names either in one line.

    Parameters
    ----------
    command : sequence of str
        The ``flwr run`` command line.
    app_dir : str or Path
        The Flower App's directory (its ``pyproject.toml`` holds the defaults).
    local_data : bool
        The run is a simulation on this machine, whose ServerApp and parties run in this working
        directory: its ``output-dir`` must not hold a run yet (unless it is the ``resume`` one,
        :func:`~flower_topics.run.outputs.check_output_dir`), and its ``dataset`` is read and
        partitioned as the parties will read it
        (:func:`~flower_topics.data.node_data.check_dataset`, which fills the corpus cache the
        parties then share), a ``vocabulary`` file is read as the ServerApp will read it, and the
        seed words and a ``dplda.public-corpus`` are checked against it or the corpus' words
        (:func:`~flower_topics.federation.preflight.check_public_inputs`). Off
        for a deployment, where each party names its own file and the ServerApp's machine holds
        the output directory and the vocabulary file.
    num_partitions : int
        ``local_data``: the number of simulated parties the dataset is shared among.

    Returns
    -------
    dict
        The validated run config, defaults filled in.

    Raises
    ------
    UserInputError
        For a malformed ``--run-config``, an unknown key, a bad value or (``local_data``)
        an output directory that holds a run, a dataset or a vocabulary file that is missing or
        cannot be read; the message is one line.
    """
    import click
    from flwr.common.config import flatten_dict, get_project_config, parse_config_args

    from flower_topics.data.node_data import check_dataset, simulated_share
    from flower_topics.federation.preflight import check_public_inputs
    from flower_topics.data.vocabulary_file import read_vocabulary_file
    from flower_topics.run.config import parse_run_config, parse_run_options
    from flower_topics.run.outputs import check_output_dir
    from flower_topics.wire.agreement import MODES

    items = run_config_items(command)
    try:
        overrides = parse_config_args(items) if items else {}
    except click.ClickException as exc:
        raise UserInputError(f"--run-config: {' '.join(exc.format_message().split())} (strings are quoted: "
                             "dataset='/srv/notes.jsonl')") from None
    except (ValueError, OSError) as exc:
        raise UserInputError(f"--run-config: {' '.join(str(exc).split())}") from None
    try:
        project = get_project_config(Path(app_dir))
        defaults = flatten_dict(project.get("tool", {}).get("flwr", {}).get("app", {}).get("config", {}))
    except Exception:  # no readable app here: `flwr run` reports that itself
        defaults = {}
    if local_data:
        options = parse_run_options({**defaults, **overrides})
        check_output_dir(str(options["output-dir"]), str(options["resume"]) or None)
        if str(options["vocabulary"]) not in MODES:
            read_vocabulary_file(str(options["vocabulary"]))
        check_dataset(options, num_partitions)
        check_public_inputs(options, simulated_share(options, 0, max(1, num_partitions)).corpus.vocabulary)
    return parse_run_config({**defaults, **overrides})  # last: calibrates the noise (dplda)


def stream(command: Sequence[str], cwd: Path, env: dict[str, str], verbose: bool,
           started: list[int] | None = None, errors: list[str] | None = None) -> int:
    """Run ``command``, printing its output line by line; unless ``verbose``, without Flower's chatter.

    The id of each run it submitted (``Successfully started run <id>``) is appended to ``started``, and the
    message of each ``flower-topics: error: ...`` line it printed (the ServerApp's one line) to ``errors``.
    """
    process = subprocess.Popen(list(command), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, bufsize=1)
    assert process.stdout is not None
    try:
        for line in process.stdout:
            submitted = _RUN_STARTED.search(_ANSI.sub("", line))
            if submitted and started is not None:
                started.append(int(submitted.group(1)))
            said = _ERROR_LINE.search(_ANSI.sub("", line))
            if said and errors is not None:
                errors.append(said.group(1).strip())
            if not verbose:
                line = _INFO_PREFIX.sub("", _ANSI.sub("", line))
                if any(marker in line for marker in FLOWER_CHATTER) or not line.strip():
                    continue
            print(line, end="", flush=True)
        return process.wait()
    finally:  # left early (interrupted): the command is stopped too, by its PID
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


#: glibc's malloc gives each allocation of at least this many bytes its own memory map, returned to the
#: system when it is freed. By default the threshold starts at 128 KiB and rises with every such block
#: freed, up to 32 MiB, after which a round's K x V count arrays and Flower's message buffers come from
#: the heap and stay resident. Fixed at 4 MiB for Flower's processes (and the Ray workers that serve the
#: simulated parties, which inherit it): large arrays are returned to the system when freed, while the
#: many small ones stay on the heap (at 128 KiB rounds spend much of their time mapping). Every array above
#: it is then a fresh map faulted in page by page, so hot paths reuse their large arrays (:mod:`flower_topics.numeric.work_arrays`).
MALLOC_MMAP_THRESHOLD = 4 * 1024 * 1024


def flwr_env(flwr_home: Path) -> dict[str, str]:
    """Environment for offline Flower processes that keep their state in ``flwr_home``.

    ``MALLOC_MMAP_THRESHOLD_`` (glibc) is set to :data:`MALLOC_MMAP_THRESHOLD` unless the caller's
    environment sets it.
    """
    env = dict(os.environ)
    env.setdefault("MALLOC_MMAP_THRESHOLD_", str(MALLOC_MMAP_THRESHOLD))
    # Flower's processes start each other by name (flower-superexec, flwr-serverapp, ...)
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
    env["FLWR_HOME"] = str(flwr_home)
    env["FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION"] = "1"
    env["FLWR_DISABLE_UPDATE_CHECK"] = "1"
    env["RAY_DISABLE_USAGE_STATS"] = "1"
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def _bin(name: str) -> str:
    """An executable of this Python environment (Flower's console scripts)."""
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


def write_connection(flwr_home: Path, address: str) -> None:
    """Write ``FLWR_HOME/config.toml`` with the connection :data:`CONNECTION` as default."""
    lines = ["[superlink]", f'default = "{CONNECTION}"', "", f"[superlink.{CONNECTION}]",
             f'address = "{address}"', "insecure = true"]
    flwr_home.mkdir(parents=True, exist_ok=True)
    (flwr_home / "config.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")


def set_num_supernodes(flwr_home: Path, num_supernodes: int) -> None:
    """Set the number of simulated SuperNodes of the connection's default federation."""
    subprocess.run(
        [_bin("flwr"), "federation", "simulation-config", "@none/default", CONNECTION,
         "--num-supernodes", str(num_supernodes)],
        env=flwr_env(flwr_home), check=True, capture_output=True, timeout=60,
    )


@contextmanager
def _listening(cmd: list[str], flwr_home: Path, port: int, log_path: Path) -> Iterator[subprocess.Popen]:
    """Start ``cmd`` in its own process group, wait until it listens on ``port``, stop it (and what it started)
    by PID, also when this process gets SIGTERM meanwhile (:func:`_sigterm_exits`)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with _sigterm_exits():
        with log_path.open("ab") as log:
            process = subprocess.Popen(cmd, env=flwr_env(flwr_home), stdout=log, stderr=subprocess.STDOUT,
                                       start_new_session=True)
        try:
            wait_for_port(port, process, timeout=60)
            yield process
        finally:
            stop(process)


@contextmanager
def superlink(flwr_home: Path, *, simulation: bool, log_path: Path) -> Iterator[int]:
    """Run a SuperLink on a free port of 127.0.0.1; yields the port; stops it by PID."""
    port = free_port()
    cmd = [_bin("flower-superlink"), "--insecure", "--host", "127.0.0.1", "--port", str(port),
           "--disable-runtime-dependency-installation"]
    if simulation:
        cmd.append("--simulation")
    with _listening(cmd, flwr_home, port, log_path):
        yield port


@contextmanager
def supernode(flwr_home: Path, superlink_port: int, node_config: str, *, log_path: Path) -> Iterator[int]:
    """Run a SuperNode connected to ``127.0.0.1:superlink_port``; yields its PID; stops it.

    Parameters
    ----------
    node_config : str
        The node's ``--node-config``, e.g. ``"partition-id=0 num-partitions=2"``.
    """
    port = free_port()
    cmd = [_bin("flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{superlink_port}",
           "--host", "127.0.0.1", "--port", str(port), "--node-config", node_config]
    with _listening(cmd, flwr_home, port, log_path) as process:
        yield process.pid


def wait_for_supernodes(app_dir: Path, flwr_home: Path, count: int, timeout: float = 120.0) -> None:
    """Wait until ``count`` SuperNodes are online on the connection :data:`CONNECTION` (``flwr supernode list``).

    Raises
    ------
    TimeoutError
        When fewer are online after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    online = 0
    while True:
        out = subprocess.run([_bin("flwr"), "supernode", "list", CONNECTION, "--format", "json"], cwd=app_dir,
                             env=flwr_env(flwr_home), capture_output=True, text=True, timeout=60)
        try:
            online = sum(str(node.get("status")) == "online" for node in json.loads(out.stdout)["nodes"])
        except (ValueError, KeyError, TypeError, AttributeError):
            online = 0
        if online >= count:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{online} of {count} SuperNodes online after {timeout:.0f} s (their logs: "
                               f"{flwr_home}/supernode-<i>.log)")
        time.sleep(POLL_FIRST)


def flwr_error(out: subprocess.CompletedProcess) -> str:
    """The error of a ``flwr ... --format json`` command, on one line (its ``error-message``, else its output)."""
    try:
        text = str(json.loads(out.stdout)["error-message"])
    except (ValueError, KeyError, TypeError):
        text = f"{out.stdout} {out.stderr}"
    return " ".join(text.split())


def run_status(app_dir: Path, flwr_home: Path, run_id: int, connection: str = CONNECTION) -> str:
    """The status of a run (e.g. ``finished:completed``) from ``flwr ls``, with its
    details appended after `` - `` when Flower gives any (the error of a failed run)."""
    out = subprocess.run(
        [_bin("flwr"), "ls", connection, "--run-id", str(run_id), "--format", "json"],
        cwd=app_dir, env=flwr_env(flwr_home), capture_output=True, text=True, timeout=60,
    )
    try:
        run = json.loads(out.stdout)["runs"][0]
    except (ValueError, KeyError, IndexError):
        raise RuntimeError(f"cannot read the status of run {run_id}: {flwr_error(out)}") from None
    details = str(run.get("status-details", "N/A"))
    return str(run["status"]) + ("" if details in ("", "N/A") else f" - {details}")


def submit(app_dir: Path, flwr_home: Path, run_config: Sequence[str]) -> int:
    """``flwr run . <connection>``; returns the run id."""
    cmd = [_bin("flwr"), "run", ".", CONNECTION, "--format", "json"]
    for item in run_config:
        cmd += ["--run-config", item]
    out = subprocess.run(cmd, cwd=app_dir, env=flwr_env(flwr_home), capture_output=True, text=True, timeout=300)
    try:
        return int(json.loads(out.stdout)["run-id"])
    except (ValueError, KeyError):
        raise RuntimeError(f"flwr run failed: {out.stdout}{out.stderr}") from None


#: Seconds between two status reads of :func:`wait_for_run`: the first, and the most it grows to (by half each time).
POLL_FIRST, POLL_MOST = 1.0, 5.0


def wait_for_run(app_dir: Path, flwr_home: Path, run_id: int, timeout: float, connection: str = CONNECTION) -> str:
    """Wait until run ``run_id`` has finished; returns its final status.

    Each read is a ``flwr ls`` process (it starts Python and imports Flower's CLI), so the pause between reads
    grows from :data:`POLL_FIRST` to :data:`POLL_MOST` seconds: reading every second would take CPU from the
    run it waits for.
    """
    deadline = time.monotonic() + timeout
    pause = POLL_FIRST
    while True:
        status = run_status(app_dir, flwr_home, run_id, connection)
        if status.startswith("finished"):
            return status
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"run {run_id} did not finish within {timeout:.0f} s")
        time.sleep(min(pause, left))
        pause = min(POLL_MOST, pause * 1.5)


def latest_run(app_dir: Path, flwr_home: Path, connection: str = CONNECTION) -> tuple[int, str] | None:
    """``(run_id, status)`` of the newest run on the connection, or None."""
    out = subprocess.run([_bin("flwr"), "ls", connection, "--format", "json"], cwd=app_dir,
                         env=flwr_env(flwr_home), capture_output=True, text=True, timeout=60)
    try:
        runs = json.loads(out.stdout)["runs"]
    except (ValueError, KeyError):
        raise RuntimeError(f"cannot list the runs of connection {connection!r}: {flwr_error(out)}") from None
    if not runs:
        return None
    newest = max(runs, key=lambda r: int(r["run-id"]))
    return int(newest["run-id"]), str(newest["status"])


def with_superlink(command: Sequence[str], *, num_supernodes: int = 5, app_dir: str | Path = ".",
                   timeout: float = 3600.0, verbose: bool = False, flwr_home: Path | None = None,
                   connection: str | None = None, run_log: Path | None = None, data_checked: bool = False,
                   node_configs: Sequence[str] | None = None) -> int:
    """Run ``command`` (e.g. ``flwr run . --stream``) and exit non-zero unless its run completed.

    Before anything starts, the command's ``--run-config`` is checked
    (:func:`check_run_config`): a bad one is one line, ``flower-topics: error: ...``, and
    status 2. Then, by default, a SuperLink (simulation engine) is started on a free port
    of 127.0.0.1 with ``FLWR_HOME`` = ``$FLWR_HOME`` or ``<app_dir>/.flwr-home`` and runtime
    dependency installation off, and made the default connection; ``command`` runs with
    that environment, the run it submitted is awaited, and the SuperLink is stopped by PID.
    With ``connection`` (real hosts) nothing is started: the command runs against that
    existing ``flwr`` connection (``$FLWR_HOME``, default ``~/.flwr``) and the run's
    final status is read from it. Either way the result is non-zero unless the run's final
    status is ``finished:completed`` (``flwr run`` itself exits 0 even when the run failed).

    Parameters
    ----------
    command : sequence of str
        The command to run, typically ``["flwr", "run", ".", "--stream"]``
        (with ``connection``: ``["flwr", "run", ".", connection, ...]``).
    num_supernodes : int
        Simulated SuperNodes (= partitions); not used with ``connection``.
    app_dir : str or Path
        Working directory of the command (the Flower App).
    timeout : float
        Seconds to wait for the run to finish after the command returned.
    verbose : bool
        Print all of the command's output (by default Flower's start-up chatter is dropped,
        see :data:`FLOWER_CHATTER`).
    flwr_home : Path, optional
        Flower's home (default: ``$FLWR_HOME``, else ``<app_dir>/.flwr-home`` for the private
        SuperLink and ``~/.flwr`` with ``connection``).
    connection : str, optional
        An existing SuperLink connection of ``FLWR_HOME/config.toml`` (a deployment): start
        nothing, and do not check the run config's ``dataset`` here (each party names its own).
    run_log : Path, optional
        Private SuperLink: where the log of a failed run is kept (default
        ``FLWR_HOME/logs/run-<id>.log``); it is fetched with ``flwr log`` before the SuperLink
        stops, and the failure line names it (``flwr log`` cannot reach a SuperLink that has
        stopped). A caller whose ``flwr_home`` is temporary gives it: the SuperLink's own log
        is then copied beside it (``flower-superlink.log``) when the SuperLink fails.
    data_checked : bool, default False
        The caller has already checked the output directory and read the corpus into its shares
        (``flower-topics simulate``): the run config's keys are still checked, the data not again.
    node_configs : sequence of str, optional
        Each party's ``--node-config`` (e.g. ``"partition-id=0 num-partitions=2 lifetime-epsilon=8"``): Flower's
        simulation engine gives its parties no node config of their own, so the private SuperLink is then a
        deployment one, with one SuperNode per entry (:func:`supernode`, logs ``FLWR_HOME/supernode-<i>.log``),
        and ``num_supernodes`` is not used.

    Returns
    -------
    int
        0 when the run completed, else 1 (or the command's own non-zero status); 2, before
        anything is started, when the command's ``--run-config`` is invalid.
    """
    app_dir = Path(app_dir).resolve()
    try:
        check_run_config(command, app_dir, local_data=connection is None and not data_checked,
                         num_partitions=len(node_configs) if node_configs else federation_size(command, num_supernodes))
    except UserInputError as exc:
        print(f"flower-topics: error: {exc}", file=sys.stderr)
        return 2
    verbose = verbose or bool(re.search(r"(^|\s)verbose=true\b", " ".join(command)))
    if connection is not None:
        if connection not in command:
            print(f"flower-topics: error: name the connection in the command too, e.g. flwr run . {connection} "
                  "--run-config ...", file=sys.stderr)
            return 2
        home = Path(flwr_home or os.environ.get("FLWR_HOME") or Path.home() / ".flwr").expanduser().resolve()
        try:
            return _run_and_check(command, app_dir, home, connection, timeout, verbose)
        except (RuntimeError, TimeoutError) as exc:
            print(f"flower-topics: error: {exc}", file=sys.stderr)
            return 1
    home = Path(flwr_home or os.environ.get("FLWR_HOME") or app_dir / ".flwr-home").resolve()
    log_path = home / "superlink.log"
    try:
        with superlink(home, simulation=not node_configs, log_path=log_path) as port, ExitStack() as nodes:
            write_connection(home, f"127.0.0.1:{port}")
            for i, node_config in enumerate(node_configs or ()):
                nodes.enter_context(supernode(home, port, node_config, log_path=home / f"supernode-{i}.log"))
            if node_configs:  # every party online before the run starts: it takes part from the first stage
                wait_for_supernodes(app_dir, home, len(node_configs))
            run_command = list(command) if node_configs else with_num_supernodes(command, num_supernodes)
            if run_command is None:  # not a flwr run command: the SuperLink's own federation config says it
                set_num_supernodes(home, num_supernodes)
                run_command = list(command)
            command = run_command
            if verbose:
                print(f"flower-topics: SuperLink on 127.0.0.1:{port} (FLWR_HOME={home}); running: "
                      f"{' '.join(command)}", flush=True)
            return _run_and_check(command, app_dir, home, CONNECTION, timeout, verbose, fresh=True, run_log=run_log)
    except (RuntimeError, TimeoutError, subprocess.SubprocessError) as exc:  # e.g. the SuperLink did not start
        print(f"flower-topics: error: {' '.join(str(exc).split())} (the SuperLink's log: "
              f"{_keep_superlink_log(log_path, run_log)})", file=sys.stderr)
        return 1


def _keep_superlink_log(log_path: Path, run_log: Path | None) -> Path:
    """Where the SuperLink's log can be read after the command: ``log_path``, or with ``run_log`` (a caller whose
    FLWR_HOME is temporary) a copy beside it, ``flower-superlink.log``."""
    if run_log is None or not log_path.is_file():
        return log_path
    kept = Path(run_log).expanduser().resolve().with_name("flower-superlink.log")
    try:
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log_path, kept)
    except OSError:
        return log_path
    return kept


def federation_size(command: Sequence[str], num_supernodes: int) -> int:
    """The number of simulated SuperNodes a ``flwr run`` command asks for: its own
    ``--federation-config num-supernodes=N`` when it gives one, else ``num_supernodes``."""
    given = [value for flag, value in zip(command, command[1:]) if flag == "--federation-config"]
    given += [item.split("=", 1)[1] for item in command if item.startswith("--federation-config=")]
    for value in given:
        found = re.search(r"(?:^|\s)num-supernodes\s*=\s*(\d+)", value)
        if found:
            return int(found.group(1))
    return num_supernodes


def with_num_supernodes(command: Sequence[str], num_supernodes: int) -> list[str] | None:
    """A ``flwr run`` command with ``--federation-config num-supernodes=N`` added (unless one of its own
    ``--federation-config`` values sets it), or None for a command that is not ``flwr run``.

    Saves the ``flwr federation simulation-config`` process that sets it on the SuperLink otherwise.
    """
    if len(command) < 2 or Path(command[0]).name != "flwr" or command[1] != "run":
        return None
    given = [value for flag, value in zip(command, command[1:]) if flag == "--federation-config"]
    given += [item.split("=", 1)[1] for item in command if item.startswith("--federation-config=")]
    if any(re.search(r"(^|\s)num-supernodes\s*=", value) for value in given):
        return list(command)
    return [*command, "--federation-config", f"num-supernodes={num_supernodes}"]


def _run_and_check(command: Sequence[str], app_dir: Path, home: Path, connection: str, timeout: float,
                   verbose: bool, *, fresh: bool = False, run_log: Path | None = None) -> int:
    """Run ``command``, find the run it submitted, wait for its final status; 0 only if it completed.

    ``fresh``: the connection is a private SuperLink started for this command, which holds no run yet (no
    ``flwr ls`` before it) and stops when the command is done: the log of a failed run is then saved to
    ``run_log`` (see :func:`with_superlink`) while it still can be, and the failure line names that file.
    """
    before = None if fresh else latest_run(app_dir, home, connection)
    started: list[int] = []
    said: list[str] = []
    code = stream(command, app_dir, flwr_env(home), verbose, started, errors=said)
    if code != 0:
        return code
    if started:
        run_id = started[-1]
    else:  # e.g. --format json: the newest run, if the command added one
        newest = latest_run(app_dir, home, connection)
        if newest is None or newest == before:
            print("flower-topics: the command submitted no run", file=sys.stderr)
            return 1
        run_id = newest[0]
    status = wait_for_run(app_dir, home, run_id, timeout, connection)
    if not status.startswith("finished:completed"):
        if fresh:
            kept = save_run_log(app_dir, home, run_id, run_log or home / "logs" / f"run-{run_id}.log", connection)
            where = (f"its full log is kept in {kept}" if kept is not None else
                     "rerun with --verbose to see Flower's own lines too")
        else:  # an existing SuperLink, still up: Flower's own command reaches it
            where = f"also: flwr log {run_id} {connection} --show"
        state, _, details = status.partition(" - ")
        if details and any(message in details for message in said):  # the ServerApp's line said it: not twice
            print(f"flower-topics: run {run_id} FAILED ({state}): the error above ({where})", file=sys.stderr)
        else:
            print(f"flower-topics: run {run_id} FAILED ({status}); the log above says why ({where})", file=sys.stderr)
        return 1
    if verbose or connection != CONNECTION:
        print(f"flower-topics: run {run_id} finished:completed", flush=True)
    return 0


def save_run_log(app_dir: Path, flwr_home: Path, run_id: int, path: Path, connection: str = CONNECTION
                 ) -> Path | None:
    """Write the log of run ``run_id`` (``flwr log <id> <connection> --show``, colour codes removed) to ``path``.

    For a private SuperLink, before it stops: afterwards no command can read the log. Returns ``path``, or None
    when the log could not be read or written (the caller then names no file).
    """
    try:
        out = subprocess.run([_bin("flwr"), "log", str(run_id), connection, "--show"], cwd=app_dir,
                             env=flwr_env(flwr_home), capture_output=True, text=True, timeout=60)
        text = _ANSI.sub("", out.stdout)
        if out.returncode != 0 or not text.strip():
            return None
        path = Path(path).expanduser().resolve()
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    except (OSError, subprocess.SubprocessError):
        return None
    return path
