"""The depth study's two training switches: no_warmup (the noam schedule at its peak from the first step, the same
decay after warmup) and stop_diverged (a run that diverges, at a non-finite loss or a dev PPL above its start, ends
there and is scored as its start)."""

from __future__ import annotations

import pytest

from harness.train.config import TrainConfig, learning_rate, rate_at


def test_no_warmup_differs_in_the_ramp_alone():
    cfg, flat = TrainConfig(warmup=400), TrainConfig(warmup=400, no_warmup=True)
    peak = learning_rate(400, 512, 400)
    assert rate_at(1, flat, 512) == rate_at(400, flat, 512) == pytest.approx(peak)
    assert rate_at(1, cfg, 512) == pytest.approx(peak / 400)
    for step in (400, 401, 1000, 100000):
        assert rate_at(step, flat, 512) == rate_at(step, cfg, 512)


def test_a_diverging_run_stops_where_it_diverged_and_is_scored_as_its_start(tmp_path, capsys):
    import json

    from harness.cli import main
    from tests.helpers import train_small
    metrics, _ = train_small(main, capsys, tmp_path, "transformer", "train.stop_diverged=true", "train.no_warmup=true",
                             "train.lr_scale=300", steps=60)
    assert metrics["diverged"] == 1.0 and 1 <= metrics["diverged_step"] <= 60 and metrics["steps"] <= 60
    assert metrics["dev_ppl"] == metrics["dev_ppl_start"]                 # scored as its start
    assert metrics["dev_ppl_measured"] != metrics["dev_ppl"]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[0]["step"] == 0 and rows[0]["dev_ppl"] == metrics["dev_ppl_start"]


def test_a_run_that_learns_does_not_diverge(tmp_path, capsys):
    from harness.cli import main
    from tests.helpers import train_small
    metrics, _ = train_small(main, capsys, tmp_path, "transformer", "train.stop_diverged=true", steps=30)
    assert metrics["diverged"] == 0.0 and metrics["steps"] == 30 and "dev_ppl_measured" not in metrics
    assert metrics["dev_ppl"] < metrics["dev_ppl_start"]


def test_the_rows_report_tables_which_seeds_diverged_and_where():
    import pandas as pd

    from harness.report.rows import divergence_section
    runs = pd.DataFrame({"tags.row": ["post24", "post24", "pre24", "pre24"], "tags.seed": ["0", "1", "0", "1"],
                         "status": ["FINISHED"] * 4, "metrics.diverged": [1.0, 0.0, 0.0, 0.0],
                         "metrics.diverged_step": [37.0, None, None, None],
                         "metrics.dev_ppl_start": [980.0, 1010.0, 990.0, 1000.0],
                         "metrics.dev_ppl_measured": [5e4, None, None, None]})
    lines = divergence_section(runs, ["post24", "pre24"])
    assert "| **post24** | 1 of 2 | seed 0: step 37 | 995.0 | 5e+04 |" in lines
    assert "| **pre24** | 0 of 2 | – | 995.0 | – |" in lines
    assert divergence_section(runs.drop(columns=["metrics.diverged"]), ["post24"]) == []
    # no run diverged: MLflow then has neither diverged_step nor dev_ppl_measured as a column
    calm = runs.assign(**{"metrics.diverged": 0.0}).drop(columns=["metrics.diverged_step", "metrics.dev_ppl_measured"])
    lines = divergence_section(calm, ["post24", "pre24"])
    assert "| **post24** | 0 of 2 | – | 995.0 | – |" in lines and "| **pre24** | 0 of 2 | – | 995.0 | – |" in lines


def test_a_resumed_run_keeps_the_start_it_measures_divergence_from(tmp_path, capsys):
    """The start PPL and a divergence are in every checkpoint: a run resumed after its first checkpoint measures
    divergence from its own start (not from the resumed weights), and a diverged run does not train on."""
    import json

    from harness.cli import main
    from harness.train.checkpoint import DIVERGENCE_KEYS, load_checkpoint
    from tests.helpers import train_small
    train_small(main, capsys, tmp_path, "transformer", "train.stop_diverged=true", "train.checkpoint_every=10",
                "train.checkpoint_minutes=0", steps=30)
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    ckpts = sorted((tmp_path / "run" / "checkpoints").glob("*.pt"))
    state = load_checkpoint(ckpts[-1])
    assert set(state["divergence"]) == {"dev_ppl_start"} and DIVERGENCE_KEYS[0] == "dev_ppl_start"
    assert state["divergence"]["dev_ppl_start"] == first["dev_ppl"]


def test_the_rows_plot_reads_diverged_rows_beside_trained_ones():
    """A diverged row is scored as its start (dev PPL near the vocabulary's size) beside rows near 1.3: the PPL
    panel goes to a log scale, and the depth study's long row names are slanted rather than run together."""
    import pandas as pd

    from harness.report.rows import rows_figure
    table = pd.DataFrame({"row": ["post24", "post24_nowarmup", "pre24", "pre24_nowarmup"],
                          "ppl_mean": [1.3, 1000.0, 1.25, 1.28], "ppl_std": [0.01, 0.0, 0.01, 0.02],
                          "bleu_tok_mean": [80.0, 0.0, 81.0, 80.5], "bleu_tok_std": [1.0, 0.0, 1.0, 1.0]})
    fig = rows_figure("depth", table, diverged={"post24_nowarmup"})
    ppl_axis = fig.axes[1]
    assert ppl_axis.get_yscale() == "log" and {t.get_rotation() for t in ppl_axis.get_xticklabels()} == {30.0}
    # the diverged row's bars hatched, and named as diverged; the others plain
    assert [p.get_hatch() for p in ppl_axis.patches] == [None, "//", None, None]
    assert [t.get_text() for t in fig.axes[0].texts] == ["diverged"]
    short = rows_figure("t", table.assign(row=["a", "b", "c", "d"], ppl_mean=[1.3, 1.4, 1.25, 1.28]))
    assert short.axes[1].get_yscale() == "linear"
    assert {t.get_rotation() for t in short.axes[1].get_xticklabels()} == {0.0}


def test_a_claim_between_two_rows_that_both_diverged_says_so_rather_than_blaming_seed_noise():
    import pandas as pd

    from harness.report.claims_section import claim_why
    from harness.report.stopping import diverged_seeds, regime_note
    from harness.report.verdicts import Claim
    g = pd.DataFrame({"metrics.diverged": [1.0, 1.0, 0.0]})
    assert diverged_seeds(g) == (2, 3) and diverged_seeds(pd.DataFrame({"x": [1]})) == (0, 0)
    diag = {"post24": {"diverged": (3, 3), "seeds": 3, "drop": 0.5, "span": (600, 800)},
            "post24_nowarmup": {"diverged": (3, 3), "seeds": 3}, "pre24": {"diverged": (0, 3), "seeds": 3}}
    # a diverged row's curve says nothing about where training stood: no "still improving"
    assert regime_note("post24", diag) == "stopped as diverged in 3 of 3 seeds (scored as its dev PPL at the start)"
    assert regime_note("pre24", diag) == ""
    claim = Claim(id="postnorm_deep_needs_warmup", study="depth", source="", text="", metric="nll", better="lower",
                  a="post24", b="post24_nowarmup", expect="better")
    c = {"verdict": "inconclusive", "expect": "better", "n": 3, "diff": 0.0, "low": 0.0, "high": 0.0,
         "a_row": "post24", "b_row": "post24_nowarmup", "margin": 0.0, "claim": claim}
    why = claim_why(c, diag)
    assert "post24 was stopped as diverged in 3 of 3 seeds" in why and "the runs cannot order them" in why
    assert "seed-to-seed spread" not in why
    # one side trained: the interval is read as usual
    why = claim_why(c | {"b_row": "pre24", "low": -0.5, "high": 0.5}, diag)
    assert "seed-to-seed spread" in why and "cannot order" not in why


def test_a_diverged_runs_dev_curve_ends_where_its_weights_went_not_at_the_score_of_its_start():
    from harness.report.curves import diverged_curve
    hist = [(0, 1041.7), (200, 229.5), (400, 232.0), (600, 399.1), (800, 3580.0), (800, 1041.7)]
    assert diverged_curve(hist, 1041.7) == hist[:5]
    assert diverged_curve([(0, 1041.7)], 1041.7) == [(0, 1041.7)]        # diverged at the start: its one point


def test_a_gap_claim_over_diverged_rows_says_what_its_gap_then_measures():
    from harness.report.claims_section import claim_why
    from harness.report.verdicts import Claim
    claim = Claim(id="depth_gap_grows", study="depth", source="", text="", metric="nll", better="lower",
                  a=["post24_nowarmup", "pre24_nowarmup"], b=["post6_nowarmup", "pre6_nowarmup"], expect="gap_grows")
    c = {"verdict": "contradicted", "expect": "gap_grows", "n": 3, "a": "post24_nowarmup − pre24_nowarmup",
         "b": "post6_nowarmup − pre6_nowarmup", "a_mean": 5.28, "b_mean": 6.70, "low": -1.56, "high": -1.28,
         "claim": claim}
    diag = {"post24_nowarmup": {"diverged": (3, 3)}, "post6_nowarmup": {"diverged": (3, 3)},
            "pre24_nowarmup": {"diverged": (0, 3)}, "pre6_nowarmup": {"diverged": (0, 3)}}
    why = claim_why(c, diag)
    assert why.startswith("the gap post24_nowarmup − pre24_nowarmup was +5.280")
    assert "; post24_nowarmup and post6_nowarmup stopped as diverged in every seed" in why
    assert "pre24_nowarmup stopped" not in why
    assert "diverged" not in claim_why(c, {r: {"diverged": (1, 3)} for r in diag})     # not every seed: no note
