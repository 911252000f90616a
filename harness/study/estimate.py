"""How much a study will cost before it runs (`run --dry-run`): FLOPs, parameters and time per training
trial, and the wall time of trials packed onto the devices."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from harness.probes.flops import training_flops_per_target_token
from harness.trial import Trial
from model import build_model, count_parameters

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

    @property
    def measured(self) -> bool:
        """Times come from updates timed here (--measure; a rate given with --tflops takes precedence)."""
        return self.measure and not self.tflops


def update_seconds(trial: Trial, cache: dict) -> float:
    """One update of the trial's model at its batch, measured on this machine's device (once per distinct model
    and batch: `cache`)."""
    from harness.probes.cost import measured_update_seconds
    from harness.train.config import make_optimizer
    from harness.train.device import autocast_for, resolve_device
    model_cfg, train_cfg = trial.model, trial.train
    key = (model_cfg, train_cfg.batch_tokens, train_cfg.max_tokens, train_cfg.amp, train_cfg.cpu_amp,
           train_cfg.optimizer)
    if key not in cache:
        device = resolve_device(train_cfg.device)
        cache[key] = measured_update_seconds(model_cfg, train_cfg, device, ASSUMED_SENTENCE_LEN,
                                             make_optimizer=make_optimizer,
                                             autocast=autocast_for(device, train_cfg.amp, train_cfg.cpu_amp))
    return cache[key]


def trial_seconds(trial: Trial, flops: float, timing: Timing, workers: int, cache: dict) -> float:
    """A trial's estimated training time (evaluation left out), its workers scaling it ideally."""
    if timing.tflops:
        return flops / (timing.tflops * 1e12) / workers
    return update_seconds(trial, cache) * trial.train.steps / workers


def measured_rate(trial: Trial, flops: float, cache: dict) -> tuple[float, float]:
    """(target tokens a second, the share of this machine's matmul peak the counted FLOPs reach) of the trial's
    measured update, with the threads the caller set: the figures `run --dry-run --measure` prints per trial."""
    from harness.probes.peak import matmul_peak
    from harness.train.device import matmul_dtype, resolve_device
    seconds = update_seconds(trial, cache)
    device = resolve_device(trial.train.device)
    dtype = matmul_dtype(device, trial.train)
    peak = matmul_peak(device, dtype)
    return trial.train.batch_tokens / seconds, (flops / trial.train.steps / seconds / (peak * 1e12)) if peak else 0.0


def wall_slots(timing: Timing, cpu_per_trial: float, workers: int) -> tuple[int, str]:
    """How many trials run at once for the wall time, and on what: where updates were timed on a CPU, as many as
    its cores fit at the profile's cpu a trial (Ray's placement on one machine); else the devices given over
    the workers a trial takes."""
    import os

    import torch
    if timing.measured and not torch.cuda.is_available():
        cores = os.cpu_count() or 1
        return max(
            1, cores // max(1, round(cpu_per_trial * workers))
        ), f"on {cores} CPU cores, {cpu_per_trial:g} a trial"
    return max(1, timing.devices // workers), f"on {timing.devices} device(s), {workers} a trial"


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
