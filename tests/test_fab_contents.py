"""What `flwr run .` packs into the FAB: the package (its modules and the embedded corpus), nothing beside it.

On the deployment engine every message's ClientApp process unpacks the whole FAB; the apps import only the
package, and the Quickstart's ``dataset='embedded'`` reads the corpus from the package the FAB installs.
"""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from flwr.cli.build import build_fab_from_files, collect_files
from flwr.cli.install import install_from_fab

ROOT = Path(__file__).resolve().parents[1]


def test_the_fab_holds_the_package_and_its_embedded_corpus_only(app_dir, tmp_path):
    app = tmp_path / "app"
    shutil.copytree(app_dir, app)
    for extra in ("docs/guide.md", "benchmarks/bench.py", "benchmarks/results.json", "tests/deployment.py",
                  "CHANGELOG.md"):  # what a checkout has beside the package
        (app / extra).parent.mkdir(parents=True, exist_ok=True)
        (app / extra).write_text("# not for the apps\n", encoding="utf-8")
    fab = build_fab_from_files(collect_files(app))[0]
    names = zipfile.ZipFile(io.BytesIO(fab)).namelist()
    outside = [n for n in names if not n.startswith(("flower_topics/", ".info/")) and n != "pyproject.toml"]
    assert outside == [], outside
    modules = {p.relative_to(app).as_posix() for p in (app / "flower_topics").rglob("*.py")}
    assert modules <= set(names), sorted(modules - set(names))[:5]
    assert {"flower_topics/data/embedded/debian.jsonl", "flower_topics/data/embedded/LICENSE.md"} <= set(names)

    # installed as Flower installs it, first on sys.path: the ClientApp loads and the embedded corpus reads
    home = tmp_path / "flwr-home"
    installed = install_from_fab(fab, install_dir=home, skip_prompt=True)
    check = ("import json, sys; sys.path.insert(0, sys.argv[1]);"
             "import flower_topics; from flower_topics.federation import client_app;"
             "from flower_topics.data.embedded import EMBEDDED_PATH;"
             "print(json.dumps([flower_topics.__file__, len(EMBEDDED_PATH.read_text(encoding='utf-8').splitlines())]))")
    done = subprocess.run([sys.executable, "-c", check, str(installed)], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, check=False, env={"PATH": "/usr/bin:/bin"})
    assert done.returncode == 0, done.stderr[-2000:]
    package, lines = json.loads(done.stdout.strip().splitlines()[-1])
    assert Path(package).is_relative_to(installed)
    assert lines == len((ROOT / "flower_topics/data/embedded/debian.jsonl").read_text(encoding="utf-8").splitlines())
