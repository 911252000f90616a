"""Data-parallel trials on CPU with gloo, through the real path: `harness run` on a study with
`resources: {workers: 2}` launches Ray Train's TorchTrainer inside the Tune trial. A 2-worker trial equals
a 1-worker trial with the same global batch; a worker killed mid-trial is restarted and the trial ends
with one child run; a driver SIGKILL followed by --resume loses and duplicates nothing; `harness train`
under torchrun takes the same path. docs/reliability.md describes the faults."""

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import free_port, new_store, pid_alive, wait_for

pytestmark = pytest.mark.slow

# Dropout off (p_drop 0): every rank then computes exactly what one process computes for its micro-batch,
# and the curves differ only by the order in which floating-point sums are taken (the all-reduce). Two
# micro-batches an update (batch_tokens = 2 x max_tokens): each of the two ranks takes one whole.
STUDY = """
study: dp
version: 1
seeds: [0]
max_failures: 1
resources: {workers: WORKERS, cpu: CPU}
base: {preset: cpu_d128}
rows:
  base: {}
  A1: {n_heads: 1}
profiles:
  tiny:
    model: {d_model: 32, d_ff: 64, n_layers: 1, vocab_size: 300, max_len: 128, p_drop: 0.0}
    train: {steps: 20, warmup: 10, max_tokens: 300, batch_tokens: 600, checkpoint_every: 10,
            checkpoint_minutes: 0, log_every: 1, eval_every: 0, bleu_sentences: 4, max_extra: 3}
    data: {train_pairs: 1000, dev_pairs: 8, test_pairs: 8, cache_dir: CACHE}
"""

# fp32 sums in another order, through 20 Adam steps: measured differences are about 1e-6 relative; the
# bound leaves two orders of magnitude and is still far below what one changed batch or setting moves
# (a different seed moves the step-20 loss by about 1e-2).
RTOL = 1e-4


def _study(tmp: Path, workers: int, cpu: float, cache: Path) -> Path:
    path = tmp / "dp.yaml"
    path.write_text(STUDY.replace("WORKERS", str(workers)).replace("CPU", str(cpu)).replace("CACHE", str(cache)))
    return path


def _run(tmp: Path, study: Path, *extra: str, env: dict | None = None, timeout: int = 600):
    env = {**os.environ, "MLFLOW_TRACKING_URI": new_store(tmp),
           "RAY_TRAIN_COLLECTIVE_TIMEOUT_S": "120", **(env or {})}
    return subprocess.run([sys.executable, "-m", "harness", "run", str(study), "--runs-dir", str(tmp / "runs"),
                           "--rows", "base", *extra], cwd=tmp, env=env, capture_output=True, text=True,
                          timeout=timeout)


def _children(tmp: Path):
    from mlflow import MlflowClient
    client = MlflowClient(f"sqlite:///{tmp / 'mlflow.db'}")
    exp = client.get_experiment_by_name("dp")
    runs = client.search_runs([exp.experiment_id])
    return client, [r for r in runs if r.data.tags.get("kind") == "study"], \
        [r for r in runs if r.data.tags.get("kind") == "trial"]


def _curve(tmp: Path) -> dict[int, float]:
    (path,) = (tmp / "runs").glob("*/base-s0/metrics.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return {r["step"]: r["train_loss"] for r in rows if "train_loss" in r}


@pytest.fixture(scope="module")
def one_and_two(tmp_path_factory):
    """The same trial with one worker and with two (each worker 0.9 CPU, so that two workers and the trial's
    own 0.1-CPU driver fit a 2-core machine)."""
    cache = tmp_path_factory.mktemp("cache")
    out = {}
    for workers, cpu in ((1, 1), (2, 0.9)):
        tmp = tmp_path_factory.mktemp(f"w{workers}")
        done = _run(tmp, _study(tmp, workers, cpu, cache))
        assert done.returncode == 0, done.stdout + done.stderr
        out[workers] = tmp
    return out, cache


def test_two_workers_train_the_one_worker_trial(one_and_two):
    runs, _ = one_and_two
    one, two = _curve(runs[1]), _curve(runs[2])
    assert sorted(one) == sorted(two) == list(range(1, 21))
    for step in one:
        assert two[step] == pytest.approx(one[step], rel=RTOL), step
    assert one[20] < one[1] - 0.5                               # it trained: the comparison is not of noise
    (_, parents1, (c1,)), (_, parents2, (c2,)) = _children(runs[1]), _children(runs[2])
    assert c2.data.metrics["dev_ppl"] == pytest.approx(c1.data.metrics["dev_ppl"], rel=RTOL)
    # One update holds the same tokens either way; the two-worker trial says how it ran.
    assert c2.data.metrics["tokens_seen"] == c1.data.metrics["tokens_seen"]
    assert (c1.data.tags["workers"], c1.data.tags["backend"]) == ("1", "none (one process)")
    assert (c2.data.tags["workers"], c2.data.tags["backend"]) == ("2", "gloo")
    assert [p.info.status for p in parents1 + parents2] == ["FINISHED", "FINISHED"]
    assert c1.info.status == c2.info.status == "FINISHED"


def test_a_worker_killed_mid_trial_is_restarted_and_the_trial_has_one_child_run(one_and_two, tmp_path):
    """Rank 1 dies at step 14 (after the checkpoint of step 10): Ray Train restarts the group, every rank
    resumes from step 10, and the trial ends as the uninterrupted two-worker trial did."""
    runs, cache = one_and_two
    done = _run(tmp_path, _study(tmp_path, 2, 0.9, cache), env={"HARNESS_INJECT_FAULT": "crash@base:14/1"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert list((tmp_path / "runs").glob("*/base-s0/.crashed_at_14_rank1"))       # it did die once
    _, parents, children = _children(tmp_path)
    assert len(parents) == 1 and len(children) == 1 and children[0].info.status == "FINISHED"
    (_, _, (ref,)) = _children(runs[2])
    assert children[0].data.metrics["dev_ppl"] == pytest.approx(ref.data.metrics["dev_ppl"], rel=RTOL)
    curve, ref_curve = _curve(tmp_path), _curve(runs[2])
    assert sorted(curve) == list(range(1, 21))                     # steps 11..14 logged once, not twice
    assert all(curve[s] == pytest.approx(ref_curve[s], rel=RTOL) for s in curve)


def test_driver_sigkill_then_resume_loses_and_duplicates_nothing(one_and_two, tmp_path):
    runs, cache = one_and_two
    study = _study(tmp_path, 2, 0.9, cache)
    env = {**os.environ, "MLFLOW_TRACKING_URI": new_store(tmp_path)}
    cmd = [sys.executable, "-m", "harness", "run", str(study), "--runs-dir", str(tmp_path / "runs"), "--rows", "base"]
    # Slow the steps down enough to land the kill between the checkpoint and the end.
    proc = subprocess.Popen(cmd, cwd=tmp_path, env={**env, "HARNESS_INJECT_FAULT": "slow@base:1"},
                            stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    ckpt = lambda: list((tmp_path / "runs").glob("*/base-s0/checkpoints/step_00000010.pt"))  # noqa: E731
    wait_for(lambda: bool(ckpt()), proc, what="the checkpoint of step 10")
    pids = [int(p.read_text()) for p in (tmp_path / "runs").glob("*/base-s0/worker*.pid")]
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=120)
    wait_for(lambda: not any(pid_alive(p) for p in pids), None, timeout=120, what="the workers to exit")
    again = subprocess.run(cmd + ["--resume"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr
    _, parents, children = _children(tmp_path)
    assert len(parents) == 1 and len(children) == 1 and children[0].info.status == "FINISHED"
    assert children[0].data.tags["workers"] == "2"
    (_, _, (ref,)) = _children(runs[2])
    assert children[0].data.metrics["dev_ppl"] == pytest.approx(ref.data.metrics["dev_ppl"], rel=RTOL)
    assert sorted(_curve(tmp_path)) == list(range(1, 21))


def test_harness_train_under_torchrun_equals_one_process(one_and_two, tmp_path):
    """`torchrun --nproc-per-node 2 -m harness train ...`: the same split of each update, the same curve."""
    _, cache = one_and_two
    sets = ["--set", "d_model=32", "--set", "d_ff=64", "--set", "n_layers=1", "--set", "vocab_size=300",
            "--set", "max_len=128", "--set", "p_drop=0.0", "--set", "steps=20", "--set", "warmup=10",
            "--set", "max_tokens=300", "--set", "batch_tokens=600", "--set", "log_every=1",
            "--set", "eval_every=0", "--set", "bleu_sentences=4", "--set", "max_extra=3",
            "--set", "train_pairs=1000", "--set", "dev_pairs=8", "--set", "test_pairs=8",
            "--set", f"cache_dir={cache}", "--set", "checkpoint_every=0", "--set", "checkpoint_minutes=0"]
    common = ["-m", "harness", "train", "--preset", "cpu_d128", "--threads", "1", "--quiet", "--json", *sets]
    one = subprocess.run([sys.executable, *common, "--out", str(tmp_path / "one")], capture_output=True, text=True,
                         timeout=300)
    rdzv = [f"--rdzv-endpoint=127.0.0.1:{free_port()}", "--rdzv-backend=c10d", "--nnodes=1"]   # its own port
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", *rdzv, "--nproc-per-node", "2",
                          *common, "--out", str(tmp_path / "two")], capture_output=True, text=True, timeout=300)
    assert one.returncode == 0 and two.returncode == 0, one.stderr[-2000:] + two.stderr[-2000:]
    a = json.loads(one.stdout.strip().splitlines()[-1])
    b = json.loads(two.stdout.strip().splitlines()[-1])              # rank 0 alone prints
    assert b["dev_ppl"] == pytest.approx(a["dev_ppl"], rel=RTOL) and b["tokens_seen"] == a["tokens_seen"]


def test_a_trial_larger_than_the_cluster_is_one_sentence(tmp_path):
    """Four 1-CPU workers on a 2-core local Ray: refused before any trial starts (Ray itself would wait for
    the placement group forever), no run left behind."""
    done = _run(tmp_path, _study(tmp_path, 4, 1, tmp_path / "cache"), timeout=300)
    err = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "needs 4 workers x 1 CPUs" in err[-1], done.stdout + done.stderr
    _, parents, children = _children(tmp_path)
    assert parents == [] and children == []
