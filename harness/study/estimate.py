"""How much a study will cost before it runs (`run --dry-run`): FLOPs, parameters and time per training
trial, and the wall time of trials packed onto the devices."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from model import build_model, count_parameters

from harness.probes.flops import training_flops_per_target_token
from harness.trial import Trial

ASSUMED_SENTENCE_LEN = 25   # for estimates made before the data is read (WMT14 EN-DE averages about 25 subwords)


def estimated_flops(trial: Trial) -> float:
    """Training FLOPs of a trial before it runs: the analytic count of harness/probes/flops.py per target
    token, for sentences of ASSUMED_SENTENCE_LEN, x tokens per step x steps (padding left out)."""
    model_cfg, train_cfg = trial.model, trial.train
    n = ASSUMED_SENTENCE_LEN
    return training_flops_per_target_token(model_cfg, n, n) * train_cfg.batch_tokens * train_cfg.steps


def parameter_count(trial: Trial) -> int:
    """Counted on the meta device: no memory, even for paper_big."""
    with torch.device("meta"):
        return count_parameters(build_model(trial.model))


@dataclass(frozen=True)
class Timing:
    """How `run --dry-run` turns FLOPs into time: a sustained training rate per device the user gives
    (tflops), or one measured here (measure: a few updates of each distinct model at its batch, on this
    machine's device), and the devices the study runs on (each trial takes `workers` of them)."""
    tflops: float = 0.0
    measure: bool = False
    devices: int = 1

    @property
    def wanted(self) -> bool:
        return bool(self.tflops) or self.measure


def trial_seconds(trial: Trial, flops: float, timing: Timing, workers: int, cache: dict) -> float:
    """A trial's estimated training time (evaluation left out), its workers scaling it ideally."""
    if timing.tflops:
        return flops / (timing.tflops * 1e12) / workers
    from harness.probes.cost import measured_update_seconds
    from harness.train.config import make_optimizer
    from harness.train.device import resolve_device
    model_cfg, train_cfg = trial.model, trial.train
    key = (model_cfg, train_cfg.batch_tokens, train_cfg.max_tokens, train_cfg.amp, train_cfg.optimizer)
    if key not in cache:
        cache[key] = measured_update_seconds(model_cfg, train_cfg, resolve_device(train_cfg.device),
                                             ASSUMED_SENTENCE_LEN, make_optimizer=make_optimizer)
    return cache[key] * train_cfg.steps / workers


def packed_wall(seconds: list[float], slots: int) -> float:
    """The wall time of trials run longest first on `slots` slots, each next trial on the first free slot
    (what the runner's order and Tune's FIFO do)."""
    free = [0.0] * max(1, slots)
    for s in sorted(seconds, reverse=True):
        free[free.index(min(free))] += s
    return max(free)


def duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"
