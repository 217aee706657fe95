"""Topic prevalence by period in a run: the parties' tables, their exact sum, secure aggregation, and dplda's noise
and accounting, as a user and a hostile server see them."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
from flwr.app import ConfigRecord

from flower_topics.clients import dplda as dplda_client
from flower_topics.data.periods import period_grid
from flower_topics.errors import UserInputError
from flower_topics.federation.client_app import make_client_app
from flower_topics.federation.server_app import run_server
from flower_topics.metrics.prevalence import period_totals
from flower_topics.run.config import parse_run_config
from flower_topics.run.prevalence_outputs import read_prevalence
from flower_topics.simulations.inprocess import InProcessGrid
from flower_topics.privacy import dplda_calibration
from flower_topics.strategies.dplda import calibrated_settings
from flower_topics.wire import dplda as dplda_wire

GROUP_A = ("engine", "wheel", "brake", "garage", "diesel", "tyre")
GROUP_B = ("river", "boat", "harbour", "sail", "anchor", "ferry")


def _party_file(tmp_path, name: str, rng: np.random.Generator, dated: dict[str, tuple[int, int]], undated: int):
    """A .jsonl party file: for each month, (documents about cars, documents about boats), plus undated ones."""
    lines = []
    for month, (cars, boats) in dated.items():
        for group, n in ((GROUP_A, cars), (GROUP_B, boats)):
            for _ in range(n):
                lines.append({"text": " ".join(rng.choice(group, size=12)), "date": month})
    for _ in range(undated):
        lines.append({"text": " ".join(rng.choice(GROUP_A + GROUP_B, size=12))})
    path = tmp_path / f"{name}.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n", encoding="utf-8")
    return str(path)


PARTIES = [
    ({"2020-01": (8, 1), "2020-02": (7, 2)}, 3),
    ({"2020-02": (6, 1), "2021-05": (1, 9)}, 0),
    ({"2021-05": (2, 8), "2021-06": (0, 7)}, 2),
]

BASE = {"dataset": "party-files", "num-topics": 2, "num-rounds": 4, "lda.local-sweeps": 5, "federated-eval": False,
        "min-df": 1, "date-column": "date", "prevalence-period": "quarter", "stopwords": "none"}


def _grid(tmp_path, config, keep_own=False):
    rng = np.random.default_rng(5)
    nodes = []
    for i, (dated, undated) in enumerate(PARTIES):
        node = {"dataset": _party_file(tmp_path, f"party{i}", rng, dated, undated), "date-column": "date"}
        if keep_own:
            node["prevalence-out"] = str(tmp_path / f"own{i}.csv")
        nodes.append(node)
    return InProcessGrid(make_client_app(config), nodes, config)


def _rows(path):
    with open(path, encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def test_plain_prevalence_sums_the_parties_exact_tables(tmp_path):
    config = {**BASE, "output-dir": str(tmp_path / "run"), "prevalence-by-party": True}
    model = run_server(_grid(tmp_path, config, keep_own=True), config)
    table, labels = read_prevalence(tmp_path / "run" / "prevalence.csv")
    # every dated document counted once, in its quarter; the undated ones left out and counted
    assert table.periods == ("2020-Q1", "2021-Q2")
    np.testing.assert_allclose(table.documents, [8 + 1 + 7 + 2 + 6 + 1, 1 + 9 + 2 + 8 + 7], rtol=1e-5)
    assert model.metadata["prevalence"]["undated"] == 5 and model.metadata["prevalence"]["parties"] == 3
    np.testing.assert_allclose(np.nansum(table.shares(), axis=0), 1.0, rtol=1e-5)
    # the car topic holds most of 2020 and the boat topic most of 2021
    car = int(np.argmax([sum(w in label for w in GROUP_A) for label in labels]))
    shares = table.shares()
    assert shares[car, 0] > 0.7 and shares[1 - car, 1] > 0.7
    # the server's per-party tables are the parties' own exact tables, and the total is their sum
    by_party = _rows(tmp_path / "run" / "prevalence-by-party.csv")
    for i in range(3):
        own = {(r["period"], r["topic"]): float(r["share"]) for r in _rows(tmp_path / f"own{i}.csv") if r["share"]}
        sent = {(r["period"], r["topic"]): float(r["share"]) for r in by_party
                if r["share"] and r["party"] == str(sorted({int(x["party"]) for x in by_party})[i])}
        assert own.keys() == sent.keys() and all(abs(own[key] - sent[key]) < 1e-5 for key in own)
    assert "topic-prevalence release" in model.metadata["privacy"]["document_guarantee"]
    assert (tmp_path / "run" / "prevalence.png").stat().st_size > 10_000


def test_secure_prevalence_is_the_plain_sum_within_its_rounding(tmp_path):
    plain = {**BASE, "output-dir": str(tmp_path / "plain"), "prevalence-from": "2020", "prevalence-to": "2021-12"}
    secure = {**plain, "output-dir": str(tmp_path / "secure"), "secure-aggregation": True}
    run_server(_grid(tmp_path, plain), plain)
    run_server(_grid(tmp_path, secure), secure)
    a, _ = read_prevalence(tmp_path / "plain" / "prevalence.csv")
    b, _ = read_prevalence(tmp_path / "secure" / "prevalence.csv")
    assert a.periods == b.periods == period_grid("2020", "2021-12", "quarter")
    # each party's cells are rounded to 1/1024 of a document: at most 3 parties x 1/1024 a cell
    np.testing.assert_allclose(a.sums, b.sums, atol=3 / 1024 + 1e-9)
    assert a.documents[1] == 0 and a.documents[4] == 0  # quarters without a document


@pytest.mark.parametrize(("change", "words"), [
    ({"prevalence-from": "2020"}, "prevalence-from and prevalence-to go together"),
    ({"prevalence-from": "2021", "prevalence-to": "2020"}, "comes before"),
    ({"prevalence-from": "soon", "prevalence-to": "2020"}, "prevalence-from 'soon' is not a date"),
    ({"secure-aggregation": True}, "needs public periods"),
    ({"secure-aggregation": True, "prevalence-by-party": True, "prevalence-from": "2020", "prevalence-to": "2021"},
     "cannot go with secure aggregation"),
    ({"prevalence-period": "week"}, "prevalence-period"),
    ({"method": "dplda", "vocabulary": "private"}, "periods must be public"),
])
def test_bad_prevalence_settings_are_one_line_before_round_1(change, words):
    with pytest.raises(UserInputError) as caught:
        parse_run_config({**BASE, **change})
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_a_party_without_dates_is_named_and_the_others_answer(tmp_path):
    config = {**BASE, "output-dir": str(tmp_path / "run")}
    grid = _grid(tmp_path, config)
    first = next(iter(grid.contexts))
    grid.contexts[first].node_config["date-column"] = ""  # this party reads no dates
    model = run_server(grid, config)
    assert model.metadata["prevalence"]["parties"] == 2


DP = {**BASE, "method": "dplda", "vocabulary": "private", "prevalence-from": "2020", "prevalence-to": "2021-12",
      "dplda.sample-rate": 0.5, "dplda.epsilon": 3.0, "num-rounds": 3, "vocabulary-epsilon": 0.5}


def test_dplda_calibrates_its_rounds_with_the_prevalence_release_in_one_guarantee():
    with_it = parse_run_config(DP)
    without = parse_run_config({**DP, "prevalence-period": ""})
    sigma_p = dplda_calibration.prevalence_noise(with_it)
    settings = calibrated_settings(with_it)
    assert sigma_p > 0 and settings.noise_multiplier > calibrated_settings(without).noise_multiplier
    eps_rounds, delta = dplda_calibration.budget(with_it).for_rounds()
    # the rounds and the prevalence release together meet what the vocabulary leaves, no more
    total = dplda_calibration.rounds_epsilon(settings, 3, delta, sigma_p)
    assert total <= eps_rounds * (1 + 1e-9) and total > 0.95 * eps_rounds
    # the prevalence release alone is calibrated to its share
    alone = dplda_calibration.accountant(settings)
    alone.step(noise_multiplier=sigma_p, sample_rate=1.0)
    assert alone.get_epsilon(delta) == pytest.approx(0.1 * eps_rounds, rel=2e-3)
    planned = dplda_calibration.planned_releases(with_it)
    assert any(r.sample_rate == 1.0 and r.noise_multiplier == sigma_p for r in planned)


def _request(sigma_p: float, secure: bool = False, **extra) -> ConfigRecord:
    settings = calibrated_settings(parse_run_config({**DP, "secure-aggregation": secure}))
    return ConfigRecord({**settings.to_record(), dplda_wire.PREVALENCE_NOISE: sigma_p, **extra})


def test_dplda_prevalence_noise_is_gaussian_at_the_calibrated_scale():
    """Many releases of the same table: the noise has mean 0 and the standard deviation sigma_p (a chi-square
    bound at 1e-6), every cell independent."""
    rng = np.random.default_rng(0)
    theta = rng.dirichlet(np.ones(4), size=30)
    index = rng.integers(0, 3, size=30)
    exact = period_totals(theta, index, 3)[0]
    sigma = dplda_calibration.prevalence_noise(parse_run_config(DP))
    draws = np.array([dplda_client.prevalence_release(theta, index, 3, _request(sigma), dplda_client.DPLDAClientState(),
                                                      seed)[0] - exact for seed in range(400)])
    noise = draws.reshape(400, -1)
    n = noise.size
    # (n - 1) s^2 / sigma^2 ~ chi2(n - 1): within +-5.5 standard deviations of its mean at n = 4800
    statistic = (noise ** 2).sum() / sigma ** 2
    assert abs(statistic - n) < 5.5 * np.sqrt(2 * n)
    assert abs(noise.mean()) < 5.5 * sigma / np.sqrt(n)
    assert abs(np.corrcoef(noise[:, 0], noise[:, 1])[0, 1]) < 0.25


def test_a_hostile_server_gets_one_noisy_prevalence_and_never_an_exact_one():
    theta, index = np.full((5, 2), 0.5), np.zeros(5, dtype=np.int64)
    state = dplda_client.DPLDAClientState()
    sigma = dplda_calibration.prevalence_noise(parse_run_config(DP))
    with pytest.raises(UserInputError, match="carries no noise"):
        dplda_client.prevalence_release(theta, index, 1, _request(0.0), state, 1)
    dplda_client.prevalence_release(theta, index, 1, _request(sigma), state, 1)
    with pytest.raises(UserInputError, match="already released its topic prevalence"):
        dplda_client.prevalence_release(theta, index, 1, _request(sigma), state, 2)
    # a noise far below the calibrated one spends over the run's target: refused
    with pytest.raises(UserInputError, match="over its cap"):
        dplda_client.prevalence_release(theta, index, 1, _request(0.05), dplda_client.DPLDAClientState(), 3)


def test_dplda_secure_prevalence_rows_keep_their_sensitivity():
    rng = np.random.default_rng(1)
    theta = rng.dirichlet(np.full(5, 0.3), size=2000)
    rows = dplda_client.integer_shares(theta, 512.0, rng)
    assert np.all(np.sqrt((rows.astype(float) ** 2).sum(axis=1)) <= 512.0)
    # unbiased where the norm allows it: the mean encoding is within 1% of theta x units
    assert abs(rows.sum() / (theta.sum() * 512.0) - 1) < 0.01


def test_dplda_run_reports_one_guarantee_with_the_prevalence_release(tmp_path):
    words = tmp_path / "vocabulary.txt"
    words.write_text("\n".join(GROUP_A + GROUP_B) + "\n", encoding="utf-8")
    config = {**DP, "output-dir": str(tmp_path / "run"), "vocabulary": str(words)}
    model = run_server(_grid(tmp_path, config), config)
    privacy = model.metadata["privacy"]
    assert "topic-prevalence release" in privacy["document_guarantee"]
    assert privacy["document_epsilon"] <= 3.0 * (1 + 1e-6)
    table, _ = read_prevalence(tmp_path / "run" / "prevalence.csv")
    assert table.periods == period_grid("2020", "2021-12", "quarter")
    assert model.metadata["prevalence"]["noise_std"] > 0


def test_the_report_shows_the_prevalence_curves_with_the_topics_labels(tmp_path):
    """``flower-topics report``: the prevalence plot is in the page, names the topics by their labels, and a
    browser draws it (blanking it changes the pixels where it is)."""
    import re

    import matplotlib.image

    from flower_topics.cli.main import main
    from tests.test_report import _browser

    config = {**BASE, "output-dir": str(tmp_path / "run")}
    model = run_server(_grid(tmp_path, config), config)
    assert main(["report", str(tmp_path / "run")]) == 0
    page = (tmp_path / "run" / "report.html").read_text(encoding="utf-8")
    dom = _browser(tmp_path, "--dump-dom", (tmp_path / "run" / "report.html").as_uri()).stdout
    section = re.search(r'<div class="plot" id="prevalence">(.*?)</div>', dom, re.S).group(1)
    assert "Topic prevalence over time" in dom and "5 without a date" in dom
    for label in model.labels():
        assert f">{label}<" in section, label
    blank = re.sub(r'<div class="plot" id="prevalence">.*?</div>', '<div class="plot" id="prevalence"></div>', page,
                   flags=re.S)
    (tmp_path / "blank.html").write_text(blank, encoding="utf-8")
    shots = []
    pages = (("report", tmp_path / "run" / "report.html"), ("blank", tmp_path / "blank.html"))
    for name, url in ((name, path.as_uri()) for name, path in pages):
        _browser(tmp_path, f"--screenshot={tmp_path / name}.png", "--window-size=1200,2400", url)
        shots.append(matplotlib.image.imread(tmp_path / f"{name}.png")[..., :3])
    changed = np.abs(shots[0] - shots[1]).max(axis=2) > 0.1
    assert changed.mean() > 0.02


@pytest.mark.parametrize(("extra", "hidden"), [
    ({}, False),
    ({"secure-aggregation": True, "prevalence-from": "2020", "prevalence-to": "2021"}, True),
    ({"method": "dplda", "prevalence-from": "2020", "prevalence-to": "2021"}, True),
    ({"method": "dplda", "secure-aggregation": True, "prevalence-from": "2020", "prevalence-to": "2021"}, True),
])
def test_the_prevalence_reply_is_on_the_documented_list(tmp_path, extra, hidden):
    """The wire audit of real runs: a prevalence reply is one K x T table (the run's periods when they are
    public), with counts of what was left out only in a plain release."""
    from tests.wire_audit import Audit

    words = tmp_path / "vocabulary.txt"
    words.write_text("\n".join(GROUP_A + GROUP_B) + "\n", encoding="utf-8")
    config = {**BASE, "output-dir": str(tmp_path / "run"), "vocabulary": str(words), "num-rounds": 2, **extra}
    if config.get("method") == "dplda":
        config["dplda.sample-rate"] = 0.5
    grid = _grid(tmp_path, config)
    audit = Audit()
    grid.client_app = audit.wrap(grid.client_app)
    run_server(grid, config)
    seen = audit.check(lambda context: {10 ** 9})
    assert seen["query.prevalence"] == 3
    replies = [reply for request, reply, _ in audit.sent if request.metadata.message_type == "query.prevalence"]
    assert all(not reply.has_error() for reply in replies)
    assert all(bool(dict(reply.content["metrics"])) is not hidden for reply in replies)


def test_a_party_ledger_records_dplda_prevalence_and_refuses_an_exact_table(tmp_path):
    """A dplda party with a privacy ledger records its prevalence release (one Gaussian, q = 1) with its rounds,
    and the whole run's spend is what the run's report states; the same party refuses a request that would have
    it release its exact table (a hostile server naming another method)."""
    from flwr.app import Array, ArrayRecord, Message, RecordDict

    from flower_topics.federation.client_app import data_config
    from flower_topics.federation.party_ledger import documents_fingerprint
    from flower_topics.privacy.ledger import compose, read_ledger
    from flower_topics.wire import prevalence as prevalence_wire
    from flower_topics.wire.protocol import ARRAYS, CONFIG

    words = tmp_path / "vocabulary.txt"
    words.write_text("\n".join(GROUP_A + GROUP_B) + "\n", encoding="utf-8")
    config = {**DP, "output-dir": str(tmp_path / "run"), "vocabulary": str(words)}
    grid = _grid(tmp_path, config)
    for i, context in enumerate(grid.contexts.values()):
        context.node_config.update({"privacy-ledger": str(tmp_path / f"ledger-{i}.json"), "lifetime-epsilon": 10.0})
    model = run_server(grid, config)
    parsed = parse_run_config(config)
    for i, context in enumerate(grid.contexts.values()):
        ledger = read_ledger(tmp_path / f"ledger-{i}.json")
        assert [e.release.sample_rate for e in ledger.entries][-1] == 1.0  # the prevalence release, last
        spent = ledger.spent(documents_fingerprint(context.node_config, data_config(parsed)), 1e-5)
        assert spent == pytest.approx(compose(dplda_calibration.planned_releases(parsed), 1e-5), rel=1e-9)
        assert spent <= model.metadata["privacy"]["document_epsilon"] * (1 + 1e-9)
    # a hostile server asks the same party for lda's (exact) prevalence table
    node, context = next(iter(grid.contexts.items()))
    request = {"vocabulary": str(context.state["vocabulary"]["fingerprint"]), "method": "lda", "period": "year",
               "periods": "", "eval-alpha": 0.01, "eval-iterations": 10, prevalence_wire.QUANTUM: 1024.0}
    msg = Message(RecordDict({CONFIG: ConfigRecord(request), ARRAYS: ArrayRecord(
        {prevalence_wire.TOPIC_WORD: Array(np.full((2, 12), 1 / 12))})}), dst_node_id=node,
        message_type=prevalence_wire.PREVALENCE)
    reply = grid.send_and_receive([msg])[0]
    assert reply.has_error() and "no document-level accounting" in reply.error.reason


def test_when_no_party_can_answer_the_model_is_still_written(tmp_path):
    config = {**BASE, "output-dir": str(tmp_path / "run")}
    grid = _grid(tmp_path, config)
    for context in grid.contexts.values():
        context.node_config["date-column"] = ""  # no party reads dates
    model = run_server(grid, config)
    assert (tmp_path / "run" / "model.npz").is_file() and not (tmp_path / "run" / "prevalence.csv").exists()
    assert "prevalence" not in model.metadata
