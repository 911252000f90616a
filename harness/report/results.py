"""Reading a study's results for its report: the latest invocation from MLflow or a record (harness.tracking),
its trials as one pandas frame, and the small readers every layout shares (a row's finished runs, a column, a
param, the rows' order). Each table's layout is a module of this package (table1 ... table4, rows, rivals, ...);
this one and its neighbours hold what they share: cells.py (cells and formatting), header.py (header, provenance,
departures), stopping.py (how each row's training ended), claims_section.py (the claims write-up), curves.py
(learning curves and axis ticks), labels.py (names beside points), sections.py (architectures and measurements) and
files.py (writing the files)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Iterable

import pandas as pd

from harness import logged
from harness.errors import UserError
from harness.metrics import claim_metrics

# Our metric name -> the final metric logged by the trial.
# The dev figures every rows table shows, by their claims.yaml keys (harness/metrics.py)
METRICS = {key: claim_metrics()[key][0] for key in ("ppl", "bleu", "bleu_tok")}


def load_results(study: str, uri: str | None = None, profile: str | None = None, variant: str = "") -> dict:
    """The latest invocation of `study` (of name `variant`, `run --name`) as logged.study_results gives
    it; a UserError when absent."""
    uri = uri or logged.tracking_uri()
    logged.require_store(uri)
    try:
        results = logged.study_results(uri, study, profile, variant)
    except UserError:
        raise
    except Exception as err:  # an unreachable server, an unreadable file: one sentence, not a stack
        raise UserError(f"cannot read the MLflow tracking store {uri} ({type(err).__name__}: "
                        f"{str(err).splitlines()[0][:200] if str(err) else ''}); start it or point "
                        "MLFLOW_TRACKING_URI elsewhere.") from None
    which = (f"study {study}" + (f" with profile {profile}" if profile else "")
             + (f" named {variant}" if variant else ""))
    if results is None and logged.is_record(uri):
        rec = logged.record_of(uri)
        raise UserError(f"no runs of {which} in the record {rec.path}: it holds study {rec.study} with profile "
                        f"{rec.profile}{f' named {rec.variant}' if rec.variant else ''}.")
    if results is None:
        raise UserError(f"no runs of {which} in {uri}; run `python -m harness run studies/{study}.yaml"
                        f"{f' --profile {profile}' if profile else ''}{f' --name {variant}' if variant else ''}` "
                        "first.")
    if results["runs"].empty:
        raise UserError(f"the latest run of {which} (MLflow run {results['parent']['run_id']}) has no trials "
                        "yet; let it run or resume it with `python -m harness run ... --resume`.")
    if variant:          # the trials carry no name of their own: plot_title reads it here
        results["runs"] = results["runs"].assign(**{f"tags.{logged.VARIANT_TAG}": variant})
    return results


def declared_table(parent: dict) -> str:
    """The table the study file's `table:` names, as its parent run keeps it (a tag; a param in older stores),
    or ""."""
    return parent["tags"].get("table") or parent["params"].get("table") or ""


def table_name(parent: dict, study: str) -> str:
    """The paper table a study reproduces: its declared table, else its name."""
    return declared_table(parent) or study


def column(df: pd.DataFrame, name: str) -> pd.Series:
    """A numeric column (params come back as strings); all-NaN when the runs never logged it."""
    if name not in df:
        return pd.Series(float("nan"), index=df.index)
    return pd.to_numeric(df[name], errors="coerce")


def row_order(runs: pd.DataFrame, paper_rows: Iterable[str] = (), declared: Iterable[str] = ()) -> list[str]:
    """The paper's row order, then the study file's (the parent's `rows` param), then first appearance."""
    seen = runs.sort_values("start_time", kind="stable")["tags.row"].astype(str).drop_duplicates().tolist()
    paper, declared = list(paper_rows), list(declared)
    big = len(paper) + len(declared) + len(seen)
    return sorted(seen, key=lambda r: (paper.index(r) if r in paper else big,
                                       declared.index(r) if r in declared else big, seen.index(r)))


def row_groups(runs: pd.DataFrame, order: Iterable[str]):
    """Per row, in `order`: (row, its runs, the FINISHED ones, the row's status, its failure reasons joined).
    Status: FINISHED (every seed), PARTIAL (some), FAILED (none finished, one failed), else the run's status."""
    names = runs["tags.row"].astype(str)
    for row in order:
        g = runs[names == row]
        done = g[g["status"] == "FINISHED"]
        status = ("FINISHED" if len(done) == len(g) else "PARTIAL" if len(done)
                  else "FAILED" if (g["status"] == "FAILED").any() else str(g["status"].iloc[0]))
        reasons = g["tags.failure_reason"].dropna().astype(str) if "tags.failure_reason" in g else []
        reason = " | ".join(dict.fromkeys(r.strip()[:300] for r in reasons if r.strip()))
        yield row, g, done, status, reason


def synthetic_data(runs: pd.DataFrame) -> bool:
    """Whether any trial trained on the made-up corpus (data.name synth) rather than real data."""
    return "params.data.name" in runs and bool((runs["params.data.name"] == "synth").any())


def declared_rows(parent: dict) -> list[str]:
    """The rows in the study file's order (the parent's `rows` param)."""
    return [r for r in str(parent["params"].get("rows", "")).split(",") if r]


def finished(runs: pd.DataFrame, row: str) -> pd.DataFrame:
    """The row's FINISHED runs."""
    return runs[(runs["tags.row"].astype(str) == row) & (runs["status"] == "FINISHED")]


MAIN_PROFILES = ("tiny", "", None)


def report_folder(parent: dict) -> str:
    """Where an invocation's report goes below reports/: the main (tiny) profile's at the top, as before;
    any other profile's in a folder named after it, so that reports/table2.md (the made-up corpus) and
    reports/multi30k/table2.md (Multi30K) stand side by side; a named invocation's (`run --name corpus2`) in
    a folder of that name below its profile's (reports/corpus2/table3.md)."""
    profile = parent["tags"].get("profile") or parent["params"].get("profile")
    folder = Path("." if profile in MAIN_PROFILES else str(profile))
    variant = parent["tags"].get(logged.VARIANT_TAG, "")
    return (folder / variant if variant else folder).as_posix()


NAN = float("nan")


def text_of(run: pd.Series, key: str) -> str:
    """A tag or param as text; "" when absent."""
    v = run.get(key)
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else str(v)


def param_of(run: pd.Series, key: str) -> float:
    """A param as a number (params are strings in MLflow); NaN when absent or not a number."""
    v = run.get(f"params.{key}")
    return NAN if v is None else float(pd.to_numeric(pd.Series([v]), errors="coerce").iloc[0])


def mean_of(done: pd.DataFrame, metric: str) -> float:
    return column(done, f"metrics.{metric}").mean()


def std_of(done: pd.DataFrame, metric: str) -> float:
    return column(done, f"metrics.{metric}").std()   # NaN for one seed


def tags_of(g: pd.DataFrame, key: str) -> str:
    return ", ".join(dict.fromkeys(g[f"tags.{key}"].dropna().astype(str))) if f"tags.{key}" in g else ""
