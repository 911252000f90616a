"""Whether each claim was registered before the runs that judge it, computed from git when a report is made.

A claim's definition is what decides its verdict: its rows, metric, direction, and margin or threshold (not its
wording). Its registration commit is the oldest commit since which harness/paper/claims.yaml has held that
definition unchanged. The runs' commit is the git SHA every trial records. The claim is "registered" when its
registration commit is the runs' commit or one of its ancestors (the code that ran already held it), and
"written after these runs' figures" otherwise. A claim whose definition changed after a committed report had
shown one of its verdicts says so too. Nothing here is typed by hand: a reader can check every status with
`git log -p harness/paper/claims.yaml`."""

from __future__ import annotations

import json
import re
import subprocess
from functools import lru_cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]          # the checkout this harness/ was imported from
CLAIMS_FILE = "harness/paper/claims.yaml"
# The fields that decide a verdict; a change of wording (text, source, paper's figures) is no redefinition.
DEFINING = ("study", "metric", "a", "b", "expect", "better", "margin", "target", "target_metric", "also")


def _git(root: str, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", "-C", root, *args], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def definition(entry: dict) -> dict:
    return {k: entry[k] for k in DEFINING if entry.get(k) is not None}


def _head(root: str) -> str | None:
    out = _git(root, "rev-parse", "HEAD")
    return out.strip() if out else None


@lru_cache(maxsize=8)
def _history(root: str, path: str, head: str | None) -> tuple[tuple[str, dict[str, dict]], ...] | None:
    """Every commit up to `head` that touched the claims file, oldest first, with each claim's definition there
    (None: not a git checkout holding that file)."""
    if head is None:
        return None
    log = _git(root, "log", "--format=%H", "--reverse", "--", path)
    if not log:
        return None
    out = []
    for sha in log.split():
        text = _git(root, "show", f"{sha}:{path}")
        try:
            entries = (yaml.safe_load(text or "") or {}).get("claims") or []
        except yaml.YAMLError:
            entries = []
        out.append((sha, {e["id"]: definition(e) for e in entries if isinstance(e, dict) and "id" in e}))
    return tuple(out)


@lru_cache(maxsize=4096)
def _is_ancestor(root: str, older: str, newer: str) -> bool | None:
    """older == newer or an ancestor of it (None: newer is no commit of this repository)."""
    if _git(root, "cat-file", "-e", f"{newer}^{{commit}}") is None:
        return None
    try:
        done = subprocess.run(["git", "-C", root, "merge-base", "--is-ancestor", older, newer], capture_output=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.returncode == 0


_MISSING = object()


@lru_cache(maxsize=4096)
def _definition_at(root: str, path: str, sha: str, claim_id: str):
    """The claim's definition in the claims file at commit `sha` (None: the file or the claim is not there;
    _MISSING: no such commit here)."""
    if _git(root, "cat-file", "-e", f"{sha}^{{commit}}") is None:
        return _MISSING
    text = _git(root, "show", f"{sha}:{path}")
    try:
        entries = (yaml.safe_load(text or "") or {}).get("claims") or []
    except yaml.YAMLError:
        return None
    return next((definition(e) for e in entries if isinstance(e, dict) and e.get("id") == claim_id), None)


@lru_cache(maxsize=1024)
def _first_shown(root: str, claim_id: str, head: str | None) -> str | None:
    """The first commit whose reports/ show this claim's verdict: its row of a claims table with a verdict in bold
    (**holds**, **contradicted**, **inconclusive**; a **not run** row, whose runs had not finished, shows none)."""
    verdict = f"`{re.escape(claim_id)}`.*[*][*][a-z]*[*][*]"
    log = _git(root, "log", "--format=%H", "--reverse", "-G", verdict, "--", "reports")
    return log.split()[0] if log and log.split() else None


def _current(root: Path, path: str, claim_id: str) -> dict | None:
    """The claim's definition in the claims file as it is now (the one the report's verdicts come from)."""
    try:
        entries = (yaml.safe_load((root / path).read_text()) or {}).get("claims") or []
    except (OSError, yaml.YAMLError):
        return None
    return next((definition(e) for e in entries if isinstance(e, dict) and e.get("id") == claim_id), None)


def registration(claim_id: str, run_shas: set[str], dirty: bool = False, root: Path = ROOT,
                 path: str = CLAIMS_FILE) -> str:
    """The claim's status against runs made at `run_shas` (their git SHAs; dirty: some ran from uncommitted
    changes), its definition read from the claims file as it is now."""
    head = _head(str(root))
    history = _history(str(root), path, head)
    current = _current(root, path, claim_id)
    if history is None or current is None:
        return "unknown: not a git checkout of the project, so when the claim was written cannot be computed"
    if history[-1][1].get(claim_id) != current:
        return "not yet committed: claims.yaml holds a definition no commit has"
    since = history[-1][0]
    for sha, defs in reversed(history):
        if defs.get(claim_id) != current:
            break
        since = sha
    short = since[:7]
    shas = {s for s in run_shas if s and s != "unknown"}
    # Registered where the code each run ran already held the claim as it is defined now: its definition in
    # claims.yaml at the run's own commit (robust to merges and to history that is not a line).
    held = [_definition_at(str(root), path, s, claim_id) for s in shas]
    unrecorded = run_shas - shas                # a run without a commit could have run before the claim
    if unrecorded:
        status = f"unknown: {'some of ' if shas else ''}the runs recorded no commit (claim defined at {short})"
    elif not shas or _MISSING in held:
        status = f"unknown: the runs' commit is not in this repository (claim defined at {short})"
    elif dirty:
        status = f"unknown: the runs ran from uncommitted changes (claim defined at {short})"
    elif all(d == current for d in held):
        status = f"registered ({short})"
    else:
        status = f"written after these runs' figures (commit {short})"
    # The commits that changed the definition (not its first appearance; a claim removed and brought back
    # differently counts too), and which of them came after a committed report had shown the claim's verdict.
    changes, last = [], None
    for sha, defs in history:
        if claim_id in defs:
            if last is not None and defs[claim_id] != last:
                changes.append(sha)
            last = defs[claim_id]
    shown = _first_shown(str(root), claim_id, head) if changes else None
    late = [sha for sha in changes if shown and sha != shown and _is_ancestor(str(root), shown, sha)]
    if late:
        times = "once" if len(late) == 1 else f"{len(late)} times"
        status += (f"; redefined {times} after its verdict was known (first shown at {shown[:7]}; "
                   f"{', '.join(sha[:7] for sha in late)})")
    return status


def _flat(value, prefix: str = "") -> dict[str, object]:
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for k, v in value.items():
            out.update(_flat(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: value}


def _profile_view(text: str | None, profile: str) -> dict[str, object]:
    """What decides a profile's runs in one version of a study file: the study's base, rows and seeds and the
    profile's own block, flattened to dotted keys (comments and other profiles left out)."""
    try:
        raw = yaml.safe_load(text or "") or {}
    except yaml.YAMLError:
        return {}
    view = {k: raw.get(k) for k in ("base", "rows", "seeds") if k in raw}
    view["profile"] = (raw.get("profiles") or {}).get(profile)
    return _flat(view)


def _row_of(key: str) -> str | None:
    """The row a flattened key belongs to (rows.X.... or profile.rows.X....), else None."""
    parts = key.split(".")
    if parts[0] == "rows" and len(parts) > 1:
        return parts[1]
    if parts[:2] == ["profile", "rows"] and len(parts) > 2:
        return parts[2]
    return None


def _rows_named(text: str | None, profile: str) -> set[str]:
    """The rows a study file names at the top and in the profile's own `rows` (empty rows included)."""
    try:
        raw = yaml.safe_load(text or "") or {}
    except yaml.YAMLError:
        return set()
    prof = (raw.get("profiles") or {}).get(profile) or {}
    return set(raw.get("rows") or {}) | set(prof.get("rows") or {})


# Profile keys that decide nothing of what a row trains or scores (they say where it runs or what it needs).
_NOT_SETTINGS = ("profile.resources", "profile.requires", "profile.departure_notes", "profile.description")


def late_profile_changes(study_file: str, profile: str, report: str | list[str],
                         root: Path = ROOT) -> list[str] | None:
    """Every setting of `profile` in `study_file` (a path relative to the checkout) changed after the first of the
    reports at `report` (reports/[FOLDER/]STUDY.md, one path or several: every report of the profile; its layout
    scores a test set) was first committed: one line each, with the commits; [] when none; None where git cannot
    tell (not a checkout of the project)."""
    root_s = str(root)
    if _head(root_s) is None or _git(root_s, "ls-files", "--error-unmatch", study_file) is None:
        return None
    log = _git(root_s, "log", "--format=%H", "--reverse", "--", *([report] if isinstance(report, str) else report))
    first = log.split()[0] if log and log.split() else None
    if first is None:
        return []
    commits = (_git(root_s, "log", "--format=%H", "--reverse", f"{first}..HEAD", "--", study_file) or "").split()
    text = _git(root_s, "show", f"{first}:{study_file}")
    before, shown_rows = _profile_view(text, profile), _rows_named(text, profile)   # later rows had no test figure
    lines = []
    for sha in commits:
        after = _profile_view(_git(root_s, "show", f"{sha}:{study_file}"), profile)
        added = set()
        for key in sorted(set(before) | set(after)):
            if before.get(key) == after.get(key) or key.startswith(_NOT_SETTINGS):
                continue
            row = _row_of(key)
            if row is not None and row not in shown_rows:
                added.add(row)
                continue
            lines.append(f"`{key.removeprefix('profile.')}`: {json.dumps(before.get(key))} → "
                         f"{json.dumps(after.get(key))} at {sha[:7]}")
        lines += [f"row `{row}` added or changed at {sha[:7]} (it had no test figure before)" for row in sorted(added)]
        before = after
    if lines:
        lines.insert(0, f"(the first report with this profile's test figures was committed at {first[:7]})")
    return lines
