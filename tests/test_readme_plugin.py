"""docs/outputs-and-api.md's "Plugging a strategy into your own ServerApp" runs as written, on the simulation engine."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from flwr.serverapp import ServerApp

from flower_topics.federation.vocabulary_agreement import agree_vocabulary
from flower_topics.federation.client_app import make_client_app
from flower_topics.run.config import defaults
from flower_topics.simulations.inprocess import InProcessGrid

ROOT = Path(__file__).resolve().parents[1]


def _section_code() -> tuple[str, list[str]]:
    text = (ROOT / "docs" / "outputs-and-api.md").read_text()
    section = text.split("## Plugging a strategy into your own ServerApp", 1)[1].split("\n## ", 1)[0]
    app_code, alternatives = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return app_code, [line for line in alternatives.splitlines() if line.strip()]


@pytest.mark.timeout(600)
def test_each_readme_strategy_runs_against_the_package_client_app(capsys):
    from flwr.simulation import run_simulation

    app_code, alternatives = _section_code()
    (original,) = [line for line in app_code.splitlines() if line.strip().startswith("strategy = ")]
    assert len(alternatives) == 2
    mains, done = [], []
    for line in [original, *alternatives]:
        namespace: dict = {}
        exec(compile(app_code.replace(original, line), "outputs-and-api.md", "exec"), namespace)  # noqa: S102 - the docs' code
        assert isinstance(namespace["app"], ServerApp)
        mains.append((line.split("(")[0].split("=")[1].strip(), namespace["main"]))

    all_three = ServerApp()

    @all_three.main()
    def main(grid, context):
        for name, readme_main in mains:
            readme_main(grid, context)
            done.append(name)

    run_simulation(server_app=all_three, client_app=make_client_app(), num_supernodes=2,
                   backend_config={"client_resources": {"num_cpus": 1, "num_gpus": 0.0}})
    assert done == ["FedLDA", "ADLDA", "PCTD"]
    printed = capsys.readouterr().out
    # phi is K x V over the words the 2 parties of the default corpus (the embedded one) agree on,
    # here the same agreement stage on the in-process grid
    assert defaults()["dataset"] == "embedded"
    agreed = agree_vocabulary(InProcessGrid.partitions(make_client_app(), 2, {}), {}).vocabulary
    assert len(agreed) > 1000
    assert printed.count(f"(10, {len(agreed)})") == 3 and "per document after 5 round(s)" in printed
