"""Training until dev stops improving (harness/train/patience.py): the rule, where a run stops, which weights
it is scored on, which checkpoints it keeps, and a resumed run that stops where the uninterrupted one did."""

import contextlib
import dataclasses
import json

import pytest
import torch

import harness.train.loop as loop
from harness.errors import UserError
from harness.eval.evaluate import perplexity
from harness.train import TrainConfig, average_checkpoints, list_checkpoints, train
from harness.train.patience import Patience, window
from model import Transformer, TransformerConfig

MODEL = TransformerConfig(vocab_size=300, d_model=32, d_ff=64, n_heads=4, n_layers=1, max_len=256)
# A budget of 12 steps, dev every 2, patience 2, the mean of the 2 checkpoints ending at the best scored.
RULE = TrainConfig(steps=12, warmup=3, max_tokens=600, batch_tokens=600, checkpoint_every=0, checkpoint_minutes=0,
                   log_every=1, bleu_sentences=8, max_extra=5, beam_size=2, eval_every=2, patience=2,
                   average_last=2)


@pytest.fixture
def scripted_dev(monkeypatch):
    """The loop's dev PPL at each evaluation, in order, from a list the test fills (the final scoring still
    computes the real one): a curve chosen by the test, so that where the rule stops is known."""
    curve: list[float] = []
    seen: list[float] = []

    def fake(*args, **kwargs):
        seen.append(curve.pop(0))
        return seen[-1]
    monkeypatch.setattr(loop, "perplexity", fake)
    return curve, seen


def test_the_rule_counts_evaluations_without_a_strictly_lower_best():
    rule = Patience(2)
    assert rule.update(2, 9.0) and rule.update(4, 7.0)
    assert not rule.update(6, 7.0) and not rule.exhausted      # equal is not better (fairseq's is_better)
    assert rule.update(8, 6.5) and rule.bad == 0                # a new best resets the count
    assert not rule.update(10, 6.6) and not rule.update(12, 8.0) and rule.exhausted
    assert (rule.best, rule.best_step) == (6.5, 8)
    again = Patience(2)
    again.load_state_dict(rule.state_dict())
    assert again == rule


def test_the_window_is_the_k_checkpoints_ending_at_the_best():
    assert window([2, 4, 6, 8, 10], 6, 2) == [4, 6]
    assert window([2, 4, 6, 8, 10], 6, 0) == [6]                 # no averaging: the best alone
    assert window([4, 6], 4, 3) == [4]                           # fewer taken than k


def test_a_run_stops_after_patience_evaluations_and_is_scored_at_its_best(tmp_path, data_cfg, dataset, scripted_dev):
    curve, seen = scripted_dev
    curve.extend([9.0, 7.0, 6.0, 6.2, 6.1, 5.0])     # best at step 6; steps 8 and 10 are no better: stop at 10
    run = tmp_path / "run"
    metrics = train(MODEL, RULE, data_cfg, run, quiet=True, dataset=dataset)
    assert seen == [9.0, 7.0, 6.0, 6.2, 6.1] and curve == [5.0]     # never evaluated past the stop
    assert metrics["steps"] == 10 and metrics["stopped_by_rule"] and not metrics["hit_budget"]
    assert (metrics["best_step"], metrics["best_dev_ppl"], metrics["evals_since_best"]) == (6, 6.0, 2)
    assert (metrics["scored_from_step"], metrics["scored_to_step"], metrics["averaged_checkpoints"]) == (4, 6, 2)
    # Disk stays bounded: the window ending at the best (4, 6) and the newest two (8, 10), nothing older.
    kept = list_checkpoints(run / "checkpoints")
    assert [p.name for p in kept] == [f"step_{s:08d}.pt" for s in (4, 6, 8, 10)]
    # The scored figure is the mean of steps 4 and 6, not the last weights.
    model = Transformer(MODEL.replace(vocab_size=dataset.tokenizer.vocab_size))
    model.load_state_dict(average_checkpoints(kept[:2]))
    scored = perplexity(model, dataset.dev.data, RULE.max_tokens, torch.device("cpu"), contextlib.nullcontext)
    assert scored == pytest.approx(metrics["dev_ppl"], rel=1e-6)
    assert metrics["dev_ppl_last"] != pytest.approx(metrics["dev_ppl"], rel=1e-6)


def test_a_run_resumed_after_the_rule_stopped_it_stops_again_and_evaluate_scores_its_window(
        tmp_path, data_cfg, dataset, scripted_dev):
    # Killed while finishing (after the stop's checkpoint): run again, it restores the stopped rule and goes
    # straight to the finish; no evaluation is asked of the scripted curve, which is empty.
    from harness.train.rescore import final_weights
    curve, seen = scripted_dev
    curve.extend([9.0, 7.0, 6.0, 6.2, 6.1])
    run = tmp_path / "run"
    first = train(MODEL, RULE, data_cfg, run, quiet=True, dataset=dataset)
    (run / "metrics.json").unlink()
    again = train(MODEL, RULE, data_cfg, run, quiet=True, dataset=dataset)
    assert len(seen) == 5 and again["steps"] == first["steps"] == 10 and again["dev_ppl"] == first["dev_ppl"]
    assert again["scored_checkpoints"] == "4,6" and again["text_form"] == "raw"
    # `evaluate` reads the same window back, not the newest checkpoints (8 and 10)
    _, paths = final_weights(run, RULE.average_last)
    assert [p.name for p in paths] == ["step_00000004.pt", "step_00000006.pt"]


def test_a_run_still_improving_hits_the_budget_and_says_so(tmp_path, data_cfg, dataset, scripted_dev):
    curve, seen = scripted_dev
    curve.extend([9.0, 8.0, 7.0, 6.0, 5.0, 4.0])     # better at every evaluation, the last step's included
    metrics = train(MODEL, dataclasses.replace(RULE, average_last=0), data_cfg, tmp_path / "run", quiet=True,
                    dataset=dataset)
    assert len(seen) == 6 and metrics["steps"] == 12
    assert metrics["hit_budget"] and not metrics["stopped_by_rule"] and metrics["best_step"] == 12
    assert metrics["averaged_checkpoints"] == 0 and metrics["scored_to_step"] == 12      # the last weights


def test_a_resumed_run_stops_where_the_uninterrupted_one_did(tmp_path, data_cfg, dataset, scripted_dev):
    curve, _ = scripted_dev
    curve.extend([9.0, 7.0, 6.0, 6.2, 6.1])
    whole = train(MODEL, RULE, data_cfg, tmp_path / "whole", quiet=True, dataset=dataset)
    run = tmp_path / "cut"
    curve.extend([9.0, 7.0, 6.0, 6.2, 6.1])
    train(MODEL, RULE, data_cfg, run, quiet=True, dataset=dataset)
    # Pretend the run died after step 8: its step-10 checkpoint is lost, and the rule's state comes back from
    # step 8's (one evaluation without a new best).
    list_checkpoints(run / "checkpoints")[-1].unlink()
    curve.extend([6.1])
    resumed = train(MODEL, RULE, data_cfg, run, quiet=True, dataset=dataset)
    for key in ("steps", "best_step", "stopped_by_rule", "dev_ppl", "dev_bleu", "tokens_seen"):
        assert resumed[key] == whole[key], key


def test_the_plateau_schedule_shrinks_the_rate_when_dev_stalls(tmp_path, data_cfg, dataset, scripted_dev):
    # ConvS2S's way (reduce on plateau): lr 0.01 after warmup, x0.1 after each 2 evaluations without a new best.
    curve, _ = scripted_dev
    curve.extend([9.0, 8.0, 8.5, 8.6, 8.7, 8.8])
    cfg = dataclasses.replace(RULE, schedule="plateau", lr=0.01, warmup=1, lr_patience=2, decay_factor=0.1,
                              decay_times=4, patience=5, average_last=0)
    metrics = train(MODEL, cfg, data_cfg, tmp_path / "run", quiet=True, dataset=dataset)
    rows = [json.loads(ln) for ln in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    lr = {r["step"]: r["lr"] for r in rows if "lr" in r}
    # best at 4; no better at 6, 8 (first shrink after 8), 10, 12 (second after 12): the budget ends at 12
    assert [lr[s] for s in (4, 8, 9, 12)] == pytest.approx([0.01, 0.01, 0.001, 0.001])
    assert metrics["lr_shrinks"] == 2 and metrics["steps"] == 12 and metrics["best_step"] == 4
    with pytest.raises(UserError, match="schedule plateau shrinks the rate when dev stops improving"):
        dataclasses.replace(cfg, lr_patience=0).validate()


def test_the_rule_is_refused_without_evaluations_or_with_an_unknown_window():
    with pytest.raises(UserError, match="train.patience 3 counts dev evaluations: set train.eval_every"):
        TrainConfig(patience=3).validate()
    with pytest.raises(UserError, match="a checkpoint by time would join that window"):
        TrainConfig(eval_every=5, patience=3, average_last=5, checkpoint_minutes=10).validate()
    with pytest.raises(UserError, match="train.average_at 'first' is not known; use one of best, last"):
        TrainConfig(eval_every=5, patience=3, average_at="first").validate()


def test_a_run_cut_while_finishing_keeps_the_splits_it_scored(tmp_path, data_cfg, dataset, scripted_dev, monkeypatch):
    # The finish's beam searches are kept in the run directory with a digest of the weights, the split and the
    # settings: run again after a cut, the finish scores nothing it had scored, and the figures are the same; a
    # kept result whose digest is not this finish's (other weights, text or settings), or one cut mid-write, is
    # decoded again.
    import sys
    finish = sys.modules["harness.train.finish"]      # the module (harness.train exports its function `finish`)
    curve, _ = scripted_dev
    curve.extend([9.0, 7.0, 6.0, 6.2, 6.1])
    cfg = dataclasses.replace(RULE, eval_test=True)
    run = tmp_path / "run"
    first = train(MODEL, cfg, data_cfg, run, quiet=True, dataset=dataset)
    assert sorted(p.name for p in (run / "final_eval").iterdir()) == ["dev.json", "test.json", "test_last.json"]
    calls = []
    real = finish.evaluate
    monkeypatch.setattr(finish, "evaluate", lambda *a, **k: calls.append(k["prefix"]) or real(*a, **k))
    (run / "metrics.json").unlink()
    again = train(MODEL, cfg, data_cfg, run, quiet=True, dataset=dataset)
    assert calls == []
    for key in ("dev_ppl", "dev_bleu", "test_bleu", "test_bleu_last", "scored_checkpoints"):
        assert again[key] == first[key], key
    (run / "metrics.json").unlink()
    kept = json.loads((run / "final_eval" / "dev.json").read_text())
    (run / "final_eval" / "dev.json").write_text(json.dumps(dict(kept, key="other weights")))
    (run / "final_eval" / "test.json").write_text("{cut mid-write")
    third = train(MODEL, cfg, data_cfg, run, quiet=True, dataset=dataset)
    assert calls == ["dev", "test"] and third["dev_bleu"] == first["dev_bleu"]


def test_the_report_header_counts_the_trials_the_rule_stopped_apart_from_budget_and_diverged_ones():
    import pandas as pd

    from harness.report.stopping import stopping_summary
    nan = float("nan")
    runs = pd.DataFrame({"status": ["FINISHED"] * 4 + ["RUNNING"] + ["FINISHED"] * 2,
                         "tags.row": ["base", "base", "big", "big", "big", "deep", "deep"],
                         "metrics.stopped_by_rule": [1.0, 1.0, 1.0, 0.0, nan, 0.0, 1.0],
                         "metrics.hit_budget": [0.0, 0.0, 0.0, 1.0, nan, 0.0, 0.0],
                         "metrics.diverged": [0.0, nan, 0.0, 0.0, nan, 1.0, 0.0]})
    # deep: one seed stopped by the rule, one diverged, so not every seed; 4 / 6 = 66.67 % reads 66.6, never 66.7
    assert stopping_summary(runs) == ["- the patience rule stopped 4 of the 6 finished trials that trained under it "
                                      "(66.6 %); 1 hit the step budget, 1 diverged; it stopped every seed of 1 of 3 "
                                      "rows"]
    timed = pd.DataFrame({"status": ["FINISHED"], "tags.row": ["base"], "metrics.stopped_by_rule": [0.0],
                          "metrics.hit_budget": [0.0]})                  # train.max_minutes stopped it first
    assert stopping_summary(timed) == ["- the patience rule stopped 0 of the 1 finished trial that trained under it "
                                       "(0 %); 0 hit the step budget, 1 stopped otherwise (a time limit); it stopped "
                                       "every seed of 0 of 1 row"]
    gone = runs[runs["tags.row"] == "deep"].assign(**{"metrics.diverged": [1.0, 1.0]})
    assert stopping_summary(gone) == ["- the patience rule stopped 0 of the 2 finished trials that trained under it "
                                      "(0 %); 0 hit the step budget, 2 diverged; it stopped every seed of 0 of 1 row"]
    assert stopping_summary(runs[runs["status"] == "RUNNING"]) == []                 # nothing finished yet
    assert stopping_summary(runs.drop(columns="metrics.stopped_by_rule")) == []       # the rule off


def test_a_row_stopped_by_its_time_limit_says_so_rather_than_blaming_the_budget():
    import pandas as pd

    from harness.report.stopping import stopping_notes
    runs = pd.DataFrame({"status": ["FINISHED"] * 3, "tags.row": ["base", "base", "big"], "tags.seed": ["0", "1", "0"],
                         "metrics.stopped_by_rule": [0.0, 0.0, 0.0], "metrics.hit_budget": [0.0, 1.0, 0.0],
                         "metrics.steps": [700.0, 1000.0, 400.0], "metrics.best_step": [700.0, 900.0, 300.0]})
    notes = stopping_notes(runs)
    assert notes["base"] == ("seed 0: stopped by its time limit at step 700 (best 700); seed 1: hit the budget of 1000 "
                             "steps (best 900)")
    assert notes["big"] == "stopped by its time limit at step 400 (best 300)"


def test_the_status_view_the_row_notes_and_the_report_header_read_an_ending_alike():
    # One reading (metrics.run_ending) behind all three: a run logged before hit_budget existed and not stopped by
    # the rule hit its budget in each, and a diverged seed is diverged in each, not a time limit.
    import pandas as pd

    from harness.report.stopping import stopping_notes, stopping_summary
    from harness.study.status import ending
    nan = float("nan")
    runs = pd.DataFrame({"status": ["FINISHED"] * 3, "tags.row": ["base", "big", "deep"], "tags.seed": ["0"] * 3,
                         "metrics.stopped_by_rule": [0.0, 1.0, 0.0], "metrics.hit_budget": [nan, 0.0, 0.0],
                         "metrics.diverged": [nan, 0.0, 1.0], "metrics.diverged_step": [nan, nan, 150.0],
                         "metrics.steps": [1000.0, 600.0, 150.0], "metrics.best_step": [1000.0, 400.0, 100.0]})
    assert stopping_summary(runs) == ["- the patience rule stopped 1 of the 3 finished trials that trained under it "
                                      "(33.3 %); 1 hit the step budget, 1 diverged; it stopped every seed of 1 of 3 "
                                      "rows"]
    assert stopping_notes(runs) == {"base": "hit the budget of 1000 steps while improving",
                                    "big": "stopped by the rule at step 600 (best 400)",
                                    "deep": "diverged at step 150"}
    views = [ending({k[8:]: v for k, v in r.items() if k.startswith("metrics.") and v == v}, int(r["metrics.steps"]))
             for _, r in runs.iterrows()]
    assert views == [("budget", "hit the budget of 1000 steps while improving"),
                     ("rule", "stopped by the rule at step 600 (best 400)"), ("diverged", "diverged at step 150")]
    assert ending({"steps": 50.0}, 50) == ("fixed steps", "ran its 50 steps (no patience rule)")


def test_a_rows_note_names_its_seeds_as_they_ran_in_numeric_order():
    # Seeds 10 and 2 finished (0 did not): the note names them 2 then 10, not "seed 0" and "seed 1"
    import pandas as pd

    from harness.report.stopping import stopping_notes
    runs = pd.DataFrame({"status": ["FINISHED", "FINISHED"], "tags.row": ["base", "base"], "tags.seed": ["10", "2"],
                         "metrics.stopped_by_rule": [1.0, 0.0], "metrics.hit_budget": [0.0, 1.0],
                         "metrics.steps": [700.0, 1000.0], "metrics.best_step": [500.0, 1000.0]})
    assert stopping_notes(runs)["base"] == ("seed 2: hit the budget of 1000 steps while improving; seed 10: stopped "
                                            "by the rule at step 700 (best 500)")
