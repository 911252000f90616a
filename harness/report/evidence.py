"""What a written report holds, read back from its Markdown: its trials, each row's finished seeds, each
claim's verdict and each check's result. `report` compares the report it is about to replace with the one it
wrote, says what changed, and refuses to replace a report made from more seeds or trials with one made from fewer
unless told to (`--force`): a newcomer's one-seed run does not quietly overwrite a three-seed reference."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_TRIALS = re.compile(r"(?:MLflow parent run|assembly) `[0-9a-f]+`(?: of \d+ slices)? \(experiment `[^`]*`, "
                     r"status \w+\), (\d+) trials, (\d+|\?) failed")
_SEEDS = re.compile(r"^(\d+)(?:/(\d+))?")
_VERDICT = re.compile(r"\*\*(holds|contradicted|inconclusive|not run)\*\*")
# A claim's registration status, by the word its cell (the claims table's last) starts with (harness/report/
# registration.py)
REGISTRATION = ("registered", "post hoc", "confirmatory", "unknown", "not yet committed")
_CHECK = re.compile(r"\| \*(passes|fails|undecided|not checked)\* \|")      # a check's result: never a claim's


@dataclass
class Evidence:
    trials: int | None = None                       # the invocation's trials (the provenance line)
    seeds: dict[str, int] = field(default_factory=dict)     # each row's finished seeds (the first rows table)
    verdicts: dict[str, str] = field(default_factory=dict)  # claim id -> verdict
    checks: dict[str, str] = field(default_factory=dict)    # check id -> passes | fails | undecided | not checked
    registration: dict[str, str] = field(default_factory=dict)  # claim id -> registered | post hoc | confirmatory ...

    @property
    def finished(self) -> int:
        return sum(self.seeds.values())


def read_evidence(markdown: str) -> Evidence:
    """The trials, rows with their finished seeds, and verdicts a report shows (what it cannot find stays empty)."""
    ev = Evidence()
    m = _TRIALS.search(markdown)
    if m:
        ev.trials = int(m.group(1))
    seeds_at = None
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not cells:
            seeds_at = None if ev.seeds else seeds_at    # the first rows table with a seeds column only
            continue
        if seeds_at is None and not ev.seeds and "seeds" in cells and cells[0] == "row":
            seeds_at = cells.index("seeds")
        elif seeds_at is not None and cells[0].startswith("**") and len(cells) > seeds_at:
            s = _SEEDS.match(cells[seeds_at])
            if s:
                ev.seeds[cells[0].strip("*")] = int(s.group(1))
        if cells[0].startswith("`") and (v := _CHECK.search(line)):
            ev.checks[cells[0].split("`")[1]] = v.group(1)
        elif cells[0].startswith("`") and (v := _VERDICT.search(line)):
            ev.verdicts[cells[0].split("`")[1]] = v.group(1)
            word = next((w for w in REGISTRATION if cells[-1].startswith(w)), None)
            if word:
                ev.registration[cells[0].split("`")[1]] = word
    return ev


def changes(old: Evidence, new: Evidence) -> list[str]:
    """What the new report shows that the old did not, and the other way round, one phrase each."""
    out = []
    if old.trials is not None and new.trials is not None and old.trials != new.trials:
        out.append(f"trials {old.trials} -> {new.trials}")
    gained = [r for r in new.seeds if r not in old.seeds]
    lost = [r for r in old.seeds if r not in new.seeds]
    if gained:
        out.append("rows gained: " + ", ".join(gained))
    if lost:
        out.append("rows lost: " + ", ".join(lost))
    moved = [f"{r} {old.seeds[r]} -> {new.seeds[r]}" for r in new.seeds
             if r in old.seeds and old.seeds[r] != new.seeds[r]]
    if moved:
        out.append("finished seeds: " + ", ".join(moved))
    flipped = [f"{c} {old.verdicts[c]} -> {v}" for c, v in new.verdicts.items()
               if c in old.verdicts and old.verdicts[c] != v]
    if flipped:
        out.append("verdicts: " + ", ".join(flipped))
    added, dropped = set(new.verdicts) - set(old.verdicts), set(old.verdicts) - set(new.verdicts)
    if added:
        out.append("claims added: " + ", ".join(sorted(added)))
    if dropped:
        out.append("claims dropped: " + ", ".join(sorted(dropped)))
    return out


def holds_less(old: Evidence, new: Evidence) -> bool:
    """The new report rests on fewer trials, or fewer finished seeds, or fewer rows than the old."""
    if old.trials is not None and new.trials is not None and new.trials < old.trials:
        return True
    return new.finished < old.finished or bool(set(old.seeds) - set(new.seeds))


REGISTRATION_HEADER = "registered before these runs?"


def stale_reason(markdown: str, study: str) -> str | None:
    """Why a written report no longer matches HEAD's claims, as far as its text shows (None: it does): the claim ids
    of its claims section against claims.yaml's for its study, and the registration column that every claims table
    now carries. The index marks such a report stale; tests/test_freshness.py checks the rest (its rows and departures
    against the study file) and that every report it finds stale is marked."""
    from harness.report.verdicts import claims_for
    want = {c.id for c in claims_for(study)}
    section = markdown.split("\n## Claims\n", 1)[1].split("\n## ", 1)[0] if "\n## Claims\n" in markdown else ""
    have = set(re.findall(r"^\| `([^`]+)`", section, re.M))
    why = []
    if have != want:
        why.append("its claims are not claims.yaml's" if have else "it has no claims section")
    if have and REGISTRATION_HEADER not in section:
        why.append("its verdicts carry no registration status")
    return " and ".join(why) or None


BANNER = "> **Stale against HEAD:**"     # the first line of a report that no longer matches HEAD


def stale_banner(why: str, slices: str | None) -> str:
    """The first line of a stale report: why, and what replaces it (its slices, where the study runs in slices)."""
    then = (f": its slices go on in {slices}, and `python -m harness report --record {slices}/*.slice.json.gz` "
            "replaces this file with their assembled report" if slices else
            ": running its study again at HEAD, then `python -m harness report`, replaces this file")
    return f"{BANNER} {why}{then}. Until then its figures and verdicts are not results of this code."


def with_banner(markdown: str, banner: str | None) -> str:
    """The report's text with its first-line banner set to `banner` (None: without one)."""
    body = markdown.split("\n", 2)[2] if markdown.startswith(BANNER) else markdown
    return f"{banner}\n\n{body}" if banner else body
