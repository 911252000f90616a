"""MLflow's UI in a real browser: a small finished study and its report in a store, `mlflow server` on
127.0.0.1, and headless Chromium (Debian's `chromium`, which .ci/run installs) loading the experiment's runs
table and the parent run's page. The assertions read the DOM Chromium rendered; the screenshots are saved
under runs/browser-test/ (or $HARNESS_TEST_OUTPUT) for a person to look at."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import TWO_ROW_STUDY, new_store, start_mlflow_server, stop_server

pytestmark = pytest.mark.slow

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
OUTPUT = Path(os.environ.get("HARNESS_TEST_OUTPUT", Path(__file__).resolve().parents[1] / "runs" / "browser-test"))


def _chromium(url: str, screenshot: Path, profile: Path) -> str:
    """The DOM after the page's scripts ran (a virtual-time budget lets the single-page app fetch and render),
    and a screenshot of the same page."""
    common = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
              "--hide-scrollbars", f"--user-data-dir={profile}", "--window-size=1600,1100",
              "--virtual-time-budget=20000", "--run-all-compositor-stages-before-draw"]
    dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=180)
    assert dom.returncode == 0, dom.stderr[-2000:]
    shot = subprocess.run([*common, f"--screenshot={screenshot}", url], capture_output=True, text=True, timeout=180)
    assert shot.returncode == 0 and screenshot.stat().st_size > 10_000, shot.stderr[-2000:]
    return dom.stdout


@pytest.fixture(scope="module")
def served_study(tmp_path_factory):
    if CHROMIUM is None:
        pytest.skip("headless Chromium is not installed (Debian: apt-get install chromium; .ci/run installs it)")
    tmp = tmp_path_factory.mktemp("ui")
    uri = new_store(tmp)
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    study = tmp / "mini.yaml"
    study.write_text(TWO_ROW_STUDY.replace("CACHE", str(tmp / "cache")).replace("study: mini", "study: table3"))
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(study), "--runs-dir", str(tmp / "runs"),
                           "--quiet"], cwd=tmp, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    view = re.search(r"http://127\.0\.0\.1:5000/(#/\S+)", done.stdout)
    assert view, done.stdout                                          # the link the study prints at its end
    rep = subprocess.run([sys.executable, "-m", "harness", "report", "--out", str(tmp / "reports")], cwd=tmp,
                         env=env, capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stdout + rep.stderr
    from mlflow import MlflowClient
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("table3")
    parent = client.search_runs([exp.experiment_id], "tags.kind = 'study'")[0]
    server, base = start_mlflow_server(tmp, uri)
    try:
        OUTPUT.mkdir(parents=True, exist_ok=True)
        yield base, exp.experiment_id, parent, (tmp / "reports" / "table3.md").read_text(encoding="utf-8"), tmp, \
            view.group(1), client
    finally:
        stop_server(server)


# A fresh browser opens MLflow 3.17 in its GenAI view whatever the experiment's tags say (the GenAI / Model
# training switch lives in the browser's storage); the URL parameter workflowType=machine_learning selects
# the model-training view, and it is the link the runner prints.
ML = "workflowType=machine_learning"


def test_the_experiment_opens_on_its_runs_table(served_study):
    base, exp_id, parent, _, tmp, _, _ = served_study
    dom = _chromium(f"{base}/#/experiments/{exp_id}?{ML}", OUTPUT / "experiment.png", tmp / "chrome1")
    (OUTPUT / "experiment.html").write_text(dom, encoding="utf-8")
    assert parent.info.run_name in dom                                # the study's parent run, in the table
    assert "Run Name" in dom and "matching runs" in dom               # the runs table, not the traces overview
    assert "No data available" not in dom


def test_the_parent_run_page_shows_the_report(served_study):
    base, exp_id, parent, report, tmp, _, _ = served_study
    dom = _chromium(f"{base}/#/experiments/{exp_id}/runs/{parent.info.run_id}?{ML}", OUTPUT / "parent_run.png",
                    tmp / "chrome2")
    (OUTPUT / "parent_run.html").write_text(dom, encoding="utf-8")
    title = report.splitlines()[0].lstrip("# ").split(":")[0]
    assert "Description" in dom and title in dom                      # the description is the report
    assert "Provenance" in dom and "Claims" in dom
    for row in ("base", "A1"):                                         # the study's rows, in the report's table
        assert f"<strong>{row}</strong>" in dom, row
    assert "wall_seconds" in dom                                      # and the parent's own metrics, by value
    assert str(parent.data.metrics["wall_seconds"]) in dom
    for row in ("base", "A1"):                                         # each row's key figure, on the parent
        assert f"{row}/dev_ppl" in dom and str(parent.data.metrics[f"{row}/dev_ppl"]) in dom, row


def test_the_printed_link_lands_on_every_row_of_the_study_with_its_metrics_without_a_click(served_study):
    """The link a study prints (a view it saved in MLflow) opens the runs table grouped by the study's rows
    (MLflow's run grouping, averaging each metric over a row's seeds): every row is a group, open, with its
    trials and their key metrics as columns, without a click. The parent run is the one run without a row,
    in the "Additional runs" group."""
    base, _, parent, _, tmp, view, client = served_study
    dom = _chromium(f"{base}/{view}", OUTPUT / "runs_table.png", tmp / "chrome3")
    (OUTPUT / "runs_table.html").write_text(dom, encoding="utf-8")
    assert "viewing a shared view" in dom and "Additional runs" in dom
    for column in ("dev_ppl", "dev_bleu", "dev_bleu_tok", "params"):
        assert f">{column}<" in dom, column                          # a column header of the runs table
    children = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert sorted(r.data.tags["row"] for r in children) == ["A1", "base"]
    for run in children:
        row, ppl = run.data.tags["row"], run.data.metrics["dev_ppl"]
        assert f">Group: {row}<" in dom, row                           # the row's group ...
        assert f">{ppl} <" in dom or f">{ppl}<" in dom, (row, ppl)   # ... with its dev PPL (one seed: the mean)
        assert f">{run.info.run_name}<" in dom, row                    # and its trial, shown without a click
