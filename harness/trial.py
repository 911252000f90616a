"""One row of a study: data -> model -> train -> evaluate -> log. Runs inside a Ray Tune trial, but knows
nothing of Ray: it takes the resolved trial and where to log, and returns its final metrics."""

from __future__ import annotations

import json
import time
import traceback
from pathlib import Path

import torch

from .studyspec import Trial
from .tracking import TrialRun, flatten
from .train import train


def loss_curve_png(metrics_jsonl: Path, out: Path, title: str) -> Path | None:
    rows = [json.loads(line) for line in metrics_jsonl.read_text().splitlines() if line.strip()] \
        if metrics_jsonl.exists() else []
    points = [(r["step"], r["train_loss"]) for r in rows if "train_loss" in r]
    if not points:
        return None
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(*zip(*sorted(dict(points).items())))
    ax.set(xlabel="step", ylabel="training loss (label-smoothed)", title=title)
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


def run_trial(spec: dict, ctx: dict) -> dict:
    """spec: a Trial as a dict. ctx: tracking URI, experiment and parent ids, run directory, threads, tags."""
    t_start, started_at = time.perf_counter(), time.time()
    trial = Trial(**spec)
    torch.set_num_threads(max(1, int(ctx["threads"])))
    out_dir = Path(ctx["run_dir"]) / trial.key
    tags = {**ctx["tags"], "row": trial.row, "seed": trial.seed, "config_hash": trial.config_hash}
    run = TrialRun(ctx["uri"], ctx["experiment_id"], ctx["parent_id"], trial.key, tags,
                   flatten({"model": trial.model, "train": trial.train, "data": trial.data}))
    model_cfg, train_cfg, data_cfg = trial.configs()
    try:
        metrics = train(model_cfg, train_cfg, data_cfg, out_dir, quiet=True, on_log=run.log_step)
    except BaseException as err:  # record why in MLflow, then let Tune retry or fail the trial
        reason = f"{type(err).__name__}: {err}"
        run.finish("FAILED", reason + "\n" + traceback.format_exc(limit=5))
        raise
    # Training FLOPs, counted analytically (harness/probes/flops.py; agrees with fvcore and torch's counter)
    # for sentences of the corpus's mean lengths: per target token, and for the whole run.
    from .probes.flops import count_analytic
    per_token = count_analytic(model_cfg.replace(vocab_size=metrics["vocab_size"]), 1,
                               max(1, round(metrics["mean_src_len"])),
                               max(1, round(metrics["mean_tgt_len"])))["flops_per_target_token"]
    metrics.update({"flops_per_target_token": per_token, "train_flops": per_token * metrics["tokens_seen"]})
    run.log_final(metrics, metrics["steps"])
    curve = loss_curve_png(out_dir / "metrics.jsonl", out_dir / "loss_curve.png", f"{trial.key} training loss")
    run.log_artifacts([out_dir / "config.json", out_dir / "dev_translations.txt", out_dir / "metrics.jsonl",
                       *([curve] if curve else [])])
    run.finish("FINISHED")
    wall = time.perf_counter() - t_start
    return {**{k: v for k, v in metrics.items() if isinstance(v, (int, float, str))},
            "trial_seconds": wall, "mlflow_seconds": run.seconds, "run_id": run.run_id,
            "started_at": started_at, "ended_at": time.time()}
