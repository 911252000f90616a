"""`python -m harness status`: a study's progress read back from a hand-made MLflow store with the runner's
schema (a parent run with its heartbeat, child runs finished, running, run under other settings, or absent)."""

import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from mlflow.entities import Metric, Param, RunTag

from harness.cli import main
from harness.logged import study_snapshot
from harness.study.kinds import load_study
from harness.study.status import ALIVE_S, render, study_status
from tests.helpers import new_store

STUDY = """
study: mini
version: 1
table: table3
seeds: [0, 1]
resources: {cpu: 1}
base: {preset: cpu_d128}
rows:
  base: {}
  A1: {n_heads: 1}
  C1: {d_ff: 32}
profiles:
  tiny:
    model: {d_model: 32, d_ff: 64, n_layers: 1, vocab_size: 300, max_len: 128}
    train: {steps: 100, warmup: 2, max_tokens: 600, batch_tokens: 600, eval_every: 10, patience: 3}
"""
COMMAND = "python -m harness run mini.yaml --profile tiny --quiet"


def _child(client, exp, parent, key, config_hash, status, metrics, dev, last_step, reason=None):
    run = client.create_run(exp, tags={"kind": "trial", "mlflow.parentRunId": parent, "trial_key": key,
                                       "config_hash": config_hash,
                                       **({"failure_reason": reason} if reason else {})}).info.run_id
    now = int(time.time() * 1000)
    rows = [Metric("train_loss", 3.0 - s / 100, now, s) for s in range(0, last_step + 1, 5)]
    rows += [Metric("dev_ppl", v, now, s) for s, v in dev]
    rows += [Metric(k, float(v), now + 1000, last_step) for k, v in metrics.items()]     # the final figures, last
    client.log_batch(run, metrics=rows)
    if status != "RUNNING":
        client.set_terminated(run, status)


@pytest.fixture
def store(tmp_path, monkeypatch):
    """The store of a study 3 rows x 2 seeds: base-s0 stopped by the rule, base-s1 at the budget, A1-s0 running
    (two evaluations past its best), A1-s1 run under other settings, C1-s0 not started, C1-s1 failed; the driver
    beat just now."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mini.yaml").write_text(STUDY)
    uri = new_store(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    study = load_study(tmp_path / "mini.yaml", "tiny")
    hashes = {t.key: t.config_hash for t in study.trials}
    client = MlflowClient(uri)
    exp = client.create_experiment("mini")
    parent = client.create_run(exp, tags={"kind": "study", "study": "mini", "version": "1", "profile": "tiny",
                                          "command": COMMAND, "study_file": "mini.yaml"}).info.run_id
    client.log_batch(parent, metrics=[Metric("invocation_wall_seconds", 1800.0, int(time.time() * 1000), 0)])
    curve = [(10, 9.0), (20, 7.0), (30, 6.0), (40, 5.0), (50, 5.2), (60, 5.1), (70, 5.3)]
    _child(client, exp, parent, "base-s0", hashes["base-s0"], "FINISHED",
           {"steps": 70, "stopped_by_rule": 1, "hit_budget": 0, "best_step": 40, "best_dev_ppl": 5.0, "dev_ppl": 4.9,
            "train_seconds": 600, "cpu_seconds": 1800}, curve, 70)
    _child(client, exp, parent, "base-s1", hashes["base-s1"], "FINISHED",
           {"steps": 100, "stopped_by_rule": 0, "hit_budget": 1, "best_step": 100, "best_dev_ppl": 4.0,
            "dev_ppl": 3.9, "train_seconds": 900, "cpu_seconds": 1800}, [(s, 10 - s / 20) for s in range(10, 101, 10)],
           100)
    _child(client, exp, parent, "A1-s0", hashes["A1-s0"], "RUNNING", {"train_seconds": 300},
           [(10, 8.0), (20, 6.5), (30, 6.0), (40, 6.2), (50, 6.1)], 55)
    _child(client, exp, parent, "A1-s1", "not-this-one", "FINISHED", {"steps": 100}, [], 100)
    _child(client, exp, parent, "C1-s1", hashes["C1-s1"], "FAILED", {"train_seconds": 30}, [(10, 9.0)], 12,
           reason="non-finite loss at step 12 (retried 2 times)\nlast checkpoint: step 10")
    return study, uri, client, parent


def _line(status, key):
    return next(t for t in status["trials"] if t["trial"] == key)


def test_each_trial_says_where_it_stands_and_how_it_ended(store):
    study, uri, _, _ = store
    status = study_status(study, study_snapshot(uri, "mini", "tiny"))
    stopped, budget, running = _line(status, "base-s0"), _line(status, "base-s1"), _line(status, "A1-s0")
    assert (stopped["state"], stopped["step"], stopped["best"], stopped["best_step"]) == ("finished", 70, 5.0, 40)
    assert stopped["dev_ppl"] == 4.9 and stopped["end"] == "rule"     # the scored (averaged) weights' figure
    assert stopped["ended"] == "stopped by the rule at step 70 (best 40)"
    assert budget["ended"] == "hit the budget of 100 steps while improving" and budget["end"] == "budget"
    # the running trial: its last step, its last dev PPL, its best and the evaluations since it, of its patience 3
    assert (running["state"], running["step"], running["dev_ppl"]) == ("running", 55, 6.1)
    assert (running["best"], running["best_step"], running["since_best"], running["patience"]) == (6.0, 30, 2, 3)
    assert _line(status, "A1-s1")["state"] == "changed"               # ran other settings: --resume reruns it
    assert _line(status, "C1-s0")["state"] == "pending"
    assert _line(status, "C1-s1")["state"] == "failed"
    assert _line(status, "C1-s1")["ended"] == "non-finite loss at step 12 (retried 2 times)"   # its reason's first line
    assert status["counts"] == {"finished": 2, "running": 1, "changed": 1, "pending": 1, "failed": 1}
    assert status["driver_alive"] and status["wall_hours"] == pytest.approx(0.5)
    assert status["cpu_hours_finished"] == pytest.approx(1.0)
    assert status["seconds_left"] is not None and status["seconds_left"] > 0   # measured from A1-s0's own rate

    text = render(status)
    assert "mini v1, profile tiny" in text
    a1 = next(line for line in text.splitlines() if line.startswith("A1-s0"))
    assert "55 / 100" in a1 and "6.00 (30)" in a1 and "2 of 3" in a1
    assert "6 trials: 2 finished, 1 running, 1 changed, 1 pending, 1 failed; of the finished, 1 stopped by the " \
           "rule, 1 at the budget" in text
    assert "running (last heard from" in text
    assert "; at most about " in text and "h left at 1 trial(s) at a time (every trial to its step budget; " in text


def test_a_driver_gone_quiet_leaves_its_running_trials_stopped_and_says_how_to_resume(store):
    study, uri, client, parent = store
    snapshot = study_snapshot(uri, "mini", "tiny")
    status = study_status(study, snapshot, now_s=snapshot["parent"]["last_heard_ms"] / 1000 + 600)
    assert not status["driver_alive"] and status["seconds_left"] is None
    assert _line(status, "A1-s0")["state"] == "stopped"
    assert render(status).splitlines()[-1] == (
        "not running (its driver stopped without closing the run (killed, or its machine lost)); "
        f"`{COMMAND} --resume` continues it (trials resume from their checkpoints)")
    client.set_terminated(parent, "KILLED")
    client.log_batch(parent, tags=[RunTag("command", COMMAND + " --resume")])
    again = study_status(study, study_snapshot(uri, "mini", "tiny"))
    assert not again["driver_alive"]
    assert render(again).splitlines()[-1].startswith(f"not running (interrupted); `{COMMAND} --resume` continues")


def test_status_command_prints_the_table_and_json(store, capsys):
    assert main(["status", "mini.yaml", "--profile", "tiny"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[1].split() == ["trial", "state", "step", "/", "budget", "dev", "PPL", "best", "(step)",
                                           "evals", "since", "best", "train", "min", "ended"]
    assert "stopped by the rule at step 70 (best 40)" in out
    assert main(["status", "mini.yaml", "--json"]) == 0
    import json
    data = json.loads(capsys.readouterr().out)
    assert data["counts"]["finished"] == 2 and len(data["trials"]) == 6


def test_status_of_a_study_never_run_or_without_a_store_is_one_sentence(store, capsys, tmp_path, monkeypatch):
    assert main(["status", "mini.yaml", "--name", "other"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: the MLflow store") and "named other" in err and "--name other" in err
    assert len(err.splitlines()) == 1
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'none.db'}")
    assert main(["status", "mini.yaml"]) == 2
    assert "no MLflow store" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()


def test_status_without_a_study_gives_one_line_an_invocation(store, capsys):
    _, _, client, _ = store
    exp = client.get_experiment_by_name("mini").experiment_id
    named = client.create_run(exp, tags={"kind": "study", "study": "mini", "version": "1", "profile": "tiny",
                                         "variant": "corpus2", "study_file": "mini.yaml"}).info.run_id
    client.log_param(named, "rows", "base")
    client.set_terminated(named, "KILLED")
    assert main(["status"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["study", "profile", "name", "state", "trials", "started"]
    cells = {tuple(line.split()[:3]): line for line in lines[1:3]}
    # as `status STUDY` counts: A1-s1, finished under other settings, is not one of its trials' runs
    assert " ".join(cells[("mini", "tiny", "-")].split()[3:8]) == "running 2 of 6 finished,"
    assert "1 running, 1 failed" in cells[("mini", "tiny", "-")]
    assert " ".join(cells[("mini", "tiny", "corpus2")].split()[3:7]) == "interrupted 0 of 2"   # one row, two seeds
    assert lines[-1].startswith("`python -m harness status STUDY")


def test_a_study_run_with_a_set_that_status_was_not_given_says_so(store, tmp_path):
    study, uri, _, _ = store
    other = load_study(tmp_path / "mini.yaml", "tiny", sets={"train": {"label_smoothing": 0.0}})
    text = render(study_status(other, study_snapshot(uri, "mini", "tiny")))
    assert f"(`{COMMAND}`)" in text.splitlines()[0]
    assert "every trial that ran did so under other settings than this study file gives now: give the --set" in text
    assert "every trial that ran" not in render(study_status(study, study_snapshot(uri, "mini", "tiny")))


def test_a_resumed_trials_repeated_evaluations_count_once_and_a_running_trial_keeps_its_study_alive(tmp_path,
                                                                                                     monkeypatch):
    """A trial resumed from its step-30 checkpoint logs its evaluations at 40 and 50 again (the latest counts);
    the parent has no heartbeat yet (it has just reopened) but the trial logs steps: the study runs."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mini.yaml").write_text(STUDY)
    uri = new_store(tmp_path)
    study = load_study(tmp_path / "mini.yaml", "tiny")
    client = MlflowClient(uri)
    exp = client.create_experiment("mini")
    parent = client.create_run(exp, tags={"kind": "study", "version": "1", "profile": "tiny"}).info.run_id
    trial = next(t for t in study.trials if t.key == "base-s0")
    run = client.create_run(exp, tags={"kind": "trial", "mlflow.parentRunId": parent, "trial_key": "base-s0",
                                       "config_hash": trial.config_hash}).info.run_id
    now = int(time.time() * 1000)
    first = [(10, 8.0), (20, 6.0), (30, 5.0), (40, 5.5), (50, 5.6)]       # the attempt that died at step 55
    again = [(40, 5.4), (50, 5.3)]                                          # the resumed attempt, later
    client.log_batch(run, metrics=[Metric("dev_ppl", v, now - 60_000, st) for st, v in first]
                     + [Metric("dev_ppl", v, now, st) for st, v in again]
                     + [Metric("train_loss", 2.0, now, st) for st in (45, 50, 55)])
    snapshot = study_snapshot(uri, "mini", "tiny")
    assert snapshot["trials"]["base-s0"]["dev_ppl"] == [(10, 8.0), (20, 6.0), (30, 5.0), (40, 5.4), (50, 5.3)]
    status = study_status(study, snapshot)
    line = _line(status, "base-s0")
    assert (line["state"], line["dev_ppl"], line["best"], line["since_best"]) == ("running", 5.3, 5.0, 2)
    assert status["driver_alive"] and status["last_heard_s_ago"] < ALIVE_S


def test_status_reads_the_rows_and_seeds_the_invocation_ran(store, capsys, tmp_path):
    _, uri, client, _ = store
    exp = client.get_experiment_by_name("mini").experiment_id
    later = client.create_run(exp, tags={"kind": "study", "version": "1", "profile": "tiny",
                                         "study_file": "mini.yaml"}).info.run_id       # `run --rows C1 --seeds 0`
    client.log_batch(later, params=[Param("rows", "C1"), Param("seeds", "0")])
    client.set_terminated(later, "KILLED")
    assert main(["status", "mini.yaml"]) == 0
    out = capsys.readouterr().out
    assert [line.split()[0] for line in out.splitlines()[2:-3]] == ["C1-s0"] and "1 trial: 1 pending" in out


def test_the_command_to_continue_is_the_latest_resumes_with_its_own_sets(store):
    # The study was resumed with a --set its first invocation lacked: `status` offers the resume's command, and the
    # parent keeps the first one as `command` (the report prints both).
    from harness.tracking import StudyTracking
    study, uri, client, parent = store
    later = COMMAND + " --resume --set resources.cpu=1"
    StudyTracking(uri, "mini").reopen_parent(parent, 1, later, {"git_sha": "f" * 40, "git_dirty": False,
                                                                "hardware": "another machine", "study": "mini"})
    client.set_terminated(parent, "KILLED")
    tags = client.get_run(parent).data.tags
    assert tags["command"] == COMMAND and tags["command_last"] == later and tags["resume_count"] == "1"
    # the resume's own commit and machine, beside the first invocation's (which stay)
    assert (tags["git_sha_last"], tags["git_dirty_last"], tags["hardware_last"]) == ("f" * 40, "False",
                                                                                    "another machine")
    assert "study_last" not in tags and tags.get("hardware") != "another machine"
    status = study_status(study, study_snapshot(uri, "mini", "tiny"))
    assert render(status).splitlines()[-1].startswith(f"not running (interrupted); `{later}` continues it")


def test_a_trial_resumed_at_another_commit_or_machine_records_both(tmp_path):
    # A trial's first attempt keeps its tags; each later attempt adds its own commit and machine as *_last, which
    # the report's hardware line and the claims' registration read beside the first.
    from harness.tracking import TrialRun
    uri = new_store(tmp_path, "m.db")
    client = MlflowClient(uri)
    exp = client.create_experiment("x")
    parent = client.create_run(exp).info.run_id
    first = TrialRun(uri, exp, parent, "base-s0", {"git_sha": "a" * 40, "hardware": "m1", "git_dirty": False}, {})
    again = TrialRun(uri, exp, parent, "base-s0", {"git_sha": "b" * 40, "hardware": "m2", "git_dirty": True}, {})
    tags = client.get_run(again.run_id).data.tags
    assert again.reopened and not first.reopened and again.run_id == first.run_id and tags["attempts"] == "2"
    assert (tags["git_sha"], tags["hardware"], tags["git_dirty"]) == ("a" * 40, "m1", "False")
    assert (tags["git_sha_last"], tags["hardware_last"], tags["git_dirty_last"]) == ("b" * 40, "m2", "True")


def test_a_resumed_trial_whose_settings_changed_starts_afresh(tmp_path, capsys):
    # Its old run holds another config's params and its folder another config's checkpoints (the trainer would
    # refuse them): the old run is superseded (tagged, deleted in MLflow), the folder kept aside, and the trial
    # starts afresh. A trial whose settings did not change keeps both.
    from types import SimpleNamespace

    from harness.study.runner import _start_changed_afresh
    from harness.tracking import StudyTracking
    uri = new_store(tmp_path, "m.db")
    tracking = StudyTracking(uri, "mini")
    parent = tracking.start_parent("mini tiny", {"study": "mini"}, {})
    client = MlflowClient(uri)
    ids = {key: client.create_run(tracking.experiment_id, tags={"mlflow.parentRunId": parent, "trial_key": key,
                                                                "config_hash": h}).info.run_id
           for key, h in (("A1-s0", "aaa"), ("base-s0", "bbb"))}
    for key in ids:
        (tmp_path / "runs" / key / "checkpoints").mkdir(parents=True)
    todo = [SimpleNamespace(key="A1-s0", config_hash="ccc"), SimpleNamespace(key="base-s0", config_hash="bbb")]
    _start_changed_afresh(tracking, parent, tmp_path / "runs", todo)
    old = client.get_run(ids["A1-s0"])
    assert old.info.lifecycle_stage == "deleted" and old.data.tags["superseded"].startswith("config hash aaa -> ccc")
    assert client.get_run(ids["base-s0"]).info.lifecycle_stage == "active"
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["A1-s0.superseded-aaa", "base-s0"]
    assert [r.data.tags["trial_key"] for r in tracking.children(parent)] == ["base-s0"]
    said = capsys.readouterr().out
    assert ("A1-s0: its resolved settings changed since it ran (the study file, a --set or a default: config hash "
            "aaa -> ccc); it starts afresh") in said
    assert "kept as A1-s0.superseded-aaa" in said and "base-s0" not in said


def test_a_changed_trial_whose_folder_a_live_worker_uses_is_not_set_aside(tmp_path):
    # Another invocation still running the trial: its folder is not renamed nor its run deleted under it.
    import subprocess
    from types import SimpleNamespace

    from harness.errors import UserError
    from harness.study.runner import _live_worker, _start_changed_afresh
    from harness.tracking import StudyTracking
    folder = tmp_path / "runs" / "A1-s0"
    folder.mkdir(parents=True)
    worker = subprocess.Popen(["bash", "-c", "exec -a ray::ImplicitFunc.train sleep 60"])
    try:
        deadline = time.time() + 10
        while b"ray::" not in Path(f"/proc/{worker.pid}/cmdline").read_bytes() and time.time() < deadline:
            time.sleep(0.05)
        (folder / "worker.pid").write_text(f"{worker.pid}\n")
        assert _live_worker(folder) == worker.pid
        uri = new_store(tmp_path, "m.db")
        tracking = StudyTracking(uri, "mini")
        parent = tracking.start_parent("mini tiny", {"study": "mini"}, {})
        run = MlflowClient(uri).create_run(tracking.experiment_id, tags={
            "mlflow.parentRunId": parent, "trial_key": "A1-s0", "config_hash": "aaa"}).info.run_id
        with pytest.raises(UserError, match="is in use by process"):
            _start_changed_afresh(tracking, parent, tmp_path / "runs", [SimpleNamespace(key="A1-s0", config_hash="b")])
        assert folder.is_dir() and MlflowClient(uri).get_run(run).info.lifecycle_stage == "active"
    finally:
        worker.kill()
        worker.wait()
    (folder / "worker.pid").write_text("999999999\n")       # a worker long gone: no guard
    assert _live_worker(folder) is None
