"""Whether each claim was registered before the first figure that could have shaped it, computed from git when a
report is made.

A claim's definition is what decides its verdict: its rows, metric, direction, and margin or threshold (not its
wording). Its definition commit is the oldest commit since which harness/paper/claims.yaml has held that definition
unchanged, under its id or under another id over the same study, rows and metric (a renamed claim is the same claim
redefined). A claim is *registered* when that commit came before every figure of its rows on the same data: before
the first committed report of the same study, profile and data (corpus seeds) that shows its rows, and before the
runs that judge it (the code each run ran already held the definition). Otherwise it is *post hoc*, and the status
names the first report or runs that showed those figures; a definition committed in the same commit as the first
report that showed its rows is post hoc too. A post hoc claim judged on fresh data (another corpus seed, whose first
figures came after the claim) is *confirmatory* there. What must come first is only what we chose: a claim that
restates the paper's own comparison (the paper's two rows with its figures, better, margin 0) reads registered
whenever it was typed in. A claim redefined after a committed report had shown its verdict says so too. Nothing here
is typed by hand: a reader can check every status with `git log -p harness/paper/claims.yaml reports/`."""

from __future__ import annotations

import json
import posixpath
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


def _rows(spec) -> list[str]:
    """The rows a side of a claim names: a row, a list, or {best: [...]} / {first: [...]}."""
    if spec is None:
        return []
    if isinstance(spec, str):
        return [spec]
    if isinstance(spec, dict):
        return [r for v in spec.values() for r in _rows(v)]
    return [r for x in spec for r in _rows(x)]


def claim_key(d: dict) -> tuple:
    """What makes two claims one claim whatever their ids: the study, the rows each side names, as written, and
    the metric (the best of A1..A3 against A4 is another claim than the best of A2..A4 against A1)."""
    return d.get("study"), json.dumps(d.get("a"), sort_keys=True), json.dumps(d.get("b"), sort_keys=True), \
        d.get("metric")


def _same_claim(defs: dict[str, dict], claim_id: str, key: tuple) -> list[dict]:
    """The definitions in one version of the claims file that are this claim: its id, or another over its key."""
    return [d for cid, d in defs.items() if cid == claim_id or claim_key(d) == key]


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
def _definition_at(root: str, path: str, sha: str, claim_id: str, key: tuple = ()):
    """The claim's definition in the claims file at commit `sha`, under its id or, failing that, under another id
    over the same `key` (None: the file or the claim is not there; _MISSING: no such commit here)."""
    if _git(root, "cat-file", "-e", f"{sha}^{{commit}}") is None:
        return _MISSING
    text = _git(root, "show", f"{sha}:{path}")
    try:
        entries = (yaml.safe_load(text or "") or {}).get("claims") or []
    except yaml.YAMLError:
        return None
    defs = {e["id"]: definition(e) for e in entries if isinstance(e, dict) and "id" in e}
    return defs.get(claim_id) or next(iter(_same_claim(defs, claim_id, key)), None)


@lru_cache(maxsize=1024)
def _first_shown(root: str, claim_ids: tuple[str, ...], head: str | None) -> str | None:
    """The first commit whose reports/ show one of these claims' verdicts: its row of a claims table with a verdict
    in bold (**holds**, **contradicted**, **inconclusive**; a **not run** row, whose runs had not finished, shows
    none)."""
    verdict = f"`({'|'.join(re.escape(c) for c in claim_ids)})`.*[*][*][a-z]*[*][*]"
    log = _git(root, "log", "--format=%H", "--reverse", "-E", "-G", verdict, "--", "reports")
    return log.split()[0] if log and log.split() else None


def _entry(root: Path, path: str, claim_id: str) -> dict | None:
    """The claim's whole entry in the claims file as it is now (the one the report's verdicts come from)."""
    try:
        entries = (yaml.safe_load((root / path).read_text()) or {}).get("claims") or []
    except (OSError, yaml.YAMLError):
        return None
    return next((e for e in entries if isinstance(e, dict) and e.get("id") == claim_id), None)


def papers_own(entry: dict) -> bool:
    """The claim restates the paper's own comparison, with nothing of ours chosen: two rows the paper printed
    figures for, better, margin 0, no second comparison."""
    paper = entry.get("paper") or {}
    return (entry.get("expect") == "better" and not entry.get("margin") and not entry.get("also")
            and isinstance(entry.get("a"), str) and isinstance(entry.get("b"), str) and "a" in paper and "b" in paper)


_PROVENANCE_LINE = re.compile(r"^\*\*Provenance:\*\* `([^`]*)`.*?profile `([^`]*)`", re.M)
_ROW_CELL = re.compile(r"^\| \*\*([^*|]+)\*\* \|", re.M)


def data_identity(markdown: str) -> tuple | None:
    """The data a report's runs saw, from its provenance line: the profile and the command's `--set data.*`
    overrides (another corpus seed is other data); None where the report names neither."""
    m = _PROVENANCE_LINE.search(markdown)
    return (m.group(2), tuple(sorted(re.findall(r"--set (data\.\S+)", m.group(1))))) if m else None


@lru_cache(maxsize=64)
def _figures(root: str, study: str, head: str | None) -> tuple[tuple[str, str, tuple | None, frozenset], ...]:
    """Every committed version of a report of `study` (any profile or name), oldest first: (commit, path, its data
    identity, the rows it shows as bold first cells)."""
    log = _git(root, "log", "--format=%x00%H", "--reverse", "--name-only", "--",
               f":(glob)reports/**/{study}.md") if head else None
    out = []
    for chunk in (log or "").split("\0")[1:]:
        sha, *paths = chunk.split()
        for rel in paths:
            text = _git(root, "show", f"{sha}:{rel}")
            if text:
                out.append((sha, rel, data_identity(text), frozenset(_ROW_CELL.findall(text))))
    return tuple(out)


def _shows(side, shown: frozenset) -> bool:
    """A report showing `shown` rows shows this side of a claim: its row, every row of a list or of {best: ...},
    and of {first: ...} any one (the verdict reads the first that ran)."""
    if side is None:
        return True
    if isinstance(side, str):
        return side in shown
    if isinstance(side, dict) and "first" in side:
        return any(_shows(r, shown) for r in side["first"])
    return all(_shows(r, shown) for r in (side.get("best", []) if isinstance(side, dict) else side))


def first_figures(root: Path, entry: dict, identity: tuple | None, same: bool = True) -> tuple[str, str] | None:
    """The first commit, and the report, that showed the rows of the claim `entry` on the data `identity` (same
    False: on other data); None where none did. A report whose data cannot be read counts as the same data (the
    stricter reading)."""
    for sha, rel, ident, shown in _figures(str(root), entry.get("study", ""), _head(str(root))):
        on_same = ident is None or identity is None or ident == identity
        if on_same == same and _shows(entry.get("a"), shown) and _shows(entry.get("b"), shown):
            return sha, rel
    return None


def _before(root: Path, older: str, newer: str) -> bool:
    """older came strictly before newer (an ancestor, not the same commit)."""
    return older != newer and bool(_is_ancestor(str(root), older, newer))


def _run_status(run_shas: set[str], dirty: bool, held: list, current: dict, short: str) -> str:
    """The claim against the commits of the runs that judge it."""
    shas = {s for s in run_shas if s and s != "unknown"}
    if run_shas - shas:                # a run without a commit could have run before the claim
        return f"unknown: {'some of ' if shas else ''}the runs recorded no commit (claim defined at {short})"
    if not shas or _MISSING in held:
        return f"unknown: the runs' commit is not in this repository (claim defined at {short})"
    if dirty:
        return f"unknown: the runs ran from uncommitted changes (claim defined at {short})"
    if all(d == current for d in held):
        return f"registered ({short})"
    return f"post hoc: written after these runs' figures (commit {short})"


def _figure_status(status: str, root: Path, entry: dict, since: str, report: str) -> str:
    """The run-based status against the first committed figures of the claim's rows: post hoc where they were
    committed before the definition (or with it), confirmatory where that was on other data alone."""
    text = (root / report).read_text(encoding="utf-8") if (root / report).is_file() else ""
    identity = data_identity(text)
    first = first_figures(root, entry, identity)
    if first and not _before(root, since, first[0]):
        return (f"post hoc: its rows' figures were first committed at {first[0][:7]} ({first[1]}), before its "
                f"definition ({since[:7]})")
    other = first_figures(root, entry, identity, same=False)
    if status.startswith("registered") and other and not _before(root, since, other[0]):
        return (f"confirmatory ({since[:7]}): registered before this data's first figures, post hoc on {other[1]} "
                f"(its figures first at {other[0][:7]})")
    return status


def registration(claim_id: str, run_shas: set[str], dirty: bool = False, root: Path = ROOT,
                 path: str = CLAIMS_FILE, report: str | None = None) -> str:
    """The claim's status against runs made at `run_shas` (their git SHAs; dirty: some ran from uncommitted
    changes), its definition read from the claims file as it is now; with `report` (the report's path in the
    checkout), against the first committed figures of its rows too."""
    head = _head(str(root))
    history = _history(str(root), path, head)
    entry = _entry(root, path, claim_id)
    if history is None or entry is None:
        return "unknown: not a git checkout of the project, so when the claim was written cannot be computed"
    current, key = definition(entry), claim_key(definition(entry))
    if history[-1][1].get(claim_id) != current:
        return "not yet committed: claims.yaml holds a definition no commit has"
    since = history[-1][0]
    for sha, defs in reversed(history):
        if current not in _same_claim(defs, claim_id, key):
            break
        since = sha
    short = since[:7]
    held = [_definition_at(str(root), path, s, claim_id, key) for s in {s for s in run_shas if s and s != "unknown"}]
    status = _run_status(run_shas, dirty, held, current, short)
    if papers_own(entry):       # nothing of ours was chosen: the paper registered it in 2017
        status = status if status.startswith(("registered", "unknown")) else \
            f"registered ({short}; the paper's own comparison)"
    elif report and not status.startswith("unknown"):
        status = _figure_status(status, root, entry, since, report)
    # The commits that changed the definition (not its first appearance; a claim removed and brought back
    # differently, or under a new id over the same rows and metric, counts too), and which of them came after a
    # committed report had shown the claim's verdict.
    changes, last, ids = [], None, {claim_id}
    for sha, defs in history:
        mine = _same_claim(defs, claim_id, key)
        ids |= {cid for cid, d in defs.items() if d in mine}
        if mine:
            now = defs.get(claim_id, mine[-1])
            if last is not None and now != last:
                changes.append(sha)
            last = now
    shown = _first_shown(str(root), tuple(sorted(ids)), head) if changes else None
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
_NOT_SETTINGS = ("profile.resources", "profile.requires", "profile.departure_notes", "profile.description",
                 "profile.include")


def _include_of(text: str | None, profile: str) -> tuple[str, str] | None:
    """The (file, profile) a profile's `include: FILE:PROFILE` names, or None."""
    try:
        raw = yaml.safe_load(text or "") or {}
    except yaml.YAMLError:
        return None
    inc = (((raw.get("profiles") or {}).get(profile)) or {}).get("include")
    if not isinstance(inc, str):
        return None
    file, _, prof = inc.partition(":")
    return file, prof or profile


def _included_files(root: Path, study_file: str, profile: str) -> list[str]:
    """The study files a profile includes as HEAD's tree has them, in turn (at most four deep)."""
    out, path, prof = [], study_file, profile
    for _ in range(4):
        try:
            inc = _include_of((root / path).read_text(encoding="utf-8"), prof)
        except OSError:
            break
        if inc is None:
            break
        path, prof = posixpath.normpath(posixpath.join(posixpath.dirname(path), inc[0])), inc[1]
        out.append(path)
    return out


def _view_at(root_s: str, sha: str, study_file: str, profile: str, depth: int = 0) -> dict[str, object]:
    """_profile_view of a study file at a commit, resolved through the profile it includes (and that one's, in turn):
    the included profile's settings, with this profile's own laid over them, so that a change to Table 3's tiny
    profile is a change to every profile built on it and moving a setting into an included profile is none. The
    included file's rows are not this study's and are left out."""
    text = _git(root_s, "show", f"{sha}:{study_file}")
    view = _profile_view(text, profile)
    inc = _include_of(text, profile)
    if not inc or depth >= 4:
        return view
    path = posixpath.normpath(posixpath.join(posixpath.dirname(study_file), inc[0]))
    start = {key: value for key, value in _view_at(root_s, sha, path, inc[1], depth + 1).items()
             if key.startswith("profile.") and not key.startswith(("profile.rows.", "profile.include"))}
    # the included profile is the start and this one's own settings are laid over it, key by key
    return {**start, **{key: value for key, value in view.items() if value is not None or key not in start}}


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
    files = [study_file, *_included_files(root, study_file, profile)]
    commits = (_git(root_s, "log", "--format=%H", "--reverse", f"{first}..HEAD", "--", *files) or "").split()
    text = _git(root_s, "show", f"{first}:{study_file}")
    before, shown_rows = _view_at(root_s, first, study_file, profile), _rows_named(text, profile)   # later rows: none
    lines = []
    for sha in commits:
        after = _view_at(root_s, sha, study_file, profile)
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
        lines.insert(0, f"(the first report with this profile's figures was committed at {first[:7]})")
    return lines
