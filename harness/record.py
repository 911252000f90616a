"""A study invocation's record: everything its report read from MLflow (the parent run, the trials' table, and each
metric history and JSON artifact a section or plot asked for), kept as one file beside the report
(reports/[PROFILE/][NAME/]STUDY.record.json.gz). `python -m harness report --record FILE` regenerates the report
from it, byte for byte, with no MLflow store: a report whose store is gone can still be redrawn when the report code
changes, and a reader can check a committed report against the evidence it was made from.

A record holds what the report read and nothing else, so a report changed to read something more (a metric it never
drew) cannot be made from an older record; it says so and names the store to use instead. Tracking URIs of the form
`record:PATH` (harness/logged.py) read a record as a store of that one invocation.

Gzipped JSON written deterministically (sorted keys, no timestamp in the gzip header), so that regenerating a report
from its record writes the same bytes again. Read with json only: a record never runs code.
"""

from __future__ import annotations

import copy
import gzip
import hashlib
import io
import json
import math
import subprocess
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.errors import UserError
from harness.io import atomic_writer

FORMAT = 1
SCHEME = "record:"
SEPARATOR = "|"          # between the files of a `record:` URI that assembles several slices
SUFFIX = ".record.json.gz"


@dataclass(eq=False)
class Reads:
    """What one report read: the invocation (study_results' dict), and each history and artifact by run."""
    results: dict | None = None
    histories: dict[str, dict[str, list]] = field(default_factory=dict)
    artifacts: dict[str, dict[str, Any]] = field(default_factory=dict)
    # runs whose every metric history and JSON artifact is held (a slice's): one missing is absent, not unread
    complete: list[str] = field(default_factory=list)

    def history(self, run_id: str, key: str, points: list[tuple[int, float]]) -> None:
        self.histories.setdefault(run_id, {})[key] = [[int(s), float(v)] for s, v in points]

    def artifact(self, run_id: str, name: str, value: Any) -> None:
        self.artifacts.setdefault(run_id, {})[name] = value


@dataclass
class Record:
    """A record read back: the study, profile and name (`run --name`) of its invocation, and what was read."""
    path: Path
    study: str
    profile: str
    variant: str
    reads: Reads

    def results(self) -> dict:
        """study_results' dict as the report first read it (a copy: the report may add columns)."""
        return copied(self.reads.results)

    def matches(self, study: str, profile: str | None, variant: str) -> bool:
        return study == self.study and profile in (None, self.profile) and variant == self.variant

    def history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        try:
            return [(int(s), float(v)) for s, v in self.reads.histories[run_id][key]]
        except KeyError:
            if run_id in self.reads.complete:       # a slice holds every history: this one was never logged
                return []
            raise UserError(self._missing(f"history of metric {key!r} for run {run_id}")) from None

    def artifact(self, run_id: str, name: str) -> Any:
        try:
            return copy.deepcopy(self.reads.artifacts[run_id][name])
        except KeyError:
            if run_id in self.reads.complete:       # as a store answers for an artifact the run does not have
                return None
            raise UserError(self._missing(f"artifact {name!r} for run {run_id}")) from None

    def _missing(self, what: str) -> str:
        return (f"the record {self.path} holds no {what}: the report that wrote it did not read it, so this one "
                "can only be made from the study's MLflow store (MLFLOW_TRACKING_URI).")


def copied(results: dict) -> dict:
    """A study_results dict that no later change to the one given reaches (its parent deep-copied, its table too)."""
    return {"parent": copy.deepcopy(results["parent"]), "runs": results["runs"].copy()}


def record_path(report_md: Path) -> Path:
    """The record beside a report: STUDY.md -> STUDY.record.json.gz."""
    return report_md.with_name(report_md.stem + SUFFIX)


# ------------------------------------------------------------------------------------------ the trials' table

def _column(series: pd.Series) -> dict:
    """One column of the trials' table as JSON: its dtype and its values (missing ones as null; times in ns)."""
    if series.dtype.kind == "M":
        return {"dtype": str(series.dtype), "values": [None if pd.isna(v) else int(v.value) for v in series]}
    return {"dtype": str(series.dtype),
            "values": [None if _missing(v) else (v.item() if hasattr(v, "item") else v) for v in series]}


def _missing(v: Any) -> bool:
    return v is None or (isinstance(v, float) and math.isnan(v)) or v is pd.NA or v is pd.NaT


def _series(name: str, col: dict, index: pd.Index) -> pd.Series:
    dtype, values = col["dtype"], col["values"]
    if dtype.startswith("datetime64"):
        times = pd.to_datetime([pd.NaT if v is None else v for v in values], unit="ns", utc="UTC" in dtype)
        return pd.Series(times, index=index, name=name).astype(dtype)
    return pd.Series(values, index=index, name=name, dtype=dtype)


def table_to_json(df: pd.DataFrame) -> dict:
    return {"columns": [str(c) for c in df.columns], "index": [int(i) for i in df.index],
            "data": {str(c): _column(df[c]) for c in df.columns}}


def table_from_json(obj: dict) -> pd.DataFrame:
    n = len(obj["index"])
    index = pd.RangeIndex(n) if obj["index"] == list(range(n)) else pd.Index(obj["index"], dtype="int64")
    return pd.DataFrame({c: _series(c, obj["data"][c], index) for c in obj["columns"]}, index=index,
                        columns=obj["columns"])


# ------------------------------------------------------------------------------------------ the file

def save(path: Path, reads: Reads, study: str, variant: str = "") -> Path:
    """Write the record of `reads` (whose results are study_results' dict) for `study`'s invocation (of name
    `variant`) to path, deterministically."""
    parent = reads.results["parent"]
    body = {"format": FORMAT, "study": study, "profile": parent.get("tags", {}).get("profile", ""),
            "variant": variant, "parent": parent, "runs": table_to_json(reads.results["runs"]),
            "histories": reads.histories, "artifacts": reads.artifacts,
            **({"complete": sorted(reads.complete)} if reads.complete else {})}
    with atomic_writer(path, binary=True) as f:
        f.write(_gzip(json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=True)))
    return path


def _gzip(text: str) -> bytes:
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, compresslevel=9, mtime=0) as gz:
        gz.write(text.encode("utf-8"))
    return buf.getvalue()


def same(a: Path, b: Path) -> bool:
    """Whether two records hold the same (their JSON, not their bytes: another zlib may compress it otherwise)."""
    try:
        return gzip.decompress(Path(a).read_bytes()) == gzip.decompress(Path(b).read_bytes())
    except (OSError, EOFError, zlib.error):
        return False


def _check(body: dict) -> None:
    """Raise ValueError naming the first part of a record's body that is not what `save` writes."""
    if body.get("format") != FORMAT:
        raise ValueError(f"format {body.get('format')!r}, not {FORMAT}")
    parent = body.get("parent")
    if not isinstance(parent, dict) or not isinstance(parent.get("tags"), dict) or "run_id" not in parent:
        raise ValueError("its parent run is not a dict with run_id and tags")
    for name in ("study", "profile", "variant"):
        if not isinstance(body.get(name), str):
            raise ValueError(f"its {name} is not a string")
    for run_id, hists in body.get("histories", {}).items():
        for key, points in hists.items():
            if not all(isinstance(p, list) and len(p) == 2 and all(isinstance(x, (int, float)) for x in p)
                       for p in points):
                raise ValueError(f"the history of {key!r} for run {run_id} is not a list of [step, value]")
    if not all(isinstance(v, dict) for v in body.get("artifacts", {}).values()):
        raise ValueError("its artifacts are not one dict per run")


def load(path: Path) -> Record:
    """A record file read back; a UserError naming the file for anything else."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"there is no record at {path}; a record is the {SUFFIX} file `report` writes beside each "
                        "report (STUDY.md -> STUDY.record.json.gz).")
    try:
        body = json.loads(gzip.decompress(path.read_bytes()).decode("utf-8"))
        if not isinstance(body, dict):
            raise ValueError("not a JSON object")
        _check(body)
        reads = Reads(results={"parent": body["parent"], "runs": table_from_json(body["runs"])},
                      histories=body["histories"], artifacts=body["artifacts"],
                      complete=[str(r) for r in body.get("complete", [])])
        return Record(path, body["study"], body["profile"], body["variant"], reads)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError, KeyError, TypeError,
            AttributeError) as err:
        raise UserError(f"{path} is not a study record written by `python -m harness report` "
                        f"({type(err).__name__}: {str(err)[:120]}).") from None


# ------------------------------------------------------------------------------------------ slices
# A study run in slices: each invocation (`run --slices`) writes a slice record as its trials finish
# (DIR/NAME.slice.json.gz, the same format as a report's record but holding every metric history and JSON artifact
# of its finished trials), and `report --record` assembles the slices of one study, profile and name into one report,
# each trial once. A report's own record is accepted as a slice too.

SLICE_SUFFIX = ".slice.json.gz"
SLICES_TAG = "slices"              # the assembled parent's tag: one entry per slice (its provenance and trials)
CHANGES_TAG = "slice_changes"      # ... and what changed in the training code between the slices' commits
TRAINING_CODE = ("model", "harness/train", "harness/data")
_SEED_PARAMS = ("params.train.seed",)
_PROJECT = Path(__file__).resolve().parents[1]


def slice_name(parent: dict) -> str:
    """A slice record's file name: when and on which parent run it started (sorts in time)."""
    started = str(parent.get("tags", {}).get("started", "")).replace(":", "").replace("-", "")
    return f"{started or 'unstarted'}-{parent['run_id'][:8]}{SLICE_SUFFIX}"


def identity(run) -> tuple[str, int, str]:
    """A trial's identity within a study, profile and name: its row, seed and configuration hash."""
    seed = run.get("tags.seed")
    return str(run.get("tags.row")), int(seed) if str(seed or "").lstrip("-").isdigit() else -1, \
        str(run.get("tags.config_hash") or "")


def finished(runs: pd.DataFrame) -> pd.DataFrame:
    return runs[runs["status"] == "FINISHED"] if "status" in runs else runs.iloc[:0]


def slice_entries(rec: Record) -> list[dict]:
    """The slices a record stands for, each with its provenance and its finished trials' keys: one for a slice or a
    report's record, as many as it was assembled from for an assembled one."""
    parent = rec.reads.results["parent"]
    tags = parent.get("tags", {})
    if SLICES_TAG in tags:
        return json.loads(tags[SLICES_TAG])
    runs = finished(rec.reads.results["runs"])
    metrics = parent.get("metrics") or {}
    wall = parent.get("study_wall_seconds") or metrics.get("wall_seconds")
    return [{"parent_run": parent["run_id"], "file": rec.path.name,
             "command": tags.get("command", "?"), "command_last": tags.get("command_last", ""),
             "git_sha": tags.get("git_sha", "?"), "git_dirty": str(tags.get("git_dirty", "?")),
             "git_sha_last": tags.get("git_sha_last", ""), "cpu_model": tags.get("cpu_model", "?"),
             "cpu_isa": tags.get("cpu_isa", "?"), "hardware": tags.get("hardware", "?"),
             "started": tags.get("started", "?"), "status": parent.get("status", "?"),
             "wall_seconds": None if wall is None else round(float(wall), 1),
             "trials": sorted(str(k) for k in runs.get("tags.trial_key", pd.Series(dtype=str)).dropna())}]


def _settings(runs: pd.DataFrame) -> dict[str, dict[str, str]]:
    """Each row's resolved settings (its params, the seed left out) as the slices' trials logged them."""
    cols = [c for c in runs.columns if c.startswith("params.") and c not in _SEED_PARAMS]
    out: dict[str, dict[str, str]] = {}
    for _, run in runs.iterrows():
        out.setdefault(str(run["tags.row"]), {}).update(
            {c[len("params."):]: str(run[c]) for c in cols if not _missing(run[c])})
    return out


def _conflict(mine: dict[str, str], theirs: dict[str, str]) -> str | None:
    """The first setting two slices' trials of one row disagree on, as "key a against b" (None: they agree)."""
    for key in sorted(set(mine) & set(theirs)):
        if mine[key] != theirs[key]:
            return f"{key} {mine[key]} against {theirs[key]}"
    return None


def assemble(records: list[Record]) -> Record:
    """One record from several slices of a study, profile and name: their finished trials, each once, with their
    histories and artifacts, under a parent that names every slice. Refused (UserError, one sentence) where the
    records are of different studies, profiles or names, or where two slices trained a row under other settings
    (another configuration hash for the same row and seed, or other resolved settings of the same row)."""
    records = sorted(records, key=lambda r: min(str(e.get("started")) for e in slice_entries(r)))
    first = records[0]
    for rec in records[1:]:
        if (rec.study, rec.profile, rec.variant) != (first.study, first.profile, first.variant):
            raise UserError(f"{rec.path} holds study {rec.study}, profile {rec.profile}"
                            f"{f', name {rec.variant}' if rec.variant else ''}, and {first.path} study {first.study}, "
                            f"profile {first.profile}{f', name {first.variant}' if first.variant else ''}: only the "
                            "slices of one study, profile and name assemble into one report.")
    kept, owners, dropped, settings = [], {}, [], {}
    for rec in records:
        runs = finished(rec.reads.results["runs"])
        for row, theirs in _settings(runs).items():
            mine = settings.setdefault(row, (rec.path, theirs))
            why = _conflict(mine[1], theirs)
            if why:
                raise UserError(f"{rec.path} trained row {row} with other settings than {mine[0]} ({why}): a slice "
                                "whose configuration hashes differ cannot join the study; run its trials again at "
                                "the study's settings.")
        for i, run in runs.iterrows():
            row, seed, digest = identity(run)
            if (row, seed) in owners:
                other, other_hash = owners[(row, seed)]
                if other_hash != digest:
                    raise UserError(f"{rec.path} and {other} both hold {row}-s{seed} under different configuration "
                                    f"hashes ({digest} against {other_hash}): a slice whose configuration hashes "
                                    "differ cannot join the study; run it again at the study's settings.")
                dropped.append(f"{row}-s{seed} in {rec.path.name} (kept {other.name}'s)")
                continue
            owners[(row, seed)] = (rec.path, digest)
            kept.append((rec, run))
    return _assembled(records, kept, dropped)


_PER_INVOCATION = ("command_last", "git_sha_last", "git_dirty_last", "hardware_last", "resume_count", "resumed",
                   "run_dir", "interrupted", SLICES_TAG, CHANGES_TAG, "slice_duplicates", "slice_held")


def _assembled(records: list[Record], kept: list[tuple[Record, pd.Series]], dropped: list[str]) -> Record:
    """assemble's result: the kept trials' table, histories and artifacts, under a parent built from the slices."""
    first = records[0]
    ids = {str(run["run_id"]) for _, run in kept}
    frames = [rec.reads.results["runs"].loc[[run.name for r, run in kept if r is rec]]
              for rec in records if any(r is rec for r, _ in kept)]
    runs = pd.concat(frames, ignore_index=True) if frames else first.reads.results["runs"].iloc[:0]
    runs = runs[[c for c in runs.columns if "." not in c] + sorted(c for c in runs.columns if "." in c)]
    if "start_time" in runs and len(runs):
        runs = runs.sort_values("start_time", ascending=False, kind="stable").reset_index(drop=True)
    entries = {e["parent_run"]: e for rec in records for e in slice_entries(rec)}
    slices = sorted(entries.values(), key=lambda e: (str(e.get("started")), e["parent_run"]))
    keys = {str(run.get("tags.trial_key")) for _, run in kept}
    for e in slices:                        # each slice's trials as assembled: a duplicate is kept once
        e["trials"] = [k for k in e.get("trials", []) if k in keys and not keys.discard(k)]
    parents = [rec.reads.results["parent"] for rec in records]
    rows = _row_order(parents, runs)
    seeds = sorted({identity(run)[1] for _, run in runs.iterrows()})
    wall = sum(float(e["wall_seconds"] or 0) for e in slices)
    tags = {k: v for k, v in first.reads.results["parent"]["tags"].items() if k not in _PER_INVOCATION}
    tags.update({SLICES_TAG: json.dumps(slices, sort_keys=True), CHANGES_TAG: json.dumps(changes_between(slices)),
                 "n_trials": str(len(runs)), "n_failed": "0"})
    if dropped:
        tags["slice_duplicates"] = json.dumps(sorted(dropped))
    digest = hashlib.sha256(",".join(sorted(e["parent_run"] for e in slices)).encode()).hexdigest()[:32]
    parent = {"run_id": digest, "status": "FINISHED" if all(e.get("status") == "FINISHED" for e in slices)
              else "RUNNING", "start_time": min(p.get("start_time") or 0 for p in parents), "tags": tags,
              "params": {**first.reads.results["parent"].get("params", {}), "rows": ",".join(rows),
                         "seeds": ",".join(map(str, seeds))},
              "metrics": {"wall_seconds": wall}, "study_wall_seconds": wall}
    reads = Reads(results={"parent": parent, "runs": runs},
                  histories={k: v for rec in records for k, v in rec.reads.histories.items() if k in ids},
                  artifacts={k: v for rec in records for k, v in rec.reads.artifacts.items() if k in ids},
                  complete=sorted({r for rec in records for r in rec.reads.complete if r in ids}))
    path = Path(" + ".join(str(r.path) for r in records))
    return Record(path, first.study, first.profile, first.variant, reads)


def _row_order(parents: list[dict], runs: pd.DataFrame) -> list[str]:
    """The assembled rows in the study file's order (a slice's `study_rows` tag: every row of its profile), else in
    the order the slices list them; only rows with a trial."""
    full = next((p["tags"]["study_rows"].split(",") for p in parents if p.get("tags", {}).get("study_rows")), [])
    listed = [r for p in parents for r in str(p.get("params", {}).get("rows", "")).split(",") if r]
    order = list(dict.fromkeys([*full, *listed]))
    have = set(runs["tags.row"].astype(str)) if "tags.row" in runs else set()
    return [r for r in order if r in have] + sorted(have - set(order))


def changes_between(slices: list[dict], root: Path = _PROJECT) -> dict:
    """What changed in the training code (model/, harness/train/, harness/data/) between the slices' commits:
    {"commits": [...], "files": [...]} (files [] : nothing), or {"commits": [...], "unknown": why} where git cannot
    say (not a checkout, a commit it does not have)."""
    commits = list(dict.fromkeys(c for e in slices for c in (e.get("git_sha"), e.get("git_sha_last")) if c))
    if len(commits) < 2:
        return {"commits": commits, "files": []}
    files: set[str] = set()
    for older, newer in zip(commits, commits[1:]):
        try:
            done = subprocess.run(["git", "-C", str(root), "diff", "--name-only", older, newer, "--",
                                   *TRAINING_CODE], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired) as err:
            return {"commits": commits, "unknown": f"git did not run ({type(err).__name__})"}
        if done.returncode != 0:
            return {"commits": commits, "unknown": f"git does not know commit {older[:12]} or {newer[:12]} here"}
        files |= set(done.stdout.split())
    return {"commits": commits, "files": sorted(files)}
