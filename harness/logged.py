"""Reading what the studies logged, and only reading: one parent run per study invocation, one child run per
trial (row x seed), from an MLflow store or from a record standing in for one (harness/record.py, `report
--record`). The report, `status`, `list` and the study runner's resume read through here; harness/tracking.py
writes. Together they are the only modules that import mlflow.

The local default is a sqlite store in the working directory (`mlflow ui` there shows every study);
MLFLOW_TRACKING_URI points at a shared server.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
from pathlib import Path
from typing import Any, Iterator

import mlflow
from mlflow import MlflowClient

from harness import record
from harness.errors import UserError

PARENT_KIND, CHILD_KIND = "study", "trial"
_SCHEMES = ("sqlite", "http", "https", "file", "postgresql", "mysql", "databricks")


# A report reads one small JSON artifact per trial; MLflow draws a progress bar for each download, three lines of
# "Downloading artifacts" between the report's own. Off unless the user turned it on.
os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


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


# The parent-run tag holding an invocation's name (`run --name corpus2`): a named invocation (typically a
# --set variant of a profile) is reported and resumed apart from the profile's unnamed ones.
VARIANT_TAG = "variant"


PARENT_SEARCH = 500     # how many of a study's latest invocations are searched for one of a given name


def latest_named(parents: list, variant: str):
    """The first (latest) of `parents` whose name (`run --name`) is `variant`; "" for the unnamed ones."""
    return next((r for r in parents if r.data.tags.get(VARIANT_TAG, "") == variant), None)


def quote(value: str) -> str:
    return "'" + str(value).replace("'", "\\'") + "'"


HELD_TAG = "slice_held"     # a slice's parent: the trials other slices' records held when it started (`run --slices`)


def _parents(client, experiment_id: str, profile: str | None) -> list:
    where = f"tags.kind = '{PARENT_KIND}'" + (f" and tags.profile = {quote(profile)}" if profile else "")
    return client.search_runs([experiment_id], where, order_by=["attributes.start_time DESC"],
                              max_results=PARENT_SEARCH)


def variants(uri: str, study: str, profile: str | None = None) -> list[str]:
    """The names (`run --name`) of a study's named invocations, in the order they first ran."""
    rec = record_of(uri)
    if rec is not None:
        return [rec.variant] if rec.variant and rec.study == study and profile in (None, rec.profile) else []
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(study)
    parents = reversed(_parents(client, exp.experiment_id, profile)) if exp else []
    names = [r.data.tags.get(VARIANT_TAG, "") for r in parents]
    return [n for n in dict.fromkeys(names) if n]


def study_results(uri: str, study: str, profile: str | None = None, variant: str = "") -> dict | None:
    """The latest invocation of a study (optionally of one profile; of one name, `run --name`, where
    `variant` is given, else of the unnamed ones) as read back from MLflow:
    {'parent': {'run_id', 'status', 'start_time', 'tags': {...}, 'params': {...}},
     'runs': pandas DataFrame, one row per child run: run_id, status, start_time, end_time, and the
     columns tags.<name>, params.<name> (strings) and metrics.<name> (last value of each metric)}.
    None when the store has no such study. A `record:PATH` URI reads the one invocation a record holds."""
    rec = record_of(uri)
    if rec is not None:
        results = rec.results() if rec.matches(study, profile, variant) else None
    else:
        results = _study_results(uri, study, profile, variant)
    if results is not None and _RECORDING and _RECORDING[-1].results is None:
        _RECORDING[-1].results = record.copied(results)
    return results


_PUBLISHED_TAGS = ("mlflow.note.content", "mlflow.loggedArtifacts")


def _study_results(uri: str, study: str, profile: str | None, variant: str) -> dict | None:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(study)
    if exp is None:
        return None
    parent = latest_named(_parents(client, exp.experiment_id, profile), variant)
    if parent is None:
        return None
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs([exp.experiment_id], filter_string="tags.mlflow.parentRunId = "
                                                                 f"{quote(parent.info.run_id)}")
    # MLflow orders the metrics.*, params.* and tags.* columns as a set iterates (another order in each process):
    # sorted here, so that what a report reads, and its record, is the same from one reading to the next
    runs = runs[[c for c in runs.columns if "." not in c] + sorted(c for c in runs.columns if "." in c)]
    # publish_report's own tags (the last report's text, its artifacts' list) are left out: a report never reads
    # them, and its record would otherwise change each time a report is published.
    tags = {k: v for k, v in parent.data.tags.items() if k not in _PUBLISHED_TAGS}
    return {"parent": {"run_id": parent.info.run_id, "status": parent.info.status,
                       "start_time": parent.info.start_time, "tags": tags,
                       "params": dict(parent.data.params), "metrics": dict(parent.data.metrics),
                       "study_wall_seconds": study_wall_seconds(uri, parent.info.run_id)},
            "runs": runs}


def slice_reads(uri: str, parent_id: str, study_rows: list[str]) -> record.Reads | None:
    """A slice's record (`run --slices`): an invocation's parent run and its FINISHED trials, each with every metric
    history and top-level JSON artifact it logged, so that any report of the study can be made from it; None while
    no trial has finished. study_rows: every row of its profile in the study file's order (assembly orders by it)."""
    client = MlflowClient(uri)
    parent = client.get_run(parent_id)
    mlflow.set_tracking_uri(uri)
    runs = mlflow.search_runs([parent.info.experiment_id],
                              filter_string=f"tags.mlflow.parentRunId = {quote(parent_id)}")
    if not len(runs) or not (runs["status"] == "FINISHED").any():
        return None
    runs = runs[runs["status"] == "FINISHED"].reset_index(drop=True)
    runs = runs[[c for c in runs.columns if "." not in c] + sorted(c for c in runs.columns if "." in c)]
    tags = {k: v for k, v in parent.data.tags.items() if k not in _PUBLISHED_TAGS}
    reads = record.Reads(results={"parent": {
        "run_id": parent_id, "status": parent.info.status, "start_time": parent.info.start_time,
        "tags": {**tags, "study_rows": ",".join(study_rows)}, "params": dict(parent.data.params),
        "metrics": dict(parent.data.metrics), "study_wall_seconds": study_wall_seconds(uri, parent_id)},
        "runs": runs})
    for run_id in runs["run_id"]:
        for key in sorted(client.get_run(run_id).data.metrics):
            reads.history(run_id, key, [(m.step, m.value) for m in client.get_metric_history(run_id, key)])
        for art in client.list_artifacts(run_id):
            if not art.is_dir and art.path.endswith(".json"):
                reads.artifact(run_id, art.path, _artifact_json(uri, run_id, art.path))
        reads.complete.append(run_id)
    return reads


def _beats(client, run_id: str) -> tuple[float | None, int | None]:
    """A parent run's heartbeat (invocation_wall_seconds, step = the invocation): the wall time summed over its
    invocations (the last figure each logged; None: none logged) and when the latest beat came (ms)."""
    history = client.get_metric_history(run_id, "invocation_wall_seconds")
    last: dict[int, float] = {}
    for m in history:
        last[m.step] = max(m.value, last.get(m.step, 0.0))
    return (sum(last.values()) if last else None), max((m.timestamp for m in history), default=None)


def _latest_per_step(history) -> list[tuple[int, float, int]]:
    """(step, value, timestamp) in step order, one per step: the latest logged (a retried or resumed trial logs
    again the evaluations between its last checkpoint and its interruption)."""
    latest = {}
    for m in sorted(history, key=lambda m: (m.step, m.timestamp)):
        latest[m.step] = (m.step, m.value, m.timestamp)
    return list(latest.values())


def study_snapshot(uri: str, study: str, profile: str, variant: str = "") -> dict | None:
    """Where the latest invocation of a study's profile (of one name, `run --name`, or the unnamed ones) stands,
    for `python -m harness status`: {'parent': {'run_id', 'status', 'version', 'command' (the latest
    invocation's: a --resume's where it was resumed), 'rows', 'seeds' (as it ran), 'wall_seconds',
    'last_heard_ms' (the latest of its driver's heartbeat and its running trials' logged steps; None: nothing
    yet)}, 'trials': {trial key: {'status', 'config_hash', 'reason' (a failed trial's),
    'metrics' (last values), 'step' (the last training step logged), 'dev_ppl' ([(step, PPL)] in step order, one
    per step), 'start', 'end'}}}. None when the store has no such invocation."""
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(study)
    parent = latest_named(_parents(client, exp.experiment_id, profile), variant) if exp else None
    if parent is None:
        return None
    wall, heard = _beats(client, parent.info.run_id)
    trials = {}
    for run in client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = {quote(parent.info.run_id)}"):
        m, key = run.data.metrics, run.data.tags.get("trial_key", run.info.run_id)
        done = run.info.status == "FINISHED"
        # the last training step: a finished run logged it (steps); any other is read off its loss curve
        losses = _latest_per_step(client.get_metric_history(run.info.run_id, "train_loss")) \
            if "train_loss" in m and not (done and "steps" in m) else []
        if run.info.status == "RUNNING" and losses:
            heard = max(heard or 0, max(t for _, _, t in losses))
        # a finished run's best is in its final metrics: its curve is read only where they are not
        dev = [(s, v) for s, v, _ in _latest_per_step(client.get_metric_history(run.info.run_id, "dev_ppl"))] \
            if "dev_ppl" in m and not (done and "best_step" in m and "best_dev_ppl" in m) else []
        trials[key] = {"status": run.info.status, "config_hash": run.data.tags.get("config_hash", ""),
                       "reason": run.data.tags.get("failure_reason", ""),
                       "metrics": dict(m), "step": max((s for s, _, _ in losses), default=0), "dev_ppl": dev,
                       "start": run.info.start_time, "end": run.info.end_time}
    return {"parent": {"run_id": parent.info.run_id, "status": parent.info.status,
                       "version": parent.data.tags.get("version", ""),
                       "command": parent.data.tags.get("command_last") or parent.data.tags.get("command", ""),
                       "rows": parent.data.params.get("rows", ""), "seeds": parent.data.params.get("seeds", ""),
                       "held": parent.data.tags.get(HELD_TAG, ""),
                       "wall_seconds": wall, "last_heard_ms": heard},
            "trials": trials}


def invocations(uri: str) -> list[dict]:
    """The latest invocation of every study, profile and name in the store, for `status` without a study: study,
    profile, name, run_id, status, started (ms), study_file, rows and seeds (as run), last_heard_ms (its driver's
    latest heartbeat), and its child runs as (trial key, config hash, status). In study order, then by start."""
    client = MlflowClient(uri)
    out = []
    for name in list_studies(uri):
        exp = client.get_experiment_by_name(name)
        seen = set()
        for parent in _parents(client, exp.experiment_id, None):
            tags = parent.data.tags
            key = (tags.get("profile", ""), tags.get(VARIANT_TAG, ""))
            if key in seen:
                continue
            seen.add(key)
            children = [(r.data.tags.get("trial_key", ""), r.data.tags.get("config_hash", ""), r.info.status)
                        for r in client.search_runs([exp.experiment_id],
                                                    f"tags.mlflow.parentRunId = {quote(parent.info.run_id)}")]
            out.append({"study": name, "profile": key[0], "name": key[1], "run_id": parent.info.run_id,
                        "status": parent.info.status, "started": parent.info.start_time,
                        "study_file": tags.get("study_file", ""), "rows": parent.data.params.get("rows", ""),
                        "seeds": parent.data.params.get("seeds", ""), "children": children,
                        "last_heard_ms": _beats(client, parent.info.run_id)[1]})
    return out


def metric_history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    rec = record_of(uri)
    points = rec.history(run_id, key) if rec is not None else \
        [(m.step, m.value) for m in MlflowClient(uri).get_metric_history(run_id, key)]
    if _RECORDING:
        _RECORDING[-1].history(run_id, key, points)
    return points


def artifact_json(uri: str, run_id: str, name: str) -> Any:
    """A JSON artifact of a run (e.g. a trial's heads.json), read back; None where the run has none."""
    rec = record_of(uri)
    value = rec.artifact(run_id, name) if rec is not None else _artifact_json(uri, run_id, name)
    if _RECORDING:
        _RECORDING[-1].artifact(run_id, name, copy.deepcopy(value))
    return value


def _artifact_json(uri: str, run_id: str, name: str) -> Any:
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = MlflowClient(uri).download_artifacts(run_id, name, tmp)
        except Exception:         # MLflow raises its own (and OSError) for an artifact that is not there
            return None
        return json.loads(Path(local).read_text(encoding="utf-8"))


# What the report in progress read (`recording`), innermost last; records read as stores, by URI.
_RECORDING: list[record.Reads] = []


_RECORDS: dict[str, record.Record] = {}


@contextlib.contextmanager
def recording() -> Iterator[record.Reads]:
    """Within it, every study_results, metric_history and artifact_json is also kept in the Reads it yields: what
    `report` writes as the record beside a report (harness/record.py)."""
    reads = record.Reads()
    _RECORDING.append(reads)
    try:
        yield reads
    finally:
        _RECORDING.pop()


def record_uri(path: Path | list[Path]) -> str:
    """The tracking URI that reads a record file as a store of its one invocation; several records (slices of one
    study, profile and name) are read as one invocation of all their trials (record.assemble)."""
    paths = [path] if isinstance(path, (str, Path)) else list(path)
    return record.SCHEME + record.SEPARATOR.join(str(Path(p).resolve()) for p in paths)


def record_uris(paths: list[Path]) -> list[str]:
    """`report --record FILE ..`: one URI for each study, profile and name among the records, so that the slices of
    one study (and a report's record given beside them) assemble into one report."""
    groups: dict[tuple[str, str, str], list[Path]] = {}
    for path in paths:
        rec = record.load(path)
        groups.setdefault((rec.study, rec.profile, rec.variant), []).append(Path(path))
    return [record_uri(group) for group in groups.values()]


def is_record(uri: str) -> bool:
    return uri.startswith(record.SCHEME)


def record_of(uri: str) -> record.Record | None:
    """The record a `record:` URI names (None for any other URI), read again when its file changed."""
    if not is_record(uri):
        return None
    paths = [Path(p) for p in uri[len(record.SCHEME):].split(record.SEPARATOR)]
    stats = [p.stat() if p.is_file() else None for p in paths]
    key = uri + "".join(f"|{s.st_mtime_ns if s else 0}|{s.st_size if s else 0}" for s in stats)
    if key not in _RECORDS:
        loaded = [record.load(p) for p in paths]
        _RECORDS[key] = loaded[0] if len(loaded) == 1 else record.assemble(loaded)
    return _RECORDS[key]


def require_store(uri: str) -> None:
    """For readers: a local sqlite store that does not exist is an error, not a new empty store."""
    if is_record(uri):
        record_of(uri)
        return
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).is_file():
        raise UserError(f"there is no MLflow store at {uri[len('sqlite:///'):]}; run a study first "
                        "(`python -m harness run studies/table3.yaml`) or set MLFLOW_TRACKING_URI.")


def list_studies(uri: str) -> list[str]:
    """Names of the experiments that hold at least one study run."""
    require_store(uri)
    if is_record(uri):
        return [record_of(uri).study]
    client = MlflowClient(uri)
    names = []
    for exp in client.search_experiments():
        if client.search_runs([exp.experiment_id], f"tags.kind = '{PARENT_KIND}'", max_results=1):
            names.append(exp.name)
    return sorted(names)


# A study's key figures, in this order, where its trials logged them (train studies: PPL, both BLEUs and
# size; Table 4: F1 and the share of trees; Table 1: the fitted exponents).
def study_wall_seconds(uri: str, parent_id: str) -> float | None:
    """A study's wall time over all its invocations: the last figure each logged (None: none logged, a study
    run before invocations were timed)."""
    return _beats(MlflowClient(uri), parent_id)[0]


def trial_progress(uri: str, experiment_id: str, parent_id: str) -> dict[str, dict]:
    """What each child run of a study invocation has logged so far, by trial key: status, the last
    training step and its loss, tokens/s, training seconds, and start and end times (ms). For the
    driver's live view (harness/study/progress.py), which polls it."""
    client = MlflowClient(uri)
    out = {}
    for run in client.search_runs([experiment_id], f"tags.mlflow.parentRunId = {quote(parent_id)}"):
        m = run.data.metrics
        step = 0
        if run.info.status == "RUNNING" and "train_loss" in m:
            history = client.get_metric_history(run.info.run_id, "train_loss")
            step = max((h.step for h in history), default=0)
        elif "steps" in m:
            step = int(m["steps"])
        out[run.data.tags.get("trial_key", run.info.run_id)] = {
            "status": run.info.status, "step": step, "loss": m.get("train_loss"),
            "tokens_per_s": m.get("tokens_per_s"), "train_seconds": m.get("train_seconds", 0.0),
            "start": run.info.start_time, "end": run.info.end_time}
    return out
