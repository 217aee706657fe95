"""The README's test command is the one CI runs, and its first step installs Chromium where it can.

``.ci/run`` runs exactly the README's command line; ``.ci/install-chromium`` (that line's first step) is run here
with fake ``apt-get``, ``sudo`` and ``id`` on a PATH of their own, so nothing is installed.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / ".ci" / "install-chromium"
BASH = shutil.which("bash")


def _readme_test_command() -> str:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("Install and run the tests"):]
    return re.search(r"```bash\n(.*?)\n```", section, flags=re.S).group(1)


def test_ci_runs_the_readmes_test_command():
    command = _readme_test_command()
    assert "\n" not in command  # one line to copy
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert ci[-1] == command
    assert [line for line in ci if line and not line.startswith("#")] == ["set -euo pipefail", 'cd "$(dirname "$0")/.."',
                                                                       command]
    assert command.startswith("bash .ci/install-chromium && ") and command.endswith("python -m pytest -q -n 2 "
                                                                                     "--dist loadfile "
                                                                                     "--no-loadscope-reorder")
    for script in (ROOT / ".ci" / "run", SCRIPT):
        assert os.access(script, os.X_OK), script
        subprocess.run([BASH, "-n", str(script)], check=True)  # it parses


def _fake_bin(tmp_path: Path, *, uid: int, apt: bool = True, apt_installs: bool = True) -> Path:
    """A PATH folder: ``id -u`` says ``uid``; ``apt-get`` logs its arguments and (``install``) creates ``chromium``;
    ``sudo -n`` logs and runs the rest; ``env`` is the real one."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"

    def script(name: str, body: str) -> None:
        (bin_dir / name).write_text(f"#!{BASH}\n{body}\n", encoding="utf-8")
        (bin_dir / name).chmod(0o755)

    script("id", f'echo {uid}')
    script("sudo", f'echo "sudo $*" >> {log}; [ "$1" = -n ] && shift; exec "$@"')
    (bin_dir / "env").symlink_to(shutil.which("env"))
    if apt:
        install = (f'printf "#!{BASH}\\n" > {bin_dir}/chromium; {shutil.which("chmod")} +x {bin_dir}/chromium' if apt_installs
                   else "exit 100")
        script("apt-get", f'echo "apt-get $* DEBIAN_FRONTEND=$DEBIAN_FRONTEND" >> {log}\n'
                          f'case "$*" in *install*) {install};; esac')
    return bin_dir


def _install(bin_dir: Path) -> subprocess.CompletedProcess:
    return subprocess.run([BASH, str(SCRIPT)], env={"PATH": str(bin_dir)}, capture_output=True, text=True,
                          timeout=60)


def _calls(tmp_path: Path) -> list[str]:
    log = tmp_path / "calls.log"
    return log.read_text(encoding="utf-8").splitlines() if log.exists() else []


@pytest.mark.parametrize("name", ["chromium", "chromium-browser"])
def test_an_installed_chromium_is_left_alone(tmp_path, name):
    bin_dir = _fake_bin(tmp_path, uid=0)
    (bin_dir / name).write_text(f"#!{BASH}\n", encoding="utf-8")
    (bin_dir / name).chmod(0o755)
    proc = _install(bin_dir)
    assert (proc.returncode, proc.stderr, _calls(tmp_path)) == (0, "", [])


@pytest.mark.parametrize("uid, prefix", [(0, ""), (1000, "sudo -n env DEBIAN_FRONTEND=noninteractive ")])
def test_a_missing_chromium_is_installed_with_apt_get(tmp_path, uid, prefix):
    bin_dir = _fake_bin(tmp_path, uid=uid)
    proc = _install(bin_dir)
    assert (proc.returncode, proc.stderr) == (0, "")
    assert (bin_dir / "chromium").exists()
    calls = [c for c in _calls(tmp_path) if c.startswith("apt-get")]
    assert calls == ["apt-get update -qq DEBIAN_FRONTEND=noninteractive",
                     "apt-get install -y -qq chromium DEBIAN_FRONTEND=noninteractive"]
    assert [c for c in _calls(tmp_path) if c.startswith("sudo")] == (
        [f"{prefix}apt-get update -qq", f"{prefix}apt-get install -y -qq chromium"] if prefix else [])


@pytest.mark.parametrize("apt, apt_installs", [(False, False), (True, False)])
def test_where_it_cannot_install_it_stops_with_one_line(tmp_path, apt, apt_installs):
    proc = _install(_fake_bin(tmp_path, uid=0, apt=apt, apt_installs=apt_installs))
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "apt-get install -y chromium" in lines[0] and "tests/test_report.py" in lines[0]
