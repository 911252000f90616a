"""The study kind `statement`: each row measures one of the paper's statements in its text (§3.2.1, §3.2.2, §3.5,
§4) that no table prints. Its file's rows are probe settings (harness/probes/statement_spec.StatementSpec): base.probe
-> row -> profile.probe; its trial measures (harness/probes/statements.py) and logs each point as it is measured.
A trial's seed is a repeat of the whole measurement (and seeds a learned table's initialization)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

from harness.io import atomic_write
from harness.probes.statement_spec import METRICS, StatementSpec, statement_fields
from harness.study.estimate import Timing
from harness.study.spec import Checker, Selection, Study, StudyFile, load_probe_study
from harness.study.spec import probe_settings as checked_probe_settings
from harness.tracking import TrialRun
from harness.train.dist import SINGLE, Ranks
from harness.trial import Trial

probe_type = StatementSpec


def probe_settings(chk: Checker, values: dict, where: str) -> dict:
    return checked_probe_settings(chk, values, where, statement_fields())


def _spec(base: dict, row: dict, profile: dict) -> StatementSpec:
    spec = StatementSpec(**{**base, **row, **profile})
    spec.validate()
    return spec


def load(file: StudyFile, sel: Selection) -> Study:
    """A study whose rows are statements measured: base.probe -> row -> profile.probe."""
    return load_probe_study(file, sel, probe_settings, _spec, "statement")


def describe(spec: StatementSpec) -> str:
    """One line: what the row measures, at which shape."""
    if spec.measure == "crossover":
        return f"self-attention vs {spec.recurrent} at d {spec.d}, n = d x {list(spec.factors)}, batch {spec.batch}"
    if spec.measure == "multi_head":
        return f"{spec.heads} heads vs 1 at d_model {spec.d_model}, n {spec.n}, batch {spec.batch}"
    if spec.measure == "dot_vs_additive":
        return f"{spec.score} scores at d_k {list(spec.d_ks)}, d_model {spec.d_model}, h {spec.heads}, n {spec.n}"
    if spec.measure == "conv_cost":
        return f"conv, separable vs {spec.recurrent} at k {list(spec.ks)}, d {spec.d}, n {spec.n}, batch {spec.batch}"
    return f"{spec.embedding} table, d {spec.d}, {spec.positions} positions, k = 1..{spec.max_offset}"


def print_trials(study: Study, timing: Timing = Timing()) -> None:
    print(f"{'trial':<28}{'hash':<14}{'measure':<17}what")
    for t in study.trials:
        print(f"{t.key:<28}{t.config_hash:<14}{t.probe.measure:<17}{describe(t.probe)}")


def prepare(trials: list[Trial]) -> None:
    """Nothing to prepare: the probe makes its own inputs."""


def estimated_flops(trial: Trial) -> float:
    return 0.0          # measured, not trained: no order to choose


# Ten characters a column: each measure's headline figure (the report has the rest).
SUMMARY = (("log2 FLOPs", "crossover_flops"), ("log2 time", "crossover_time"), ("FLOPs h/1", "mh_flops_ratio"),
           ("time h/1", "mh_time_ratio"), ("attn ms", "attn_ms"), ("residual", "offset_residual"),
           ("conv k^x", "conv_k_exp_time"))


def summary_columns(metrics: list[dict]) -> list[tuple[str, str]]:
    present = {k for m in metrics for k in m}
    return [(head, name) for head, name in SUMMARY if name in present]


def params(trial: Trial) -> dict:
    return {"probe": {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(trial.probe).items()}}


def _step_of(point: dict) -> int:
    """The MLflow step a point is logged at: n (crossover), heads, d_k, the offset k or the kernel width k."""
    for key in ("n", "heads", "d_k", "k"):
        if key in point:
            return int(point[key])
    return 0


def run(trial: Trial, out_dir: Path, run: TrialRun, ranks: Ranks = SINGLE) -> tuple[dict, str]:
    """One statement: each point to MLflow as it is measured, then the final metrics (those NaN are left out: a
    crossing the grid cannot place); the whole result as statement.json."""
    from harness.probes.statements import measure
    out_dir.mkdir(parents=True, exist_ok=True)

    def on_point(point: dict) -> None:
        run.log_step(_step_of(point), {k: float(v) for k, v in point.items()
                                       if isinstance(v, (int, float)) and k not in ("n", "heads", "d_k", "k", "d")})

    result = measure(trial.probe, trial.seed, on_point)
    metrics = {k: v for k, v in result["metrics"].items() if not (isinstance(v, float) and math.isnan(v))}
    metrics.update({"device": result["device"], "torch_threads": result["threads"]})
    run.log_final(metrics, 0)
    atomic_write(out_dir / "statement.json", json.dumps(result, indent=2) + "\n")
    run.log_artifacts([out_dir / "statement.json"])
    shown = [f"{k} {v:.3g}" for k, v in metrics.items() if k in METRICS[trial.probe.measure]]
    return metrics, ", ".join(shown) or "no crossing within the grid"


def smoke(trial: Trial, cache_dir: Path) -> tuple[Trial, dict]:
    """The measurement at its smallest, one repeat, and what its result must show: {metric: (low, high), or the
    name of a metric it equals}."""
    p = trial.probe
    small = dataclasses.replace(p, d=min(p.d, 16), factors=(0.5, 1.0, 2.0), d_model=min(p.d_model, 16),
                                heads=min(p.heads, 2), n=4, d_ks=(4,), batch=2, positions=64, max_offset=3,
                                ks=(2, 3, 5), repeats=1, warmup=0)
    expect = {"crossover": {"crossover_n_flops": (1, math.inf)},
              "multi_head": {"mh_flops_ratio": (0.5, 2.0), "mh_time_ratio": (0, math.inf)},
              "dot_vs_additive": {"attn_ms": (0, math.inf), "attn_mem_bytes": (1, math.inf)},
              "offset": {"offset_residual": (0, math.inf)},
              "conv_cost": {"conv_k_exp_flops": (0.9, 1.1), "conv_k_exp_time": (-math.inf, math.inf)}}[p.measure]
    return dataclasses.replace(trial, probe=small), expect
