"""A claim kind is one class at one seam (harness/report/claim_kinds/registry.py): a toy kind defined here alone,
with nothing else in the project changed, is loaded from claims.yaml, judged on a committed record's runs and written
into the study's report with its own cells and "why"."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import yaml

from harness import logged
from harness.report import verdicts
from harness.report.claim_kinds.registry import KINDS, NOT_RUN, ClaimKind, difference_cell, register
from harness.report.results import load_results
from harness.report.stats import interval
from harness.report.writers import write_report

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "reports" / "modern.record.json.gz"


class RatioBelow(ClaimKind):
    """Row a's metric over row b's, seed by seed, below a stated target: holds if the ratio's interval lies
    below it, contradicted if above it, inconclusive otherwise."""

    name = "toy_ratio_below"
    note = " A toy ratio claim divides row a's figure by row b's, seed by seed."

    def validate(self, claim, metrics):
        return None if isinstance(claim.a, str) and isinstance(claim.b, str) and claim.target else \
            "a toy ratio claim names a row as a, a row as b and a target"

    def judge(self, claim, values, curves):
        v = values(claim.metric)
        seeds = sorted(set(v.get(claim.a, {})) & set(v.get(claim.b, {})))
        out = {"id": claim.id, "a": claim.a, "b": claim.b, "a_row": claim.a, "b_row": claim.b,
               "metric": claim.metric, "expect": claim.expect, "margin": 0.0}
        if not seeds:
            return {**out, **NOT_RUN}
        mean, low, high, n = interval(v[claim.a][s] / v[claim.b][s] for s in seeds)
        result = "inconclusive" if n < 2 else "holds" if high < claim.target else \
            "contradicted" if low > claim.target else "inconclusive"
        return {**out, "verdict": result, "n": n, "diff": mean, "low": low, "high": high,
                "a_mean": interval(v[claim.a][s] for s in seeds)[0],
                "b_mean": interval(v[claim.b][s] for s in seeds)[0]}

    def cells(self, c):
        return "toy", f"{c['a']} over {c['b']}", difference_cell(c) + f", below {c['claim'].target:g}"

    def why(self, c, diag, deps, with_base):
        return f"TOY: the ratio's interval [{c['low']:.4f}, {c['high']:.4f}] against {c['claim'].target:g}"

    def points_the_papers_way(self, c):
        return c["diff"] < c["claim"].target


@pytest.fixture
def toy_kind(tmp_path, monkeypatch):
    register(RatioBelow())
    claims = yaml.safe_load(verdicts.CLAIMS.read_text(encoding="utf-8"))
    claims["claims"].append({"id": "toy_rope_over_base", "study": "modern", "source": "tests/test_claim_kinds.py",
                             "text": "A toy: RoPE's dev ln PPL over the base's stays below 1.5.", "metric": "nll",
                             "a": "F1", "b": "base", "expect": "toy_ratio_below", "target": 1.5})
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump(claims, sort_keys=False), encoding="utf-8")
    monkeypatch.setattr(verdicts, "CLAIMS", path)
    verdicts.load_claims.cache_clear()
    yield
    verdicts.load_claims.cache_clear()
    KINDS.pop("toy_ratio_below", None)


def test_a_toy_kind_is_judged_and_written(toy_kind, tmp_path):
    if not RECORD.exists():
        pytest.skip(f"{RECORD} is not committed")
    uri = logged.record_uri(RECORD)
    runs = load_results("modern", uri)["runs"]
    got = next(c for c in verdicts.check_claims("modern", runs, uri) if c["id"] == "toy_rope_over_base")
    # the verdict from the per-seed figures, computed here by hand
    values = verdicts.per_seed(runs, "nll")
    ratios = [values["F1"][s] / values["base"][s] for s in sorted(set(values["F1"]) & set(values["base"]))]
    mean, low, high, n = interval(ratios)
    assert n >= 2 and got["n"] == n and math.isclose(got["diff"], mean)
    assert got["verdict"] == ("holds" if high < 1.5 else "contradicted" if low > 1.5 else "inconclusive")

    made = write_report("modern", tmp_path, uri=uri, publish=False, force=True)
    text = next(p for p in made if p.name == "modern.md").read_text(encoding="utf-8")
    row = next(ln for ln in text.splitlines() if ln.startswith("| `toy_rope_over_base`"))
    assert f"**{got['verdict']}**" in row and "F1 over base" in row and ", below 1.5" in row
    assert f"TOY: the ratio's interval [{low:.4f}, {high:.4f}] against 1.5" in row
    assert "A toy ratio claim divides row a's figure by row b's" in text     # the kind's note, in the paragraph
    counts = re.search(r"(\d+) hold, (\d+) contradicted, (\d+) inconclusive, (\d+) not run", text)
    assert sum(map(int, counts.groups())) == len(verdicts.claims_for("modern"))


def test_a_malformed_claim_of_the_toy_kind_is_refused_in_its_words(toy_kind, tmp_path, monkeypatch):
    claims = yaml.safe_load(verdicts.CLAIMS.read_text(encoding="utf-8"))
    claims["claims"][-1].pop("target")
    verdicts.CLAIMS.write_text(yaml.safe_dump(claims, sort_keys=False), encoding="utf-8")
    verdicts.load_claims.cache_clear()
    with pytest.raises(ValueError, match="toy_rope_over_base: a toy ratio claim names a row as a, a row as b and a "
                                         "target"):
        verdicts.load_claims()


def test_an_unknown_kind_names_the_kinds_there_are(tmp_path, monkeypatch):
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "claims": [
        {"id": "x", "study": "t", "source": "-", "text": "-", "metric": "nll", "a": "base", "b": "B1",
         "better": "lower", "expect": "smaller"}]}), encoding="utf-8")
    monkeypatch.setattr(verdicts, "CLAIMS", path)
    verdicts.load_claims.cache_clear()
    try:
        with pytest.raises(ValueError, match="claim x: expect 'smaller' is not a claim kind; the kinds are above, "
                                             "better, check, equivalent, gap_grows, sooner, value"):
            verdicts.load_claims()
    finally:
        verdicts.load_claims.cache_clear()


def test_a_check_among_the_claims_is_refused(tmp_path, monkeypatch):
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "claims": [
        {"id": "x", "study": "t", "source": "-", "text": "-", "metric": "exp_n", "a": "sdpa", "target": 2,
         "margin": 0.25, "expect": "check"}]}), encoding="utf-8")
    monkeypatch.setattr(verdicts, "CLAIMS", path)
    verdicts.load_claims.cache_clear()
    try:
        with pytest.raises(ValueError, match="claim x: expect 'check' is a check of the implementation: it belongs "
                                             "in checks.yaml"):
            verdicts.load_claims()
    finally:
        verdicts.load_claims.cache_clear()


def test_a_second_kind_of_a_taken_name_is_refused():
    class Impostor(ClaimKind):
        name = "better"
    with pytest.raises(ValueError, match="claim kind 'better' is already registered"):
        register(Impostor())


def test_a_comparison_on_fewer_than_three_seeds_is_named_and_a_measurement_is_not():
    from harness.report.verdicts import Claim, too_few_seeds
    compare = Claim(id="c", study="t", source="-", text="-", metric="nll", a="base", b="B1", expect="better",
                    better="lower")
    above = Claim(id="t", study="t", source="-", text="-", metric="nll", a="base", expect="above", target=1.0)
    value = Claim(id="v", study="t", source="-", text="-", metric="exp_n", a="sdpa", expect="value", target=2.0,
                  margin=0.25)
    checked = [{"claim": compare, "verdict": "inconclusive", "n": 2}, {"claim": above, "verdict": "holds", "n": 3},
               {"claim": value, "verdict": "holds", "n": 1}, {"claim": compare, "verdict": "not run", "n": 0}]
    assert too_few_seeds(checked) == [checked[0]]


def test_list_claims_names_the_claims_the_default_profile_cannot_decide(capsys):
    from harness.cli import main
    assert main(["list", "claims", "table3"]) == 0
    out = capsys.readouterr().out.splitlines()
    few = [ln for ln in out if "cannot be decided without --seeds 0,1,2" in ln]
    assert few and all(ln.split()[1] == "table3" for ln in few)
    assert any(ln.startswith("dropout_helps") for ln in few)
