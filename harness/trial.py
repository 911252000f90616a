"""One row of a study: data -> model -> train -> evaluate -> log. Runs inside a Ray Tune trial (or, data
parallel, in each Ray Train worker of one), but knows nothing of Ray: it takes the resolved trial, where
to log and which rank it is, and returns its final metrics. Rank 0 alone opens the trial's child run."""

from __future__ import annotations

import hashlib
import json
import os
import time
import traceback
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import torch

from model import ModelConfig, config_from_dict, with_settings

from harness import system
from harness.errors import HarnessWarning
from harness.data.corpus import DataConfig
from harness.io import atomic_write
from harness.tracking import RUN_POINTER, TrialRun, flatten
from harness.train import TrainConfig, train
from harness.train.dist import SINGLE, Ranks


# Settings added after studies had run: (part, name, default).
_ADDED_LATER = (("data", "target", "de"), ("train", "bleu_moses", "2025"), ("data", "lexicon_seed", 0),
                ("model", "word_positions", False), ("data", "parse_tags", False),
                ("data", "parse_subtrees", 0), ("model", "family", "transformer"))


def trial_key(row: str, seed: int) -> str:
    """A trial's name everywhere: its run directory, its MLflow child run, Ray's trial name (e.g. base-s0)."""
    return f"{row}-s{seed}"


def spec_key(spec: dict) -> str:
    """trial_key of a Trial as the dict Ray carries (`Trial.__dict__`)."""
    return trial_key(spec["row"], spec["seed"])


@dataclass(frozen=True)
class Trial:
    """One row x seed of a study, resolved: the model, train and data settings it runs with (or, for a
    scaling row, the probe's settings). Built by harness/study/spec.py; its key and config hash are what
    MLflow records and --resume matches."""
    row: str
    seed: int
    model: dict
    train: dict
    data: dict
    kind: str = "train"
    probe: dict = field(default_factory=dict)    # kind scaling: a ScalingSpec as a dict

    @property
    def key(self) -> str:
        return trial_key(self.row, self.seed)

    @property
    def config_hash(self) -> str:
        config = {"model": self.model, "train": self.train, "data": self.data}
        for part, name, default in _ADDED_LATER:   # at their defaults, trials hash as before (--resume finds them)
            if config[part].get(name, default) == default:
                config[part] = {k: v for k, v in config[part].items() if k != name}
        if self.kind != "train":
            config = {"kind": self.kind, "probe": self.probe, "seed": self.seed}
        blob = json.dumps(config, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def configs(self) -> tuple[ModelConfig, TrainConfig, DataConfig]:
        return config_from_dict(self.model), TrainConfig(**self.train), DataConfig(**self.data)


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


def run_trial(spec: dict, ctx: dict, ranks: Ranks = SINGLE) -> dict:
    """spec: a Trial as a dict. ctx: tracking URI, experiment and parent ids, run directory, threads, tags.
    ranks: this process among the trial's data-parallel workers; ranks other than 0 train and return {}."""
    t_start, started_at = time.perf_counter(), time.time()
    trial = Trial(**spec)
    torch.set_num_threads(max(1, int(ctx["threads"])))
    out_dir = Path(ctx["run_dir"]) / trial.key
    out_dir.mkdir(parents=True, exist_ok=True)
    pid_file = "worker.pid" if ranks.is_main else f"worker.rank{ranks.rank}.pid"
    atomic_write(out_dir / pid_file, f"{os.getpid()}\n")     # which process to look at (or kill, in tests)
    if not ranks.is_main:
        _training_trial(trial, out_dir, None, ranks)
        return {}
    tags = {**ctx["tags"], "row": trial.row, "seed": trial.seed, "config_hash": trial.config_hash,
            "trial_kind": trial.kind, "workers": ranks.world, "backend": ranks.backend or "none (one process)",
            "hardware": system.hardware(), **system.versions()}   # this worker's own: a cluster's nodes may differ
    params_of, body = KINDS[trial.kind]
    run = TrialRun(ctx["uri"], ctx["experiment_id"], ctx["parent_id"], trial.key, tags, flatten(params_of(trial)))
    # Where this trial's child run is, so that `python -m harness evaluate RUN_DIR` can log to it later
    atomic_write(out_dir / RUN_POINTER, json.dumps({"tracking_uri": ctx["uri"], "run_id": run.run_id,
                                                    "experiment_id": ctx["experiment_id"]}) + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            metrics, summary = body(trial, out_dir, run, ranks)
        except BaseException as err:  # record why in MLflow, then let Tune retry or fail the trial
            reason = f"{type(err).__name__}: {err}"
            try:
                _record_warnings(run, out_dir, caught)
                run.finish("FAILED", reason + "\n" + traceback.format_exc(limit=5))
            except Exception:         # the store itself is what failed: nothing more can be recorded there
                pass
            raise
    said = _record_warnings(run, out_dir, caught)
    run.finish("FINISHED")
    wall = time.perf_counter() - t_start
    return {**{k: v for k, v in metrics.items() if isinstance(v, (int, float, str))},
            "summary": summary, "warnings": "\n".join(said), "trial_seconds": wall, "mlflow_seconds": run.seconds,
            "run_id": run.run_id,
            "started_at": started_at, "ended_at": time.time()}


# Library housekeeping (deprecations), not a sign that this run went differently from what it was asked.
_HOUSEKEEPING = (DeprecationWarning, PendingDeprecationWarning, FutureWarning, ImportWarning)


def _record_warnings(run: TrialRun, out_dir: Path, caught: list) -> list[str]:
    """The warnings raised inside a trial (Ray keeps a worker's stderr from the driver), each once: in the
    child run as the tag `warnings` (their count) and the artifact warnings.txt, and returned for the
    driver to print, one line each."""
    said = list(dict.fromkeys(f"{w.category.__name__}: {w.message}" for w in caught
                              if not issubclass(w.category, _HOUSEKEEPING)))
    if said:
        path = atomic_write(out_dir / "warnings.txt", "\n".join(said) + "\n")
        run.client.set_tag(run.run_id, "warnings", str(len(said)))
        run.log_artifacts([path])
    return said


FAULT_ENV = "HARNESS_INJECT_FAULT"


def injected_fault(row: str, rank: int = 0) -> tuple[str, int] | None:
    """Fault injection for the reliability tests (docs/reliability.md): HARNESS_INJECT_FAULT="KIND@ROW:STEP"
    with KIND nan (the loss of that step becomes NaN), oom (an out-of-memory error at that step), crash
    (the worker process dies at that step, once: a retry gets past it) or slow (every step from that one
    on takes 0.25 s longer, so that a test can act mid-trial) or warn (a HarnessWarning
    at that step, as a degraded fast path raises one), on rank 0, or on another rank of a
    data-parallel trial with "KIND@ROW:STEP/RANK". Several faults: comma-separated."""
    for item in filter(None, os.environ.get(FAULT_ENV, "").split(",")):
        try:
            kind, rest = item.split("@", 1)
            where, at = rest.rsplit(":", 1)
            step, _, on_rank = at.partition("/")
            if where == row and kind in ("nan", "oom", "crash", "slow", "warn") and int(on_rank or 0) == rank:
                return kind, int(step)
        except ValueError:
            raise ValueError(f"{FAULT_ENV}={item!r} is not KIND@ROW:STEP[/RANK] (KIND nan, oom, crash, slow or warn)") from None
    return None


def fault_hook(fault: tuple[str, int] | None, out: Path, rank: int = 0) -> tuple:
    """The training hooks that inject `fault` (kind, step), or none: nan makes that step's loss NaN, oom
    raises an out-of-memory error, crash ends the worker process once (a marker file lets a retry pass)."""
    if fault is None:
        return ()
    kind, at = fault

    def inject(step: int, loss_sum: torch.Tensor) -> torch.Tensor:
        if kind == "slow" and step >= at:
            time.sleep(0.25)
        if step != at:
            return loss_sum
        if kind == "nan":
            return loss_sum * float("nan")
        if kind == "warn":
            warnings.warn(HarnessWarning(f"injected warning at step {step}"), stacklevel=2)
        if kind == "oom":
            raise torch.OutOfMemoryError(f"CUDA out of memory (injected at step {step})")
        marker = out / (f".crashed_at_{step}" + (f"_rank{rank}" if rank else ""))
        if kind == "crash" and not marker.exists():
            marker.touch()
            os._exit(17)                 # the worker dies without cleanup, as a killed process does
        return loss_sum
    return (inject,)


def _training_trial(trial: Trial, out_dir: Path, run: TrialRun | None, ranks: Ranks = SINGLE) -> tuple[dict, str]:
    """Train and evaluate the row, log the final metrics and artifacts (run None: a rank other than 0, which
    only trains)."""
    model_cfg, train_cfg, data_cfg = trial.configs()
    hooks = fault_hook(injected_fault(trial.row, ranks.rank), out_dir, ranks.rank)
    if run is None:
        train(model_cfg, train_cfg, data_cfg, out_dir, quiet=True, hooks=hooks, ranks=ranks)
        return {}, ""
    if run.reopened:     # rows an earlier attempt wrote while the store was unreachable
        run.backfill(out_dir / "metrics.jsonl")
    metrics = train(model_cfg, train_cfg, data_cfg, out_dir, quiet=True, on_log=run.log_step, hooks=hooks,
                    ranks=ranks)
    # Training FLOPs, counted analytically (harness/probes/flops.py; agrees with fvcore and torch's counter)
    # for sentences of the corpus's mean lengths: per target token, and for the whole run.
    from harness.probes.flops import training_flops_per_target_token
    per_token = training_flops_per_target_token(with_settings(model_cfg, vocab_size=metrics["vocab_size"]),
                                                max(1, round(metrics["mean_src_len"])),
                                                max(1, round(metrics["mean_tgt_len"])))
    metrics.update({"flops_per_target_token": per_token, "train_flops": per_token * metrics["tokens_seen"]})
    # The yardstick for Table 2's cost column computed the paper's way (time x devices x a sustained rate):
    # this device's own large-matmul rate, in the dtype training ran in, with the trial's threads.
    from harness.probes.peak import matmul_peak
    device = torch.device(metrics["device"])
    dtype = torch.bfloat16 if device.type == "cuda" and train_cfg.amp else torch.float32
    metrics["device_matmul_tflops"] = matmul_peak(device, dtype)
    run.log_final(metrics, metrics["steps"])
    curve = loss_curve_png(out_dir / "metrics.jsonl", out_dir / "loss_curve.png", f"{trial.key} training loss")
    run.log_artifacts([out_dir / "config.json", out_dir / "dev_translations.txt", out_dir / "metrics.jsonl",
                       *([curve] if curve else [])])
    if "dev_f1" in metrics:
        summary = f"dev PPL {metrics['dev_ppl']:.2f}, F1 {metrics['dev_f1']:.2f}"
    else:
        summary = f"dev PPL {metrics['dev_ppl']:.2f}, BLEU {metrics.get('dev_bleu', float('nan')):.2f}"
    return metrics, summary


def _scaling_trial(trial: Trial, out_dir: Path, run: TrialRun, ranks: Ranks = SINGLE) -> tuple[dict, str]:
    """One layer of Table 1: each timed point goes to MLflow as it is measured (step = n or d), then the
    fitted exponents, sequential operations and path lengths; the whole result as scaling.json."""
    from harness.probes.scaling import ScalingSpec, measure_layer
    out_dir.mkdir(parents=True, exist_ok=True)

    def on_point(row: dict) -> None:
        x = row[row["sweep"]]
        mem = row.get("peak_mem_bytes") if row.get("peak_mem_bytes") is not None else row.get("largest_fwd_tensor_bytes")
        run.log_step(x, {f"fwd_s_vs_{row['sweep']}": row["fwd_s"], f"fwd_bwd_s_vs_{row['sweep']}": row["fwd_bwd_s"],
                         **({f"mem_bytes_vs_{row['sweep']}": mem} if mem is not None else {})})

    result = measure_layer(ScalingSpec(**trial.probe), on_point)
    for p in result["path_lengths"]:
        if p["measured"] is not None:
            run.log_step(p["n"], {"path_measured": p["measured"], "path_formula": p["formula"]})
    seq = result["sequential_ops"]
    metrics = {f"exp_{k}": v["slope"] for k, v in result["fits"].items()}
    metrics.update({f"exp_{k}_fixed_cost_dominated": float(v["fixed_cost_dominated"]) for k, v in result["fits"].items()})
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


# What a trial of each study kind logs as its params and runs as its body (the study file's side of a kind
# is harness/study/spec.py's LOADERS, the runner's harness/study/kinds.py).
KINDS = {"train": (lambda t: {"model": t.model, "train": t.train, "data": t.data}, _training_trial),
         "scaling": (lambda t: {"probe": t.probe}, _scaling_trial)}
