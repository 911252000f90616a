"""Writing to MLflow: one parent run per study invocation, one child run per trial (row x seed); harness/logged.py
reads them back (the two are the only modules that import mlflow).

The local default is a sqlite store in the working directory (`mlflow ui` there shows every study);
MLFLOW_TRACKING_URI points at a shared server. The client API is used throughout (no fluent active-run
state), so a Ray worker can open, reopen and close its own run. Metrics are sent in batches.

Child runs carry the tags study, version, row, profile, seed, config_hash, trial_key, git_sha, git_dirty,
hardware (the worker's own), version.<package> (torch, ray, mlflow, sacrebleu, sentencepiece, fvcore and the
project: harness/system.versions), workers and backend; the parent has the same version tags; params are the
resolved configs, flattened (model.d_model, train.steps, data.name, ...).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from harness.errors import UserError
from harness.logged import CHILD_KIND, PARENT_KIND, PARENT_SEARCH, latest_named, quote
from harness.metrics import VIEW

RUN_POINTER = "mlflow_run.json"     # in a trial's run directory: its tracking URI and child run id


# MLflow 3's UI opens an experiment in its GenAI view (traces, "Evaluations") unless the experiment says it
# is model training: then it opens the runs table.
EXPERIMENT_KIND = ("mlflow.experimentKind", "custom_model_development")


def _local_artifacts(uri: str) -> str | None:
    """Artifact root for a local sqlite store: ./mlruns beside the database, absolute (see tracking_uri)."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///"):]).parent / "mlruns").as_uri()
    return None


def flatten(config: dict, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flatten(value, name + "."))
        else:
            out[name] = str(value)
    return out


# What an invocation or a trial's attempt records of itself when it resumes an earlier one, as `KEY_last` beside
# the first's `KEY`: a study resumed at another commit or on another machine says so (report header,
# registration), rather than showing the first invocation's alone.
RESUMED_AS = ("git_sha", "git_dirty", "hardware")


def last_tags(tags: dict[str, Any]) -> list[RunTag]:
    return [RunTag(f"{k}_last", str(tags[k])) for k in RESUMED_AS if k in tags]


class StudyTracking:
    """The driver's side: the experiment, the parent run, and what earlier invocations finished."""

    def __init__(self, uri: str, study: str):
        self.uri = uri
        self.client = MlflowClient(uri)
        try:
            exp = self.client.get_experiment_by_name(study)
            # Created here, in the driver, before any trial starts: parallel trials opening a fresh sqlite
            # store at once would race on its schema migration.
            self.experiment_id = exp.experiment_id if exp else \
                self.client.create_experiment(study, artifact_location=_local_artifacts(uri))
            if exp is None or exp.tags.get(EXPERIMENT_KIND[0]) != EXPERIMENT_KIND[1]:
                self.client.set_experiment_tag(self.experiment_id, *EXPERIMENT_KIND)
        except Exception as err:  # an unreachable server, a bad path: one sentence, not a stack
            raise UserError(f"cannot reach the MLflow tracking store {uri} ({type(err).__name__}: "
                            f"{str(err).splitlines()[0][:200]}); start it or point MLFLOW_TRACKING_URI "
                            "elsewhere.") from None

    def latest_parent(self, profile: str, version: int, variant: str = ""):
        """The latest invocation of this profile and study version with this name (`run --name`; "" for
        the unnamed ones)."""
        runs = self.client.search_runs(
            [self.experiment_id], f"tags.kind = '{PARENT_KIND}' and tags.profile = {quote(profile)} "
                                  f"and tags.version = '{version}'", order_by=["attributes.start_time DESC"],
            max_results=PARENT_SEARCH)
        return latest_named(runs, variant)

    def children(self, parent_id: str) -> list:
        return list(self.client.search_runs([self.experiment_id], f"tags.mlflow.parentRunId = {quote(parent_id)}"))

    def backfill_finished(self, run_id: str, metrics_jsonl: Path) -> int:
        """A finished trial's rows its run lacks (`missing_rows`: an attempt killed with them unsent and resumed
        past them, by code that sent only training rows), sent from its metrics.jsonl; its status, end time and
        tags stay as they were. Returns how many rows were sent."""
        missing = missing_rows(self.client, run_id, metrics_jsonl)[0]
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, step) for step, row in missing for k, v in row.items()]
        for i in range(0, len(metrics), 1000):          # MLflow takes at most 1000 metrics a batch
            self.client.log_batch(run_id, metrics=metrics[i:i + 1000])
        return len(missing)

    def supersede(self, run_id: str, why: str) -> None:
        """A trial's child run whose settings no longer match its row: tagged `superseded` with why, then deleted
        (MLflow's soft delete: reports and --resume no longer see it; the UI's deleted runs still hold it)."""
        self.client.set_tag(run_id, "superseded", why)
        self.client.delete_run(run_id)

    def row_headlines(self, parent_id: str) -> dict[str, float]:
        """Each row's key figure, the mean over its finished seeds, keyed `ROW/METRIC` (the first of VIEW_METRICS
        the row's trials logged, e.g. base/dev_ppl): logged on the parent run, so that the runs table a user
        lands on shows every row of the study with a value before any parent run is expanded."""
        values: dict[str, list[float]] = {}
        for run in self.children(parent_id):
            row, metrics = run.data.tags.get("row"), run.data.metrics
            key = next((k for k in VIEW_METRICS if k in metrics), None)
            if run.info.status == "FINISHED" and row and key:
                values.setdefault(f"{row}/{key}", []).append(metrics[key])
        return {k: sum(v) / len(v) for k, v in sorted(values.items())}

    def start_parent(self, name: str, tags: dict[str, Any], params: dict[str, Any]) -> str:
        run = self.client.create_run(self.experiment_id, tags={**{k: str(v) for k, v in tags.items()},
                                                               "kind": PARENT_KIND}, run_name=name)
        self.client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()])
        return run.info.run_id

    def tag_parent(self, run_id: str, tags: dict[str, str]) -> None:
        self.client.log_batch(run_id, tags=[RunTag(k, str(v)[:5000]) for k, v in tags.items()])

    def reopen_parent(self, run_id: str, resumes: int, command: str = "", now: dict[str, Any] | None = None) -> None:
        """Mark the parent running again for its `resumes`-th --resume, made by `command` (tag `command_last`;
        `command` stays the first invocation's), at the commit and on the hardware in `now` (tags `git_sha_last`,
        `git_dirty_last`, `hardware_last`; the first invocation's stay in `git_sha`, ...)."""
        self.client.update_run(run_id, status="RUNNING")
        self.client.log_batch(run_id, tags=[RunTag("resumed", "true"), RunTag("resume_count", str(resumes)),
                                            *([RunTag("command_last", command[:5000])] if command else []),
                                            *last_tags(now or {})])

    def log_prepare_seconds(self, run_id: str, seconds: float, invocation: int) -> None:
        """The driver's data preparation before the trials (BPE, a first corpus) in this invocation (metric
        prepare_seconds, step = the invocation): part of its wall time, outside the overhead account."""
        self._log_at_invocation(run_id, "prepare_seconds", seconds, invocation)

    def log_invocation_wall(self, run_id: str, seconds: float, invocation: int) -> None:
        """This invocation's wall time so far (metric invocation_wall_seconds, step = the invocation: 0 the
        first, 1 the first --resume, ...): a study run across sessions sums them (`study_wall_seconds`)."""
        self._log_at_invocation(run_id, "invocation_wall_seconds", seconds, invocation)

    def _log_at_invocation(self, run_id: str, key: str, seconds: float, invocation: int) -> None:
        self.client.log_batch(run_id, metrics=[Metric(key, float(seconds), int(time.time() * 1000), invocation)])

    def end_parent(self, run_id: str, status: str, metrics: dict[str, float], tags: dict[str, str]) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
                              tags=[RunTag(k, str(v)) for k, v in tags.items()])
        self.client.set_terminated(run_id, status)

    def discard_parent(self, run_id: str) -> None:
        """A parent run whose study could not start at all (deleted: it holds nothing)."""
        self.client.delete_run(run_id)

    def mark_unfinished(self, parent_id: str, status: str = "KILLED") -> None:
        """Children left RUNNING by an interrupted invocation (a killed process reaps nothing)."""
        for run in self.children(parent_id):
            if run.info.status == "RUNNING":
                self.client.set_terminated(run.info.run_id, status)


# A trial talks to the store through MLflow's REST client, which by default retries a failed request 7 times
# with exponential backoff (minutes of a stalled training loop per call while a server is down). Trials use
# a short leash instead and buffer what they could not send (TrialRun); users' own settings win.
TRIAL_HTTP_SETTINGS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                       "MLFLOW_HTTP_REQUEST_TIMEOUT": "20"}


WAIT_ENV = "HARNESS_MLFLOW_WAIT_S"     # how long a finishing trial waits for an unreachable store (default 300)


def _unreachable(err: BaseException) -> bool:
    """A store that cannot be reached (server down, network, locked database), as opposed to a request the
    store refused (those are bugs: raised at once)."""
    import requests
    if isinstance(err, (requests.exceptions.ConnectionError, requests.exceptions.Timeout, ConnectionError,
                        TimeoutError)):
        return True
    text = str(err)
    return any(s in text for s in ("Max retries exceeded", "Connection refused", "ConnectionError",
                                   "timed out", "database is locked", "Failed to establish"))


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def missing_rows(client, run_id: str, metrics_jsonl: Path) -> tuple[list[tuple[int, dict]], dict[str, set[int]]]:
    """What a trial's metrics.jsonl holds and its child run does not: the rows that never reached the store (it was
    down, or an attempt was killed with rows still in its buffer), training rows and dev evaluations alike (an
    evaluation is not repeated on resume when the checkpoint resumed from was written after it), each metric at each
    step once. Returns [(step, {metric: value})] and, by metric, the steps the run holds once those are sent."""
    rows = [json.loads(line) for line in metrics_jsonl.read_text().splitlines() if line.strip()] \
        if metrics_jsonl.exists() else []
    keys = sorted({k for r in rows for k, v in r.items() if k != "step" and _number(v)})
    held = {k: {m.step for m in client.get_metric_history(run_id, k)} for k in keys}
    missing = []
    for r in rows:
        step = r.get("step", -1)
        lacking = {k: v for k, v in r.items() if k in held and _number(v) and step not in held[k]}
        for k in lacking:           # a row the file holds twice (a run resumed at step 0 records step 0 again)
            held[k].add(step)
        if lacking:
            missing.append((step, lacking))
    return missing, held


class TrialRun:
    """A worker's child run, reopened (not duplicated) when the same trial runs again after a resume or retry.

    Metrics are buffered and sent in batches. While the store is unreachable they stay in the buffer (and
    in the trial's metrics.jsonl) and go out when it answers again; a finishing trial waits up to
    HARNESS_MLFLOW_WAIT_S seconds for it, then fails with a reason that says where the metrics are. A
    reopened run skips training steps it already holds (a retried trial recomputes the steps after its
    last checkpoint; on CPU they are bit-identical) and records how many attempts the trial took."""

    def __init__(self, uri: str, experiment_id: str, parent_id: str, trial_key: str, tags: dict[str, Any],
                 params: dict[str, str], flush_every_s: float = 10.0):
        for key, value in TRIAL_HTTP_SETTINGS.items():
            os.environ.setdefault(key, value)
        self.uri = uri
        self.client = MlflowClient(uri)
        self.seconds = 0.0                # time spent talking to MLflow (the harness reports it as overhead)
        t0 = time.perf_counter()
        found = self.client.search_runs(
            [experiment_id], f"tags.mlflow.parentRunId = {quote(parent_id)} and tags.trial_key = {quote(trial_key)}")
        self.logged_through = -1          # last training step this run already holds
        self.held: dict[str, set[int]] = {}     # by metric, the steps a reopened run holds (`backfill`)
        if found:
            self.run_id = found[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            attempts = int(found[0].data.tags.get("attempts", "1")) + 1
            self.client.log_batch(self.run_id, tags=[RunTag("attempts", str(attempts)), *last_tags(tags)])
            history = self.client.get_metric_history(self.run_id, "train_loss")
            self.logged_through = max((m.step for m in history), default=-1)
            self.reopened = True
        else:
            all_tags = {**{k: str(v) for k, v in tags.items()}, "kind": CHILD_KIND, "trial_key": trial_key,
                        "mlflow.parentRunId": parent_id, "attempts": "1"}
            self.run_id = self.client.create_run(experiment_id, tags=all_tags, run_name=trial_key).info.run_id
            items = [Param(k, v[:6000]) for k, v in params.items()]
            for i in range(0, len(items), 100):           # MLflow takes at most 100 params a batch
                self.client.log_batch(self.run_id, params=items[i:i + 100])
            self.reopened = False
        self.buffer: list[Metric] = []
        self.flush_every_s, self.last_flush = flush_every_s, time.perf_counter()
        self.unreachable_since: float | None = None
        self.seconds += time.perf_counter() - t0

    def backfill(self, metrics_jsonl: Path) -> int:
        """Send what an earlier attempt's metrics.jsonl holds and the store does not (`missing_rows`), and remember
        every metric and step the run then holds: the steps recomputed after the checkpoint resumed from, whose
        rows the file held too, are not sent again (dev evaluations included). Returns how many rows were queued,
        whole or in part."""
        t0 = time.perf_counter()
        missing, self.held = missing_rows(self.client, self.run_id, metrics_jsonl)
        self.seconds += time.perf_counter() - t0
        for step, metrics in missing:
            self._add(step, metrics)
        self.logged_through = max([self.logged_through, *self.held.get("train_loss", ())])
        return len(missing)

    def log_step(self, step: int, metrics: dict[str, float]) -> None:
        """Per-step training metrics and dev evaluations; what the run already holds is not sent twice (training
        steps up to the last it holds; any metric at a step `backfill` found held or sent)."""
        if "train_loss" in metrics and step <= self.logged_through:
            return
        if "train_loss" in metrics:
            self.logged_through = step
        metrics = {k: v for k, v in metrics.items() if step not in self.held.get(k, ())}
        if metrics:
            self._add(step, metrics)

    def _add(self, step: int, metrics: dict[str, Any]) -> None:
        now = int(time.time() * 1000)
        self.buffer.extend(Metric(k, float(v), now, step) for k, v in metrics.items() if _number(v))
        if len(self.buffer) >= 500 or time.perf_counter() - self.last_flush >= self.flush_every_s:
            self.flush()

    def flush(self, wait_s: float = 0.0) -> None:
        """Send the buffer. An unreachable store keeps it for the next flush; with wait_s > 0, retry for that
        long, then raise."""
        t0 = time.perf_counter()
        deadline = t0 + wait_s
        try:
            while self.buffer:
                chunk = self.buffer[:1000]                # MLflow takes at most 1000 metrics a batch
                try:
                    self.client.log_batch(self.run_id, metrics=chunk)
                except Exception as err:
                    if not _unreachable(err):
                        raise
                    if self.unreachable_since is None:
                        self.unreachable_since = time.time()
                        print(f"MLflow store {self.uri} unreachable ({type(err).__name__}); buffering metrics",
                              flush=True)
                    if time.perf_counter() >= deadline:
                        if wait_s:
                            raise RuntimeError(
                                f"the MLflow store {self.uri} stayed unreachable for "
                                f"{time.time() - self.unreachable_since:.0f} s; {len(self.buffer)} metric values "
                                "were not sent (they are in the trial's metrics.jsonl and are sent when the "
                                "trial is retried or resumed)") from None
                        return
                    time.sleep(min(5.0, max(0.0, deadline - time.perf_counter())))
                    continue
                del self.buffer[:len(chunk)]
                self.unreachable_since = None
        finally:
            self.last_flush = time.perf_counter()
            self.seconds += self.last_flush - t0

    def log_final(self, metrics: dict[str, Any], step: int) -> None:
        """Final numbers as metrics at the last step; strings (e.g. the sacreBLEU signature) as tags."""
        self._add(step, {k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        tags = [RunTag(k, str(v)) for k, v in metrics.items() if isinstance(v, str)]
        self.flush(wait_s=float(os.environ.get(WAIT_ENV, "300")))
        t0 = time.perf_counter()
        if tags:
            self.client.log_batch(self.run_id, tags=tags)
        self.seconds += time.perf_counter() - t0

    def log_artifacts(self, paths: list[Path]) -> None:
        t0 = time.perf_counter()
        for p in paths:
            if p.exists():
                self.client.log_artifact(self.run_id, str(p))
        self.seconds += time.perf_counter() - t0

    def finish(self, status: str = "FINISHED", reason: str | None = None) -> None:
        t0 = time.perf_counter()
        try:
            self.flush(wait_s=float(os.environ.get(WAIT_ENV, "300")) if status == "FINISHED" else 0.0)
        finally:
            if reason:
                self.client.set_tag(self.run_id, "failure_reason", reason[:5000])
            self.client.set_terminated(self.run_id, status)
            self.seconds += time.perf_counter() - t0


NOTE_LIMIT = 7500    # MLflow keeps tag values up to 8000 characters; the run's description is a tag


def publish_report(uri: str, parent_id: str, markdown: str, files: list[Path], table) -> None:
    """Put a regenerated report on the study's parent run, where the MLflow UI shows it: the Markdown as the
    run's description (`mlflow.note.content`; cut at a line with a pointer to the whole file when it is
    longer than a tag holds), the report's files as artifacts under report/, and its table as an MLflow
    table (report/table.json, shown by the artifact viewer). Running `report` again writes over the note and the
    files of the same name; a plot the new report no longer draws stays among the artifacts (MLflow's client has
    no call that deletes one), and the note, which lists the plots it shows, is the current word."""
    client = MlflowClient(uri)
    note = markdown
    if len(note) > NOTE_LIMIT:
        cut = note.rfind("\n", 0, NOTE_LIMIT - 200)
        note = note[:cut] + f"\n\n... (the rest is in the artifact report/{files[0].name})\n"
    client.set_tag(parent_id, "mlflow.note.content", note)
    for path in files:
        client.log_artifact(parent_id, str(path), artifact_path="report")
    client.log_table(parent_id, data=table, artifact_file="report/table.json")
    share_view(uri, parent_id)


# The MLflow UI's shared views (its runs page's "Share" button): an experiment tag holding a view state, opened
# by `#/experiments/<id>/runs?viewStateShareKey=<key>`. The UI reads plain JSON there (or its own compressed
# form) with the runs table's settings: which columns, which parent runs are expanded, the sort, the grouping.
VIEW_PREFIX = "mlflow.sharedViewState."


VIEW_METRICS = VIEW           # harness/metrics.py: the view's metric columns, in order


VIEW_PARAMS = ("model.n_layers", "model.d_model", "model.d_ff", "model.n_heads", "model.p_drop", "probe.layer")


def share_view(uri: str, parent_id: str) -> str:
    """Save the study invocation's view of the runs table in MLflow and return the link to it, relative to the
    server's root: the trials grouped by their `row` tag (MLflow's run grouping, each group's metrics averaged
    over its seeds; a group opens on its trials), so that the page shows every row of the study with its
    figures before any click; key metrics and knobs as columns. (The parent run is also marked expanded,
    which MLflow 3.17 does not restore from a shared view.)"""
    client = MlflowClient(uri)
    parent = client.get_run(parent_id)
    exp = parent.info.experiment_id
    children = client.search_runs([exp], f"tags.mlflow.parentRunId = {quote(parent_id)}", max_results=50)
    metrics = {k for r in children for k in r.data.metrics}
    params = {k for r in children for k in r.data.params}
    columns = ["tags.`row`", "tags.`seed`",
               *(f"metrics.`{k}`" for k in VIEW_METRICS if k in metrics),
               *(f"params.`{k}`" for k in VIEW_PARAMS if k in params)]
    state = {"selectedColumns": columns, "runsExpanded": {parent_id: True},
             "orderByKey": "attributes.start_time", "orderByAsc": False,
             "groupBy": {"aggregateFunction": "average", "groupByKeys": [{"mode": "tag", "groupByData": "row"}]}}
    client.set_experiment_tag(exp, VIEW_PREFIX + parent_id, json.dumps(state))
    # workflowType: a fresh browser opens MLflow 3.17 in its GenAI view whatever the experiment's kind says
    return f"#/experiments/{exp}/runs?viewStateShareKey={parent_id}&workflowType=machine_learning"


def log_evaluation(run_dir: Path, where: str, metrics: dict[str, Any], checkpoint: int | None = None) -> str | None:
    """Log a later evaluation of a finished trial (`python -m harness evaluate`) to the trial's own child
    run, under `eval/<data directory>/` so that it never overwrites what the trial logged itself: numbers as
    metrics (eval/multi30k-en-de/test_2017_flickr_bleu, ...), strings as tags, and the tag
    `evaluated_splits` listing every <data directory>/<split> scored so. Returns the run id, or None when
    the directory is not a study trial's (a `harness train` run has no MLflow run). One checkpoint's scores
    (`evaluate --checkpoint STEP`) go under `eval/<data directory>/checkpoint/` at that step, a curve beside
    the final weights' scores."""
    pointer = Path(run_dir) / RUN_POINTER
    if not pointer.is_file():
        return None
    ids = json.loads(pointer.read_text(encoding="utf-8"))
    client = MlflowClient(ids["tracking_uri"])
    run = client.get_run(ids["run_id"])
    data_name, split = where.rsplit("/", 1)
    label = where if checkpoint is None else f"{where}@{checkpoint}"
    splits = sorted(set(filter(None, run.data.tags.get("evaluated_splits", "").split(","))) | {label})
    now = int(time.time() * 1000)
    prefix = f"eval/{data_name}/" if checkpoint is None else f"eval/{data_name}/checkpoint/"
    client.log_batch(ids["run_id"],
                     metrics=[Metric(prefix + k, float(v), now, checkpoint or 0) for k, v in metrics.items()
                              if isinstance(v, (int, float)) and not isinstance(v, bool)],
                     tags=[RunTag(prefix + k, str(v)[:5000]) for k, v in metrics.items() if isinstance(v, str)]
                     + [RunTag("evaluated_splits", ",".join(splits))])
    return ids["run_id"]
