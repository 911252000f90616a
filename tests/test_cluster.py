"""A real two-node Ray cluster on this machine: `ray start --head` on 127.0.0.1 and a second node joined with
`ray start --address`, each with one CPU and a custom resource naming it. A two-row study run with
`--address` places its two 1-CPU trials at once, so one of them must run on the second node; each trial
ends with one finished child run, which records the node it ran on. Afterwards nothing of the cluster is
left running (the test stops its own processes, found by its own temp directory, and no other Ray).
Ray 2.59+ authenticates local clusters with a token; every process here (both nodes, the driver) is given
the same one, as the nodes of a real cluster are (README, "On a Ray cluster")."""

import json
import os
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.helpers import TWO_ROW_STUDY, free_port, new_store, pid_alive, wait_for

pytestmark = pytest.mark.slow

RAY = str(Path(sys.executable).with_name("ray"))


def _cluster_pids(temp_dir: str) -> list[int]:
    """Processes whose command line names this cluster's temp directory (GCS, raylets, their helpers)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if temp_dir.encode() in (proc / "cmdline").read_bytes():
                    pids.append(int(proc.name))
            except OSError:
                continue
    return pids


@pytest.fixture
def two_nodes():
    temp_dir = tempfile.mkdtemp(prefix="rc", dir="/tmp")      # short: Ray's socket paths have a length limit
    port = free_port()
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32)}
    common = ["--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--disable-usage-stats"]
    head = subprocess.run([RAY, "start", "--head", "--port", str(port), "--temp-dir", temp_dir,
                           "--include-dashboard", "false", "--resources", json.dumps({"head_node": 1}), *common],
                          env=env, capture_output=True, text=True, timeout=180)
    try:
        assert head.returncode == 0, head.stdout + head.stderr
        second = subprocess.run([RAY, "start", "--address", f"127.0.0.1:{port}",
                                 "--resources", json.dumps({"second_node": 1}), *common],
                                env=env, capture_output=True, text=True, timeout=180)
        assert second.returncode == 0, second.stdout + second.stderr
        nodes = subprocess.run([sys.executable, "-c", (
            "import json, ray; ray.init(address=%r, logging_level='ERROR'); "
            "print(json.dumps({n['NodeID']: sorted(n['Resources']) for n in ray.nodes() if n['Alive']}))")
            % f"127.0.0.1:{port}"], env=env, capture_output=True, text=True, timeout=120)
        assert nodes.returncode == 0, nodes.stderr
        yield f"127.0.0.1:{port}", json.loads(nodes.stdout.strip().splitlines()[-1]), env
    finally:
        # SIGTERM as `ray stop` sends it, then SIGKILL for whatever of this cluster is still up after 20 s
        # (some of Ray's helper processes outlive their raylet); only this test's processes are touched.
        for sig, grace in ((15, 20), (9, 60)):
            for pid in _cluster_pids(temp_dir):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass
            deadline = time.monotonic() + grace
            while _cluster_pids(temp_dir) and time.monotonic() < deadline:
                time.sleep(0.5)
    assert not _cluster_pids(temp_dir), "processes of the test's cluster are still running"


def test_a_study_on_a_two_node_cluster_places_a_trial_on_the_second_node(two_nodes, tmp_path):
    from mlflow import MlflowClient
    address, nodes, env = two_nodes
    assert len(nodes) == 2
    (second,) = [node for node, resources in nodes.items() if "second_node" in resources]
    study = tmp_path / "mini.yaml"
    study.write_text(TWO_ROW_STUDY.replace("CACHE", str(tmp_path / "cache")))
    uri = new_store(tmp_path)
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(study), "--address", address,
                           "--runs-dir", str(tmp_path / "runs")], cwd=tmp_path,
                          env={**env, "MLFLOW_TRACKING_URI": uri}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name("mini").experiment_id])
    children = [r for r in runs if r.data.tags.get("kind") == "trial"]
    assert sorted(r.data.tags["trial_key"] for r in children) == ["A1-s0", "base-s0"]      # one run each
    assert all(r.info.status == "FINISHED" for r in children)
    placed = {r.data.tags["trial_key"]: r.data.tags["ray_node"] for r in children}
    assert set(placed.values()) <= set(nodes) and second in placed.values(), (placed, nodes)
    # The trials' worker processes were the cluster's, and none outlives the study's driver.
    pids = [int(p.read_text()) for p in (tmp_path / "runs").glob("*/*/worker.pid")]
    assert len(pids) == 2
    wait_for(lambda: not any(pid_alive(p) for p in pids), None, timeout=60, what="the trial workers to exit")
