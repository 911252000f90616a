"""The registry of report layouts and the report writers: MLflow -> reports/<study>.md and .csv, plots, and
reports/README.md (an index).

Each paper table has its layout in a module of its own (table1 ... table4), registered in WRITERS under the
name that a study's `table:` gives; the helpers they share are in modules named for their concern (results.py
reads the latest invocation, header.py, cells.py, curves.py, claims_section.py, files.py, ...), the claims' verdicts
in verdicts.py. Adding a layout touches its module and one WRITERS entry.
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Callable, Iterable

import pandas as pd

from harness import logged, record, tracking
from harness.errors import UserError, suggest
from harness.io import atomic_write
from harness.report import inference, rows, statements, table1, table2, table3, table4
from harness.report.evidence import (
    REGISTRATION,
    Evidence,
    changes,
    holds_less,
    read_evidence,
    stale_banner,
    stale_reason,
    with_banner,
)
from harness.report.files import install_files
from harness.report.results import declared_table, load_results, report_folder
from harness.report.slices import PROVENANCE

Writer = Callable[[str, dict, str, Path], list[Path]]   # (study, results, uri, out_dir) -> files written

WRITERS: dict[str, Writer] = {"table1": table1.write_table1, "table2": table2.write_table2,
                              "table3": table3.write_table3, "table4": table4.write_table4,
                              # not a paper table: studies/inference.yaml, found by the study's name
                              "inference": inference.write_inference,
                              # not a paper table: studies/statements.yaml, the paper's statements in its text
                              "statements": statements.write_statements,
                              # rows against a base, no paper table (modern.yaml, decoder_only.yaml, heads.yaml, ...)
                              "rows": rows.write_rows}
# A study without a paper table of its own is laid out as rows against its base (harness/report/rows.py).
NO_TABLE = "rows"


def writer_for(parent: dict, study: str) -> Writer:
    """The layout of a study's report, from its parent run's `table` (a study named after a table counts)."""
    table = declared_table(parent) or (study if study in WRITERS else "")
    if not table:
        return WRITERS[NO_TABLE]
    if table not in WRITERS:
        raise UserError(f"study {study}: no report layout for table {table!r}{suggest(table, WRITERS)}; "
                        f"layouts: {', '.join(WRITERS)}.")
    return WRITERS[table]


# Profiles whose reports are kept apart from the made-up corpus's (reports/<profile>/<study>.md): each trains
# on real text, and a profile of another name (paper, gpu) gets a folder of its own too.
REAL_DATA_PROFILES = ("multi30k", "wsj-sample")
def _headline(ev: Evidence) -> str:
    """A report's verdicts counted and its rows' seeds, for the index ("" where it shows neither)."""
    parts = []
    if ev.verdicts:
        counts = {v: sum(x == v for x in ev.verdicts.values()) for v in ("holds", "contradicted", "inconclusive",
                                                                         "not run")}
        said = ", ".join(f"{n} {'hold' if v == 'holds' else v}" for v, n in counts.items() if n)
        parts.append(f"{len(ev.verdicts)} claim{'s' * (len(ev.verdicts) > 1)}: {said}")
        if ev.registration:
            parts.append(", ".join(f"{sum(w == x for x in ev.registration.values())} {w}" for w in REGISTRATION
                                   if w in ev.registration.values()))
    if ev.checks:
        counts = {v: sum(x == v for x in ev.checks.values()) for v in ("passes", "fails", "undecided", "not checked")}
        said = ", ".join(f"{n} {v if n == 1 else {'passes': 'pass', 'fails': 'fail'}.get(v, v)}"
                         for v, n in counts.items() if n)
        parts.append(f"{len(ev.checks)} check{'s' * (len(ev.checks) > 1)} of the implementation: {said}")
    if ev.seeds:
        lo, hi = min(ev.seeds.values()), max(ev.seeds.values())
        parts.append(f"{len(ev.seeds)} row{'s' * (len(ev.seeds) > 1)}, {lo if lo == hi else f'{lo} to {hi}'} "
                     f"finished seed{'s' * (hi != 1)} a row")
    return "**" + "; ".join(parts) + "** · " if parts else ""


_WALL = re.compile(r"^- wall time (\d+(?:\.\d+)?) (s|h)( over \d+ (?:invocations|slices))?", re.M)
_CPU_HOURS = re.compile(r"^- CPU time of the trials: (\d+(?:\.\d+)?) CPU-hours", re.M)
_RULE = re.compile(r"^- the patience rule stopped (\d+) of the (\d+) finished trials? that trained under it", re.M)


def _cost(text: str) -> str:
    """What a report's runs cost, from its provenance lines, for the index ("" where it gives neither): the wall
    time across every invocation that made it, the trials' CPU-hours, and under the patience rule how many
    trials it stopped."""
    parts = []
    if m := _WALL.search(text):
        seconds = float(m[1]) * (3600 if m[2] == "h" else 1)
        parts.append(f"{seconds / 3600:.2f} h wall{m[3] or ''}" if seconds >= 5400 else f"{seconds / 60:.1f} min wall")
    if m := _CPU_HOURS.search(text):
        parts.append(f"{float(m[1]):.2f} CPU-hours")
    if m := _RULE.search(text):
        parts.append(f"{m[1]} of {m[2]} stopped by the patience rule")
    return ", ".join(parts) + " · " if parts else ""


def write_index(out_dir: Path) -> Path:
    """reports/README.md: every <study>.md present in out_dir (and in a profile's folder below it) with its
    headline (the verdicts of its claims, counted, and the seeds its rows finished) and its provenance line; first,
    each report's stale banner set or removed (mark_stale)."""
    mark_stale(out_dir)
    return atomic_write(out_dir / "README.md", index_text(out_dir))


def _reports_in(out_dir: Path) -> list[Path]:
    return sorted(p for p in [*out_dir.glob("*.md"), *out_dir.glob("*/*.md"), *out_dir.glob("*/*/*.md")]
                  if p.name != "README.md")


def mark_stale(out_dir: Path) -> list[Path]:
    """Give every report in out_dir that no longer matches HEAD's claims (evidence.stale_reason) a first-line banner
    saying why and what replaces it, and take it from every report that matches again; the reports changed."""
    changed = []
    for md in _reports_in(out_dir):
        text = md.read_text(encoding="utf-8")
        why = stale_reason(text, md.stem)
        slices = md.with_suffix(".slices")
        banner = stale_banner(why, slices.relative_to(out_dir.parent).as_posix() if slices.is_dir() else None) \
            if why else None
        marked = with_banner(text, banner)
        if marked != text:
            atomic_write(md, marked)
            changed.append(md)
    return changed


def index_text(out_dir: Path) -> str:
    """The text `write_index` writes, from the reports in out_dir as they stand."""
    lines = ["# Reports", "", "Generated by `python -m harness report` from the MLflow store; each report names the "
             "command, commit, profile, hardware and date of the runs it shows. Do not edit by hand. A report with a "
             "record (what it read from MLflow) regenerates from it alone: `python -m harness report --record "
             "FILE`.", ""]
    for md in _reports_in(out_dir):
        text = md.read_text(encoding="utf-8")
        prov = next((ln[len(PROVENANCE):].strip() for ln in text.splitlines()
                     if ln.startswith(PROVENANCE)), "(no provenance line)")
        headline = _headline(read_evidence(text))
        rel = md.relative_to(out_dir)
        real = rel.parts[0] in REAL_DATA_PROFILES and len(rel.parts) > 1
        name = md.stem if rel.parent == Path(".") else \
            f"{md.stem} ({rel.parent.as_posix()}{', real data' if real else ''})"
        rec = record.record_path(rel)
        rec_link = f", [record]({rec.as_posix()})" if (out_dir / rec).is_file() else ""
        why = stale_reason(text, md.stem)
        stale = f"**stale** ({why}: its study is to run again) · " if why else ""
        lines.append(f"- [{name}]({rel.as_posix()}) ([csv]({rel.with_suffix('.csv').as_posix()}){rec_link}): "
                     f"{stale}{headline}{_cost(text)}{prov}")
    return "\n".join(lines) + "\n"


_PARENT_RUN = re.compile(r"(?:MLflow parent run|^- assembly) `([0-9a-f]+)`", re.M)


def _replaces_another(study: str, index_dir: Path, results: dict) -> str | None:
    """The sentence refusing to write over a report made from another invocation (None: nothing to refuse):
    a committed reference report (three seeds, say) is not replaced by a newcomer's one-seed run without a word."""
    md = index_dir / report_folder(results["parent"]) / f"{study}.md"
    if not md.is_file():
        return None
    old = _PARENT_RUN.search(md.read_text(encoding="utf-8"))
    new = results["parent"]["run_id"]
    if old is None or old.group(1) == new:
        return None
    return (f"{md} was made from another invocation (MLflow parent run {old.group(1)}; this store's latest is {new}, "
            f"{len(results['runs'])} trials); write this one elsewhere with --out DIR, or replace it with --replace.")


def _evidence_of(results: dict) -> Evidence:
    """The trials and each row's finished seeds that a report of these results will show."""
    runs, tags = results["runs"], results["parent"]["tags"]
    rows = runs.groupby(runs["tags.row"].astype(str)) if len(runs) else []
    seeds = {str(row): int((g["status"] == "FINISHED").sum()) for row, g in rows}
    trials = tags.get("n_trials")
    return Evidence(int(trials) if str(trials or "").isdigit() else len(runs), seeds)


def _holds_less(study: str, index_dir: Path, results: dict) -> str | None:
    """The sentence refusing to replace a report made from more trials or seeds than these results hold (None:
    they hold as much)."""
    md = index_dir / report_folder(results["parent"]) / f"{study}.md"
    if not md.is_file():
        return None
    text = md.read_text(encoding="utf-8")
    same = _PARENT_RUN.search(text)
    if same is not None and same.group(1) == results["parent"]["run_id"]:
        return None                     # this invocation's own report, written again
    old, new = read_evidence(text), _evidence_of(results)
    if not old.seeds and old.trials is None or not holds_less(old, new):
        return None
    would = "; ".join(_short(c) for c in changes(Evidence(old.trials, old.seeds), new))   # verdicts: not yet known
    return (f"{md} rests on {old.trials} trials ({old.finished} finished seeds over {len(old.seeds)} rows) and this "
            f"invocation on {new.trials} ({new.finished} over {len(new.seeds)}), so replacing it would change {would}; "
            "write it elsewhere with --out DIR, or replace the fuller report anyway with --force.")


def _short(change: str, most: int = 3) -> str:
    """A change phrase with at most `most` items of its list ("rows lost: A1, A2, A3 and 4 more")."""
    head, _, items = change.partition(": ")
    parts = items.split(", ") if items else []
    if len(parts) <= most:
        return change
    return f"{head}: {', '.join(parts[:most])} and {len(parts) - most} more"


def _refusal(study: str, index_dir: Path, results: dict, replace: bool, force: bool) -> str | None:
    """Why these results may not replace the report in `index_dir` (None: they may). A fuller report is named
    first, with what replacing it would change and `--force`, whether or not another invocation made it: that is
    the evidence a reader would lose; then a report of another invocation, which --replace writes over."""
    if force:
        return None
    return _holds_less(study, index_dir, results) or (None if replace else _replaces_another(study, index_dir,
                                                                                              results))


def write_report(study: str, out_dir: Path = Path("reports"), uri: str | None = None,
                 profile: str | None = None, variant: str = "", replace: bool = True, force: bool = False,
                 say: Callable[[str], None] | None = None, publish: bool = True) -> list[Path]:
    """Write <study>.md, <study>.csv, its PNGs and the refreshed README.md index; return their paths. The
    latest unnamed invocation, or the latest of name `variant` (`run --name`). replace False: refuse (UserError)
    to write over a report that another invocation made; force False: refuse to replace a report that rests on
    more trials or seeds. say: told what changed against the report replaced (rows, seeds, verdicts). publish
    False: the report is not also attached to the study's parent run in MLflow (`report --check` writes nothing)."""
    uri = uri or logged.tracking_uri()
    with logged.recording() as reads:       # what the report reads: its record (harness/record.py)
        results = load_results(study, uri, profile, variant)
        writer = writer_for(results["parent"], study)
        index_dir = Path(out_dir)
        refusal = _refusal(study, index_dir, results, replace, force)
        if refusal:
            raise UserError(refusal)
        out_dir = index_dir / report_folder(results["parent"])
        before = out_dir / f"{study}.md"
        old = read_evidence(before.read_text(encoding="utf-8")) if before.is_file() else None
        # Made apart, then put in place: a report that fails half-way (a store gone, a record without what it
        # reads) leaves the one it would have replaced as it was.
        with tempfile.TemporaryDirectory(prefix="harness-report-") as tmp:
            made = writer(study, results, uri, Path(tmp))
            made.append(record.save(record.record_path(made[0]), reads, study, variant))
            files = install_files(study, made, out_dir)
    md, csv = files[0], files[1]
    if say is not None and old is not None:
        changed = changes(old, read_evidence(md.read_text(encoding="utf-8")))
        say(f"{md}: " + ("; ".join(changed) if changed else "the same rows, seeds and verdicts as the report it "
                                                          "replaced"))
    # The same report on the study's parent run, so that the MLflow UI shows what the study reproduced.
    if publish and not logged.is_record(uri):
        tracking.publish_report(uri, results["parent"]["run_id"], md.read_text(encoding="utf-8"), files,
                                pd.read_csv(csv))
    return [*files, write_index(index_dir)]


def report_all(out_dir: Path = Path("reports"), uri: str | list[str] | None = None,
               studies: Iterable[str] | None = None,
               profile: str | None = None, variant: str | None = None, replace: bool = False, force: bool = False,
               say: Callable[[str], None] | None = None, publish: bool = True) -> list[Path]:
    """Reports for several studies (default: every study in the store), each of its latest unnamed
    invocation and of its latest invocation of every name (`run --name`; only `variant` where given);
    studies with no runs (of this profile) are skipped, and nothing at all to report is an error. Without
    `replace`, a report that another invocation made is not written over, and without `force` neither is one that
    rests on more trials or seeds: every report is checked first, so a refusal writes nothing. `uri` may be a list
    (several records, `report --record`): all of them are read and checked before anything is written."""
    uris = [uri] if isinstance(uri, str) or uri is None else list(uri)
    uris = [u or logged.tracking_uri() for u in uris]
    todo = []
    for u in uris:            # every report of every source checked before any is written
        logged.require_store(u)
        for study in logged.list_studies(u) if studies is None else studies:
            for name in ["", *logged.variants(u, study, profile)] if variant is None else [variant]:
                try:
                    results = load_results(study, u, profile, name)
                except UserError as err:
                    if not str(err).startswith(("no runs of", "the latest run of")):
                        raise
                    continue
                refusal = _refusal(study, Path(out_dir), results, replace, force)
                if refusal:
                    raise UserError(refusal)
                todo.append((u, study, name))
    paths: list[Path] = []
    for u, study, name in todo:
        paths += write_report(study, out_dir, u, profile, name, replace=True, force=True, say=say, publish=publish)
    if not paths:
        where = ", ".join(uris)
        raise UserError(f"no study in {where} has runs{f' with profile {profile}' if profile else ''}"
                        f"{f' named {variant}' if variant else ''}; "
                        + ("these records hold other invocations." if all(map(logged.is_record, uris)) else
                           "run `python -m harness run studies/NAME.yaml` first."))
    return list(dict.fromkeys(paths))   # the index is rewritten after each study: list it once


def compare_reports(fresh: Path, committed: Path, paths: Iterable[Path]) -> list[str]:
    """`report --check`: each file regenerated under `fresh` against the same file under `committed`, one line
    each that differs ("differs from line 49 (150 lines there, 150 regenerated)", "differs (its bytes)", "absent
    (the regenerated report has it)"); [] where all agree."""
    out = []
    for path in sorted(set(paths)):
        rel = path.relative_to(fresh)
        if rel.name == "README.md":           # the index lists what is in the folder, so a temporary one differs
            continue
        there = committed / rel
        if path.name.endswith(record.SUFFIX):     # a report made before records existed has none: not stale
            if there.is_file() and not record.same(path, there):
                out.append(f"{there}: differs (what its report read)")
            continue
        if not there.is_file():
            out.append(f"{there}: absent (the regenerated report has it)")
        elif there.read_bytes() != path.read_bytes():
            if path.suffix in (".md", ".csv"):
                new, old = path.read_text(encoding="utf-8").splitlines(), there.read_text(encoding="utf-8").splitlines()
                first = next((i for i, (a, b) in enumerate(zip(new, old)) if a != b), min(len(new), len(old)))
                out.append(f"{there}: differs from line {first + 1} ({len(old)} lines there, {len(new)} regenerated)")
            else:
                out.append(f"{there}: differs (its bytes)")
    return out
