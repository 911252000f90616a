"""The report's closing "Claims" section: each claim of harness/paper/claims.yaml for the study, its verdict
(computed in harness/report/verdicts.py), the cells that show it, why the runs decide it as they do, and whether it was
registered before its figures (harness/report/registration.py); and, for layouts that score a test set, the
profile's settings changed after a test figure existed."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pandas as pd

from harness.report import verdicts
from harness.report.header import claim_departures, row_departures
from harness.report.registration import ROOT as _REGISTRATION_ROOT
from harness.report.registration import late_profile_changes, registration
from harness.report.results import report_folder
from harness.report.stopping import all_diverged, regime_note, row_diagnostics


def _claim_value(metric: str, x: float) -> str:
    if pd.isna(x):
        return "–"
    if metric.endswith("nll"):                                     # nll, test_nll, long_nll: ln PPL
        return f"PPL {math.exp(x):.2f}"
    if metric.endswith("log_ms"):                                  # ln milliseconds
        return f"{math.exp(x):.2f} ms"
    if metric.endswith("_fade"):                                   # a share's fall, in percentage points
        return f"fade {100 * x:+.1f} points"
    if metric in ("seq_ops", "path"):                              # counts as counts
        return f"{x:g}"
    return f"{x:.2f}" if x == 0 or 0.01 <= abs(x) < 1e6 else f"{x:.3g}"   # a residual's 3.1e-15 as such


def _num3(x: float) -> str:
    """A claim figure in three significant digits, whatever its scale (an exponent's 0.12, a residual's 3.1e-15)."""
    return "–" if x is None or pd.isna(x) else f"{x:.3g}"


def _diverged_why(c: dict, diag: dict[str, dict]) -> str:
    """For a claim read off several rows (a gap between gaps): which of them diverged in every seed, and what the
    figure then measures ("" where none did)."""
    claim = c.get("claim")
    rows = [r for side in (getattr(claim, "a", None), getattr(claim, "b", None))
            for r in ([side] if isinstance(side, str) else side or [])]
    gone = [r for r in dict.fromkeys(rows) if all_diverged(diag.get(r, {}).get("diverged", (0, 0)))]
    if not gone:
        return ""
    return (f"; {' and '.join(gone)} stopped as diverged in every seed and {'is' if len(gone) == 1 else 'are'} "
            "scored as the start: a gap with a diverged row measures how far the other row trained from that "
            "start, not how far the diverged row fell behind")


def _measured_why(c: dict) -> str:
    """claim_why for the claims that are not a comparison of two rows: a threshold, a gap between gaps, time to
    quality, a measurement against the formula."""
    if c["expect"] == "above":
        if c["n"] < 2:
            return f"{c['n']} seed{'s' if c['n'] != 1 else ''}: no interval (run with `--seeds 0,1,2`)"
        side = {"holds": "lies above 0", "contradicted": "lies below 0", "inconclusive": "spans 0"}[c["verdict"]]
        return (f"{c['a_row']} measured {c['a_mean']:.3g} against the target {c['b_mean']:g} fixed before the runs; "
                f"the interval [{c['low']:+.3g}, {c['high']:+.3g}] of value − target {side}")
    if c["expect"] == "gap_grows":
        if c["n"] < 2:
            return f"{c['n']} seed{'s' if c['n'] != 1 else ''}: no interval (run with `--seeds 0,1,2`)"
        side = {"holds": "lies above 0: the gap grew", "contradicted": "lies below 0: the gap shrank",
                "inconclusive": "spans 0"}[c["verdict"]]
        return (f"the gap {c['a']} was {c['a_mean']:+.3f} and {c['b']} {c['b_mean']:+.3f}; the interval "
                f"[{c['low']:+.3f}, {c['high']:+.3f}] of their difference {side}")
    if c["expect"] == "sooner":
        each = "; ".join(
            f"{p['row']} {p['metric'].split('_to_')[0]}: ratio {_num3(p['diff'])}"
            + ("" if pd.isna(p["low"]) else f" [{_num3(p['low'])}, {_num3(p['high'])}]")
            + (f", never reached in {p['never']} of {p['n']} seeds" if p["never"] else "")
            + f" ({p['verdict']})" for p in c["parts"])
        rule = {"holds": "every ratio's interval lies below 1",
                "contradicted": f"{c['a_row']} needed more than a rival, or never reached its best",
                "inconclusive": "not every ratio's interval lies below 1 (one seed gives none)",
                "not run": ""}[c["verdict"]]
        return (f"{c['a_row']}'s training to reach each rival's best dev BLEU over the rival's own: {each}; {rule}")
    if c["expect"] == "value":
        if c.get("parts"):       # several rows or metrics: each part's deviation, then the verdict's reason
            each = "; ".join(f"{p['row']} {p['metric']} {_num3(p['diff'])}"
                             + ("" if pd.isna(p["low"]) else f" [{_num3(p['low'])}, {_num3(p['high'])}]")
                             + f" ({p['verdict']})" for p in c["parts"])
            rule = {"holds": f"every part within ±{c['margin']:g}",
                    "contradicted": f"a part outside ±{c['margin']:g}",
                    "inconclusive": "no part outside the tolerance, but not every part inside it"}[c["verdict"]]
            return f"measured − target: {each}; {rule}"
        off = f"{c['a_row']} measured {_num3(c['a_mean'])}, {_num3(abs(c['diff']))} from {c['b_mean']:g}"
        if c["verdict"] == "holds":
            return f"{off}: within ±{c['margin']:g}"
        return (f"{off}: outside ±{c['margin']:g}; the row's notes in the table above say where its fit parts "
                "from the formula" if c["verdict"] == "contradicted" else
                f"{off}: its interval over seeds is neither inside nor wholly outside ±{c['margin']:g}")
    return ""


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
    if c["expect"] in ("above", "gap_grows", "sooner", "value"):
        return _measured_why(c) + _diverged_why(c, diag)
    notes = []
    if c["n"] < 2:
        notes.append(f"{c['n']} paired seed{'s' if c['n'] != 1 else ''}: no interval (run with `--seeds 0,1,2`)")
    elif c["verdict"] == "holds":
        notes.append(f"the interval [{c['low']:+.3f}, {c['high']:+.3f}] of the paired difference {c['diff']:+.3f} "
                     + (f"lies above {c['margin']:g}" if c["expect"] == "better" else
                        f"lies inside ±{c['margin']:g}"))
    rests = "it rests on " if c["verdict"] == "holds" else ""
    rows = list(dict.fromkeys(r for r in (c["a_row"], c["b_row"]) if r))
    for row in rows:
        d = diag.get(row, {})
        regime = regime_note(row, diag)
        if regime and not regime.startswith("stopped by the rule"):     # a row the rule stopped is no caveat
            notes.append(f"{rests}{row}, which was {regime}" if rests else f"{row} was {regime}")
        if d.get("seeds") and not d.get("rose") and c["claim"].regime == "over-fitting":
            notes.append(f"{row} did not over-fit: its dev PPL was at its lowest at the end in every seed")
    if deps and rows:
        moved = claim_departures(rows, deps, with_base)
        if moved:
            notes.append(f"{'it rests on ' if rests else ''}departures from the paper that change how its rows "
                         f"compare: {'; '.join(moved)}")
    if c["n"] >= 2 and c["verdict"] == "inconclusive" and rows and all(
            all_diverged(diag.get(r, {}).get("diverged", (0, 0))) for r in rows):
        notes.append("both rows are scored as their start, the same initialisation on both sides: the runs cannot "
                     "order them")
    elif c["n"] >= 2 and c["verdict"] == "inconclusive":
        if c["expect"] == "better":
            notes.append(f"the interval [{c['low']:+.3f}, {c['high']:+.3f}] of the paired difference {c['diff']:+.3f} "
                         f"spans {c['margin']:g}: the effect, if any, is within the seed-to-seed spread at this scale")
        else:
            notes.append(f"the interval [{c['low']:+.3f}, {c['high']:+.3f}] is not inside ±{c['margin']:g}")
    if c.get("also"):
        x = c["also"]
        notes.append(f"both parts must hold: {c['metric']} {c['main_verdict']}, {x['metric']} {x['verdict']}")
    if c["verdict"] == "contradicted" and c.get("main_verdict", "contradicted") == "contradicted":
        notes.append((f"{c['b_row']} is better than {c['a_row']} on every reading of the interval "
                      f"[{c['low']:+.3f}, {c['high']:+.3f}]" if c["margin"] == 0 else
                      f"the whole interval [{c['low']:+.3f}, {c['high']:+.3f}] lies below the margin {c['margin']:g}: "
                      f"{c['a_row']} is not better than {c['b_row']} by that much") if c["expect"] == "better" else
                     f"the whole interval [{c['low']:+.3f}, {c['high']:+.3f}] lies outside ±{c['margin']:g}")
    return "; ".join(notes)


def late_changes_section(parent: dict | None) -> list[str]:
    """For a layout that scores a test set: every setting of this profile changed after a committed report had
    shown a test figure of it (from git, harness/report/registration.py), so that a reader can tell settings
    chosen on dev alone from settings changed once a test figure was known."""
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
    head = ["## Settings changed after a test figure of this profile existed", ""]
    if changes is None:
        return head + ["Unknown: this report was not made in a git checkout of the project, so when its profile's "
                       "settings changed cannot be computed.", ""]
    if not changes:
        return head + [f"None: no setting of the `{profile}` profile changed after a committed report first showed "
                       "its test figures (computed from git).", ""]
    return head + [f"Computed from git: {changes[0][1:-1]}; each setting below changed after that, so a test figure "
                   "was known when it was chosen (the choice itself was made on dev: docs/calibration.md).", "",
                   *[f"- {c}" for c in changes[1:]], ""]


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


def claim_registration(claim_id: str, c: dict, runs: pd.DataFrame) -> str:
    """The claim's registration against the commits of the finished runs of every row its verdict reads (all four
    of a gap between gaps, every rival of a `sooner` claim, every row of a list; of a `first` list the first that
    finished, as the verdict takes it); against every run's when none of those finished."""
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
    return registration(claim_id, shas, bool(dirty))


def points_the_papers_way(c: dict) -> bool | None:
    """Whether a checked claim's point estimate lies on the paper's side (None: nothing to point with)."""
    if pd.isna(c["diff"]):
        return None
    claim = c["claim"]
    if claim.expect == "sooner":
        return c["diff"] < 1
    if claim.expect in ("equivalent", "value"):
        return abs(c["diff"]) <= claim.margin
    return c["diff"] > 0


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


def _claim_cells(c: dict) -> tuple[str, str, str]:
    """A checked claim's cells: the paper's figures, ours (a against b, or against the target), and the
    difference with its interval and what the claim asks of it."""
    claim = c["claim"]
    paper = claim.paper
    metric = c.get("part_metric", claim.metric)       # a value claim's figures are its farthest part's
    unit = "ln PPL" if metric.endswith("nll") else metric
    a_val, b_val = _claim_value(metric, c["a_mean"]), _claim_value(metric, c["b_mean"])
    if claim.expect == "sooner":     # time to quality against each rival
        paper_cell = paper.get("finding", "–")
        ours = (f"{c['a']} against {c['b']}: the slowest part, against {c['b_row']}, took "
                f"{_num3(c['a_mean'])} {'seconds' if c['part_metric'].startswith('seconds') else 'FLOPs'} "
                f"to reach its best where it took {_num3(c['b_mean'])}"
                if c["b_row"] else f"{c['a']} against {c['b']}")
    elif claim.expect == "gap_grows":  # a gap between two rows against the gap between two others
        paper_cell = paper.get("finding", "–")
        ours = f"{c['a']}: {_num3(c['a_mean'])} vs {c['b']}: {_num3(c['b_mean'])}"
    elif claim.expect == "value":      # one row's measurement against the formula
        paper_cell, ours = paper.get("formula", "–"), f"{c['a']}: {a_val} against {b_val}"
        if c.get("parts"):
            ours += f" (the part farthest from it: {c['a_row']}, {metric})"
    elif claim.expect == "above":    # one row's measurement against a threshold
        paper_cell = paper.get("finding", "–")
        ours = f"{c['a']}: {c['a_mean']:.3g} against {c['b_mean']:g}"
    else:
        paper_cell = (f"{paper['a']:g} vs {paper['b']:g} ({paper.get('metric', claim.metric)})" if paper else "–")
        ours = f"{c['a']}: {a_val} vs {c['b']}: {b_val}"
    diff = ("–" if pd.isna(c["diff"]) else f"{c['diff']:+.3f}" if pd.isna(c["low"]) else
            f"{c['diff']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]") + f" {unit}, n={c['n']}"
    if c.get("also"):        # a second comparison of the same rows, which must hold too
        x = c["also"]
        what = "–" if pd.isna(x["diff"]) else f"{x['diff']:+.3g}" if pd.isna(x["low"]) else \
            f"{x['diff']:+.3g} [{x['low']:+.3g}, {x['high']:+.3g}]"
        diff += (f" ({c['main_verdict']}); and {x['metric']} ({claim.also['better']} is better): {c['a_row']} "
                 f"{x['a_mean']:.3g} vs {c['b_row']} {x['b_mean']:.3g}, Δ {what}, n={x['n']} ({x['verdict']})")
    if claim.expect == "equivalent":
        diff += f", margin ±{claim.margin:g}"
    elif claim.expect == "better" and claim.margin:
        diff += f", by more than {claim.margin:g}"
    elif claim.expect == "value":
        diff += f", tolerance ±{claim.margin:g}"
    elif claim.expect == "above":
        diff += f", above {claim.target:g}"
    elif claim.expect == "sooner":
        diff = ("–" if pd.isna(c["diff"]) else f"ratio {c['diff']:.3f}" if pd.isna(c["low"]) else
                f"ratio {c['diff']:.3f} [{c['low']:.3f}, {c['high']:.3f}]") + \
            f" (the largest part), n={c['n']}, below 1 to hold"
    return paper_cell, ours, diff


def claims_section(study: str, runs: pd.DataFrame, uri: str, parent: dict | None = None) -> list[str]:
    """The report's closing "Claims" section: every claim of harness/paper/claims.yaml for this study, the
    paper's sentence and numbers, ours with the seed-paired interval, the computed verdict and why (with the
    invocation's `parent`, the departures that set a claim's row apart)."""
    checked = verdicts.check_claims(study, runs, uri)
    if not checked:
        return []
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
    lines[2] += (" The last column is computed from git when this report is made (harness/report/registration.py): "
                 "\"registered\" where the claim's rows, metric and margin or threshold were committed in the runs' "
                 "commit or before it, \"written after these runs' figures\" otherwise, and whether the claim was "
                 "redefined after a committed report had shown its verdict.")
    if any(c["expect"] == "above" for c in checked):
        lines[2] += (" A threshold claim compares one row's measured value with a target fixed in claims.yaml before "
                     "the runs: Δ is value - target, and it holds if Δ's interval over seeds lies above 0, is "
                     "contradicted if it lies below 0, inconclusive otherwise.")
    if any(c["expect"] == "value" for c in checked):
        lines[2] += (" A measurement claim (Table 1's columns) compares one row's measured value with the paper's "
                     "formula instead: Δ is measured - formula, and it holds if Δ lies within the stated tolerance "
                     "(with several seeds, if its interval does), contradicted otherwise.")
    for c in checked:
        claim = c["claim"]
        paper_cell, ours, diff = _claim_cells(c)
        cells = [f"`{claim.id}` ({claim.source})", claim.text, paper_cell, ours, diff, f"**{c['verdict']}**",
                 claim_why(c, diag, deps, with_base), claim_registration(claim.id, c, runs)]
        lines.append("| " + " | ".join(str(x).replace("|", "\\|").replace("\n", " ") for x in cells) + " |")
    return lines + [""]
