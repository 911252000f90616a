"""Whether each claim was registered before the runs that judge it, computed from git when a report is made.

A claim's definition is what decides its verdict: its rows, metric, direction, and margin or threshold (not its
wording). Its registration commit is the oldest commit since which harness/paper/claims.yaml has held that
definition unchanged. The runs' commit is the git SHA every trial records. The claim is "registered" when its
registration commit is the runs' commit or one of its ancestors (the code that ran already held it), and
"written after these runs' figures" otherwise. A claim whose definition changed after a committed report had
shown one of its verdicts says so too. Nothing here is typed by hand: a reader can check every status with
`git log -p harness/paper/claims.yaml`."""

from __future__ import annotations

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


@lru_cache(maxsize=1024)
def _first_shown(root: str, claim_id: str, head: str | None) -> str | None:
    """The first commit whose reports/ show this claim (its id in a claims table)."""
    log = _git(root, "log", "--format=%H", "--reverse", "-S", f"`{claim_id}`", "--", "reports")
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
    ancestry = {_is_ancestor(str(root), since, s) for s in shas}
    if not shas or None in ancestry:
        status = f"unknown: the runs' commit is not in this repository (claim defined at {short})"
    elif dirty:
        status = f"unknown: the runs ran from uncommitted changes (claim defined at {short})"
    elif ancestry == {True}:
        status = f"registered ({short})"
    else:
        status = f"written after these runs' figures (commit {short})"
    # The commits that changed the definition (not its first appearance), and which of them came after a
    # committed report had shown the claim's verdict.
    changes = [sha for (_, before), (sha, defs) in zip(history, history[1:])
               if claim_id in before and claim_id in defs and before[claim_id] != defs[claim_id]]
    shown = _first_shown(str(root), claim_id, head) if changes else None
    late = [sha for sha in changes if shown and sha != shown and _is_ancestor(str(root), shown, sha)]
    if late:
        times = "once" if len(late) == 1 else f"{len(late)} times"
        status += (f"; redefined {times} after its verdict was known (first shown at {shown[:7]}; "
                   f"{', '.join(sha[:7] for sha in late)})")
    return status
