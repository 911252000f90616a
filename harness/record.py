"""A study invocation's record: everything its report read from MLflow (the parent run, the trials' table, and each
metric history and JSON artifact a section or plot asked for), kept as one file beside the report
(reports/[PROFILE/][NAME/]STUDY.record.json.gz). `python -m harness report --record FILE` regenerates the report
from it, byte for byte, with no MLflow store: a report whose store is gone can still be redrawn when the report code
changes, and a reader can check a committed report against the evidence it was made from.

A record holds what the report read and nothing else, so a report changed to read something more (a metric it never
drew) cannot be made from an older record; it says so and names the store to use instead. Tracking URIs of the form
`record:PATH` (harness/tracking.py) read a record as a store of that one invocation.

Gzipped JSON written deterministically (sorted keys, no timestamp in the gzip header), so that regenerating a report
from its record writes the same bytes again. Read with json only: a record never runs code.
"""

from __future__ import annotations

import copy
import gzip
import io
import json
import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from harness.errors import UserError
from harness.io import atomic_writer

FORMAT = 1
SCHEME = "record:"
SUFFIX = ".record.json.gz"


@dataclass(eq=False)
class Reads:
    """What one report read: the invocation (study_results' dict), and each history and artifact by run."""
    results: dict | None = None
    histories: dict[str, dict[str, list]] = field(default_factory=dict)
    artifacts: dict[str, dict[str, Any]] = field(default_factory=dict)

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
            raise UserError(self._missing(f"history of metric {key!r} for run {run_id}")) from None

    def artifact(self, run_id: str, name: str) -> Any:
        try:
            return copy.deepcopy(self.reads.artifacts[run_id][name])
        except KeyError:
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
            "histories": reads.histories, "artifacts": reads.artifacts}
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
                      histories=body["histories"], artifacts=body["artifacts"])
        return Record(path, body["study"], body["profile"], body["variant"], reads)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError, KeyError, TypeError,
            AttributeError) as err:
        raise UserError(f"{path} is not a study record written by `python -m harness report` "
                        f"({type(err).__name__}: {str(err)[:120]}).") from None
