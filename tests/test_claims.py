"""The paper's claims as data, and the verdicts computed from seed-paired intervals (harness/report/verdicts.py)."""

import math
from pathlib import Path

import pandas as pd
import pytest

from harness.paper import load_tables
from harness.report import verdicts
from harness.report.claim_kinds.compare import verdict
from harness.report.claim_kinds.gap import gap_verdict
from harness.report.claim_kinds.sooner import sooner_verdict
from harness.report.claim_kinds.value import value_verdict
from harness.report.stats import interval
from harness.report.verdicts import Claim
from tests.helpers import new_store


def _claim(**kw) -> Claim:
    base = dict(id="x", study="table3", source="§", text="t", metric="nll", better="lower", a="A", b="B",
                expect="better")
    return Claim(**{**base, **kw})


def test_interval_matches_student_t():
    mean, low, high, n = interval([1.0, 2.0, 3.0])
    # sd 1, n 3: half-width t(0.975, 2) / sqrt(3) = 4.303 / 1.732
    assert (mean, n) == (2.0, 3)
    assert high - mean == pytest.approx(4.303 / math.sqrt(3), rel=1e-4)
    assert low == pytest.approx(2 * mean - high)
    assert math.isnan(interval([5.0])[1])          # one value: no interval
    assert interval([])[3] == 0


def test_better_holds_contradicted_inconclusive():
    c = _claim()        # lower is better; claim: A better than B
    clear = {"A": {0: 1.0, 1: 1.1, 2: 0.9}, "B": {0: 2.0, 1: 2.2, 2: 2.1}}
    assert verdict(c, clear)["verdict"] == "holds"
    assert verdict(c, {"A": clear["B"], "B": clear["A"]})["verdict"] == "contradicted"
    noisy = {"A": {0: 1.0, 1: 2.0, 2: 1.5}, "B": {0: 2.0, 1: 1.0, 2: 1.6}}
    assert verdict(c, noisy)["verdict"] == "inconclusive"
    one = {"A": {0: 1.0}, "B": {0: 2.0}}
    got = verdict(c, one)
    assert got["verdict"] == "inconclusive" and got["n"] == 1 and got["diff"] == pytest.approx(1.0)


def test_pairing_uses_only_common_seeds_and_orientation():
    c = _claim(better="higher")        # BLEU-like: A claimed above B
    values = {"A": {0: 30.0, 1: 31.0, 2: 29.0, 7: 0.0}, "B": {0: 20.0, 1: 21.0, 2: 19.5}}
    got = verdict(c, values)
    assert got["n"] == 3 and got["verdict"] == "holds"
    assert got["diff"] == pytest.approx((10 + 10 + 9.5) / 3)


def test_pairing_removes_a_shared_seed_effect():
    # Each seed moves both rows together by a lot; unpaired the intervals overlap, paired the gap is clear.
    c = _claim()
    values = {"A": {0: 1.0, 1: 3.0, 2: 5.0}, "B": {0: 1.1, 1: 3.1, 2: 5.1}}
    assert verdict(c, values)["verdict"] == "holds"


def test_equivalence_margin():
    c = _claim(expect="equivalent", margin=0.05)
    close = {"A": {0: 1.00, 1: 1.01, 2: 0.99}, "B": {0: 1.00, 1: 1.00, 2: 1.00}}
    assert verdict(c, close)["verdict"] == "holds"
    far = {"A": {0: 1.5, 1: 1.51, 2: 1.49}, "B": close["B"]}
    assert verdict(c, far)["verdict"] == "contradicted"
    wide = {"A": {0: 0.9, 1: 1.1, 2: 1.0}, "B": close["B"]}
    assert verdict(c, wide)["verdict"] == "inconclusive"


def test_best_of_rows_and_missing_rows():
    c = _claim(a={"best": ["A", "C"]}, b="B")
    values = {"A": {0: 2.0, 1: 2.0}, "C": {0: 1.0, 1: 1.1}, "B": {0: 3.0, 1: 3.2}}
    got = verdict(c, values)
    assert got["a_row"] == "C" and "= C" in got["a"] and got["verdict"] == "holds"
    assert verdict(_claim(b="Z"), values)["verdict"] == "not run"


def test_every_claim_in_the_file_is_valid_and_names_real_rows():
    import yaml
    paper_rows = load_tables()["table3"]["rows"]
    study_rows = set(yaml.safe_load((Path(__file__).parents[1] / "studies" / "table3.yaml").read_text())["rows"])
    rows3 = set(paper_rows) | study_rows
    # the rows of ours: the base on the D rows' data, and the base without positions (§3.5's positions_needed)
    assert study_rows - set(paper_rows) == {"Dbase", "P0"}
    loaded = verdicts.load_claims()
    assert {c.study for c in loaded} >= {"table2", "table3", "table4", "modern"}
    table3 = [c for c in loaded if c.study == "table3"]
    assert len(table3) >= 10
    for c in table3:
        for side in (c.a, c.b):
            for row in ([side] if isinstance(side, str) else [*side.values()][0]):
                assert row in rows3, (c.id, row)
        if c.paper:    # the paper's numbers quoted in the claim are the ones in tables.yaml
            metric = c.paper.get("metric")
            for side, value in (("a", c.paper["a"]), ("b", c.paper["b"])):
                name = getattr(c, side)
                name = name if isinstance(name, str) else name.get("first", [None])[0]
                if isinstance(name, str) and metric in ("ppl", "bleu"):
                    assert paper_rows[{"Dbase": "base"}.get(name, name)][metric] == value, (c.id, side)


def test_table2_claims_quote_tables_yaml_for_their_rows_pair():
    """The BLEU a Table 2 claim quotes is tables.yaml's for its rows' pair: EN-FR rows (base_enfr, big_enfr)
    quote the EN-FR column, the others the EN-DE one; every row named is a row of studies/table2.yaml."""
    import yaml
    rows2 = set(yaml.safe_load((Path(__file__).parents[1] / "studies" / "table2.yaml").read_text())["rows"])
    paper = load_tables()["table2"]["rows"]
    from harness.report.table2 import T2_ROWS
    names = T2_ROWS
    bleu = [c for c in verdicts.load_claims() if c.study == "table2" and c.paper and c.paper.get("metric") == "bleu"]
    assert {c.id for c in bleu} >= {"big_above_base", "big_above_base_enfr", "base_above_gnmt", "base_above_convs2s"}
    for c in bleu:
        for side in ("a", "b"):
            spec = getattr(c, side)
            rows = spec["best"] if isinstance(spec, dict) else [spec]     # {best: [...]}: the best of those rows
            assert set(rows) <= rows2, (c.id, rows)
            quoted = []
            for row in rows:
                pair = "en_fr" if row.endswith("_enfr") else "en_de"
                quoted.append(paper[names[row.removesuffix("_enfr")]][f"bleu_{pair}"])
            assert max(quoted) == c.paper[side], (c.id, side)


def test_check_claims_reads_finished_runs_only():
    runs = pd.DataFrame({"tags.row": ["D2", "D2", "D1", "D1", "D1"], "tags.seed": ["0", "1", "0", "1", "2"],
                         "status": ["FINISHED"] * 4 + ["FAILED"],
                         "metrics.dev_ppl": [2.0, 2.1, 3.0, 3.3, 1.0]})
    got = {c["id"]: c for c in verdicts.check_claims("table3", runs)}
    d = got["more_dropout_helps"]
    assert d["n"] == 2
    assert d["diff"] == pytest.approx(((math.log(3.0) - math.log(2.0)) + (math.log(3.3) - math.log(2.1))) / 2)
    assert got["single_head_worse"]["verdict"] == "not run"


def _value(**kw) -> Claim:
    base = dict(id="v", study="table1", source="Table 1", text="t", metric="exp_n", a="sdpa", expect="value",
                target=2.0, margin=0.25)
    return Claim(**{**base, **kw})


def test_value_claims_measured_against_the_formula():
    one = {"sdpa": {0: 1.94}}
    got = value_verdict(_value(), one)
    assert got["verdict"] == "holds" and got["diff"] == pytest.approx(-0.06) and got["n"] == 1
    assert value_verdict(_value(), {"sdpa": {0: 2.48}})["verdict"] == "contradicted"   # one seed decides
    assert value_verdict(_value(a="rnn_loop"), one)["verdict"] == "not run"
    spread = {"sdpa": {0: 1.6, 1: 2.3, 2: 2.1}}                   # interval straddles the tolerance's edge
    assert value_verdict(_value(), spread)["verdict"] == "inconclusive"
    # counts against the run's own evaluation of the formula, exactly (margin 0)
    counts, formula = {"rnn_loop": {0: 2048.0}}, {"rnn_loop": {0: 2048.0}}
    c = _value(metric="seq_ops", a="rnn_loop", target=None, target_metric="seq_ops_formula", margin=0.0)
    assert value_verdict(c, counts, formula)["verdict"] == "holds"
    assert value_verdict(c, {"rnn_loop": {0: 1.0}}, formula)["verdict"] == "contradicted"
    assert value_verdict(c, counts, {})["verdict"] == "not run"     # no formula value: not checked


def test_value_claims_over_several_rows_and_a_second_metric():
    """One statement measured at several shapes and on two metrics: it holds only if every part does, and is
    contradicted by any part outside the tolerance; the shown figures are the farthest part's."""
    c = _value(a=["d64", "d256"], metric="exp_n", target=0.0, margin=1.0, also={"metric": "exp_d"})
    first = {"d64": {0: 0.1}, "d256": {0: -0.4}}
    got = value_verdict(c, first, None, {"d64": {0: 0.5}, "d256": {0: 0.9}})
    assert got["verdict"] == "holds" and got["a_row"] == "d256" and got["diff"] == pytest.approx(0.9)
    assert [p["metric"] for p in got["parts"]] == ["exp_n", "exp_n", "exp_d", "exp_d"]
    got = value_verdict(c, first, None, {"d64": {0: 0.5}, "d256": {0: 3.0}})    # the time crossover far off
    assert got["verdict"] == "contradicted" and got["a_row"] == "d256" and got["diff"] == pytest.approx(3.0)
    got = value_verdict(c, first, None, {"d64": {0: 0.5}})      # a part not run: not every part holds
    assert got["verdict"] == "inconclusive"
    assert value_verdict(c, {}, None, {})["verdict"] == "not run"


def test_better_by_more_than_a_margin():
    """expect better with a margin: the paired interval against the margin instead of 0."""
    c = _claim(a="P0", b="base", margin=0.1)       # P0's PPL above base's: a = P0 with better: higher on nll
    c = Claim(**{**c.__dict__, "better": "higher"})
    far = {"P0": {0: 1.5, 1: 1.6, 2: 1.55}, "base": {0: 1.0, 1: 1.05, 2: 1.0}}
    assert verdict(c, far)["verdict"] == "holds"
    near = {"P0": {0: 1.05, 1: 1.06, 2: 1.04}, "base": {0: 1.0, 1: 1.0, 2: 1.0}}
    got = verdict(c, near)
    assert got["verdict"] == "contradicted"          # better, but by less than the margin on every reading
    assert verdict(Claim(**{**c.__dict__, "margin": 0.0}), near)["verdict"] == "holds"


def test_table1_claims_name_its_rows_and_metrics():
    from pathlib import Path

    import yaml
    rows = set(yaml.safe_load((Path(__file__).parents[1] / "studies" / "table1.yaml").read_text())["rows"])
    table1 = [c for c in verdicts.load_claims() if c.study == "table1"]
    assert len(table1) >= 10 and all(c.expect == "value" and c.a in rows for c in table1)
    runs = pd.DataFrame({"tags.row": ["sdpa", "restricted"], "tags.seed": ["0", "0"], "status": ["FINISHED"] * 2,
                         "metrics.exp_n_fwd": [1.94, 1.83], "metrics.path_measured_max_n": [1.0, 8.0],
                         "metrics.path_formula_max_n": [1.0, 8.0]})
    got = {c["id"]: c["verdict"] for c in verdicts.check_claims("table1", runs)}
    assert got["attention_quadratic_in_n"] == "holds" and got["restricted_linear_in_n"] == "contradicted"
    assert got["attention_path_constant"] == got["restricted_path_n_over_r"] == "holds"
    assert got["recurrent_linear_in_n"] == "not run"


@pytest.mark.parametrize("bad, message", [
    (dict(b="B"), "a row \\(or a list of rows\\) as a and no b"),
    (dict(a=[]), "a row \\(or a list of rows\\) as a and no b"),
    (dict(also={"metric": "exp_d", "better": "lower"}), "also must be"),
    (dict(target_metric="path_formula"), "exactly one of target and target_metric"),
    (dict(target=None), "exactly one of target and target_metric"),
    (dict(target=None, target_metric="nope"), "is not one of"),
    (dict(margin=-1.0), "must not be negative"),
])
def test_bad_value_claims_are_refused(tmp_path, monkeypatch, bad, message):
    import dataclasses

    import yaml
    item = {k: v for k, v in dataclasses.asdict(_value(**bad)).items() if v not in (None, "", {})}
    item.setdefault("margin", 0.25)
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "claims": [item]}))
    monkeypatch.setattr(verdicts, "CLAIMS", path)
    verdicts.load_claims.cache_clear()
    try:
        with pytest.raises(ValueError, match=message):
            verdicts.load_claims()
    finally:
        verdicts.load_claims.cache_clear()


def test_first_of_rows_reads_the_first_that_ran():
    """{first: [Dbase, base]}: the base on the dropout rows' data where the profile trained it, else the base."""
    c = _claim(a={"first": ["Dbase", "base"]}, b="D1")
    both = {"Dbase": {0: 1.0, 1: 1.1}, "base": {0: 5.0, 1: 5.0}, "D1": {0: 2.0, 1: 2.2}}
    got = verdict(c, both)
    assert got["a_row"] == "Dbase" and got["verdict"] == "holds"
    got = verdict(c, {k: v for k, v in both.items() if k != "Dbase"})
    assert got["a_row"] == "base" and got["verdict"] == "contradicted"
    assert verdict(c, {"D1": both["D1"]})["verdict"] == "not run"


def test_a_verdict_that_holds_still_says_what_it_rests_on():
    """The why column is filled for every verdict: a claim that holds gives its interval, a row of it still
    improving, and the departures under which its rows compare otherwise than in the paper (the D rows'
    smaller training set against the base's; not widths scaled alike for every row)."""
    import json as _json

    from harness.report.claims_section import claim_why
    from harness.report.header import claim_departures, row_departures
    tags = {"departures": _json.dumps([
        {"key": "model.d_model", "values": [{"ours": 64, "paper": 512, "rows": ["base", "D1", "Dbase"]},
                                            {"ours": 128, "paper": 1024, "rows": ["big"]}]},
        {"key": "train.steps", "values": [{"ours": 1600, "paper": 100000, "rows": ["base", "D1", "Dbase"]},
                                          {"ours": 1600, "paper": 300000, "rows": ["big"]}]},
        {"key": "data.train_pairs", "values": [{"ours": 20000, "paper": None, "rows": ["base", "big"]},
                                               {"ours": 2000, "paper": None, "rows": ["D1", "Dbase"]}]}])}
    deps = row_departures(tags)
    assert claim_departures(["Dbase", "D1"], deps) == [
        "`data.train_pairs`: Dbase 2000 (paper –), D1 2000 (paper –), base 20000 (paper –)"]
    # big given the base's steps where the paper gives it 3x: that changes how big compares; widths / 8 do not
    assert claim_departures(["big", "base"], deps) == ["`train.steps`: big 1600 (paper 300000), base 1600 (paper "
                                                       "100000)"]
    c = {"verdict": "holds", "expect": "better", "n": 3, "diff": 0.3, "low": 0.2, "high": 0.4, "a_row": "Dbase",
         "b_row": "D1", "margin": 0.0, "claim": _claim(a="Dbase", b="D1")}
    diag = {"Dbase": {"ppl": 1.7, "drop": 0.2, "span": (1200, 1600), "rose": 0, "seeds": 3},
            "D1": {"ppl": 2.4, "drop": 0.0}}
    why = claim_why(c, diag, deps)
    assert why.startswith("the interval [+0.200, +0.400] of the paired difference +0.300 lies above 0")
    assert "it rests on Dbase, which was still improving: dev PPL -20 % from step 1200 to 1600" in why
    assert "it rests on departures from the paper that change how its rows compare: `data.train_pairs`" in why
    # A study without a base row (Table 4): only its own rows are compared
    assert claim_departures(["Dbase", "D1"], deps, with_base=False) == []


def test_sooner_reads_where_the_base_first_reaches_each_rivals_best():
    """trains_faster_than_rivals: per seed, the training the base needs to reach a rival's best dev BLEU over the
    rival's own, on each axis; below 1 over seeds for every rival and axis to hold."""
    from harness.report.claim_kinds.sooner import reached
    curve = [(1e9, 10.0, 5.0), (1e10, 100.0, 15.0), (1e11, 1000.0, 25.0)]
    assert reached(curve, 15.0, 1) == 100.0 and reached(curve, 20.0, 1) == pytest.approx(550.0)
    assert reached(curve, 20.0, 0) == pytest.approx(10 ** 10.5)          # interpolated in log FLOPs
    assert math.isnan(reached(curve, 30.0, 1))

    def fast(scale):            # a curve reaching BLEU 30 at `scale` seconds (and 1e9 x scale FLOPs)
        return [(1e9 * scale * f, scale * f, 30.0 * f) for f in (0.25, 0.5, 1.0)]

    c = Claim(id="s", study="table2", source="§7", text="t", metric="seconds_to_rival_best", a="base",
              b=["gnmt", "convs2s"], expect="sooner", also={"metric": "flops_to_rival_best"})
    seeds = (0, 1, 2)
    curves = {"base": {s: fast(100 + s) for s in seeds}, "gnmt": {s: fast(400 + 10 * s) for s in seeds},
              "convs2s": {s: fast(300 - s) for s in seeds}}
    got = sooner_verdict(c, curves)
    assert got["verdict"] == "holds" and got["b_row"] == "convs2s" and got["high"] < 1
    assert len(got["parts"]) == 4 and {p["metric"] for p in got["parts"]} == {"seconds_to_rival_best",
                                                                                  "flops_to_rival_best"}
    slow = {**curves, "convs2s": {s: fast(50 + s) for s in seeds}}         # the base takes twice as long
    assert sooner_verdict(c, slow)["verdict"] == "contradicted"
    never = {**curves, "gnmt": {s: [(1e9, 1.0, 40.0)] for s in seeds}}    # a rival's best the base never reaches
    got = sooner_verdict(c, never)
    assert got["verdict"] == "contradicted" and got["b_row"] == "gnmt"
    assert sooner_verdict(c, {k: {0: v[0]} for k, v in curves.items()})["verdict"] == "inconclusive"
    assert sooner_verdict(c, {})["verdict"] == "not run"


def test_table2_report_judges_and_marks_time_to_quality_from_the_curves(tmp_path):
    """From a store whose rows logged dev BLEU curves (step, curve_bleu, curve_tokens, curve_seconds), the Table 2
    report computes trains_faster_than_rivals and marks where the base reached each rival's best."""
    from mlflow import MlflowClient
    from mlflow.entities import Metric

    from harness.report.writers import write_report
    from tests.helpers import finish, start, trial
    uri = new_store(tmp_path)
    client = MlflowClient(uri)
    exp, parent = start(client, "table2", "base,gnmt,convs2s")
    i = 0
    for row, scale in (("base", 100.0), ("gnmt", 400.0), ("convs2s", 300.0)):
        for seed in (0, 1, 2):
            s = scale * (1 + 0.05 * seed)
            curve = [Metric(k, v, 0, step) for step, f in ((100, 0.25), (200, 0.5), (300, 1.0))
                     for k, v in (("curve_bleu", 30.0 * f), ("curve_tokens", 1e4 * f * s), ("curve_seconds", s * f))]
            trial(client, exp, parent, i, row, seed, "train", "FINISHED", {"data.name": "synth"},
                  [("dev_ppl", 2.0, 300), ("dev_bleu", 30.0, 300), ("flops_per_target_token", 1e6, 300), *curve])
            i += 1
    finish(client, parent, 9, 0)
    write_report("table2", tmp_path / "reports", uri)
    text = (tmp_path / "reports" / "table2.md").read_text()
    line = next(x for x in text.splitlines() if x.startswith("| `trains_faster_than_rivals`"))
    assert "**holds**" in line and "convs2s" in line, line
    assert "first reached each rival's best dev BLEU (×)" in text
    assert (tmp_path / "reports" / "table2_bleu_vs_compute.png").exists()


def test_a_gap_that_grows_with_depth():
    """gap_grows: (x - y) - (u - v) seed by seed, > 0 where x falls further behind y than u behind v."""
    c = Claim(id="g", study="depth", source="§", text="t", metric="nll", better="lower", a=["post24", "pre24"],
              b=["post6", "pre6"], expect="gap_grows")
    grows = {"post24": {0: 3.0, 1: 3.2, 2: 3.1}, "pre24": {0: 1.0, 1: 1.1, 2: 1.0},
             "post6": {0: 1.2, 1: 1.3, 2: 1.2}, "pre6": {0: 1.0, 1: 1.1, 2: 1.0}}
    got = gap_verdict(c, grows)
    assert got["verdict"] == "holds" and got["a_mean"] == pytest.approx(2.067, abs=1e-3)
    assert got["b_mean"] == pytest.approx(0.2) and got["diff"] == pytest.approx(1.867, abs=1e-3)
    shrinks = {**grows, "post24": {0: 1.05, 1: 1.15, 2: 1.05}}
    assert gap_verdict(c, shrinks)["verdict"] == "contradicted"
    assert gap_verdict(c, {k: v for k, v in grows.items() if k != "pre6"})["verdict"] == "not run"
    assert gap_verdict(c, {k: {0: v[0]} for k, v in grows.items()})["verdict"] == "inconclusive"


def test_every_claim_names_a_study_file_and_rows_of_it():
    # a misspelled study (or row) would leave the claim out of every report without a word
    import yaml

    from harness.report.verdicts import rows_read
    studies = {}
    for path in (Path(__file__).parents[1] / "studies").glob("*.yaml"):
        raw = yaml.safe_load(path.read_text())
        studies[raw["study"]] = set(raw.get("rows") or {})
    for c in verdicts.load_claims():
        assert c.study in studies, (c.id, c.study)
        assert rows_read(c, set()) <= studies[c.study], (c.id, rows_read(c, set()) - studies[c.study])
