"""The report's closing "Claims" section: each claim of harness/paper/claims.yaml for the study, its verdict
(computed in harness/report/verdicts.py), the cells that show it, why the runs decide it as they do, and whether it was
registered before its figures (harness/report/registration.py); and, for layouts that score a test set, the
profile's settings changed after a test figure existed."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pandas as pd

from harness.errors import HarnessWarning
from harness.report import verdicts
from harness.report.claim_kinds.registry import KINDS, kind_of
from harness.report.evidence import REGISTRATION
from harness.report.header import row_departures
from harness.report.registration import ROOT as _REGISTRATION_ROOT
from harness.report.registration import late_profile_changes, registration
from harness.report.results import report_folder
from harness.report.stopping import row_diagnostics


def claim_rows(claim) -> list[str]:
    """The rows a claim reads: its a and b, each a row, a list of rows, or {best: [...]} / {first: [...]}."""
    out = []
    for side in (claim.a, claim.b):
        for part in (side.values() if isinstance(side, dict) else [side]):
            out += [str(r) for r in (part if isinstance(part, (list, tuple)) else [part]) if r]
    return list(dict.fromkeys(out))


def claim_why(c: dict, diag: dict[str, dict], deps: dict[str, dict[str, tuple]] | None = None,
               with_base: bool = True) -> str:
    """Why the runs give this verdict (generated, never written by hand): the interval against 0 or the
    margin, and what the verdict rests on, even where it holds: a row still improving or near the plateau,
    a row that did not over-fit where the claim is about over-fitting, and the departures from the paper
    under which its rows stand to each other otherwise than in the paper (`deps`, from row_departures)."""
    if c["verdict"] == "not run":
        rows = claim_rows(c["claim"])
        waiting = [r for r in rows if diag.get(r, {}).get("unfinished") == "running"]
        pending = [r for r in rows if diag.get(r, {}).get("unfinished") == "pending"]
        if not waiting and not pending:
            return "its rows were not run in this invocation"
        said = [f"{', '.join(waiting)} {'has' if len(waiting) == 1 else 'have'} no finished seed"] * bool(waiting) + \
            [f"{', '.join(pending)} not started"] * bool(pending)
        return f"not finished yet: {'; '.join(said)} (`python -m harness status` shows where each stands)"
    return kind_of(c["expect"]).why(c, diag, deps, with_base)


def late_changes_section(parent: dict | None) -> list[str]:
    """Every setting of this profile (and of the profiles it includes) changed after a committed report had first
    shown its figures (from git, harness/report/registration.py), so that a reader can tell settings fixed before
    any figure was seen from settings changed once one was."""
    tags = (parent or {}).get("tags", {})
    path, profile, study = tags.get("study_file", ""), tags.get("profile", ""), tags.get("study", "")
    if not path or not profile or profile == "paper":
        return []
    rel = Path(path).resolve()
    try:
        rel = rel.relative_to(_REGISTRATION_ROOT.resolve())
    except ValueError:
        rel = Path(path)
    report = (Path("reports") / report_folder(parent) / f"{study}.md").as_posix()
    changes = late_profile_changes(rel.as_posix(), profile, [report, *reports_of(study, profile)])
    head = ["## Settings changed after this profile's first report", ""]
    if changes is None:
        return head + ["Unknown: this report was not made in a git checkout of the project, so when its profile's "
                       "settings changed cannot be computed.", ""]
    if not changes:
        return head + [f"None: no setting of the `{profile}` profile (nor of a profile it includes) changed after a "
                       "committed report first showed its figures (computed from git).", ""]
    return head + [f"Computed from git: {changes[0][1:-1]}; each setting below changed after that, so a figure of "
                   "this profile was known when it was chosen (the choice itself was made on dev: "
                   "docs/calibration.md). A setting under `include FILE:PROFILE` is one of the profile this one "
                   "builds on.", "", *[f"- {c}" for c in changes[1:]], ""]


def reports_of(study: str, profile: str) -> list[str]:
    """The committed reports of `study` made with `profile` (a named invocation's too, e.g. reports/multi30k/
    rivals/table2.md): a test figure any of them showed was known when the profile's settings changed after."""
    folder = _REGISTRATION_ROOT / "reports"
    mark = re.compile(rf"^- study version \S+, profile `{re.escape(profile)}`", re.M)
    found = []
    for md in sorted(folder.rglob(f"{study}.md")) if folder.is_dir() else []:
        try:
            if mark.search(md.read_text(encoding="utf-8")):
                found.append(md.relative_to(_REGISTRATION_ROOT).as_posix())
        except OSError:
            continue
    return found


def claim_registration(claim_id: str, c: dict, runs: pd.DataFrame, report: str | None = None) -> str:
    """The claim's registration against the commits of the finished runs of every row its verdict reads (all four
    of a gap between gaps, every rival of a `sooner` claim, every row of a list; of a `first` list the first that
    finished, as the verdict takes it); against every run's when none of those finished; with `report` (this
    report's path), against the first committed figures of its rows on the same data too."""
    done = runs[runs["status"] == "FINISHED"] if "status" in runs else runs
    read = verdicts.rows_read(c["claim"], set(done["tags.row"].dropna().astype(str)))
    judged = done[done["tags.row"].isin(read)]
    judged = judged if len(judged) else runs
    # a run that recorded no commit counts as "" (registration cannot then be established for it)
    shas = set(judged["tags.git_sha"].fillna("").astype(str)) if "tags.git_sha" in judged else {""}
    if "tags.git_sha_last" in judged:          # a trial resumed at a later commit trained at both
        shas |= set(judged["tags.git_sha_last"].dropna().astype(str))
    dirty = any(judged.get(c, pd.Series(dtype=str)).astype(str).str.lower().isin(["true", "1"]).any()
                for c in ("tags.git_dirty", "tags.git_dirty_last"))
    return registration(claim_id, shas, bool(dirty), report=report)


def points_the_papers_way(c: dict) -> bool | None:
    """Whether a checked claim's point estimate lies on the paper's side (None: nothing to point with)."""
    return None if pd.isna(c["diff"]) else kind_of(c["claim"].expect).points_the_papers_way(c)


def one_seed_note(checked: list[dict], parent: dict | None) -> str:
    """Where claims rest on one seed (no interval, so no verdict): how many of them point the paper's way by their
    point estimate alone, and the command that gives verdicts."""
    single = [c for c in checked if c["verdict"] == "inconclusive" and c["n"] == 1]
    if not single:
        return ""
    pointing = sum(points_the_papers_way(c) is True for c in single)
    command = (parent or {}).get("tags", {}).get("command", "")
    metrics = (parent or {}).get("metrics") or {}
    # The study's wall time over every invocation (a study resumed across sessions), else the last one's.
    wall = (parent or {}).get("study_wall_seconds") or metrics.get("wall_seconds")
    if wall is not None and (parent or {}).get("status") in ("FINISHED", "FAILED"):
        wall -= metrics.get("prepare_seconds") or 0.0      # the last invocation's data preparation, not repeated
    rerun = f" `{command} --seeds 0,1,2`" if command and "--seeds" not in command else " three seeds (`--seeds 0,1,2`)"
    cost = f", about three times this study's {wall / 60:.0f} minutes," if wall else ""
    return (f" {len(single)} claim{'s rest' if len(single) > 1 else ' rests'} on one seed, which gives no interval: "
            f"{pointing} of {len(single)} point the paper's way by their point estimate alone (not a verdict);"
            f"{rerun}{cost} gives verdicts.")


def claims_section(study: str, runs: pd.DataFrame, uri: str, parent: dict | None = None) -> list[str]:
    """The report's closing "Claims" section: every claim of harness/paper/claims.yaml for this study, the
    paper's sentence and numbers, ours with the seed-paired interval, the computed verdict and why (with the
    invocation's `parent`, the departures that set a claim's row apart)."""
    checks = late_changes_section(parent) + checks_section(study, runs, uri)
    checked = verdicts.check_claims(study, runs, uri)
    if not checked:
        return checks
    diag = row_diagnostics(runs, uri)
    for row, g in runs.groupby(runs["tags.row"].astype(str)):      # rows that ran but have no finished seed yet
        if not (g["status"] == "FINISHED").any() and (g["status"] != "FAILED").any():
            diag.setdefault(row, {})["unfinished"] = "running"
    if parent and parent.get("status") in ("RUNNING", "KILLED"):  # an invocation not done: its rows yet to start
        for row in parent["params"].get("rows", "").split(","):
            if row and row not in set(runs["tags.row"].astype(str)):
                diag.setdefault(row, {})["unfinished"] = "pending"
    deps = row_departures(parent["tags"]) if parent else {}
    with_base = "base" in (parent["params"].get("rows", "").split(",") if parent else
                           runs["tags.row"].astype(str).tolist())
    counts = {v: sum(c["verdict"] == v for c in checked) for v in ("holds", "contradicted", "inconclusive", "not run")}
    report = (Path("reports") / report_folder(parent) / f"{study}.md").as_posix() if parent else None
    status = {c["claim"].id: claim_registration(c["claim"].id, c, runs, report) for c in checked}
    lines = ["## Claims", "",
             f"Each claim of the paper (and, for the modern rows, of the paper behind each replacement) as written in "
             f"harness/paper/claims.yaml, checked on these runs: {counts['holds']} hold, {counts['contradicted']} "
             f"contradicted, {counts['inconclusive']} inconclusive, {counts['not run']} not run. A verdict is "
             "computed, "
             "never written: the difference between the two rows is taken seed by seed (oriented so that > 0 is the "
             "claimed direction) and its 95 % t-interval decides: holds if it lies above 0 (or inside the equivalence "
             "margin), contradicted if it lies below 0 (or wholly outside the margin), inconclusive if it spans 0. "
             "Perplexity claims are compared as ln PPL (nats per subword), so a difference of 0.05 is a PPL ratio of "
             "about 1.05.", "",
             "| claim | the paper says | paper | ours: a vs b | paired Δ (95 % CI), seeds | verdict | why, from the "
             "runs "
             "| registered before these runs? |",
             "|---|---|---|---|---|---|---|---|"]
    lines[2] += one_seed_note(checked, parent)
    few = verdicts.too_few_seeds(checked)
    if few:
        ids = ", ".join(f"`{c['claim'].id}`" for c in few)
        lines[2] += (f" Judged on fewer than 3 seeds, which cannot decide a comparison or a threshold: {ids}; "
                     "`--seeds 0,1,2` decides them.")
        warnings.warn(HarnessWarning(f"{study}: {len(few)} claim{'s are' if len(few) > 1 else ' is'} judged on fewer "
                                     f"than 3 seeds and cannot be decided ({', '.join(c['claim'].id for c in few)}); "
                                     "run the study with --seeds 0,1,2"))
    lines[2] += (" The last column is computed from git when this report is made (harness/report/registration.py): "
                 "\"registered\" where the claim's rows, metric and margin or threshold (what we chose; a restatement "
                 "of the paper's own comparison chose nothing) were committed before the first committed report that "
                 "showed its rows' figures on the same data and before the runs' commit, \"post hoc\" otherwise, "
                 "naming the report or runs that showed them first, \"confirmatory\" where a post hoc claim is "
                 "judged on data whose figures came after it (another corpus seed), and whether the claim was "
                 "redefined after a committed report had shown its verdict. " + registration_counts(status.values()))
    present = {c["expect"] for c in checked}
    lines[2] += "".join(kind.note for name, kind in KINDS.items() if name in present)
    for c in checked:
        claim = c["claim"]
        paper_cell, ours, diff = kind_of(claim.expect).cells(c)
        cells = [f"`{claim.id}` ({claim.source})", claim.text, paper_cell, ours, diff, f"**{c['verdict']}**",
                 claim_why(c, diag, deps, with_base), status[claim.id]]
        lines.append("| " + " | ".join(str(x).replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
    return checks + lines + [""]


def checks_section(study: str, runs: pd.DataFrame, uri: str) -> list[str]:
    """The checks of the implementation (harness/paper/checks.yaml) for this study, in a table of their own
    before the claims: each passes or fails, and none is counted among the claims."""
    checked = verdicts.check_claims(study, runs, uri, checks=True)
    if not checked:
        return []
    counts = {w: sum(c["verdict"] == w for c in checked) for w in ("passes", "fails", "undecided", "not checked")}
    lines = ["## Checks of the implementation", "",
             "Statements of the paper that this implementation decides by construction: FLOPs counted over the "
             "code's own operations, identities, and sizes the code fixes (harness/paper/checks.yaml). Each is "
             "measured on these runs as a measurement claim is (the value against the formula, within the "
             "tolerance) and reads passes or fails: a correct implementation cannot contradict it, so a pass "
             "says the code does what the paper's formula says, not that the paper's claim holds, and none is "
             "counted among the claims below. What a check catches is a broken implementation: "
             "tests/test_checks.py makes each fail on one. "
             f"{counts['passes']} pass, {counts['fails']} fail, {counts['undecided']} undecided, "
             f"{counts['not checked']} not checked.", "",
             "| check | the paper says | formula | ours | Δ (95 % CI), seeds | result | why, from the runs | "
             "where it was |",
             "|---|---|---|---|---|---|---|---|"]
    for c in checked:
        check = c["claim"]
        kind = kind_of(check.expect)
        formula, ours, diff = kind.cells(c)
        why = kind.why(c, {}, None, True) if c["verdict"] != "not checked" else "its rows were not run"
        cells = [f"`{check.id}` ({check.source})", check.text, formula, ours, diff, f"*{c['verdict']}*", why,
                 check.moved or "a check from the start"]
        lines.append("| " + " | ".join(str(x).replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
    return lines + [""]


def registration_counts(statuses) -> str:
    """The claims' registration statuses counted: "Registration: 3 registered, 5 post hoc, 2 confirmatory."."""
    statuses = list(statuses)
    counts = {w: sum(s.startswith(w) for s in statuses) for w in REGISTRATION}
    return "Registration: " + ", ".join(f"{n} {w}" for w, n in counts.items() if n or w in REGISTRATION[:3]) \
        + "."
