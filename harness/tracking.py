"""MLflow, and only here: one parent run per study invocation, one child run per trial (row x seed).

The local default is a sqlite store in the working directory (`mlflow ui` there shows every study);
MLFLOW_TRACKING_URI points at a shared server. The client API is used throughout (no fluent active-run
state), so a Ray worker can open, reopen and close its own run. Metrics are sent in batches.

Child runs carry the tags study, version, row, profile, seed, config_hash, trial_key, git_sha, git_dirty,
hardware; params are the resolved configs, flattened (model.d_model, train.steps, data.name, ...).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import mlflow
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from .errors import UserError

PARENT_KIND, CHILD_KIND = "study", "trial"
_SCHEMES = ("sqlite", "http", "https", "file", "postgresql", "mysql", "databricks")


def tracking_uri() -> str:
    uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
    if not uri:
        # Absolute, so that Ray workers (whose working directory is elsewhere) write to the same store.
        return f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"
    scheme = uri.split(":", 1)[0].split("+", 1)[0]
    if "://" not in uri or scheme not in _SCHEMES:
        raise UserError(f"MLFLOW_TRACKING_URI={uri!r} is not a tracking URI MLflow accepts here; use e.g. "
                        "http://127.0.0.1:5000 or sqlite:////abs/path/mlflow.db, or unset it for ./mlflow.db.")
    return uri


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


def _quote(value: str) -> str:
    return "'" + str(value).replace("'", "\\'") + "'"


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
        except Exception as err:  # an unreachable server, a bad path: one sentence, not a stack
            raise UserError(f"cannot reach the MLflow tracking store {uri} ({type(err).__name__}: "
                            f"{str(err).splitlines()[0][:200]}); start it or point MLFLOW_TRACKING_URI elsewhere.") from None

    def latest_parent(self, profile: str, version: int):
        runs = self.client.search_runs(
            [self.experiment_id], f"tags.kind = '{PARENT_KIND}' and tags.profile = {_quote(profile)} "
                                  f"and tags.version = '{version}'", order_by=["attributes.start_time DESC"],
            max_results=1)
        return runs[0] if runs else None

    def children(self, parent_id: str) -> list:
        return list(self.client.search_runs([self.experiment_id], f"tags.mlflow.parentRunId = {_quote(parent_id)}"))

    def start_parent(self, name: str, tags: dict[str, Any], params: dict[str, Any]) -> str:
        run = self.client.create_run(self.experiment_id, tags={**{k: str(v) for k, v in tags.items()},
                                                               "kind": PARENT_KIND}, run_name=name)
        self.client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in params.items()])
        return run.info.run_id

    def reopen_parent(self, run_id: str, resumes: int) -> None:
        self.client.update_run(run_id, status="RUNNING")
        self.client.log_batch(run_id, tags=[RunTag("resumed", "true"), RunTag("resume_count", str(resumes))])

    def end_parent(self, run_id: str, status: str, metrics: dict[str, float], tags: dict[str, str]) -> None:
        now = int(time.time() * 1000)
        self.client.log_batch(run_id, metrics=[Metric(k, float(v), now, 0) for k, v in metrics.items()],
                              tags=[RunTag(k, str(v)) for k, v in tags.items()])
        self.client.set_terminated(run_id, status)

    def mark_unfinished(self, parent_id: str, status: str = "KILLED") -> None:
        """Children left RUNNING by an interrupted invocation (a killed process reaps nothing)."""
        for run in self.children(parent_id):
            if run.info.status == "RUNNING":
                self.client.set_terminated(run.info.run_id, status)


class TrialRun:
    """A worker's child run, reopened (not duplicated) when the same trial runs again after a resume or retry."""

    def __init__(self, uri: str, experiment_id: str, parent_id: str, trial_key: str, tags: dict[str, Any],
                 params: dict[str, str], flush_every_s: float = 10.0):
        self.client = MlflowClient(uri)
        self.seconds = 0.0                # time spent talking to MLflow (the harness reports it as overhead)
        t0 = time.perf_counter()
        found = self.client.search_runs(
            [experiment_id], f"tags.mlflow.parentRunId = {_quote(parent_id)} and tags.trial_key = {_quote(trial_key)}")
        if found:
            self.run_id = found[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            self.reopened = True
        else:
            all_tags = {**{k: str(v) for k, v in tags.items()}, "kind": CHILD_KIND, "trial_key": trial_key,
                        "mlflow.parentRunId": parent_id}
            self.run_id = self.client.create_run(experiment_id, tags=all_tags, run_name=trial_key).info.run_id
            items = [Param(k, v[:6000]) for k, v in params.items()]
            for i in range(0, len(items), 100):           # MLflow takes at most 100 params a batch
                self.client.log_batch(self.run_id, params=items[i:i + 100])
            self.reopened = False
        self.buffer: list[Metric] = []
        self.flush_every_s, self.last_flush = flush_every_s, time.perf_counter()
        self.seconds += time.perf_counter() - t0

    def log_step(self, step: int, metrics: dict[str, float]) -> None:
        now = int(time.time() * 1000)
        self.buffer.extend(Metric(k, float(v), now, step) for k, v in metrics.items()
                           if isinstance(v, (int, float)) and not isinstance(v, bool))
        if len(self.buffer) >= 500 or time.perf_counter() - self.last_flush >= self.flush_every_s:
            self.flush()

    def flush(self) -> None:
        t0 = time.perf_counter()
        while self.buffer:
            chunk = self.buffer[:1000]                    # MLflow takes at most 1000 metrics a batch
            self.client.log_batch(self.run_id, metrics=chunk)
            del self.buffer[:len(chunk)]
        self.last_flush = time.perf_counter()
        self.seconds += self.last_flush - t0

    def log_final(self, metrics: dict[str, Any], step: int) -> None:
        """Final numbers as metrics at the last step; strings (e.g. the sacreBLEU signature) as tags."""
        self.log_step(step, {k: v for k, v in metrics.items() if isinstance(v, (int, float))})
        tags = [RunTag(k, str(v)) for k, v in metrics.items() if isinstance(v, str)]
        self.flush()
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
            self.flush()
        finally:
            if reason:
                self.client.set_tag(self.run_id, "failure_reason", reason[:5000])
            self.client.set_terminated(self.run_id, status)
            self.seconds += time.perf_counter() - t0


def study_results(uri: str, study: str, profile: str | None = None) -> dict | None:
    """The latest invocation of a study (optionally of one profile) as read back from MLflow:
    {'parent': {'run_id', 'status', 'start_time', 'tags': {...}, 'params': {...}},
     'runs': pandas DataFrame, one row per child run: run_id, status, start_time, end_time, and the
     columns tags.<name>, params.<name> (strings) and metrics.<name> (last value of each metric)}.
    None when the store has no such study."""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(study)
    if exp is None:
        return None
    where = f"tags.kind = '{PARENT_KIND}'" + (f" and tags.profile = {_quote(profile)}" if profile else "")
    parents = client.search_runs([exp.experiment_id], where, order_by=["attributes.start_time DESC"], max_results=1)
    if not parents:
        return None
    parent = parents[0]
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs([exp.experiment_id], filter_string=f"tags.mlflow.parentRunId = {_quote(parent.info.run_id)}")
    return {"parent": {"run_id": parent.info.run_id, "status": parent.info.status,
                       "start_time": parent.info.start_time, "tags": dict(parent.data.tags),
                       "params": dict(parent.data.params), "metrics": dict(parent.data.metrics)},
            "runs": runs}


def metric_history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, key)]


def require_store(uri: str) -> None:
    """For readers: a local sqlite store that does not exist is an error, not a new empty store."""
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        raise UserError(f"there is no MLflow store at {uri[len('sqlite:///'):]}; run a study first "
                        "(`python -m harness run studies/table3.yaml`) or set MLFLOW_TRACKING_URI.")


def list_studies(uri: str) -> list[str]:
    """Names of the experiments that hold at least one study run."""
    require_store(uri)
    client = MlflowClient(uri)
    names = []
    for exp in client.search_experiments():
        if client.search_runs([exp.experiment_id], f"tags.kind = '{PARENT_KIND}'", max_results=1):
            names.append(exp.name)
    return sorted(names)
