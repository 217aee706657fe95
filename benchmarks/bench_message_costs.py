"""CPU a ClientApp process spends on one message before its work, each part in a fresh process.

    python benchmarks/bench_message_costs.py
    python benchmarks/bench_message_costs.py --root /path/to/another/checkout   # the same, another version

On Flower's deployment engine every message starts a fresh ``flwr-clientapp`` process. Measured
here, each in new Python processes (``--repeat`` times, the median), with the package of
``--root`` first on ``sys.path``:

- **ClientApp import and config parse**: CPU seconds of importing
  ``flower_topics.federation.client_app`` and parsing a ``fedlda`` run config (every message
  does both), after ``flwr.app`` and numpy; and whether numba was imported;
- **dplda guard**: CPU seconds of the party's budget check (``spending_over_cap``) for its 20th
  release of a 40-round run (plain: PLD; ``--secure``-style: Skellam RDP), in a process that knows
  only what the party kept from its releases 1-19 (where the version keeps anything), and which
  accountant library it imported;
- **FAB extraction**: ``flwr.cli.install.install_from_fab`` of an already installed FAB (what each
  ClientApp process does before it imports the app: every file extracted and its hash checked),
  for the FAB ``flwr run .`` builds from ``--root``, and for the same folder without its
  ``pyproject.toml``'s ``fab-include`` / ``fab-exclude`` rules, alternated.

Prints one line per figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

IMPORT = r"""
import json, sys, time
import flwr.app, numpy
t = time.process_time()
from flower_topics.federation import client_app
from flower_topics.run.config import parse_run_config
from flower_topics.wire.fedlda import FedLDASettings
client_app.data_config({"method": "fedlda", "num-topics": 4})
FedLDASettings.from_record(parse_run_config({"method": "fedlda", "vocabulary": "/x/v.txt"}))
print(json.dumps({"cpu": time.process_time() - t, "numba": "numba" in sys.modules}))
"""

SETTINGS = r"""
import json, sys
from flower_topics.run.config import parse_run_config
from flower_topics.strategies.dplda import calibrated_settings
config = parse_run_config({"method": "dplda", "num-rounds": 40, "secure-aggregation": sys.argv[1] == "secure",
                           "vocabulary": "/x/v.txt", "federated-eval": False})
print(json.dumps(dict(calibrated_settings(config).to_record())))
"""

GUARD = r"""
import inspect, json, sys, time
import numpy as np
from flower_topics.clients import dplda as client
from flower_topics.wire import dplda as wire
settings = wire.DPLDASettings.from_record(json.loads(sys.argv[1]))
first, last, kept = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
keeps = "state" in inspect.signature(client.spending_over_cap).parameters
state = client.DPLDAClientState()
if first > 1 and keeps:
    state.guard = np.load(kept)
seen = set(sys.modules)
t = time.process_time()
for n in range(first, last + 1):
    releases = np.tile([[settings.noise_multiplier, settings.sample_rate]], (n, 1))
    args = (releases, settings, 0.0, 0.0, settings.epsilon) + ((state,) if keeps else ())
    assert client.spending_over_cap(*args) is None
cpu = time.process_time() - t
if keeps:
    np.save(kept, state.guard)
print(json.dumps({"cpu": cpu, "imported": sorted({m.split(".")[0] for m in set(sys.modules) - seen}
                                               & {"dp_accounting", "autodp", "opacus"})}))
"""

FAB = r"""
import io, json, re, statistics, sys, time, zipfile
from pathlib import Path
from flwr.cli.build import build_fab_from_files, collect_files
from flwr.cli.install import install_from_fab
files = collect_files(Path(sys.argv[1]))
pyproject = files["pyproject.toml"]
text = (pyproject.read_text() if isinstance(pyproject, Path) else pyproject.decode())
fabs = {"as built": build_fab_from_files(dict(files))[0],
        "without fab-include": build_fab_from_files({**files, "pyproject.toml": re.sub(
            r"(?m)^fab-(include|exclude) = .*$", "", text).encode()})[0]}
times = {name: [] for name in fabs}
for fab in fabs.values():
    install_from_fab(fab, skip_prompt=True)
for _ in range(int(sys.argv[2])):  # alternated, so that both see the same load
    for name, fab in fabs.items():
        t = time.perf_counter()
        install_from_fab(fab, skip_prompt=True)
        times[name].append(time.perf_counter() - t)
print(json.dumps({name: {"seconds": statistics.median(times[name]), "mb": len(fab) / 1e6,
                         "files": len(zipfile.ZipFile(io.BytesIO(fab)).namelist())} for name, fab in fabs.items()}))
"""


def run(script: str, root: Path, *args: str, env: dict | None = None) -> dict:
    """The last line of ``script`` run in a fresh process with ``root`` first on ``sys.path``, as JSON."""
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=600,
                          check=True, cwd=tempfile.gettempdir(),
                          env={**os.environ, "PYTHONPATH": str(root), **(env or {})})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=str(ROOT), help="the checkout whose package is measured")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    root = Path(args.root).resolve()
    med = statistics.median
    rows = [run(IMPORT, root) for _ in range(args.repeat)]
    print(f"ClientApp import and config parse: {med(r['cpu'] for r in rows):.2f} s CPU (median of {args.repeat}); "
          f"numba imported: {rows[0]['numba']}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("plain", "secure"):
            record = json.dumps(run(SETTINGS, root, mode))
            kept = str(Path(tmp) / f"guard-{mode}.npy")
            run(GUARD, root, record, "1", "19", kept)  # the party's releases 1-19, one process
            rows = [run(GUARD, root, record, "20", "20", kept) for _ in range(args.repeat)]
            print(f"dplda guard, release 20 of 40 ({mode}): {med(r['cpu'] for r in rows):.2f} s CPU "
                  f"(median of {args.repeat}); imported {rows[0]['imported'] or 'nothing'}", flush=True)
        fabs = run(FAB, root, str(root), str(2 * args.repeat + 1), env={"FLWR_HOME": str(Path(tmp) / "flwr-home")})
        for name, fab in fabs.items():
            print(f"FAB extraction ({name}): {fab['seconds']:.2f} s (median of {2 * args.repeat + 1}, alternated) "
                  f"for {fab['mb']:.2f} MB, {fab['files']} files", flush=True)

if __name__ == "__main__":
    main()
