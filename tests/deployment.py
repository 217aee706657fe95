"""A TLS + SuperNode-authentication deployment of Flower 1.41 on 127.0.0.1, for tests.

What Flower 1.41 expects (read from its source, ``flwr/superlink/cli/flower_superlink.py``,
``flwr/supernode/cli/flower_supernode.py``, ``flwr/cli/supernode/register.py``):

- the SuperLink serves its Fleet, Control and Runtime APIs over HTTPS on ONE port
  (``--host``/``--port``) when given ``--ssl-ca-certfile --ssl-certfile --ssl-keyfile``
  (PEM files; all three are required, and ``--insecure`` must be absent);
  ``--enable-supernode-auth`` refuses to start without TLS;
- with ``--enable-supernode-auth`` a SuperNode may not register itself: its public key is
  registered beforehand with ``flwr supernode register <public key> <connection>``
  (the Control API, so through the ``flwr`` connection of the SuperLink's operator);
- a SuperNode's key pair is an elliptic-curve key on a NIST curve (P-384 in Flower's
  docs) in OpenSSH format: the private key (``load_ssh_private_key``, unencrypted) goes to
  ``flower-supernode --auth-supernode-private-key``, the public key
  (``load_ssh_public_key``, the ``ecdsa-sha2-nistp384 AAAA...`` line) to
  ``flwr supernode register``; ``ssh-keygen -t ecdsa -b 384 -N "" -f node`` makes such a pair;
- SuperNodes verify the SuperLink's certificate with ``--root-certificates <ca.crt>``;
  the ``flwr`` CLI with ``root-certificates = "<absolute path>"`` in its
  ``[superlink.<name>]`` connection entry (``FLWR_HOME/config.toml``);
- a SuperNode whose key is not registered exits with status 1 after logging
  ``Failed to initialize the connection to the SuperLink``.

Every process listens on 127.0.0.1 only, runs in its own process group, logs to a file
and is stopped by its PID (:func:`flower_topics.simulations.processes.stop`).
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import json
import subprocess
import sys
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from flower_topics.simulations.processes import free_port, process_tree, stop, wait_for_port
from flower_topics.simulations.local_superlink import CONNECTION, flwr_env, run_status, wait_for_run
from flower_topics.run.outputs import STATE_FILE

HOST = "127.0.0.1"


def _bin(name: str) -> str:
    """A console script of this Python environment (flwr, flower-superlink, ...)."""
    candidate = Path(sys.executable).with_name(name)
    return str(candidate) if candidate.exists() else name


# ---------------------------------------------------------------------------------------
# certificates and keys
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Certificates:
    """The SuperLink's TLS files (PEM)."""

    ca: Path  #: the CA certificate: --ssl-ca-certfile, --root-certificates, root-certificates
    cert: Path  #: the server certificate: --ssl-certfile
    key: Path  #: the server's private key: --ssl-keyfile


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> None:
    path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
    path.chmod(0o600)


def make_certificates(directory: Path, hosts: tuple[str, ...] = (HOST, "localhost"),
                      days: int = 2) -> Certificates:
    """A throw-away CA and a server certificate signed by it for ``hosts`` (IPs or names)."""
    directory.mkdir(parents=True, exist_ok=True)
    now = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=5)
    until = now + dt.timedelta(days=days)

    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "flower-topics test CA")])
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    ca_cert = (
        x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
        .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                     data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                     crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
        .add_extension(ca_ski, critical=False)
        .sign(ca_key, hashes.SHA384())
    )

    key = ec.generate_private_key(ec.SECP384R1())
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
        .not_valid_before(now).not_valid_after(until)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.SubjectAlternativeName(names), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA384())
    )

    certs = Certificates(ca=directory / "ca.crt", cert=directory / "server.pem", key=directory / "server.key")
    certs.ca.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    certs.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(key, certs.key)
    return certs


@dataclass(frozen=True)
class NodeKeys:
    """A SuperNode's authentication key pair (OpenSSH format, ECDSA P-384)."""

    private: Path  #: flower-supernode --auth-supernode-private-key
    public: Path  #: flwr supernode register <public>


def make_node_keys(directory: Path, name: str) -> NodeKeys:
    """What ``ssh-keygen -t ecdsa -b 384 -N "" -f <directory>/<name>`` makes."""
    directory.mkdir(parents=True, exist_ok=True)
    key = ec.generate_private_key(ec.SECP384R1())
    keys = NodeKeys(private=directory / name, public=directory / f"{name}.pub")
    keys.private.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                               serialization.NoEncryption()))
    keys.private.chmod(0o600)
    keys.public.write_bytes(key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                          serialization.PublicFormat.OpenSSH) + b"\n")
    return keys


# ---------------------------------------------------------------------------------------
# the flwr connection and SuperNode registration
# ---------------------------------------------------------------------------------------
def write_tls_connection(flwr_home: Path, address: str, root_certificates: Path) -> Path:
    """``FLWR_HOME/config.toml`` with the TLS connection :data:`CONNECTION` as default.

    Flower 1.41 wants ``root-certificates`` as an absolute path; ``insecure`` is left out
    (it defaults to false).
    """
    flwr_home.mkdir(parents=True, exist_ok=True)
    path = flwr_home / "config.toml"
    path.write_text(
        "[superlink]\n"
        f'default = "{CONNECTION}"\n\n'
        f"[superlink.{CONNECTION}]\n"
        f'address = "{address}"\n'
        f'root-certificates = "{Path(root_certificates).resolve()}"\n',
        encoding="utf-8",
    )
    return path


def register_supernode(flwr_home: Path, public_key: Path, cwd: Path, name: str | None = None) -> int:
    """``flwr supernode register <public_key> <connection>``; returns the node id."""
    cmd = [_bin("flwr"), "supernode", "register", str(public_key), CONNECTION, "--format", "json"]
    if name:
        cmd += ["--name", name]
    out = subprocess.run(cmd, cwd=cwd, env=flwr_env(flwr_home), capture_output=True, text=True, timeout=60)
    try:
        return int(json.loads(out.stdout)["node-id"])
    except (ValueError, KeyError, TypeError):
        raise RuntimeError(f"flwr supernode register failed ({out.returncode}): {out.stdout}{out.stderr}") from None


def list_supernodes(flwr_home: Path, cwd: Path) -> list[dict]:
    """``flwr supernode list <connection> --format json``: the SuperLink's SuperNodes."""
    out = subprocess.run([_bin("flwr"), "supernode", "list", CONNECTION, "--format", "json"], cwd=cwd,
                         env=flwr_env(flwr_home), capture_output=True, text=True, timeout=60)
    try:
        return list(json.loads(out.stdout)["nodes"])
    except (ValueError, KeyError, TypeError):
        raise RuntimeError(f"flwr supernode list failed ({out.returncode}): {out.stdout}{out.stderr}") from None


# ---------------------------------------------------------------------------------------
# processes
# ---------------------------------------------------------------------------------------
def _start(cmd: list[str], flwr_home: Path, log_path: Path) -> subprocess.Popen:
    """Start ``cmd`` in its own process group with its output in ``log_path``."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as log:
        return subprocess.Popen(cmd, env=flwr_env(flwr_home), stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True)


@contextmanager
def tls_superlink(flwr_home: Path, certs: Certificates, *, log_path: Path, auth: bool = True,
                  startup_timeout: float = 60.0) -> Iterator[tuple[int, subprocess.Popen]]:
    """A SuperLink (deployment engine) with TLS (and SuperNode authentication) on a free
    port of 127.0.0.1; yields ``(port, process)``; stops it by PID."""
    port = free_port()
    cmd = [_bin("flower-superlink"), "--ssl-ca-certfile", str(certs.ca), "--ssl-certfile", str(certs.cert),
           "--ssl-keyfile", str(certs.key), "--host", HOST, "--port", str(port),
           "--disable-runtime-dependency-installation"]
    if auth:
        cmd.append("--enable-supernode-auth")
    process = _start(cmd, flwr_home, log_path)
    try:
        wait_for_port(port, process, timeout=startup_timeout)
        yield port, process
    finally:
        stop(process)


@contextmanager
def tls_supernode(flwr_home: Path, superlink_port: int, certs: Certificates, keys: NodeKeys | None,
                  node_config: str, *, log_path: Path, wait: bool = True,
                  max_wait_time: float | None = None) -> Iterator[subprocess.Popen]:
    """A SuperNode connected over TLS to ``127.0.0.1:superlink_port``, authenticated with
    ``keys`` (None: no key, Flower then generates one and tries to register itself);
    yields its process; stops it by PID.

    With ``wait`` it waits until its Runtime API (a free port of 127.0.0.1) listens,
    which it opens before connecting to the SuperLink.
    """
    port = free_port()
    cmd = [_bin("flower-supernode"), "--superlink", f"{HOST}:{superlink_port}",
           "--root-certificates", str(certs.ca), "--host", HOST, "--port", str(port),
           "--node-config", node_config]
    if keys is not None:
        cmd += ["--auth-supernode-private-key", str(keys.private)]
    if max_wait_time is not None:
        cmd += ["--max-wait-time", str(max_wait_time)]
    process = _start(cmd, flwr_home, log_path)
    try:
        if wait:
            wait_for_port(port, process, timeout=60)
        yield process
    finally:
        stop(process)


def wait_for_exit(process: subprocess.Popen, timeout: float) -> int | None:
    """The exit status of ``process`` once it exited, or None if it still runs after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return process.returncode
        time.sleep(0.2)
    return None


def wait_for_log(log_path: Path, text: str, timeout: float) -> bool:
    """Whether ``text`` appears in ``log_path`` within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log_path.exists() and text in log_path.read_text(errors="replace"):
            return True
        time.sleep(0.3)
    return False


def descendants(pid: int) -> list[int]:
    """PIDs of the processes below ``pid``, e.g. Flower's SuperExec, which the SuperLink and
    SuperNodes start in a session of its own."""
    return process_tree(pid)[1:]


def alive(pid: int) -> bool:
    """Whether ``pid`` is a running process (a zombie counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def run_log(flwr_home: Path, run_id: int, cwd: Path) -> str:
    """``flwr log <run_id> <connection> --show``: the run's ServerApp log (its traceback on failure)."""
    out = subprocess.run([_bin("flwr"), "log", str(run_id), CONNECTION, "--show"], cwd=cwd,
                         env=flwr_env(flwr_home), capture_output=True, text=True, timeout=60)
    return out.stdout + out.stderr


# ---------------------------------------------------------------------------------------
# SuperNodes a fault test kills and restarts, and fault injection
# ---------------------------------------------------------------------------------------
def start_supernode(flwr_home: Path, superlink_port: int, node_config: str, *, log_path: Path,
                    certs: Certificates | None = None, keys: NodeKeys | None = None,
                    startup_timeout: float = 60.0) -> subprocess.Popen:
    """Start a SuperNode connected to ``127.0.0.1:superlink_port`` (over TLS with ``certs``,
    authenticated with ``keys``; without ``certs``, insecure) in its own process group (no
    context manager: a fault test kills and restarts it); returns once its Runtime API (a
    free port of 127.0.0.1) listens. The caller stops it with
    :func:`flower_topics.simulations.processes.stop` (or :func:`kill_tree`)."""
    port = free_port()
    cmd = [_bin("flower-supernode"), "--superlink", f"{HOST}:{superlink_port}",
           "--host", HOST, "--port", str(port), "--node-config", node_config]
    cmd += ["--insecure"] if certs is None else ["--root-certificates", str(certs.ca)]
    if keys is not None:
        cmd += ["--auth-supernode-private-key", str(keys.private)]
    process = _start(cmd, flwr_home, log_path)
    try:
        wait_for_port(port, process, timeout=startup_timeout)
    except BaseException:
        stop(process)
        raise
    return process


def signal_tree(process: subprocess.Popen, sig: int) -> list[int]:
    """Send ``sig`` to the process group of ``process`` and to every process below it
    (Flower's SuperExec and ClientApp processes run in sessions of their own); returns the
    PIDs signalled besides the group."""
    import os

    below = descendants(process.pid)
    try:
        os.killpg(process.pid, sig)
    except ProcessLookupError:
        pass
    for pid in below:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    return below


def kill_tree(process: subprocess.Popen) -> None:
    """SIGKILL ``process``'s group and everything below it, and reap it (a crash of the host)."""
    import signal

    signal_tree(process, signal.SIGKILL)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def online_nodes(flwr_home: Path, cwd: Path) -> set[int]:
    """Ids of the SuperNodes the SuperLink reports online (``flwr supernode list``)."""
    return {int(n["node-id"]) for n in list_supernodes(flwr_home, cwd) if n.get("status") == "online"}


def wait_for_outputs(app_dir: Path, flwr_home: Path, run_id: int, out: Path,
                     processes: Sequence[subprocess.Popen], timeout: float) -> str:
    """The final status of run ``run_id``, after waiting for its outputs rather than asking Flower.

    ``flwr ls`` is a Python process of its own (about 2 s of CPU): read every second for minutes, it took a
    good part of a core from the run on a 2-core machine (64 reads, 122 s of CPU, in the TLS test). The run's
    ``out/state.npz`` (:data:`flower_topics.run.outputs.STATE_FILE`), written with its final outputs, is watched instead, the status read every 20 s until it
    is there (or the run ended without it), then with :func:`wait_for_run`. Fails at once when one of
    ``processes`` (the SuperLink, the SuperNodes) has exited.
    """
    deadline = time.monotonic() + timeout
    last_check = time.monotonic()
    while time.monotonic() < deadline and not (out / STATE_FILE).exists():
        for process in processes:
            if process.poll() is not None:
                raise RuntimeError(f"{' '.join(map(str, process.args[:2]))} (PID {process.pid}) exited with status "
                                   f"{process.returncode} during run {run_id}")
        if time.monotonic() - last_check > 20:
            if run_status(app_dir, flwr_home, run_id).startswith("finished"):
                break
            last_check = time.monotonic()
        time.sleep(0.5)
    return wait_for_run(app_dir, flwr_home, run_id, timeout=max(60.0, deadline - time.monotonic()))
