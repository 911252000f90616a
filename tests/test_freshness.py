"""Every committed report matches HEAD: its claims (ids, wording, margin or threshold, and a registration status
for each verdict), its rows and its departures from the paper are what harness/paper/claims.yaml and its study
file give now. No training: the study file is resolved as `run` resolves it, from the command the report names.

A report whose runs are still to be made again is listed in STALE with the reason; the test fails if a listed
report has become fresh (drop it from the list) as well as if any other report is stale."""

import json
import re
from pathlib import Path

import pytest
import yaml

from harness.report.evidence import read_evidence
from harness.report.header import departure_lines
from harness.report.registration import registration
from harness.study.departures import departures
from harness.study.kinds import load_study
from tests.helpers import commits_of, invocation_of

ROOT = Path(__file__).resolve().parents[1]
CLAIMS = ROOT / "harness" / "paper" / "claims.yaml"
CHECKS = ROOT / "harness" / "paper" / "checks.yaml"
REGISTRATION_HEADER = "registered before these runs?"

# Reports whose studies must run again before they match HEAD, with the kinds of difference each has: the check
# fails on any other kind, and on a listed kind that is no longer found (regenerating a report from new runs
# removes it from here). Both are real-data Multi30K reports made before the profiles trained until val stopped
# improving: their departures lack the rule, they have no registration column, and Table 3's shows 17 of its 21
# rows. The runs that replace them go on as slices (docs/calibration.md, "Studies in slices"); each leaves this list
# when its report is assembled. (Table 2's two were withdrawn on 2026-12-08: docs/results.md.)
STALE = {
    "reports/multi30k/table3.md": {"rows", "departures", "claim ids", "registration column"},
    "reports/multi30k/decoder_only.md": {"departures", "registration column"},
}


def committed_reports() -> list[Path]:
    return sorted(p for p in (ROOT / "reports").rglob("*.md") if p.name != "README.md")


def _section(text: str, title: str) -> list[str] | None:
    if f"\n## {title}\n" not in text:
        return None
    body = text.split(f"\n## {title}\n", 1)[1]
    return body.split("\n## ", 1)[0].splitlines()


def _cells(line: str) -> list[str]:
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


def expected_claims(study: str, claims_file: Path = CLAIMS, key: str = "claims") -> dict[str, dict]:
    entries = yaml.safe_load(claims_file.read_text())[key]
    return {c["id"]: c for c in entries if c["study"] == study}


def problems(report: Path, claims_file: Path = CLAIMS, checks_file: Path = CHECKS) -> list[tuple[str, str]]:
    """What in the report differs from what HEAD's claims and study file give, as (kind, what) pairs ([] when
    fresh)."""
    text = report.read_text()
    path, profile, rows, sets = invocation_of(text)
    study = load_study(ROOT / path, profile, rows, None, sets)
    found = []
    # Rows: every row the invocation ran appears as a bold first cell of a table, and no other.
    shown = set(re.findall(r"^\| \*\*([A-Za-z0-9_.+-]+)\*\* \|", text, re.M))
    if set(study.rows) != shown:
        found.append(("rows", f"the report shows {sorted(shown)}, the study file gives {sorted(study.rows)}"))
    # Departures, as the runner would tag them now (probe studies have none to list).
    if study.kind == "train":
        want = [ln for ln in departure_lines({"departures": json.dumps(departures(study))}, ",".join(study.rows))
                if ln.startswith("- ") or ln.startswith("None:")]
        have = [ln for ln in (_section(text, "Departures from the paper") or [])
                if ln.startswith("- ") or ln.startswith("None:")]
        if _section(text, "Departures from the paper") is None:
            found.append(("departures", "the report has no departures section"))
        elif want != have:
            found.append(("departures", f"{sorted(set(have) ^ set(want))} differ"))
    # Claims: ids, wording and margin or threshold, and each verdict's registration status.
    claims = expected_claims(study.name, claims_file)
    # a study resumed at a later commit names that one too (its trials trained at both), an assembly every slice's
    shas = commits_of(text)
    section = _section(text, "Claims") or []
    table = [ln for ln in section if ln.startswith("| `")]
    if claims and not section:
        found.append(("claim ids", "the report has no claims section"))
    ids = {re.match(r"\| `([^`]+)`", ln).group(1): ln for ln in table}
    if set(ids) != set(claims):
        found.append(("claim ids", f"the report has {sorted(ids)}, claims.yaml has {sorted(claims)}"))
    # Checks of the implementation: their own table, ids and tolerance as checks.yaml gives them, none among the claims.
    checks = expected_claims(study.name, checks_file, "checks")
    checked = {re.match(r"\| `([^`]+)`", ln).group(1): ln
               for ln in _section(text, "Checks of the implementation") or [] if ln.startswith("| `")}
    if set(checked) != set(checks):
        found.append(("check ids", f"the report checks {sorted(checked)}, checks.yaml has {sorted(checks)}"))
    for cid, ln in checked.items():
        if cid in checks and f"tolerance ±{checks[cid].get('margin', 0):g}" not in _cells(ln)[4]:
            found.append(("check bound", f"{cid}'s tolerance is not in the report"))
    header = next((ln for ln in section if ln.startswith("| claim |")), "")
    if table and REGISTRATION_HEADER not in header:
        found.append(("registration column", "the claims table has no registration column"))
    for cid, ln in ids.items():
        c = claims.get(cid)
        if c is None:
            continue
        cells = _cells(ln)
        if cells[1].replace("\\|", "|") != " ".join(c["text"].split()):
            found.append(("claim text", f"{cid}'s text differs"))
        bound = {"equivalent": f"margin ±{c.get('margin', 0):g}", "value": f"tolerance ±{c.get('margin', 0):g}",
                 "above": f"above {c.get('target', 0):g}"}.get(c["expect"])
        if bound and bound not in cells[4]:
            found.append(("claim bound", f"{cid}'s {bound} is not in the report"))
        if REGISTRATION_HEADER in header:
            # The status computed now for the runs' commit must be the one printed: a claim whose rows, metric,
            # direction or margin changed since the report was made is no longer what the report's verdict judged.
            now = registration(cid, shas, report=str(report.relative_to(ROOT))) if shas else ""
            said = cells[7] if len(cells) >= 8 else ""
            if len(cells) < 8 or (now and not now.startswith("unknown") and not said.startswith("unknown")
                                  and said != now):
                found.append(("registration status", f"{cid}: the report says {cells[7:8]}, git now {now!r}"))
    return found


@pytest.mark.parametrize("report", committed_reports(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_committed_report_matches_head(report):
    name = str(report.relative_to(ROOT))
    found = problems(report)
    kinds = {kind for kind, _ in found}
    expected = STALE.get(name, set())
    assert kinds <= expected, f"{name} is stale: {[f for f in found if f[0] not in expected]}; regenerate it"
    assert kinds >= expected, f"{name}: {sorted(expected - kinds)} no longer found: update STALE"


def test_every_stale_listing_names_a_committed_report():
    names = {str(p.relative_to(ROOT)) for p in committed_reports()}
    assert set(STALE) <= names


def test_a_claim_added_without_regenerating_the_reports_is_caught(tmp_path):
    # The fresh report of the check: the first report not listed as stale that has claims; add a claim for its
    # study to a copy of claims.yaml and the check names it.
    fresh = [p for p in committed_reports() if str(p.relative_to(ROOT)) not in STALE and "## Claims" in p.read_text()]
    report = fresh[0] if fresh else committed_reports()[0]
    study = load_study(ROOT / invocation_of(report.read_text())[0], invocation_of(report.read_text())[1]).name
    raw = yaml.safe_load(CLAIMS.read_text())
    extra = dict(
        next(c for c in raw["claims"] if c["study"] == study)
        if any(c["study"] == study for c in raw["claims"])
        else raw["claims"][0],
        id="a_new_claim",
        study=study,
    )
    raw["claims"].append(extra)
    edited = tmp_path / "claims.yaml"
    edited.write_text(yaml.safe_dump(raw, sort_keys=False))
    found = problems(report, edited)
    assert any(kind == "claim ids" and "a_new_claim" in what for kind, what in found), found


def test_a_changed_margin_is_caught(tmp_path):
    report = ROOT / "reports" / "multi30k" / "table3.md"
    raw = yaml.safe_load(CLAIMS.read_text())
    target = next(c for c in raw["claims"] if c["study"] == "table3" and c["expect"] == "equivalent")
    target["margin"] = target["margin"] * 3
    edited = tmp_path / "claims.yaml"
    edited.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert ("claim bound" in {k for k, w in problems(report, edited) if target["id"] in w})


def test_a_check_added_without_regenerating_the_reports_is_caught(tmp_path):
    report = ROOT / "reports" / "statements.md"
    raw = yaml.safe_load(CHECKS.read_text())
    raw["checks"].append(dict(next(c for c in raw["checks"] if c["study"] == "statements"), id="a_new_check"))
    edited = tmp_path / "checks.yaml"
    edited.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert problems(report) == []
    assert any(kind == "check ids" and "a_new_check" in what for kind, what in problems(report, CLAIMS, edited))


def test_every_stale_report_is_marked_stale_wherever_it_is_listed():
    """A report listed in STALE says so in the index (computed from its text: harness/report/evidence.stale_reason)
    and in docs/results.md's table, and no fresh report is marked."""
    from harness.report.evidence import BANNER, stale_reason
    index = (ROOT / "reports" / "README.md").read_text(encoding="utf-8")
    notes = (ROOT / "docs" / "results.md").read_text(encoding="utf-8")
    for md in committed_reports():
        name = md.relative_to(ROOT).as_posix()
        rel = md.relative_to(ROOT / "reports").as_posix()
        listed = next(ln for ln in index.splitlines() if f"]({rel})" in ln)
        noted = [ln for ln in notes.splitlines() if ln.startswith("| ") and f"](../{name})" in ln]
        stale = name in STALE
        assert bool(stale_reason(md.read_text(encoding="utf-8"), md.stem)) == stale, name
        assert md.read_text(encoding="utf-8").startswith(BANNER) == stale, f"{name}'s first line: {'un' * stale}marked"
        assert ("**stale**" in listed) == stale, f"reports/README.md lists {name} {'un' * stale}marked"
        assert all(("**stale**" in ln) == stale for ln in noted), f"docs/results.md lists {name} {'un' * stale}marked"


def test_a_report_that_falls_stale_gets_its_banner_and_loses_it_when_fresh_again(tmp_path):
    """mark_stale (run with every index write) sets the first-line banner from the report's own text."""
    from harness.report.evidence import BANNER
    from harness.report.writers import mark_stale
    reports = tmp_path / "reports"
    reports.mkdir()
    fresh = (ROOT / "reports" / "table1.md").read_text(encoding="utf-8")
    (reports / "table1.md").write_text(fresh, encoding="utf-8")
    assert mark_stale(reports) == []
    first = next(ln for ln in fresh.splitlines() if ln.startswith("| `"))      # a claim dropped from the report
    (reports / "table1.md").write_text(fresh.replace(first + "\n", ""), encoding="utf-8")
    assert mark_stale(reports) == [reports / "table1.md"]
    marked = (reports / "table1.md").read_text(encoding="utf-8")
    assert marked.startswith(f"{BANNER} its claims are not claims.yaml's: running its study again at HEAD")
    assert marked.split("\n", 2)[2] == fresh.replace(first + "\n", "")
    (reports / "table1.slices").mkdir()                 # a study in slices: its slices replace it
    mark_stale(reports)
    assert "reports/table1.slices/*.slice.json.gz" in (reports / "table1.md").read_text(encoding="utf-8")
    (reports / "table1.md").write_text(marked.replace(fresh.replace(first + "\n", ""), fresh), encoding="utf-8")
    assert mark_stale(reports) == [reports / "table1.md"]
    assert (reports / "table1.md").read_text(encoding="utf-8") == fresh


COUNTS = ("hold", "contradicted", "inconclusive")


def verdict_counts_in_notes(notes: str) -> list[tuple[str, dict, dict]]:
    """For each row of the notes' summary table: (report, the counts the row states, the counts the report gives),
    counts keyed hold / contradicted / inconclusive (a row states only some)."""
    found = []
    for line in notes.splitlines():
        link = re.search(r"\]\(\.\./(reports/[^)]+\.md)\)", line)
        if not line.startswith("| ") or not link:
            continue
        rest = line.split(link.group(0), 1)[1]
        stated = {k: int(m.group(1)) for k in COUNTS
                  if (m := re.search(rf"(\d+) {k}", rest))}
        verdicts = list(read_evidence((ROOT / link.group(1)).read_text()).verdicts.values())
        counts = {k: verdicts.count("holds" if k == "hold" else k) for k in COUNTS}
        found.append((link.group(1), stated, counts))
    return found


def test_the_notes_state_each_reports_verdict_counts_as_the_report_gives_them():
    # docs/results.md is written by hand beside the generated reports: a regenerated report must carry its note along
    rows = verdict_counts_in_notes((ROOT / "docs" / "results.md").read_text())
    assert sum(bool(stated) for _, stated, _ in rows) >= 10
    wrong = [(report, stated, given) for report, stated, given in rows
             if any(given.get(k) != n for k, n in stated.items())]
    assert wrong == []
    # and the check reads a stale note as stale
    stale = "| Table 3 | [reports/table3.md](../reports/table3.md) | 140 claims (**99 hold**, 41 contradicted) |"
    [(_, stated, given)] = verdict_counts_in_notes(stale)
    assert stated == {"hold": 99, "contradicted": 41} and given["hold"] != 99 and set(given) == set(COUNTS)


def test_the_committed_index_is_what_the_committed_reports_give():
    """reports/README.md is generated from the reports beside it: a report regenerated (or its index code
    changed) without the index written again fails here."""
    from harness.report.writers import index_text
    committed = (ROOT / "reports" / "README.md").read_text(encoding="utf-8")
    assert committed == index_text(ROOT / "reports"), "reports/README.md is stale: python -c 'from pathlib " \
        "import Path; from harness.report.writers import write_index; write_index(Path(\"reports\"))'"


REDRAW = "python -m harness report --record reports/STUDY.record.json.gz"


@pytest.mark.slow
def test_every_committed_record_regenerates_its_report(tmp_path):
    """A report committed with its record (STUDY.record.json.gz, what it read from MLflow) is what that record and
    HEAD's code give now: its text, table and record byte for byte, its plots pixel for pixel (of the same size
    where matplotlib is not the tested version: its wheel brings the fonts and the freetype that draw the text).
    Reports made before records existed have none (docs/studies.md)."""
    import matplotlib
    import numpy as np
    from matplotlib.image import imread

    from harness import logged, record
    from harness.report.writers import report_all
    records = sorted((ROOT / "reports").rglob("*.record.json.gz"))
    if not records:
        pytest.skip("no committed report has a record yet")
    pins = (ROOT / "docs" / "tested-versions.txt").read_text(encoding="utf-8").splitlines()
    tested_matplotlib = f"matplotlib=={matplotlib.__version__}" in pins
    made = [p for r in records for p in report_all(tmp_path, logged.record_uri(r), force=True, publish=False)]
    made = sorted({p for p in made if p.name != "README.md"})
    assert {p.name for p in made if p.name.endswith(".record.json.gz")} == {r.name for r in records}
    for path in made:
        committed = ROOT / "reports" / path.relative_to(tmp_path)
        assert committed.is_file(), f"{committed}: the regenerated report has it, the committed one does not"
        if path.suffix == ".png":          # the same figure: a plotting change without the PNGs redrawn fails
            fresh, there = imread(path), imread(committed)
            assert fresh.shape == there.shape, committed
            assert not tested_matplotlib or np.array_equal(fresh, there), \
                f"{committed}: its pixels differ from what its record draws now (redraw: {REDRAW})"
        elif path.name.endswith(".record.json.gz"):       # what was read, whatever zlib compressed it
            assert record.same(path, committed), f"{committed} differs from what its record gives (redraw: {REDRAW})"
        else:
            assert path.read_bytes() == committed.read_bytes(), \
                f"{committed} differs from what its record gives (redraw: {REDRAW})"
