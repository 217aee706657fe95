"""ServerApp: agree on the vocabulary, run the method's strategy, record federated scores, write outputs.

The same ServerApp serves Flower's simulation engine and its deployment engine, and it
never opens a party's corpus: the vocabulary comes from the parties (or a public file), the
model's quality from their sums over their own documents (``dplda.public-corpus`` is public
text the user names for the server). Each round a line is appended
to ``metrics.jsonl`` (a round scored by the next round's training messages: once that round
ends, with its evaluation); at the end the model, its top words and the plots are written.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from logging import ERROR
from typing import Any, Mapping, Sequence

import numpy as np

from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp

from flower_topics.federation import console
from flower_topics.federation.vocabulary_agreement import Agreement, agree_vocabulary, send_vocabulary
from flower_topics.run.checkpoint import Checkpoint, CheckpointWriter, load_checkpoint
from flower_topics.run.resume import RoundOffset, array_record, check_resume_config, resume_strategy
from flower_topics.run.config import RunConfig, parse_run_config
from flower_topics.data.prepare import SYNTHETIC, synthetic_config
from flower_topics.data.synthetic import make_synthetic_corpus
from flower_topics.errors import UserInputError
from flower_topics.evaluation.federated import evaluation_keys, is_eval_round
from flower_topics.methods import get_method
from flower_topics.metrics.diversity import topic_diversity
from flower_topics.metrics.similarity import align_topics, topic_similarity_score
from flower_topics.topic_model.model_file import TopicModel
from flower_topics.run.outputs import RunOutputs, read_metrics
from flower_topics.privacy.privacy_report import PrivacyReport
from flower_topics.federation.grids import with_fast_polling
from flower_topics.federation.prevalence_stage import Prevalence, check_prevalence_config, collect_prevalence
from flower_topics.run.prevalence_outputs import write_prevalence
from flower_topics.strategies.base import TopicStrategy


def build_strategy(config: Mapping[str, Any], vocabulary: Sequence[str]) -> TopicStrategy:
    """The strategy of the run config's method (from the registry), for a corpus over ``vocabulary``."""
    return get_method(str(config["method"])).build_strategy(config, vocabulary)


class RoundRecorder:
    """Flower ``evaluate_fn``: appends each round's line to metrics.jsonl and logs it.

    The line holds the round's traffic, the privacy report so far and, on evaluation
    rounds, the metrics the parties' sums gave (federated evaluation), the model's
    diversity and, for the synthetic corpus of a simulation, its similarity to the true
    topics. The line of a round whose evaluation travels with the next round's training
    messages (:meth:`~flower_topics.strategies.base.TopicStrategy.carries_evaluation`) is
    held until that round ends, then written, with its evaluation, before the next line.

    Parameters
    ----------
    strategy : TopicStrategy
        The running strategy (its traffic, evaluations and privacy accounting are recorded).
    agreement : Agreement
        The vocabulary agreement (its vocabulary, and what ``private`` spent).
    outputs : RunOutputs
        Where the lines go.
    config : Mapping
        The validated run config.
    truth : tuple, optional
        The synthetic corpus' true topics and vocabulary (simulation only).
    """

    def __init__(self, strategy: TopicStrategy, agreement: Agreement, outputs: RunOutputs,
                 config: Mapping[str, Any], truth: tuple[np.ndarray, Sequence[str]] | None = None):
        self.strategy = strategy
        self.agreement = agreement
        self.outputs = outputs
        self.config = config
        self.truth = truth
        self.started = time.time()
        self.num_rounds = int(config["num-rounds"])
        self.last: dict[str, Any] = {}  # the latest value of every metric (evaluation rounds included)
        self.restore_seconds: float | None = None
        self.resume_seconds: float | None = None
        self.pending: tuple[dict[str, Any], str] | None = None  # a line and its privacy summary waiting for its evaluation (see the class docstring)

    def resumed(self, rows: Sequence[Mapping[str, Any]], restore_seconds: float, resume_seconds: float) -> None:
        """Continue after the rounds of ``rows`` (the interrupted run's metrics): the wall time goes on from
        its last line, and the summary's metrics start from them. ``restore_seconds``: reading the checkpoint
        and restoring the strategy; ``resume_seconds``: until the parties held the vocabulary again."""
        for row in rows:
            self.last = {**self.last, **row}
        self.restore_seconds, self.resume_seconds = restore_seconds, resume_seconds
        if rows and isinstance(rows[-1].get("wall_time"), (int, float)):
            self.started = time.time() - float(rows[-1]["wall_time"])

    def model(self, arrays: ArrayRecord) -> TopicModel:
        """The global model as a :class:`TopicModel`."""
        return TopicModel(self.strategy.topic_word(arrays), self.agreement.vocabulary)

    def privacy(self) -> PrivacyReport:
        """The method's privacy report, with the vocabulary agreement's spending composed in.

        The ``union`` agreement sends each party's words with their document frequencies
        outside any accountant, so a run that used it has no document-level guarantee.
        """
        report = self.strategy.privacy_report().with_release(self.agreement.privacy)
        if self.agreement.mode == "union":
            report = report.without_document_guarantee(
                "the union vocabulary agreement (each party's words with their document frequencies)")
        if self.strategy.prevalence_parties and not self.strategy.prevalence_config():
            report = report.without_document_guarantee(
                "the topic-prevalence release (each party's summed topic shares per period, without noise)")
        return report

    def __call__(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """Record round ``server_round`` (round 0, the empty initial model, is skipped)."""
        if server_round == 0:
            return None
        self.flush()
        row, summary = self.row(server_round, arrays)
        if self.strategy.evaluation_pending(server_round):
            self.pending = row, summary
        else:
            self.write(row, summary)
        return MetricRecord({k: float(v) for k, v in row.items() if isinstance(v, (int, float)) and v is not None})

    def reopen(self, server_round: int, arrays: ArrayRecord, rows: Sequence[Mapping[str, Any]]) -> None:
        """After a resume from round ``server_round``'s checkpoint, whose metrics ``rows`` were copied over: a
        round whose line was held for its evaluation when the run stopped gets its line now (held again while the
        next round's training messages carry its evaluation); a written line gives the strategy its evaluation,
        which is then not asked for again."""
        written = [row for row in rows if int(row.get("round", 0)) == server_round]
        if not written and server_round > 0:
            self.pending = self.row(server_round, arrays)
            if not self.strategy.evaluation_pending(server_round):
                self.flush()
        elif written and is_eval_round(server_round, self.config) and "eval_parties" in written[-1]:
            self.strategy.evaluations.setdefault(server_round, {
                key: written[-1][key] for key in evaluation_keys() if key in written[-1]})

    def flush(self) -> None:
        """Write the line held for its evaluation, with the evaluation the strategy now has (if any)."""
        if self.pending is None:
            return
        (row, summary), self.pending = self.pending, None
        server_round = int(row["round"])
        traffic = self.strategy.traffic_metrics(server_round)  # the evaluation's bytes came in after the round
        row.update({k.replace("-", "_"): traffic[k] for k in ("eval-bytes-sent", "eval-bytes-received")})
        row.update(self.strategy.evaluations.get(server_round, {}))
        self.write(row, summary)

    def write(self, row: dict[str, Any], privacy: str) -> None:
        """Append ``row`` to metrics.jsonl and say it on the console with the ``privacy`` summary."""
        self.outputs.append_metrics(row)
        self.last = {**self.last, **row}
        console.say(console.round_line(row, self.num_rounds, privacy))

    def row(self, server_round: int, arrays: ArrayRecord) -> tuple[dict[str, Any], str]:
        """Round ``server_round``'s line as the strategy has it now (its evaluation, if it has it), and the
        privacy report's summary."""
        row: dict[str, Any] = {"round": server_round, "wall_time": time.time() - self.started}
        if server_round == 1:
            row["vocabulary_agreement"] = self.agreement.summary()
        traffic = self.strategy.traffic_metrics(server_round)
        row.update({k.replace("-", "_"): v for k, v in traffic.items()})
        row.update({k.replace("-", "_"): v for k, v in self.strategy.method_metrics.get(server_round, {}).items()})
        privacy = self.privacy()
        row["privacy"] = privacy.to_dict()
        if is_eval_round(server_round, self.config):
            evaluated = self.strategy.evaluations.get(server_round, {})
            if "diversity" not in evaluated or self.truth is not None:  # else the parties' evaluation has it all
                row.update(server_scores(self.model(arrays), self.truth))
            row.update(evaluated)
        return row, privacy.round_summary()


def server_scores(model: TopicModel, truth: tuple[np.ndarray, Sequence[str]] | None) -> dict[str, float]:
    """What the server scores without data: diversity, and the similarity to known true topics."""
    scores = {"diversity": topic_diversity(model.topic_word)}
    if truth is not None:
        similarity = topic_similarity_score(align_topics(truth[0], truth[1], model.vocabulary), model.topic_word)
        scores.update(tss=similarity.score, tss_normalized=similarity.normalized)
    return scores


def synthetic_truth(config: Mapping[str, Any], agreement: Agreement | None = None
                    ) -> tuple[np.ndarray, tuple[str, ...]] | None:
    """The true topics of the run's synthetic corpus, regenerated from its public seed (simulation only).

    With ``agreement``, only if every party said it trained on a simulated share of the run
    config's dataset: parties that read their own files have no known topics.
    """
    if str(config["dataset"]) != SYNTHETIC or (agreement is not None and not agreement.simulated()):
        return None
    corpus = make_synthetic_corpus(synthetic_config(config), seed=int(config["seed"]))
    return corpus.topic_word, corpus.corpus.vocabulary


@dataclass(frozen=True)
class StartedRun:
    """A run once its vocabulary is agreed (or restored) and its strategy is ready for its first round.

    Made by :func:`start_run`; what the training rounds (:func:`training_rounds`), the topic
    prevalence (:func:`topic_prevalence`) and the outputs (:func:`write_outputs`) read.

    Attributes
    ----------
    config : RunConfig
        The validated run config.
    checkpoint : Checkpoint or None
        The checkpoint the run resumes from (None: a new run).
    outputs : RunOutputs
        The run's output directory.
    agreement : Agreement
        The vocabulary agreement (on a resume, the checkpoint's).
    strategy : TopicStrategy
        The method's strategy, at round ``start_round``'s state.
    checkpoints : CheckpointWriter
        Where the run's state goes after each due round.
    recorder : RoundRecorder
        Flower's ``evaluate_fn``: each round's line of metrics.jsonl.
    initial : ArrayRecord
        The global model the rounds start from.
    counted_lost_releases : tuple of str
        The ids of the lost releases the strategy's state counts (never counted twice).
    """

    config: RunConfig
    checkpoint: Checkpoint | None
    outputs: RunOutputs
    agreement: Agreement
    strategy: TopicStrategy
    checkpoints: CheckpointWriter
    recorder: RoundRecorder
    initial: ArrayRecord
    counted_lost_releases: tuple[str, ...] = ()

    @property
    def start_round(self) -> int:
        """The rounds already completed (0 for a new run)."""
        return 0 if self.checkpoint is None else self.checkpoint.round

    @property
    def timeout(self) -> float:
        """``round-timeout``, in seconds."""
        return float(self.config["round-timeout"])

    @property
    def data(self) -> str:
        """The corpus the parties said they read (their own files unless all hold shares of ``dataset``)."""
        return self.agreement.data_source(self.config.dataset)


def start_run(grid: Grid, config: RunConfig) -> StartedRun:
    """Stage 1, the vocabulary agreement, and the method's strategy ready for its first round.

    A new run agrees on the vocabulary (:func:`~flower_topics.federation.vocabulary_agreement.agree_vocabulary`)
    and checkpoints round 0. A resume (``resume`` set) reads the checkpoint before anything is sent,
    restores the agreement without running it again (it would spend the parties' privacy a second
    time) and the strategy's state, and sends the parties the vocabulary.
    """
    started = time.time()
    checkpoint = resume_checkpoint(config)  # before anything is sent: a refused resume sends nothing
    timeout = float(config["round-timeout"])
    outputs = RunOutputs(config.output_dir, resume_from=config["resume"] or None,
                         resume_round=0 if checkpoint is None else checkpoint.round)
    if checkpoint is None:
        agreement = agree_vocabulary(grid, config, timeout=timeout)
    else:  # the agreement is not run again: it would spend the parties' privacy a second time
        agreement = Agreement.from_state(checkpoint.agreement, checkpoint.vocabulary)
    outputs.write_vocabulary(agreement.vocabulary)
    strategy = build_strategy(config, agreement.vocabulary)
    strategy.excluded.update(agreement.excluded)
    if str(config["prevalence-period"]):  # refused before round 1, not after the last
        check_prevalence_config(config, noisy=bool(strategy.prevalence_config()))
    checkpoints = CheckpointWriter(outputs.directory, config, agreement)
    if checkpoint is None:
        initial, counted = strategy.initial_arrays(), ()
        checkpoints.save(0, strategy, initial)
    else:
        initial, counted = restore_strategy(strategy, checkpoint, checkpoints)
        restored = time.time() - started
        strategy.excluded.update(send_vocabulary(grid, agreement.vocabulary, int(config["min-nodes"]), timeout))
    recorder = RoundRecorder(strategy, agreement, outputs, config, synthetic_truth(config, agreement))
    run = StartedRun(config, checkpoint, outputs, agreement, strategy, checkpoints, recorder, initial, counted)
    if checkpoint is not None:
        reopen_rounds(run, checkpoint, restored, time.time() - started)
    console.say("flower-topics: %s, %d topics, %d rounds on %s; vocabulary: %d words (%s) from %d node(s)",
                config.method, config.num_topics, config.num_rounds, run.data,
                len(agreement.vocabulary), agreement.mode, agreement.nodes)
    return run


def restore_strategy(strategy: TopicStrategy, checkpoint: Checkpoint, checkpoints: CheckpointWriter
                     ) -> tuple[ArrayRecord, tuple[str, ...]]:
    """Bring ``strategy`` to the checkpoint's state, its lost releases counted, and checkpoint that state again.

    Returns the global model the rounds continue from and the ids of the lost releases the
    strategy's state counts now (:func:`~flower_topics.run.resume.resume_strategy`).
    """
    resume_strategy(strategy, checkpoint)
    initial = array_record(checkpoint.global_arrays)
    counted = (*checkpoint.counted_lost_releases, *(release["id"] for release in checkpoint.lost_releases))
    # the lost releases are in the state now: a crash before the next round's checkpoint must not lose them
    checkpoints.save(checkpoint.round, strategy, initial, counted)
    return initial, counted


def reopen_rounds(run: StartedRun, checkpoint: Checkpoint, restore_seconds: float, resume_seconds: float) -> None:
    """On a resume from ``checkpoint``, continue the interrupted run's metrics.jsonl (:meth:`RoundRecorder.resumed`,
    :meth:`RoundRecorder.reopen`) and say where the run resumes."""
    earlier_rows = read_metrics(run.outputs.metrics_path)
    run.recorder.resumed(earlier_rows, restore_seconds, resume_seconds)
    run.recorder.reopen(run.start_round, run.initial, earlier_rows)
    console.say("flower-topics: resumed %s after round %d of %d (checkpoint restored in %.2f s, parties "
                "ready after %.2f s)%s", run.config["resume"], checkpoint.round, run.config.num_rounds,
                restore_seconds, run.recorder.resume_seconds,
                f"; {len(checkpoint.lost_releases)} round(s) released after it and lost are counted"
                if checkpoint.lost_releases else "")


class LatestModel:
    """The global model of the latest recorded round; :meth:`record` is the rounds' ``evaluate_fn``.

    Parameters
    ----------
    run : StartedRun
        The run (its recorder, checkpoints and initial model).
    """

    def __init__(self, run: StartedRun) -> None:
        self.run = run
        self.arrays = run.initial

    def record(self, server_round: int, arrays: ArrayRecord) -> MetricRecord | None:
        """Record round ``server_round`` (:class:`RoundRecorder`), checkpoint it when due, and keep its model."""
        metrics = self.run.recorder(server_round, arrays)
        if self.run.checkpoints.due(server_round):
            self.run.checkpoints.save(server_round, self.run.strategy, arrays, self.run.counted_lost_releases)
        self.arrays = arrays
        return metrics


def training_rounds(grid: Grid, run: StartedRun) -> ArrayRecord:
    """Stages 2 and 3, the training rounds with federated evaluation: Flower's round loop after the rounds
    already completed (:class:`~flower_topics.run.resume.RoundOffset`), each round recorded and checkpointed when
    due. Returns the final global model (a resume whose rounds all failed: the checkpoint's)."""
    rounds = RoundOffset(run.strategy, run.start_round, run.outputs.directory)
    latest = LatestModel(run)
    result = rounds.start(
        grid=grid,
        initial_arrays=run.initial,
        num_rounds=run.config.num_rounds - run.start_round,
        timeout=run.timeout,
        evaluate_fn=rounds.evaluate_fn(latest.record),
    )
    run.recorder.flush()  # a line still held for its evaluation (a run whose next round did not come)
    if not result.arrays and run.checkpoint is None:
        raise RuntimeError("no round produced a model: every client reply failed (see the log above)")
    return result.arrays if result.arrays else latest.arrays


def topic_prevalence(grid: Grid, run: StartedRun, model: TopicModel) -> Prevalence | None:
    """Stage 4, the topic prevalence against the final topics (None when ``prevalence-period`` is not set, or
    when the stage fails in one line: the trained model is still written)."""
    try:
        return collect_prevalence(grid, run.config, run.strategy, model.topic_word, run.agreement.vocabulary,
                                  run.timeout)
    except UserInputError as exc:  # the trained model is still written
        console.say("flower-topics: error: %s (the model is written; prevalence.csv is not)", exc, level=ERROR)
        return None


def model_metadata(run: StartedRun, prevalence: Prevalence | None, seconds: float) -> dict[str, Any]:
    """The final model's metadata: the method, the run config, the privacy report, the agreement, the wall
    time ``seconds``, the prevalence summary and, on a resume, where it resumed from."""
    config, checkpoint, recorder = run.config, run.checkpoint, run.recorder
    return {
        "method": config.method,
        "run_config": {**config, "dataset": run.data},  # the corpus the parties said they read
        "rounds": config.num_rounds,
        "privacy": recorder.privacy().to_dict(),
        "vocabulary_agreement": run.agreement.summary(),
        "wall_time": seconds,
        "engine": "flower",
        **({} if prevalence is None else {"prevalence": prevalence.summary()}),
        **({} if checkpoint is None else {"resumed": {
            "from": str(config["resume"]), "after_round": run.start_round, "lost_releases": checkpoint.lost_releases,
            "seconds_to_restore": recorder.restore_seconds, "seconds_to_resume": recorder.resume_seconds}}),
    }


def write_outputs(run: StartedRun, arrays: ArrayRecord, trained: TopicModel, prevalence: Prevalence | None
                  ) -> TopicModel:
    """Stage 5, the outputs: the ``trained`` model (of the final global ``arrays``) with its metadata, the
    strategy's final state, the plots, ``prevalence.csv``, and the run's summary on the console. Returns the model
    written."""
    seconds = time.time() - run.recorder.started  # the run's time: the model's metadata, the report and the console
    model = TopicModel(trained.topic_word, trained.vocabulary, metadata=model_metadata(run, prevalence, seconds))
    run.outputs.write_model(model)
    run.outputs.write_state({key: array.numpy() for key, array in arrays.items()})
    run.outputs.plot()
    if prevalence is not None:
        written = write_prevalence(run.outputs.directory, prevalence, model.labels())
        console.say("flower-topics: topic prevalence over %d period(s) from %d part(y/ies)%s: %s",
                    len(prevalence.table.periods), prevalence.parties,
                    f" (noise sd {prevalence.noise_std:.3g} a cell)" if prevalence.noise_std else "",
                    ", ".join(str(p) for p in written))
    for line in console.summary_lines(
            method=run.config.method, topics=model.top_words(10), asked_topics=run.config.num_topics,
            last=run.recorder.last, privacy=run.recorder.privacy().summary(), directory=str(run.outputs.directory),
            seconds=seconds, notes=get_method(run.config.method).notes(run.config)):
        console.say("%s", line)
    return model


def run_server(grid: Grid, run_config: Mapping[str, Any]) -> TopicModel:
    """Run one federated training on ``grid`` and write its outputs; the server opens no party's corpus.

    The stages of a run (docs/architecture.md): the vocabulary agreement (:func:`start_run`), the
    method's training rounds with federated evaluation every ``eval-every`` rounds
    (:func:`training_rounds`), the topic prevalence (:func:`topic_prevalence`) and the outputs
    (:func:`write_outputs`). After the agreement, after the last round and when due
    (``checkpoint-interval``) the run's state goes to ``output-dir/checkpoint.npz``; with ``resume``
    set to an interrupted run's output directory the run continues from its last complete round,
    without a new agreement (:mod:`flower_topics.run.checkpoint`).

    Parameters
    ----------
    grid : Grid
        Flower's grid (simulation or deployment).
    run_config : Mapping
        The run config (validated here; defaults fill what is missing).

    Returns
    -------
    TopicModel
        The final global model (also written to ``output-dir/model.npz``).
    """
    run = start_run(grid, parse_run_config(run_config))
    arrays = training_rounds(grid, run)
    model = run.recorder.model(arrays)
    prevalence = topic_prevalence(grid, run, model)
    return write_outputs(run, arrays, model, prevalence)


def resume_checkpoint(config: Mapping[str, Any]) -> Checkpoint | None:
    """The checkpoint the run config's ``resume`` names, checked against the run config (None: a new run).

    Raises
    ------
    UserInputError
        One line: no readable checkpoint there, or a run config that changes more than a
        resume may (:func:`~flower_topics.run.resume.check_resume_config`).
    """
    if not str(config["resume"]):
        return None
    checkpoint = load_checkpoint(str(config["resume"]))
    saved = {**checkpoint.config}
    saved.pop("resume", None)
    try:
        saved = parse_run_config(saved)
    except UserInputError as exc:
        raise UserInputError(f"resume: the checkpoint's run config is not valid here ({exc})") from None
    check_resume_config(saved, config, checkpoint.round)
    return checkpoint


def make_server_app(run_config: Mapping[str, Any] | None = None) -> ServerApp:
    """A ServerApp bound to ``run_config`` (None: read each run's own config).

    Parameters
    ----------
    run_config : Mapping, optional
        A fixed run config, for ``flwr.simulation.run_simulation`` (which passes an
        empty one); by default the config of the run is used.
    """
    server = ServerApp()

    @server.main()
    def main(grid: Grid, context: Context) -> None:
        raw = context.run_config if run_config is None else run_config
        console.install(verbose=str(raw.get("verbose", "false")).lower() in ("true", "1"))
        try:
            run_server(with_fast_polling(grid), raw)  # Flower's grids pull replies every 3 s (deployment) or 0.1 s (simulation)
        except UserInputError as exc:
            console.user_error(str(exc))  # one line; Flower's traceback of it is dropped
            raise  # not SystemExit: Flower would mark the run as completed

    return server


app = make_server_app()
