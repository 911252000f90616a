"""The header of a report assembled from slices (`run --slices`, then `report --record DIR/*.slice.json.gz`): in
place of one invocation's command, commit and machine, every slice's, what changed in the training code between
their commits, the trials kept once, and the rows whose seeds trained on different CPU models.

Everything below the header (tables, verdicts, CSV, plots) is what one invocation of the same trials gives: the
assembly (harness/record.py `assemble`) hands the layouts one trials' table, as one invocation's store would.
"""

from __future__ import annotations

import json
import shlex

import pandas as pd

from harness import record

PROVENANCE = "**Provenance:**"       # the line the index copies from each report


def slices_of(parent: dict) -> list[dict] | None:
    """The slices an assembled parent names (None: one invocation's parent)."""
    tags = parent.get("tags", {})
    return json.loads(tags[record.SLICES_TAG]) if record.SLICES_TAG in tags else None


def provenance_line(parent: dict, slices: list[dict]) -> str:
    """The line the index copies: how many slices, their commits, profile, machines and when they started."""
    tags = parent["tags"]
    commits = list(dict.fromkeys(str(s.get("git_sha", "?")) for s in slices))
    machines = list(dict.fromkeys(str(s.get("hardware", "?")) for s in slices))
    starts = sorted(str(s.get("started", "?")) for s in slices)
    when = starts[0] if starts[0] == starts[-1] else f"{starts[0]} to {starts[-1]}"
    return (f"{PROVENANCE} assembled from {len(slices)} slice{'s' * (len(slices) != 1)} (each below) · "
            f"commit{'s' * (len(commits) != 1)} {', '.join(f'`{c}`' for c in commits)} · "
            f"profile `{tags.get('profile', '?')}` · {'; '.join(machines)} · {when}")


def _wall(seconds) -> str:
    if seconds is None:
        return "?"
    return f"{seconds / 3600:.2f} h" if seconds >= 5400 else f"{seconds:.0f} s"


def slice_lines(slices: list[dict]) -> list[str]:
    """One line a slice: its command, commit, machine (CPU model and ISA), start, wall time, status and trials."""
    lines = []
    for i, s in enumerate(slices, 1):
        trials = ", ".join(s.get("trials", [])) or "none kept"
        lines.append(f"- slice {i}: command `{s.get('command', '?')}` · commit `{s.get('git_sha', '?')}` "
                     f"(uncommitted changes: {s.get('git_dirty', '?')}) · {s.get('cpu_model', '?')} "
                     f"[{s.get('cpu_isa', '?')}] · started {s.get('started', '?')} · wall "
                     f"{_wall(s.get('wall_seconds'))} · {s.get('status', '?')} · file `{s.get('file', '?')}` "
                     f"(its MLflow run `{s.get('parent_run', '?')}`) · trials: {trials}")
        if s.get("command_last") and s["command_last"] != s.get("command"):
            lines.append(f"  - its latest --resume: `{s['command_last']}` at commit "
                         f"`{s.get('git_sha_last') or s.get('git_sha', '?')}`")
    return lines


_DROPPED = {"--rows": 1, "--seeds": 1, "--resume": 0, "--quiet": 0, "--verbose": 0}


def one_trial_command(command: str, row: str, seed: str) -> str:
    """A slice's command narrowed to one trial: its --rows and --seeds replaced by the trial's, --slices, --resume and
    the output flags left out (they choose what runs and how it is shown, not what a trial computes)."""
    args, out, i = shlex.split(command), [], 0
    while i < len(args):
        a = args[i]
        if a in _DROPPED:
            i += 1 + _DROPPED[a]
            continue
        if a == "--slices":            # its folder is optional
            i += 2 if i + 1 < len(args) and not args[i + 1].startswith("--") else 1
            continue
        out.append(a)
        i += 1
    return shlex.join(out + ["--rows", row, "--seeds", seed])


def reproduce_lines(slices: list[dict], most: int = 6) -> list[str]:
    """The command that trains each trial again on its own (each one where there are at most `most`, else the form)."""
    trials = [(s, key) for s in slices for key in s.get("trials", []) if "-s" in key]
    if not trials:
        return []
    if len(trials) > most:
        s = slices[0]
        return ["- one trial again on its own: its slice's command for that row and seed alone, e.g. "
                f"`{one_trial_command(s.get('command', '?'), 'ROW', 'SEED')}`"]
    return ["- each trial again on its own: " + "; ".join(
        f"{key}: `{one_trial_command(s.get('command', '?'), *key.rsplit('-s', 1))}`" for s, key in trials)]


def changes_line(tags: dict) -> str:
    """What changed in model/, harness/train/ and harness/data/ between the slices' commits (git, at assembly)."""
    found = json.loads(tags.get(record.CHANGES_TAG, "{}") or "{}")
    commits = found.get("commits", [])
    where = "model/, harness/train/ and harness/data/"
    if len(commits) < 2:
        return f"- every slice ran at one commit: nothing in {where} differs between them"
    between = f"between the slices' commits {', '.join(f'`{c[:12]}`' for c in commits)}"
    if "unknown" in found:
        return f"- what changed in {where} {between}: unknown ({found['unknown']})"
    files = found.get("files", [])
    return f"- what changed in {where} {between}: " + (", ".join(f"`{f}`" for f in files) if files else "nothing")


def duplicates_line(tags: dict) -> list[str]:
    """The trials two slices both held, and whose was kept (the slice that started first)."""
    dropped = json.loads(tags.get("slice_duplicates", "[]") or "[]")
    return [f"- held by two slices, counted once: {'; '.join(dropped)}"] if dropped else []


def mixed_cpus(runs: pd.DataFrame) -> list[str]:
    """A line naming each row whose finished seeds trained on different CPU models: its verdicts move with the CPU
    (another CPU runs other kernels, figures within seed noise, not equal ones)."""
    if "tags.cpu_model" not in runs or "tags.row" not in runs:
        return []
    done = runs[runs["status"] == "FINISHED"] if "status" in runs else runs
    mixed = []
    for row, g in done.groupby(done["tags.row"].astype(str), sort=False):
        models = {}
        for _, run in g.iterrows():
            models.setdefault(str(run["tags.cpu_model"]), []).append(f"s{run.get('tags.seed', '?')}")
        if len(models) > 1:
            parts = [f"{model}: {', '.join(sorted(seeds))}" for model, seeds in sorted(models.items())]
            mixed.append(f"{row} ({'; '.join(parts)})")
    if not mixed:
        return []
    return ["- seeds of one row trained on different CPU models, so that row's figures and verdicts mix two "
            f"machines' kernels: {'; '.join(mixed)}"]


def header(study: str, parent: dict, runs: pd.DataFrame, slices: list[dict]) -> list[str]:
    """The provenance block of an assembled report, from its provenance line to its CPU-hours."""
    tags = parent["tags"]
    total = parent.get("study_wall_seconds")
    return [provenance_line(parent, slices), "",
            *slice_lines(slices),
            *reproduce_lines(slices),
            changes_line(tags),
            *duplicates_line(tags),
            *mixed_cpus(runs),
            f"- study version {tags.get('version', '?')}, profile `{tags.get('profile', '?')}`",
            f"- assembly `{parent['run_id']}` of {len(slices)} slices (experiment `{study}`, status "
            f"{parent['status']}), {tags.get('n_trials', len(runs))} trials, {tags.get('n_failed', '?')} failed "
            "(a slice keeps its finished trials only)",
            f"- wall time {_wall(total)} over {len(slices)} slices (their own wall times added up)"]
