"""The package's layers and its acyclic imports, as ``.importlinter`` declares them (docs/architecture.md, "Layout").

``lint-imports`` reads the contracts from ``.importlinter`` at the repository root; each must be kept.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint(config: Path) -> subprocess.CompletedProcess:
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--config", str(config), "--no-cache"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_every_import_contract_is_kept():
    out = _lint(ROOT / ".importlinter")
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in out.stdout


def test_a_climbing_import_breaks_the_layers(tmp_path):
    """The contract can fail: the same layers with the registry placed below the wire modules it imports."""
    text = (ROOT / ".importlinter").read_text()
    swapped = text.replace("    flower_topics.methods\n", "").replace("    flower_topics.wire\n",
                                                                          "    flower_topics.wire\n    flower_topics.methods\n")
    assert swapped != text
    config = tmp_path / "layers.ini"
    config.write_text(swapped)
    out = _lint(config)
    assert out.returncode != 0 and "flower_topics.methods -> flower_topics.wire" in out.stdout, out.stdout[-2000:]
