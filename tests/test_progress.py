"""The study's live view (harness/study/progress.py): the time left computed from what child runs logged,
the plain lines a non-terminal gets, and the view under a real `harness run`."""

import os
import subprocess
import sys

import pytest

from harness.study.progress import StudyProgress, time_left
from harness.train import TrainConfig
from harness.trial import Trial
from tests.helpers import new_store


def _trial(row: str, steps: int) -> Trial:
    return Trial(row=row, seed=0, train=TrainConfig(steps=steps))


TRIALS = [_trial("base", 100), _trial("big", 300), _trial("A1", 100), _trial("A2", 100)]
FLOPS = {"base-s0": 1e9, "big-s0": 3e9, "A1-s0": 1e9, "A2-s0": 1e9}


def test_time_left_applies_the_measured_rate_to_every_remaining_step_on_the_slots():
    # base finished: 100 steps in 10 s of training (1e10 FLOP/s), 12 s wall, so evaluation is 0.2 of training.
    # big runs at the same rate, 150 of 300 steps done: 45 s of training left + 0.2 x 90 s of evaluation.
    # A1 and A2 wait: 10 s of training + 2 s of evaluation each; the free slot takes them one after the other.
    seen = {"base-s0": {"status": "FINISHED", "step": 100, "train_seconds": 10.0, "start": 0, "end": 12_000},
            "big-s0": {"status": "RUNNING", "step": 150, "train_seconds": 45.0, "start": 0, "end": None}}
    assert time_left(TRIALS, FLOPS, seen, slots=2) == pytest.approx(max(45 + 18, 12 + 12))
    assert time_left(TRIALS, FLOPS, seen, slots=1) == pytest.approx(63 + 24)
    assert time_left(TRIALS, FLOPS, {}, slots=2) is None          # nothing measured yet: no guess


def test_time_left_takes_a_rows_own_seeds_then_a_line_with_per_step_overhead():
    # mid ran 0.15 s a step at 1e9 FLOPs a step, large 0.35 s at 3e9: a line of 0.05 s + 1e-10 s a FLOP. The small
    # row (1e8) then takes 0.06 s a step, not the 0.013 s that FLOPs alone would give it (scaling_dk's d_k 8 rows
    # ran far fewer FLOPs a second than its d_k 128 ones); mid's second seed takes its first seed's 0.15 s.
    trials = [_trial("mid", 100), _trial("large", 100), _trial("small", 100),
              Trial(row="mid", seed=1, train=TrainConfig(steps=100))]
    flops = {"mid-s0": 1e9, "large-s0": 3e9, "small-s0": 1e8, "mid-s1": 1e9}
    seen = {"mid-s0": {"status": "FINISHED", "step": 100, "train_seconds": 15.0, "start": 0, "end": 15_000},
            "large-s0": {"status": "FINISHED", "step": 100, "train_seconds": 35.0, "start": 0, "end": 35_000}}
    assert time_left(trials, flops, seen, slots=1) == pytest.approx(6.0 + 15.0)
    assert time_left(trials, flops, seen, slots=2) == pytest.approx(15.0)


def test_a_non_terminal_gets_plain_lines_with_counts_rows_and_the_time_left(capsys):
    seen = {"base-s0": {"status": "FINISHED", "step": 100, "train_seconds": 10.0, "start": 0, "end": 12_000},
            "big-s0": {"status": "RUNNING", "step": 150, "train_seconds": 45.0, "start": 0, "end": None,
                       "loss": 2.5, "tokens_per_s": 12_300.0},
            "A1-s0": {"status": "FAILED", "step": 3, "train_seconds": 1.0, "start": 0, "end": 1000}}
    view = StudyProgress(TRIALS, FLOPS, 2, poll=lambda: seen, tty=False)
    line = view.draw(seen)
    assert "1 finished, 1 running, 1 pending, 1 failed" in line
    # A1 failed: only A2 waits
    assert "big-s0 150/300 loss 2.500 12.3 k tok/s" in line and "about 63 s left" in line
    assert capsys.readouterr().out.strip() == line


def test_a_failing_poll_does_not_end_the_view():
    calls = []

    def poll():
        calls.append(1)
        raise ConnectionError("store away")
    view = StudyProgress(TRIALS, FLOPS, 2, poll=poll, tty=False, every=0.05).start()
    import time
    time.sleep(0.4)
    view.stop()
    assert len(calls) >= 3


@pytest.mark.slow
def test_a_study_prints_its_progress_and_the_browse_command_and_no_library_banners(tmp_path):
    from tests.helpers import TWO_ROW_STUDY
    study = tmp_path / "mini.yaml"
    study.write_text(TWO_ROW_STUDY.replace("CACHE", str(tmp_path / "cache")).replace("steps: 3,", "steps: 40,"))
    env = {**os.environ, "MLFLOW_TRACKING_URI": new_store(tmp_path),
           "HARNESS_PROGRESS_EVERY_S": "0.5", "HARNESS_INJECT_FAULT": "slow@base:1"}
    cmd = [sys.executable, "-m", "harness", "run", str(study), "--runs-dir", str(tmp_path / "runs")]
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    lines = [ln for ln in out.splitlines() if " running, " in ln and " pending, " in ln]
    assert lines and any("base-s0 " in ln and "/40" in ln for ln in lines), out
    assert any(" left" in ln and "about ? left" not in ln for ln in lines), out
    assert "mlflow ui --backend-store-uri" in out
    everything = out + done.stderr
    assert "Configuration for experiment" not in everything and "INFO mlflow" not in everything
    quiet = subprocess.run(cmd + ["--quiet"], cwd=tmp_path, env={**env, "MLFLOW_TRACKING_URI":
                           new_store(tmp_path, "q.db")}, capture_output=True, text=True, timeout=600)
    assert quiet.returncode == 0 and " pending, " not in quiet.stdout, quiet.stdout + quiet.stderr
