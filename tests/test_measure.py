"""The measurement seam: a measurement defined in this file alone, registered with one call, runs after training
through `harness train` and in a study's Ray trials (HARNESS_MEASUREMENTS names it to the workers), logs its metric
to the run and MLflow, gets a section of the study's report and feeds a claim; the registry's bookkeeping: settings
spelled as train keys, trial hashes left as they were, and reports that load every measurement import no torch."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from harness.cli import main
from harness.errors import UserError
from harness.measure.registry import Measurement, Metric, register, unregister
from tests.helpers import TWO_ROW_STUDY, new_store

ROOT = Path(__file__).resolve().parents[1]


@dataclasses.dataclass(frozen=True)
class ToySettings:
    scale: float = 0.0          # 0: not measured


def _weight_norm(ctx, s: ToySettings) -> dict:
    import torch
    with torch.no_grad():
        norm = torch.sqrt(sum((p.float() ** 2).sum() for p in ctx.model.parameters())).item()
    return {"toy_weight_norm": s.scale * norm, "toy_dev_sentences": len(ctx.dev.src_text)}


def _section(ctx):
    done = ctx.runs[ctx.runs["status"] == "FINISHED"]
    if "metrics.toy_weight_norm" not in done:
        return [], []
    lines = ["## Toy: the weights' norm", "", "| row | norm |", "|---|---|"]
    for row in ctx.rows:
        values = done[done["tags.row"].astype(str) == row]["metrics.toy_weight_norm"].dropna()
        if len(values):
            lines.append(f"| {row} | {values.mean():.3f} |")
    return lines + [""], []


TOY = Measurement("toy", ToySettings, "the weights' L2 norm, times train.toy_scale (tests/test_measure.py)",
                  metrics=(Metric("toy_weight_norm", "", "weights' norm", claim="toy_norm"),),
                  at_end=_weight_norm, section=_section)


def register_toy() -> None:
    """What HARNESS_MEASUREMENTS=tests.test_measure:register_toy calls in every process of a study."""
    register(TOY)


@pytest.fixture
def toy():
    register_toy()
    yield TOY
    unregister("toy")


def test_a_measurement_is_a_train_setting_spelled_by_its_name(toy):
    from harness.overrides import parse_sets
    from harness.train.config import TrainConfig
    cfg = TrainConfig().replace(toy_scale=2.0, steps=5)
    assert cfg.settings_of("toy") == ToySettings(2.0) and cfg.steps == 5
    assert [m.name for m, _ in cfg.active()] == ["toy"]
    assert TrainConfig.from_dict(cfg.to_dict()) == cfg and cfg.to_dict()["toy_scale"] == 2.0
    assert parse_sets(["train.toy_scale=0.5"])["train"] == {"toy_scale": 0.5}
    with pytest.raises(UserError, match="toy_scale"):          # a typo gets its did-you-mean
        parse_sets(["train.toy_scal=0.5"])
    # at its default a measurement is not in the trial's hash: trials resolved before it existed keep theirs
    from harness.trial import hashed_settings
    assert "toy_scale" not in hashed_settings(TrainConfig()) and hashed_settings(cfg)["toy_scale"] == 2.0
    assert TrainConfig().replace(toy_scale=2.0).replace(toy_scale=0.0) == TrainConfig()


def test_registering_refuses_a_taken_name_or_key(toy):
    with pytest.raises(ValueError, match="registered already"):
        register(dataclasses.replace(TOY, doc="another"))
    with pytest.raises(TypeError, match="frozen dataclass"):
        register(dataclasses.replace(TOY, name="loose", settings=dict))


def test_a_toy_measurement_runs_after_harness_train(toy, tmp_path, capsys):
    from tests.helpers import train_small
    metrics, _ = train_small(main, capsys, tmp_path, "transformer", "train.toy_scale=2.0", steps=6)
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["toy_weight_norm"] > 0 and saved["toy_weight_norm"] == metrics["toy_weight_norm"]
    assert saved["toy_dev_sentences"] == 16
    config = json.loads((tmp_path / "run" / "config.json").read_text())
    assert config["train"]["toy_scale"] == 2.0


def test_a_run_without_it_takes_no_toy_measurement(toy, tmp_path, capsys):
    from tests.helpers import train_small
    metrics, _ = train_small(main, capsys, tmp_path, "transformer", steps=6)
    assert "toy_weight_norm" not in metrics


# The shared two-row study (tests/helpers.py) as a study of its own, with no paper table (the rows layout), two
# seeds and the toy measurement taken in every trial.
STUDY = TWO_ROW_STUDY.replace("study: mini", "study: toy").replace("table: table3\n", "").replace(
    "seeds: [0]", "seeds: [0, 1]").replace("max_extra: 3}", "max_extra: 3, toy_scale: 2.0}")


@pytest.mark.slow
def test_a_toy_measurement_is_logged_reported_and_judged_from_a_study(toy, tmp_path, monkeypatch):
    """Through Ray: the workers register the toy from HARNESS_MEASUREMENTS, log its metric to MLflow; the report
    shows its section, and a claim on its metric gets a verdict."""
    study = tmp_path / "toy.yaml"
    study.write_text(STUDY.replace("CACHE", str(tmp_path / "cache")))
    uri = new_store(tmp_path)
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "HARNESS_MEASUREMENTS": "tests.test_measure:register_toy",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "harness", "run", str(study), "--runs-dir", str(tmp_path / "runs"),
                           "--profile", "tiny"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    from mlflow import MlflowClient
    client = MlflowClient(uri)
    trials = [r for r in client.search_runs([client.get_experiment_by_name("toy").experiment_id])
              if r.data.tags.get("kind") == "trial"]
    assert len(trials) == 4 and all(r.data.metrics["toy_weight_norm"] > 0 for r in trials)
    assert all(r.data.params["train.toy_scale"] == "2.0" for r in trials)

    from harness.report import verdicts
    path = tmp_path / "claims.yaml"
    path.write_text(yaml.safe_dump({"version": 1, "claims": [
        {"id": "toy_norm_positive", "study": "toy", "source": "tests/test_measure.py", "text": "Weights have a norm.",
         "metric": "toy_norm", "a": "base", "expect": "above", "target": 0.0}]}))
    monkeypatch.setattr(verdicts, "CLAIMS", path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    verdicts.load_claims.cache_clear()
    try:
        assert main(["report", "--study", "toy", "--out", str(tmp_path / "reports")]) == 0
    finally:
        verdicts.load_claims.cache_clear()
    (md,) = (tmp_path / "reports").rglob("toy.md")
    text = md.read_text()
    assert "## Toy: the weights' norm" in text and "| base |" in text and "| A1 |" in text
    (line,) = [x for x in text.splitlines() if x.startswith("| `toy_norm_positive`")]
    assert "holds" in line


def test_no_measurement_setting_is_named_outside_its_own_module():
    for key, owner in (("heads_sentences", "heads.py"), ("agreement_sentences", "agreement.py")):
        found = [p.relative_to(ROOT).as_posix() for p in (ROOT / "harness").rglob("*.py")
                 if key in p.read_text(encoding="utf-8")]
        assert found == [f"harness/measure/{owner}"], (key, found)


def test_reports_load_every_measurement_without_torch():
    """Rendering a report loads every measurement (their sections and claim metrics) and must not import torch:
    each measurement module imports its evaluation code inside its hooks."""
    code = ("import sys; import harness.report.writers, harness.report.verdicts as c; "
            "from harness.measure.registry import measurements; ms = measurements(); c.metrics(); "
            "assert len(ms) >= 6, ms; assert 'torch' not in sys.modules, 'torch imported'; print('ok')")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "HARNESS_MEASUREMENTS"})
    assert done.stdout.strip() == "ok", done.stderr[-2000:]


def test_a_plugin_that_cannot_load_is_one_sentence(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness", "list", "settings"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, "HARNESS_MEASUREMENTS": "no_such_module_x"})
    assert done.returncode == 2 and "HARNESS_MEASUREMENTS names 'no_such_module_x'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
