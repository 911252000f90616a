"""Fault injection at tiny sizes (docs/reliability.md): the driver killed (SIGKILL, SIGTERM) mid-study and
resumed, a worker dying mid-trial, an injected NaN and out-of-memory error, the MLflow server going away
mid-trial, an unwritable runs directory, a corrupted checkpoint. Each asserts that no trial is lost, no
MLflow run is duplicated, and, where training is interrupted and resumed, that the final metrics equal an
uninterrupted run's exactly (CPU, fp32)."""

import dataclasses
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from harness.data.corpus import DataConfig
from harness.errors import HarnessWarning
from harness.train import TrainConfig, train
from model import get_preset
from tests.helpers import free_port, new_store, pid_alive, start_mlflow_server, stop_server, wait_for

pytestmark = pytest.mark.slow

STUDY = """
study: faults
version: 1
seeds: [0]
max_failures: MAXF
resources: {cpu: 2}
base: {preset: cpu_d128}
rows:
  base: {}
  A1: {n_heads: 1}
  C1: {d_ff: 32}
profiles:
  tiny:
    model: {d_model: 32, d_ff: 64, n_layers: 1, vocab_size: 300, max_len: 128}
    train: {steps: STEPS, warmup: 20, max_tokens: 600, batch_tokens: 600, checkpoint_every: 25,
            checkpoint_minutes: 0, log_every: 5, bleu_sentences: 4, max_extra: 3}
    data: {train_pairs: 1000, dev_pairs: 8, test_pairs: 8, cache_dir: CACHE}
"""


def _study(tmp_path: Path, steps: int = 150, max_failures: int = 1, cache: Path | None = None) -> Path:
    path = tmp_path / "faults.yaml"
    path.write_text(STUDY.replace("CACHE", str(cache or tmp_path / "cache")).replace("STEPS", str(steps))
                    .replace("MAXF", str(max_failures)))
    return path


def _cmd(study: Path, runs: Path) -> list[str]:
    return [sys.executable, "-m", "harness", "run", str(study), "--runs-dir", str(runs)]


def _env(uri: str, **extra) -> dict:
    return {**os.environ, "MLFLOW_TRACKING_URI": uri, **extra}


def _runs(uri: str):
    from mlflow import MlflowClient
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("faults")
    runs = client.search_runs([exp.experiment_id]) if exp else []
    return client, [r for r in runs if r.data.tags.get("kind") == "study"], \
        [r for r in runs if r.data.tags.get("kind") == "trial"]


def _steps(client, run_id: str) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(run_id, "train_loss"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The same study, uninterrupted: what every interrupted-and-resumed run must reproduce exactly."""
    tmp = tmp_path_factory.mktemp("reference")
    uri = new_store(tmp)
    done = subprocess.run(_cmd(_study(tmp), tmp / "runs"), cwd=tmp, env=_env(uri), capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    client, _, children = _runs(uri)
    return {r.data.tags["row"]: r.data.metrics["dev_ppl"] for r in children}, tmp / "cache"


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM], ids=["sigkill", "sigterm"])
def test_driver_killed_mid_study_then_resume(sig, tmp_path, reference):
    ref, cache = reference
    uri = new_store(tmp_path)
    study, runs = _study(tmp_path, cache=cache), tmp_path / "runs"
    _runs(uri)        # create the store first: polling a store the driver is still migrating races it
    proc = subprocess.Popen(_cmd(study, runs), cwd=tmp_path, env=_env(uri), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    ckpts = lambda: [p for p in runs.glob("*/*/checkpoints/step_*.pt")]  # noqa: E731

    def one_done_and_one_midway() -> bool:
        _, _, children = _runs(uri)
        finished = {r.data.tags["row"] for r in children if r.info.status == "FINISHED"}
        midway = {p.parts[-3].rsplit("-s", 1)[0] for p in ckpts()} - finished
        return bool(finished) and bool(midway)
    wait_for(one_done_and_one_midway, proc, what="one finished trial and one with a checkpoint")
    client, _, before = _runs(uri)
    first_done = {r.data.tags["row"]: r.info.end_time for r in before if r.info.status == "FINISHED"}
    pids = [int(p.read_text()) for p in runs.glob("*/*/worker.pid")]
    os.kill(proc.pid, sig)
    out, _ = proc.communicate(timeout=300)
    if sig == signal.SIGTERM:
        assert proc.returncode != 0 and "--resume" in out, out
    # No orphan keeps training in the run directory once the driver is gone.
    wait_for(lambda: not any(pid_alive(p) for p in pids), None, timeout=120, what="the workers to exit")

    again = subprocess.run(_cmd(study, runs) + ["--resume"], cwd=tmp_path, env=_env(uri), capture_output=True,
                           text=True, timeout=900)
    assert again.returncode == 0, again.stdout + again.stderr
    client, parents, children = _runs(uri)
    assert len(parents) == 1 and parents[0].data.tags.get("resumed") == "true"
    assert parents[0].info.status == "FINISHED"
    assert sorted(r.data.tags["row"] for r in children) == ["A1", "C1", "base"]       # one run per trial
    for r in children:
        assert r.info.status == "FINISHED"
        assert _steps(client, r.info.run_id) == list(range(5, 151, 5)), r.data.tags["row"]   # none lost or twice
        assert r.data.metrics["dev_ppl"] == ref[r.data.tags["row"]], r.data.tags["row"]      # exactly
    for row, end in first_done.items():      # finished trials were not run again
        assert next(r for r in children if r.data.tags["row"] == row).info.end_time == end


def _with_fault(tmp_path: Path, cache: Path, fault: str) -> tuple[str, subprocess.CompletedProcess]:
    uri = new_store(tmp_path)
    done = subprocess.run(_cmd(_study(tmp_path, cache=cache), tmp_path / "runs"), cwd=tmp_path,
                          env=_env(uri, HARNESS_INJECT_FAULT=fault), capture_output=True, text=True, timeout=900)
    return uri, done


def test_worker_dying_mid_trial_is_retried_from_its_checkpoint(tmp_path, reference):
    # ... and a warning raised inside another trial reaches the driver's terminal and that trial's child run
    ref, cache = reference
    uri, done = _with_fault(tmp_path, cache, "crash@A1:60,warn@C1:40")
    assert done.returncode == 0, done.stdout + done.stderr
    client, parents, children = _runs(uri)
    assert len(parents) == 1 and len(children) == 3
    a1 = next(r for r in children if r.data.tags["row"] == "A1")
    assert a1.info.status == "FINISHED" and a1.data.tags["attempts"] == "2"
    assert list((tmp_path / "runs").glob("*/A1-s0/.crashed_at_60"))           # it did die once
    assert _steps(client, a1.info.run_id) == list(range(5, 151, 5))
    for r in children:
        assert r.data.metrics["dev_ppl"] == ref[r.data.tags["row"]], r.data.tags["row"]
    said = "HarnessWarning: injected warning at step 40"
    assert f"warning [C1-s0]: {said}" in done.stdout, done.stdout
    by_row = {r.data.tags["row"]: r for r in children}
    assert by_row["C1"].data.tags.get("warnings") == "1"
    assert said in Path(client.download_artifacts(by_row["C1"].info.run_id, "warnings.txt", str(tmp_path))).read_text()
    # the trials that raised none carry no warnings tag (nothing routine is reported as a warning)
    assert "warnings" not in by_row["base"].data.tags and "warnings" not in by_row["A1"].data.tags


def test_injected_nan_fails_its_row_after_the_retries_the_others_finish(tmp_path, reference):
    from harness.report.writers import write_report
    from harness.train import list_checkpoints, load_checkpoint
    _, cache = reference
    uri, done = _with_fault(tmp_path, cache, "nan@A1:30")
    assert done.returncode == 1, done.stdout + done.stderr          # a failed row: the study says so
    client, parents, children = _runs(uri)
    assert parents[0].info.status == "FAILED" and parents[0].data.tags["n_failed"] == "1"
    status = {r.data.tags["row"]: r for r in children}
    assert status["base"].info.status == status["C1"].info.status == "FINISHED"
    a1 = status["A1"]
    assert a1.info.status == "FAILED" and a1.data.tags["attempts"] == "2"        # max_failures 1: tried twice
    assert "FloatingPointError: loss became nan at step 30" in a1.data.tags["failure_reason"]
    # Detected before the update: the last checkpoint (step 25) holds finite weights, and none was written later.
    ckpts = list_checkpoints(next((tmp_path / "runs").glob("*/A1-s0")) / "checkpoints")
    assert ckpts[-1].name == "step_00000025.pt"
    assert all(torch.isfinite(t).all() for t in load_checkpoint(ckpts[-1])["model"].values())
    md = write_report("faults", tmp_path / "reports", uri)[0].read_text()
    assert "FAILED" in md and "loss became nan at step 30" in md


def test_out_of_memory_is_recorded_with_its_reason(tmp_path):
    from harness.study.kinds import KINDS, load_study
    from harness.tracking import StudyTracking
    from harness.trial import run_trial
    trial = load_study(_study(tmp_path, steps=10), "tiny", rows=["base"]).trials[0]
    uri = new_store(tmp_path)
    tracking = StudyTracking(uri, "faults")
    parent = tracking.start_parent("oom", {"profile": "tiny", "version": 1}, {})
    ctx = {"uri": uri, "experiment_id": tracking.experiment_id, "parent_id": parent, "run_dir": str(tmp_path),
           "threads": 1, "tags": {"study": "faults"}}
    os.environ["HARNESS_INJECT_FAULT"] = "oom@base:3"
    try:
        with pytest.raises(torch.OutOfMemoryError):
            run_trial(trial.to_dict(), ctx, KINDS[trial.kind])
    finally:
        del os.environ["HARNESS_INJECT_FAULT"]
    (run,) = tracking.children(parent)
    assert run.info.status == "FAILED"
    assert run.data.tags["failure_reason"].startswith("OutOfMemoryError: CUDA out of memory (injected at step 3)")


def test_mlflow_server_lost_mid_trial_metrics_are_buffered_and_flushed(tmp_path, reference):
    ref, cache = reference
    port = free_port()
    server, _ = start_mlflow_server(tmp_path, new_store(tmp_path, "server.db"), port, tmp_path / "artifacts")
    uri = f"http://127.0.0.1:{port}"
    study = _study(tmp_path, steps=600, cache=cache)
    proc = subprocess.Popen(_cmd(study, tmp_path / "runs") + ["--rows", "base"], cwd=tmp_path,
                            env=_env(uri, HARNESS_MLFLOW_WAIT_S="120"), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        metrics = lambda: list((tmp_path / "runs").glob("*/base-s0/metrics.jsonl"))  # noqa: E731
        wait_for(lambda: bool(metrics()) and metrics()[0].stat().st_size > 0, proc, what="training to start")
        stop_server(server)                      # the store goes away mid-trial ...
        time.sleep(8)
        server, _ = start_mlflow_server(tmp_path, f"sqlite:///{tmp_path / 'server.db'}", port,   # ... and comes back
                                        tmp_path / "artifacts")
        out, _ = proc.communicate(timeout=900)
        assert proc.returncode == 0, out
        client, parents, children = _runs(uri)
        assert len(parents) == 1 and len(children) == 1 and children[0].info.status == "FINISHED"
        assert _steps(client, children[0].info.run_id) == list(range(5, 601, 5))   # nothing lost, nothing twice
        assert math.isfinite(children[0].data.metrics["dev_ppl"])
    finally:
        if proc.poll() is None:
            proc.kill()
        stop_server(server)


def test_unwritable_runs_dir_is_one_sentence_and_nothing_started(tmp_path):
    (tmp_path / "a_file").write_text("x")
    done = subprocess.run(_cmd(_study(tmp_path), tmp_path / "a_file" / "runs"), cwd=tmp_path,
                          env=_env(f"sqlite:///{tmp_path / 'mlflow.db'}"), capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 2
    err = done.stderr.strip()
    assert len(err.splitlines()) == 1 and "--runs-dir" in err and "cannot be written" in err, err
    assert not (tmp_path / "mlflow.db").exists()


def test_corrupted_checkpoint_falls_back_to_the_one_before(tmp_path):
    model = get_preset("cpu_d128").replace(d_model=32, d_ff=64, n_layers=1, n_heads=2, vocab_size=300, max_len=128)
    cfg = TrainConfig(steps=40, warmup=10, max_tokens=600, batch_tokens=600, checkpoint_every=10,
                      checkpoint_minutes=0, log_every=5, bleu_sentences=4, max_extra=3)
    data = DataConfig(train_pairs=1000, dev_pairs=8, test_pairs=8, cache_dir=str(tmp_path / "cache"))
    whole = train(model, cfg, data, tmp_path / "whole", quiet=True)
    # Stop at 30, corrupt the newest checkpoint (a torn write), then continue to 40.
    train(model, dataclasses.replace(cfg, steps=30), data, tmp_path / "cut", quiet=True)
    resumed_cfg = cfg
    ckpts = sorted((tmp_path / "cut" / "checkpoints").glob("step_*.pt"))
    assert ckpts[-1].name == "step_00000030.pt"
    ckpts[-1].write_bytes(ckpts[-1].read_bytes()[:1000])
    # the config differs only in steps, which the checkpoint records: rewrite it so the resume is allowed
    state = torch.load(ckpts[-2], weights_only=True)
    state["config"]["train"]["steps"] = 40
    torch.save(state, ckpts[-2])
    with pytest.warns(HarnessWarning, match="step_00000030.pt cannot be read"):
        again = train(model, resumed_cfg, data, tmp_path / "cut", quiet=True)
    assert (tmp_path / "cut" / "checkpoints" / "step_00000030.pt.corrupt").exists()
    assert again["dev_ppl"] == whole["dev_ppl"] and again["steps"] == 40
    steps = [int(line.split('"step": ')[1].split(",")[0])
             for line in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(5, 41, 5))        # the steps after the good checkpoint were not logged twice


@pytest.mark.parametrize("env, argv, needle", [
    ({"MLFLOW_TRACKING_URI": "foo"}, [], "MLFLOW_TRACKING_URI='foo' is not a tracking URI"),
    ({"MLFLOW_TRACKING_URI": "http://127.0.0.1:9"}, [], "cannot reach the MLflow tracking store"),
    ({}, ["--address", "127.0.0.1:9"], "cannot join Ray at 127.0.0.1:9"),
], ids=["bad_uri", "unreachable_server", "bad_ray_address"])
def test_bad_tracking_uri_or_ray_address(env, argv, needle, tmp_path):
    full_env = {**os.environ, "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", **env}
    if "MLFLOW_TRACKING_URI" not in env:
        full_env["MLFLOW_TRACKING_URI"] = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run(_cmd(_study(tmp_path, steps=5), tmp_path / "runs") + argv, cwd=tmp_path, env=full_env,
                          capture_output=True, text=True, timeout=300)
    err = done.stderr.strip()
    assert done.returncode == 2 and needle in err and len(err.splitlines()) == 1, err
    assert not (tmp_path / "runs").exists()
    if argv:     # the address is checked before anything is created
        assert not (tmp_path / "mlflow.db").exists()


def test_a_killed_attempts_unsent_evaluation_reaches_the_store_on_resume(tmp_path):
    """A trial killed with rows still in its buffer (Ray's watchdog killing a stopped worker, a session's end) and
    resumed from a checkpoint written after its last dev evaluation never evaluates that step again: the row is
    only in its metrics.jsonl. The reopened run sends it, as it sends the training rows, and nothing twice."""
    import json as _json

    from mlflow import MlflowClient

    from harness.tracking import TrialRun
    uri = new_store(tmp_path, "m.db")
    client = MlflowClient(uri)
    exp = client.create_experiment("x")
    parent = client.create_run(exp).info.run_id
    rows = [{"step": s, "train_loss": 5.0 - s / 100, "lr": 1e-3} for s in (10, 20, 30, 40)]
    evals = [{"step": 20, "dev_ppl": 30.0, "curve_bleu": 5.0}, {"step": 40, "dev_ppl": 25.0, "curve_bleu": 7.0}]
    first = TrialRun(uri, exp, parent, "base-s0", {}, {})
    for r in (rows[0], rows[1], evals[0], rows[2]):
        first.log_step(r["step"], {k: v for k, v in r.items() if k != "step"})
    first.flush()
    for r in (rows[3], evals[1]):          # logged, never flushed: the attempt dies here
        first.log_step(r["step"], {k: v for k, v in r.items() if k != "step"})
    jsonl = tmp_path / "metrics.jsonl"
    jsonl.write_text("".join(_json.dumps(r) + "\n" for r in (*rows[:2], evals[0], rows[2], rows[3], evals[1])))
    again = TrialRun(uri, exp, parent, "base-s0", {}, {})
    assert again.reopened and again.logged_through == 30
    assert again.backfill(jsonl) == 2 and again.logged_through == 40
    again.flush()

    def steps(key):
        return sorted(m.step for m in client.get_metric_history(again.run_id, key))
    assert steps("dev_ppl") == [20, 40] and steps("curve_bleu") == [20, 40]
    assert steps("train_loss") == [10, 20, 30, 40] and steps("lr") == [10, 20, 30, 40]
    # training goes on from the checkpoint at step 20: the steps it recomputes, evaluation included, are held now
    for r in (rows[2], rows[3], evals[1]):
        again.log_step(r["step"], {k: v for k, v in r.items() if k != "step"})
    again.log_step(50, {"dev_ppl": 24.0})          # a new evaluation is sent
    again.flush()
    assert steps("train_loss") == [10, 20, 30, 40] and steps("dev_ppl") == [20, 40, 50]
    assert steps("curve_bleu") == [20, 40]          # each metric at each step once


def test_a_row_the_metrics_file_holds_twice_is_sent_once(tmp_path):
    """A run resumed at step 0 (killed before its first checkpoint) records its step-0 evaluation again."""
    import json as _json

    from mlflow import MlflowClient

    from harness.tracking import TrialRun
    uri = new_store(tmp_path, "m.db")
    client = MlflowClient(uri)
    exp = client.create_experiment("x")
    parent = client.create_run(exp).info.run_id
    TrialRun(uri, exp, parent, "base-s0", {}, {})          # the first attempt, killed before sending anything
    jsonl = tmp_path / "metrics.jsonl"
    jsonl.write_text(2 * (_json.dumps({"step": 0, "dev_ppl": 99.0}) + "\n"))
    again = TrialRun(uri, exp, parent, "base-s0", {}, {})
    assert again.backfill(jsonl) == 1
    again.log_step(0, {"dev_ppl": 99.0})                   # recorded at initialisation again: held
    again.flush()
    assert [(m.step, m.value) for m in client.get_metric_history(again.run_id, "dev_ppl")] == [(0, 99.0)]


def test_resume_sends_a_finished_trials_rows_its_run_lacks(tmp_path, capsys):
    """A trial finished by code that re-sent training rows only keeps the gap an earlier kill left: --resume sends
    what its metrics.jsonl holds and its run does not, and leaves its status, end time and tags as they were."""
    import json as _json

    from mlflow.entities import Metric

    from harness.study.runner import _backfill_finished
    from harness.tracking import StudyTracking
    tracking = StudyTracking(new_store(tmp_path, "m.db"), "table2")
    client = tracking.client
    parent = client.create_run(tracking.experiment_id, tags={"kind": "study", "run_dir": str(tmp_path / "runs")})
    child = client.create_run(tracking.experiment_id, tags={"mlflow.parentRunId": parent.info.run_id,
                                                            "trial_key": "big_enfr-s0"}).info.run_id
    client.log_batch(child, metrics=[Metric("dev_ppl", v, 0, s) for s, v in ((2750, 3.51), (3250, 3.50))])
    client.set_terminated(child, "FINISHED")
    before = client.get_run(child)
    folder = tmp_path / "runs" / "big_enfr-s0"
    folder.mkdir(parents=True)
    (folder / "metrics.jsonl").write_text("".join(_json.dumps({"step": s, "dev_ppl": v}) + "\n"
                                                  for s, v in ((2750, 3.51), (3000, 3.446), (3250, 3.50))))
    _backfill_finished(tracking, client.get_run(parent.info.run_id))
    assert "big_enfr-s0: 1 row(s) of its metrics.jsonl that its MLflow run lacked sent" in capsys.readouterr().out
    hist = sorted((m.step, m.value) for m in client.get_metric_history(child, "dev_ppl"))
    assert hist == [(2750, 3.51), (3000, 3.446), (3250, 3.50)]
    after = client.get_run(child)
    assert (after.info.status, after.info.end_time, after.data.tags) == \
        (before.info.status, before.info.end_time, before.data.tags)
    _backfill_finished(tracking, client.get_run(parent.info.run_id))       # nothing twice
    assert capsys.readouterr().out == "" and len(client.get_metric_history(child, "dev_ppl")) == 3
    with (folder / "metrics.jsonl").open("a") as f:          # an unreadable row: said, and --resume goes on
        f.write("{not json\n")
    _backfill_finished(tracking, client.get_run(parent.info.run_id))
    said = capsys.readouterr().out
    assert "big_enfr-s0: its metrics.jsonl's rows could not be checked against its MLflow run (JSONDecodeError" in said
