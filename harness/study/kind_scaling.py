"""The study kind `scaling` (Table 1): each row is one layer type timed over sequence length n and width d.
Its file's rows are probe settings (harness/probes/scaling_spec.ScalingSpec): base.probe -> row ->
profile.probe; its trial times the layer (harness/probes/scaling.py) and logs each point as it is measured."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from harness.io import atomic_write
from harness.probes.scaling_spec import ScalingSpec, scaling_fields
from harness.study.estimate import Timing
from harness.study.spec import Checker, Selection, Study, StudyFile, load_probe_study
from harness.study.spec import probe_settings as checked_probe_settings
from harness.tracking import TrialRun
from harness.train.dist import SINGLE, Ranks
from harness.trial import Trial

probe_type = ScalingSpec


def probe_settings(chk: Checker, values: dict, where: str) -> dict:
    return checked_probe_settings(chk, values, where, scaling_fields())


def _spec(base: dict, row: dict, profile: dict) -> ScalingSpec:
    spec = ScalingSpec(**{**base, **row, **profile})
    spec.validate()
    return spec


def load(file: StudyFile, sel: Selection) -> Study:
    """A study whose rows are probe settings: base.probe -> row -> profile.probe."""
    return load_probe_study(file, sel, probe_settings, _spec, "scaling")


def print_trials(study: Study, timing: Timing = Timing()) -> None:
    print(f"{'trial':<20}{'hash':<14}{'layer':<16}{'n swept (at d)':<40}{'d swept (at n)':<40}")
    for t in study.trials:
        p = t.probe
        print(f"{t.key:<20}{t.config_hash:<14}{p.layer:<16}{str(list(p.ns)) + ' d=' + str(p.d_fixed):<40}"
              f"{str(list(p.ds)) + ' n=' + str(p.n_fixed):<40}")


def prepare(trials: list[Trial]) -> None:
    """Nothing to prepare: the probe makes its own inputs."""


def estimated_flops(trial: Trial) -> float:
    return 0.0          # the rows are timed, not trained: no order to choose


def summary_columns(metrics: list[dict]) -> list[tuple[str, str]]:
    return [("exp n", "exp_n_fwd"), ("exp n f+b", "exp_n_fwd_bwd"), ("exp d", "exp_d_fwd"),
            ("exp d f+b", "exp_d_fwd_bwd"), ("seq ops", "seq_ops_measured"), ("path", "path_measured_max_n")]


def params(trial: Trial) -> dict:
    return {"probe": {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(trial.probe).items()}}


def run(trial: Trial, out_dir: Path, run: TrialRun, ranks: Ranks = SINGLE) -> tuple[dict, str]:
    """One layer of Table 1: each timed point goes to MLflow as it is measured (step = n or d), then the
    fitted exponents, sequential operations and path lengths; the whole result as scaling.json."""
    from harness.probes.scaling import measure_layer
    out_dir.mkdir(parents=True, exist_ok=True)

    def on_point(row: dict) -> None:
        x = row[row["sweep"]]
        mem = row.get("peak_mem_bytes")
        mem = mem if mem is not None else row.get("largest_fwd_tensor_bytes")
        times = {f"{p}_s_vs_{row['sweep']}": row[f"{p}_s"] for p in ("fwd", "fwd_bwd") if row[f"{p}_s"] is not None}
        run.log_step(x, {**times, **({f"mem_bytes_vs_{row['sweep']}": mem} if mem is not None else {})})

    result = measure_layer(trial.probe, on_point)
    for p in result["path_lengths"]:
        if p["measured"] is not None:
            run.log_step(p["n"], {"path_measured": p["measured"], "path_formula": p["formula"]})
    seq = result["sequential_ops"]
    metrics = {f"exp_{k}": v["slope"] for k, v in result["fits"].items()}
    metrics.update({f"exp_{k}_fixed_cost_dominated": float(v["fixed_cost_dominated"])
                    for k, v in result["fits"].items()})
    metrics.update({f"exp_{k}_points_dropped": v["dropped"] for k, v in result["fits"].items()})
    metrics.update({"seq_ops_measured": seq["measured"], "seq_ops_by_construction": seq["by_construction"],
                    "seq_ops_n": seq["n"], "aten_ops_at_n": seq["aten_ops_at_n"],
                    "torch_threads": result["torch_threads"]})
    last = result["path_lengths"][-1]
    if last["measured"] is not None:
        metrics.update({"path_measured_max_n": last["measured"], "path_formula_max_n": last["formula"],
                        "path_max_n": last["n"]})
    metrics["device"] = result["device"]
    run.log_final(metrics, 0)
    atomic_write(out_dir / "scaling.json", json.dumps(result, indent=2) + "\n")
    run.log_artifacts([out_dir / "scaling.json"])
    summary = f"exponent in n {metrics['exp_n_fwd']:.2f}, in d {metrics['exp_d_fwd']:.2f}"
    return metrics, summary


def smoke(trial: Trial, cache_dir: Path) -> tuple[Trial, dict]:
    """A grid of three tiny points per sweep, one pass, and what its result must show: {metric: (low, high), or
    the name of a metric it equals}."""
    small = dataclasses.replace(trial, probe=dataclasses.replace(
        trial.probe, ns=(8, 16, 32), ds=(8, 16, 32), n_fixed=16, d_fixed=8, batch=1, repeats=1, warmup=0, passes=1,
        path_ns=(5, 6, 7)))
    return small, {"exp_n_fwd": (-math.inf, math.inf), "seq_ops_measured": (1, math.inf),
                   "path_measured_max_n": "path_formula_max_n"}
