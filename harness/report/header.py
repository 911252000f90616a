"""A report's header: the title, the provenance line the index copies, the versions and machines that made the
runs, what the runs depart from the paper in (the `departures` tag, harness/study/departures.py) and how their
training ended; and the departures that set one row apart from another, which the claims write-up cites."""

from __future__ import annotations

import json
import math

import pandas as pd

from harness.report import slices
from harness.report.cells import num
from harness.report.results import column
from harness.report.slices import PROVENANCE
from harness.report.stopping import stopping_summary


def provenance_line(parent: dict) -> str:
    tags = parent["tags"]
    dirty = " (dirty)" if str(tags.get("git_dirty", "")).lower() in ("true", "1", "yes") else ""
    return (f"{PROVENANCE} `{tags.get('command', '?')}` · commit `{tags.get('git_sha', '?')}`{dirty} · "
            f"profile `{tags.get('profile', '?')}` · {tags.get('hardware', '?')} · {tags.get('started', '?')}")


def _resumed_elsewhere(tags: dict) -> list[str]:
    """A line where the study's latest --resume ran at another commit or on other hardware than its first
    invocation (whose commit and hardware the provenance line names); nothing otherwise."""
    sha, hw = tags.get("git_sha_last"), tags.get("hardware_last")
    if (sha is None or sha == tags.get("git_sha")) and (hw is None or hw == tags.get("hardware")):
        return []
    return [f"- its latest --resume ran at commit `{sha or '?'}` (uncommitted changes: "
            f"{tags.get('git_dirty_last', '?')}) on {hw or '?'}; the trials' own commits decide each claim's "
            "registration"]


def _versions_line(tags: dict, runs: pd.DataFrame) -> list[str]:
    """The libraries the study ran with (the parent's version.* tags) and the hardware its trials trained on
    (each child's own hardware tag: on a cluster it is the worker's); nothing for a store written before
    these tags existed."""
    named = [(k[len("version."):], v) for k, v in sorted(tags.items()) if k.startswith("version.")]
    # a trial resumed on another machine trained on both (`hardware_last`: its latest attempt's)
    devices = sorted(set().union(*(set(runs[c].dropna()) for c in ("tags.hardware", "tags.hardware_last")
                                   if c in runs)))
    if not named and not devices:
        return []
    line = "- versions: " + ", ".join(f"{name} {v}" for name, v in named) if named else "- versions: ?"
    return [line + (f"; trials trained on {', '.join(devices)}" if devices else "")]


def ours_caption(results: dict) -> str:
    """What ran, beside the paper's caption: the profile, the corpus, how rows were trained and scored."""
    runs, tags = results["runs"], results["parent"]["tags"]
    corpora = sorted({str(v) for v in runs.get("params.data.name", pd.Series(dtype=object)).dropna()})
    corpus = ", ".join("the made-up corpus" if c == "synth" else f"`{c}`" for c in corpora) or "?"
    averaged = sorted({int(v) for v in column(runs, "params.train.average_last").dropna() if v > 1})
    patience = sorted({int(v) for v in column(runs, "params.train.patience").dropna() if v > 0})
    scored = f"the mean of the last {' or '.join(map(str, averaged))} checkpoints" if averaged else \
        "no checkpoint averaging"
    trained = "trained until dev stopped improving" if patience else "a fixed number of steps"
    return f"profile `{tags.get('profile', '?')}`, {corpus}, {trained}, {scored}"


def _caption_note(results: dict) -> list[str]:
    """Below a paper's caption: what ran instead. A study that trains: its profile, corpus, training and scoring;
    a probe study (Table 1's timings): its profile and the machine its layers were measured on."""
    if results["runs"].empty:
        return ["The title is the paper's caption.", ""]
    if "params.data.name" not in results["runs"]:
        tags = results["parent"]["tags"]
        return [f"The title is the paper's caption. Ours: profile `{tags.get('profile', '?')}`, each row's layer "
                f"measured (counted, timed, its paths traced) on {tags.get('hardware', 'this machine')}, not "
                "derived.", ""]
    return [f"The title is the paper's caption. Ours: {ours_caption(results)}.", ""]


def header_lines(study: str, results: dict, caption: str | None = None, paper_caption: bool = True) -> list[str]:
    """The lines every report opens with: title (with the paper's caption), the do-not-edit note, the
    provenance line the index copies, then command, commit, profile, hardware, MLflow parent run, wall
    time and overhead share (and the sacreBLEU signature where BLEU was scored); ends with a blank line."""
    parent, runs = results["parent"], results["runs"]
    tags, metrics = parent["tags"], parent.get("metrics", {})
    wall, share = metrics.get("wall_seconds"), metrics.get("overhead_share")
    total = parent.get("study_wall_seconds")         # over every invocation (a study resumed across sessions)
    cpu = (runs["metrics.cpu_seconds"].sum()
           if "metrics.cpu_seconds" in runs and runs["metrics.cpu_seconds"].notna().any() else None)
    signatures = sorted(set(runs["tags.sacrebleu_signature"].dropna())) if "tags.sacrebleu_signature" in runs else []
    # the last invocation's; wall_seconds is logged when an invocation ends, so only a closed one pairs them
    closed = parent.get("status") in ("FINISHED", "FAILED")
    prep = f"data preparation {metrics['prepare_seconds']:.0f} s" if closed and metrics.get("prepare_seconds") else ""
    opening = [f"# {study}" + (f": {caption}" if caption else ""), "",
               *(_caption_note(results) if caption and paper_caption else []),
               "Generated from MLflow by `python -m harness report`; regenerate it, do not edit it.", ""]
    assembled = slices.slices_of(parent)
    if assembled is not None:          # slices of the study (`run --slices`), assembled: every slice's provenance
        lines = opening + slices.header(study, parent, runs, assembled) + _versions_line(tags, runs)
        return _closing_lines(lines, parent, runs, cpu, signatures)
    lines = [*opening,
             provenance_line(parent), "",
             f"- command: `{tags.get('command', '?')}`" + (
                 f"; its latest --resume: `{tags['command_last']}`"
                 if tags.get("command_last") and tags["command_last"] != tags.get("command") else ""),
             f"- git SHA: `{tags.get('git_sha', '?')}`, uncommitted changes: {tags.get('git_dirty', '?')}",
             *_resumed_elsewhere(tags),
             f"- study version {tags.get('version', '?')}, profile `{tags.get('profile', '?')}`, "
             f"hardware: {tags.get('hardware', '?')}, started {tags.get('started', '?')}",
             *_versions_line(tags, runs),
             f"- MLflow parent run `{parent['run_id']}` (experiment `{study}`, status {parent['status']}), "
             + (f"{tags.get('n_trials', len(runs))} trials, {tags.get('n_failed', '?')} failed"
                if parent.get("status") not in ("RUNNING", "KILLED") else
                f"{len(runs)} trials started so far, {int((runs['status'] == 'FAILED').sum())} failed (the "
                "invocation has not finished)"),
             f"- wall time {num(wall, '{:.0f}')} s{f' ({prep})' if prep else ''}, Ray + MLflow overhead share "
             f"{num(None if share is None else 100 * share, '{:.1f}')} %"]
    if total is not None and (wall is None or total > wall + 1):
        lines[-1] = (f"- wall time {total / 3600:.2f} h over {int(tags.get('resume_count', '0')) + 1} invocations "
                     f"(the last {num(wall, '{:.0f}')} s{f', of it {prep}' if prep else ''}), "
                     "Ray + MLflow overhead share of the last "
                     f"{num(None if share is None else 100 * share, '{:.1f}')} %")
    return _closing_lines(lines, parent, runs, cpu, signatures)


def _closing_lines(lines: list[str], parent: dict, runs: pd.DataFrame, cpu: float | None,
                   signatures: list[str]) -> list[str]:
    """The header's last lines, one invocation's or an assembly's: CPU-hours, the stopping rule, the sacreBLEU
    signature, then the departures from the paper."""
    if cpu is not None:
        lines.append(f"- CPU time of the trials: {cpu / 3600:.2f} CPU-hours (each trial's wall time, across its "
                     "interruptions, times its threads)")
    lines += stopping_summary(runs)
    if signatures:
        lines.append(f"- sacreBLEU signature: `{'`, `'.join(signatures)}`")
    lines.append("")
    return lines + departure_lines(parent["tags"], parent["params"].get("rows", ""))


def _value(v) -> str:
    return "–" if v is None else json.dumps(v) if isinstance(v, str) else str(v).lower() if isinstance(v, bool) else \
        f"{v:g}" if isinstance(v, float) else str(v)


def is_measurement_setting(key: str) -> bool:
    """Whether a departure's key is a measurement's setting (what a row measures, not what it trains)."""
    from harness.measure.registry import setting_keys
    return key.startswith("train.") and key[len("train."):] in setting_keys()


def departure_lines(tags: dict, rows: str) -> list[str]:
    """The profile's departures from the paper, as the runner computed them from the study file (the parent's
    `departures` tag: each setting where a row differs from the same row in the `paper` profile)."""
    if "departures" not in tags:
        return []
    try:
        items = json.loads(tags["departures"])
    except ValueError:
        return ["## Departures from the paper", "", "(the list was too long for its MLflow tag and is cut)", ""]
    if not items:
        return ["## Departures from the paper", "", "None: every row runs with the paper profile's settings.", ""]
    every = set(filter(None, rows.split(",")))
    lines = ["## Departures from the paper", "",
             "Generated from the study file: every setting where a row of this profile differs from the same row in "
             "the study's `paper` profile (– : a setting of the made-up corpus, which the paper's WMT data does not "
             "have). Why each was chosen: the profile's comments in the study file and docs/calibration.md.", ""]
    for d in items:
        if "key" in d and is_measurement_setting(d["key"]):     # a measurement (a run stored before they were left out)
            continue
        if "note" in d:           # a departure no setting shows (the profile's departure_notes)
            lines.append(f"- not a setting: {d['note']}")
            continue
        whole = len(d["values"]) == 1 and every and set(d["values"][0]["rows"]) >= every    # the same for every row
        parts = [f"{_value(v['ours'])} (paper {_value(v['paper'])})" + ("" if whole else f" in {', '.join(v['rows'])}")
                 for v in d["values"]]
        lines.append(f"- `{d['key']}`: {'; '.join(parts)}")
    return lines + [""]


def row_departures(tags: dict) -> dict[str, dict[str, tuple]]:
    """The parent's `departures` tag as {setting: {row: (ours, paper)}} (rows that keep the paper's value
    are absent)."""
    try:
        items = json.loads(tags.get("departures", "[]"))
    except ValueError:
        return {}
    return {d["key"]: {row: (v["ours"], v["paper"]) for v in d["values"] for row in v["rows"]} for d in items
            if "key" in d and not is_measurement_setting(d["key"])}      # a departure_notes line is no setting of a row


def _departs_unlike(x: tuple | None, y: tuple | None) -> bool:
    """Whether two rows stand to each other otherwise than in the paper on one setting: x and y are each
    row's (ours, paper), None where the row keeps the paper's value. Numbers scaled by the same factor (widths
    / 8, big's steps 3x the base's) keep their relation; a value changed for one row and not the other does not."""
    if x is None or y is None:
        return (x is None) != (y is None)
    (o1, p1), (o2, p2) = x, y
    nums = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (o1, p1, o2, p2))
    if nums and p1 and p2:
        return not math.isclose(o1 / p1, o2 / p2, rel_tol=1e-6)
    return (o1 == o2) != (p1 == p2)


def claim_departures(rows: list[str], deps: dict[str, dict[str, tuple]], with_base: bool = True) -> list[str]:
    """The departures a comparison of `rows` rests on: settings on which the claim's rows (or either of them
    and the base) stand to each other otherwise than in the paper, e.g. the tiny profile's D rows trained on
    2,000 pairs against the base's 20,000, or a big row given the base's steps where the paper gives it 3x.
    `with_base`: the study has a row named base."""
    shown = list(dict.fromkeys([*rows, *(["base"] if with_base else [])]))
    pairs = [(r, q) for i, r in enumerate(shown) for q in shown[i + 1:]]     # each with a row of the claim
    out = []
    for key, by_row in deps.items():
        if any(_departs_unlike(by_row.get(r), by_row.get(q)) for r, q in pairs):
            cells = [f"{r} {_value(by_row[r][0])} (paper {_value(by_row[r][1])})" if r in by_row
                     else f"{r} as the paper"
                     for r in shown]
            out.append(f"`{key}`: {', '.join(cells)}")
    return out
