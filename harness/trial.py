"""One row of a study: data -> model -> train -> evaluate -> log. Runs inside a Ray Tune trial (or, data
parallel, in each Ray Train worker of one), but knows nothing of Ray or of study kinds: it takes the resolved
trial, where to log, what its kind runs and which rank it is, and returns its final metrics. Rank 0 alone
opens the trial's child run. The kinds (a training row, a Table 1 probe row) are harness/study/kinds.py's."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

import torch

from harness import system
from harness.data.corpus import DataConfig
from harness.errors import HarnessWarning
from harness.io import atomic_write
from harness.tracking import RUN_POINTER, TrialRun, flatten
from harness.train import TrainConfig
from harness.train.dist import SINGLE, Ranks
from model import ModelConfig, config_from_dict, to_dict


def trial_key(row: str, seed: int) -> str:
    """A trial's name everywhere: its run directory, its MLflow child run, Ray's trial name (e.g. base-s0)."""
    return f"{row}-s{seed}"


def spec_key(spec: dict) -> str:
    """trial_key of a Trial as the dict Ray carries (`Trial.to_dict`)."""
    return trial_key(spec["row"], spec["seed"])


def hashed_settings(cfg) -> dict:
    """A config's settings as its trial's hash sees them: every field, except that a field its class declares
    in `ADDED_LATER` (added after studies had run with it unset) is left out while it holds its default, so
    that those studies' trials keep their hashes and `--resume` still finds them. The same for a probe spec
    (harness/probes/*_spec.py): a field added to one later goes into an `ADDED_LATER` declared on its class."""
    if hasattr(cfg, "later_defaults"):     # TrainConfig: its measurements' settings count as added later too
        later = cfg.later_defaults()
    else:
        later = {f.name: f.default for f in dataclasses.fields(cfg) if f.name in getattr(type(cfg), "ADDED_LATER", ())}
    return {k: v for k, v in to_dict(cfg).items() if not (k in later and v == later[k])}


@dataclass(frozen=True)
class Trial:
    """One row x seed of a study, resolved (harness/study/kinds.py reads it from the study file): the model,
    train and data configs a training row runs with, or a probe row's settings (a frozen dataclass of its
    kind, e.g. harness/probes/scaling_spec.ScalingSpec). Its key and config hash are what MLflow records and
    --resume matches. It becomes plain data only at the Ray boundary (`to_dict`, `from_dict`)."""
    row: str
    seed: int
    model: ModelConfig | None = None
    train: TrainConfig | None = None
    data: DataConfig | None = None
    kind: str = "train"
    probe: Any = None

    @property
    def key(self) -> str:
        return trial_key(self.row, self.seed)

    @property
    def config_hash(self) -> str:
        if self.probe is not None:
            config = {"kind": self.kind, "probe": hashed_settings(self.probe), "seed": self.seed}
        else:
            config = {part: hashed_settings(getattr(self, part)) for part in ("model", "train", "data")}
        blob = json.dumps(config, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def to_dict(self) -> dict:
        """The trial as plain data, for Ray's param_space (and back with `from_dict`)."""
        return {"row": self.row, "seed": self.seed, "kind": self.kind,
                "model": to_dict(self.model) if self.model is not None else None,
                **{part: to_dict(getattr(self, part)) if getattr(self, part) is not None else None
                   for part in ("train", "data", "probe")}}

    @classmethod
    def from_dict(cls, spec: dict, probe_type: type | None = None) -> "Trial":
        """`to_dict`'s inverse; probe_type: the settings class of the trial's kind, where it has one."""
        def listed(value):
            return tuple(value) if isinstance(value, list) else value
        probe = spec.get("probe")
        return cls(spec["row"], spec["seed"], kind=spec.get("kind", "train"),
                   model=config_from_dict(spec["model"]) if spec.get("model") is not None else None,
                   train=TrainConfig.from_dict(spec["train"]) if spec.get("train") is not None else None,
                   data=DataConfig(**spec["data"]) if spec.get("data") is not None else None,
                   probe=probe_type(**{k: listed(v) for k, v in probe.items()}) if probe is not None else None)


class TrialKind(Protocol):
    """What a trial of one study kind logs and runs (harness/study/kinds.py's StudyKind has these)."""
    probe_type: type | None
    params: Callable[[Trial], dict]                      # the child run's params
    run: Callable[..., tuple[dict, str]]                 # (trial, out_dir, run or None, ranks) -> metrics, summary


def run_trial(spec: dict, ctx: dict, kind: TrialKind, ranks: Ranks = SINGLE) -> dict:
    """spec: a Trial as Ray carries it (`Trial.to_dict`). ctx: tracking URI, experiment and parent ids, run
    directory, threads, tags. kind: what a trial of its study kind logs and runs. ranks: this process among
    the trial's data-parallel workers; ranks other than 0 train and return {}."""
    t_start, started_at = time.perf_counter(), time.time()
    trial = Trial.from_dict(spec, kind.probe_type)
    torch.set_num_threads(max(1, int(ctx["threads"])))
    out_dir = Path(ctx["run_dir"]) / trial.key
    out_dir.mkdir(parents=True, exist_ok=True)
    pid_file = "worker.pid" if ranks.is_main else f"worker.rank{ranks.rank}.pid"
    atomic_write(out_dir / pid_file, f"{os.getpid()}\n")     # which process to look at (or kill, in tests)
    if not ranks.is_main:
        kind.run(trial, out_dir, None, ranks)
        return {}
    tags = {**ctx["tags"], "row": trial.row, "seed": trial.seed, "config_hash": trial.config_hash,
            "trial_kind": trial.kind, "workers": ranks.world, "backend": ranks.backend or "none (one process)",
            **system.hardware_tags(), **system.versions()}   # this worker's own: a cluster's nodes may differ
    run = TrialRun(ctx["uri"], ctx["experiment_id"], ctx["parent_id"], trial.key, tags, flatten(kind.params(trial)))
    # Where this trial's child run is, so that `python -m harness evaluate RUN_DIR` can log to it later
    atomic_write(out_dir / RUN_POINTER, json.dumps({"tracking_uri": ctx["uri"], "run_id": run.run_id,
                                                    "experiment_id": ctx["experiment_id"]}) + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            metrics, summary = kind.run(trial, out_dir, run, ranks)
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
            raise ValueError(f"{FAULT_ENV}={item!r} is not KIND@ROW:STEP[/RANK] "
                             "(KIND nan, oom, crash, slow or warn)") from None
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
            os._exit(17)  # the worker dies without cleanup, as a killed process does
        return loss_sum

    return (inject,)
