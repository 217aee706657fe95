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
from flower_topics.topic_model.model_file import load_model
from flower_topics.run.outputs import plot_metrics, read_metrics
from flower_topics.privacy.privacy_report import PrivacyReport
from flower_topics.run.config import GLOBAL_OPTIONS
from flower_topics.run.report_page import build_report, topic_distances, topic_map
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
                "(Debian/Ubuntu: apt-get install -y chromium; the README's test command does this when it is missing)")


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
    # each topic is named by its number and top words, in the topics table and on the map
    labels = model.labels()
    assert labels[0] == f"0 \u00b7 {', '.join(model.top_words(3)[0])}"
    table = re.search(r'<table id="topics">(.*?)</table>', dom, re.S).group(1)
    topic_map_svg = re.search(r'<div class="plot" id="map">(.*?)</div>', dom, re.S).group(1)
    for label in labels:
        assert f'<td class="label">{label}</td>' in table and f">{label}<" in topic_map_svg, label
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
    # the labels take room on screen: the first column is wider than a topic number
    unlabelled = re.sub(r'<td class="label">(\d+) \u00b7 [^<]*</td>', r'<td class="label">\1</td>', page)
    assert unlabelled != page
    (tmp_path / "unlabelled.html").write_text(unlabelled, encoding="utf-8")
    shot = tmp_path / "unlabelled.png"
    _browser(tmp_path, f"--screenshot={shot}", "--window-size=1200,1600", (tmp_path / "unlabelled.html").as_uri())
    assert (np.abs(shots["report"] - matplotlib.image.imread(shot)[..., :3]).max(axis=2) > 0.1)[:400].mean() > 0.001


def _section(page: str, table_id: str) -> str:
    return re.search(rf'<table id="{table_id}">(.*?)</table>', page, re.S).group(1)


def _cells(html_rows: str) -> dict[str, str]:
    """``{header: cell}`` of a two-column table's rows, tags removed."""
    return {th: re.sub(r"<[^>]+>", "", td) for th, td in re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", html_rows)}


def test_the_report_shows_the_runs_own_options_only(run_dir):
    page = build_report(run_dir)
    shown = _cells(_section(page, "config"))
    assert "lda.local-sweeps" in shown and shown["method"] == "lda" and shown["num-topics"] == "3"
    assert all(key in GLOBAL_OPTIONS or key.startswith("lda.") for key in shown), sorted(shown)
    assert not any(key.startswith("synthetic-") for key in shown)  # the corpus is a file, not the generator
    config = load_model(run_dir / "model.npz").metadata["run_config"]
    assert any(key.startswith("fedlda.") for key in config) and len(shown) < len(config) - 40
    assert f"{len(config) - len(shown)} options this run did not use" in page


def test_the_report_states_the_privacy_guarantee_in_words(run_dir, tmp_path):
    page = build_report(run_dir)  # lda: no mechanism
    privacy = _cells(_section(page, "privacy"))
    assert privacy["whole run, per document"].startswith("none: ")
    assert privacy["as the method states it"].startswith("no privacy mechanism")
    assert not re.search(r'[{}\[\]]|&quot;|"', _section(page, "privacy"))  # words, not JSON values
    # a run with a per-document bound: its figures and what they cover, from the model's metadata
    report = PrivacyReport(mechanism="gaussian", unit="document", accountant="PLD", rounds=5, epsilon_round=0.5,
                           delta_round=1e-6, epsilon=2.0, delta=1e-5, guarantee="DP-SVI per document",
                           document_epsilon=2.5, document_delta=2e-5,
                           document_guarantee="every round and the vocabulary, against the server",
                           details={"noise_multiplier": 1.1})
    assert PrivacyReport.from_dict(report.to_dict()) == report
    model = load_model(run_dir / "model.npz")
    metadata = {**model.metadata, "privacy": report.to_dict()}
    from flower_topics.topic_model.model_file import TopicModel, save_model

    save_model(tmp_path / "model.npz", TopicModel(model.topic_word, model.vocabulary, metadata=metadata))
    privacy = _cells(_section(build_report(tmp_path), "privacy"))
    assert privacy["whole run, per document"] == ("eps 2.5, delta 2e-05 for adding or removing one document of one "
                                                  "party, over the whole run: every round and the vocabulary, "
                                                  "against the server")
    assert privacy["as the method states it"].startswith("eps 2, delta 1e-05 per document after 5 round(s) (PLD")
    assert privacy["mechanism"] == "gaussian"


def test_a_metric_evaluated_once_is_a_number_not_a_plot(run_dir):
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [r["round"] for r in rows if "nmi" in r] == [6] and sum("perplexity" in r for r in rows) > 1
    page = build_report(run_dir)
    plots = re.findall(r'<div class="plot">(.*?)</div>', page, re.S)
    assert any("Held-out perplexity" in svg for svg in plots)
    assert not any("NMI of the top topic" in svg or "Purity" in svg for svg in plots)
    final = _section(page, "final")
    nmi = re.search(r"<th>NMI of the top topic against the labels</th><td>([^<]+)</td><td>([^<]+)</td>", final)
    assert nmi and float(nmi.group(1)) == pytest.approx(rows[-1]["nmi"], abs=1e-4)
    assert nmi.group(2) == "round 6 only (one value: no plot)"


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
