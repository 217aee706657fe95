"""``flower-topics report``: a self-contained HTML page, rendered in a real headless browser (Chromium),
and the run's static plots (titles, privacy)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import numpy as np
import pytest

from flower_topics.cli.main import main
from flower_topics.federation.client_app import make_client_app
from flower_topics.model.model_file import load_model
from flower_topics.run.outputs import plot_metrics, read_metrics
from flower_topics.run.report_page import topic_distances, topic_map
from flower_topics.federation.server_app import run_server
from flower_topics.simulations.inprocess import InProcessGrid
from tests.test_trust_boundary import BASE, write_corpus

CHROMIUM_NAMES = ("chromium", "chromium-browser")


def _chromium() -> str:
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("Chromium is not installed, and the report test renders the page in a real browser: install it "
                "(Debian/Ubuntu: apt-get install -y chromium; .ci/run does this when it is missing)")


def _browser(tmp_path, *args: str) -> subprocess.CompletedProcess:
    command = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
               f"--user-data-dir={tmp_path / 'profile'}", "--host-resolver-rules=MAP * ~NOTFOUND", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    path = write_corpus(tmp / "all.jsonl", ["pets", "money", "space"], 120, seed=3)
    config = {**BASE, "dataset": str(path), "partition": "label", "num-rounds": 6, "output-dir": str(tmp / "run"),
              "method": "lda"}
    run_server(InProcessGrid.partitions(make_client_app(config), 3, config), config)
    return tmp / "run"


def test_the_report_is_self_contained_and_a_browser_shows_the_topics(run_dir, tmp_path):
    assert main(["report", str(run_dir)]) == 0
    page = (run_dir / "report.html").read_text(encoding="utf-8")
    # nothing to fetch at view time: no script, stylesheet, image or font from elsewhere
    assert not re.search(r"<script|<link|<img|<iframe|@import|url\((?!#)|src=", page, re.I)
    assert not re.search(r"href=\"(?!#)", page)
    model = load_model(run_dir / "model.npz")
    words = {w for topic in model.top_words(10) for w in topic}
    # what the browser renders: the DOM after loading holds every topic's top words
    dom = _browser(tmp_path, "--dump-dom", (run_dir / "report.html").as_uri()).stdout
    rendered = re.sub(r"<[^>]+>", " ", dom)
    assert words <= set(rendered.split())
    for title in ("Topic map", "Held-out perplexity", "NPMI coherence", "Run config", "Privacy report"):
        assert title in rendered, title
    # and on screen: the topics table is drawn (blanking it changes the pixels) and the page is not blank
    blank = re.sub(r'<table id="topics">.*?</table>', '<table id="topics"></table>', page, flags=re.S)
    (tmp_path / "blank.html").write_text(blank, encoding="utf-8")
    shots = {}
    for name, url in (("report", (run_dir / "report.html").as_uri()), ("blank", (tmp_path / "blank.html").as_uri())):
        shot = tmp_path / f"{name}.png"
        _browser(tmp_path, f"--screenshot={shot}", "--window-size=1200,1600", url)
        import matplotlib.image

        shots[name] = matplotlib.image.imread(shot)[..., :3]
    dark = (shots["report"].mean(axis=2) < 0.6).mean()
    assert 0.02 < dark < 0.6, f"{dark:.1%} of the screenshot is ink"
    changed = np.abs(shots["report"] - shots["blank"]).max(axis=2) > 0.1
    assert changed[:400].mean() > 0.01  # the top of the page: where the topics table is


def test_topic_map_distances_are_jensen_shannon_and_mds_keeps_them():
    rng = np.random.default_rng(0)
    phi = rng.dirichlet(np.full(30, 0.2), size=4)
    d = topic_distances(phi)
    m = 0.5 * (phi[0] + phi[1])
    js = 0.5 * np.sum(phi[0] * np.log2(phi[0] / m)) + 0.5 * np.sum(phi[1] * np.log2(phi[1] / m))
    assert d[0, 1] == pytest.approx(np.sqrt(js)) and np.allclose(d, d.T) and np.all(np.diag(d) == 0)
    coords = topic_map(phi[:3])  # three points embed exactly in two dimensions
    mapped = np.linalg.norm(coords[:, None] - coords[None], axis=2)
    np.testing.assert_allclose(mapped, d[:3, :3], atol=1e-9)


def test_topic_sizes_come_from_the_runs_counts_or_a_corpus(run_dir, tmp_path):
    from flower_topics.run.report_page import topic_sizes

    model = load_model(run_dir / "model.npz")
    counts = topic_sizes(model, run_dir)
    assert counts is not None and "state.npz" in counts.source and counts.share.sum() == pytest.approx(1)
    assert topic_sizes(model, tmp_path) is None  # no counts kept: the report says sizes are not available
    corpus = write_corpus(tmp_path / "mine.jsonl", ["pets"], 30, seed=9)
    mine = topic_sizes(model, tmp_path, str(corpus))
    pets = int(np.argmax(mine.share))
    assert mine.share[pets] > 0.9 and "cat" in model.top_words(10)[pets]


def test_static_plots_have_a_privacy_plot_only_with_a_mechanism(run_dir, tmp_path):
    written = {p.name for p in plot_metrics(run_dir / "metrics.jsonl", run_dir)}
    assert {"perplexity.png", "npmi.png"} <= written and "privacy.png" not in written  # lda: no mechanism
    rows = read_metrics(run_dir / "metrics.jsonl")
    for row in rows:
        row["privacy"] = {"unit": "document", "epsilon": 0.5 * row["round"], "epsilon_round": 0.5}
    shutil.copy(run_dir / "model.npz", tmp_path / "model.npz")
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert "privacy.png" in {p.name for p in plot_metrics(tmp_path / "metrics.jsonl", tmp_path)}


def test_report_of_a_missing_run_is_one_line(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "model.npz" in err
