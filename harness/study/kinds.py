"""Study kinds, the runner's side: what differs between a training study (rows of model, train and data
settings) and a scaling study (rows of probe settings, Table 1) once its trials are resolved: how a dry run
lists them, what the driver prepares and estimates before they run, and the columns of the closing summary.
How each kind's study file is read is harness/study/spec.py's LOADERS; what its trial runs is
harness/trial.py's KINDS. The runner looks a kind up here instead of branching on its name.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from model import build_model, count_parameters

from harness.data.corpus import DataConfig, prepare_data
from harness.probes.flops import training_flops_per_target_token
from harness.study.spec import Study
from harness.trial import Trial

ASSUMED_SENTENCE_LEN = 25   # for estimates made before the data is read (WMT14 EN-DE averages about 25 subwords)


def estimated_flops(trial: Trial) -> float:
    """Training FLOPs of a trial before it runs: the analytic count of harness/probes/flops.py per target
    token, for sentences of ASSUMED_SENTENCE_LEN, x tokens per step x steps (padding left out)."""
    model_cfg, train_cfg, _ = trial.configs()
    n = ASSUMED_SENTENCE_LEN
    return training_flops_per_target_token(model_cfg, n, n) * train_cfg.batch_tokens * train_cfg.steps


def parameter_count(trial: Trial) -> int:
    """Counted on the meta device: no memory, even for paper_big."""
    with torch.device("meta"):
        return count_parameters(build_model(trial.configs()[0]))


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
    from harness.train.device import resolve_device
    model_cfg, train_cfg, _ = trial.configs()
    key = (model_cfg, train_cfg.batch_tokens, train_cfg.max_tokens, train_cfg.amp)
    if key not in cache:
        cache[key] = measured_update_seconds(model_cfg, train_cfg, resolve_device(train_cfg.device),
                                             ASSUMED_SENTENCE_LEN)
    return cache[key] * train_cfg.steps / workers


def packed_wall(seconds: list[float], slots: int) -> float:
    """The wall time of trials run longest first on `slots` slots, each next trial on the first free slot
    (what the runner's order and Tune's FIFO do)."""
    free = [0.0] * max(1, slots)
    for s in sorted(seconds, reverse=True):
        free[free.index(min(free))] += s
    return max(free)


def _print_training_trials(study: Study, timing: Timing = Timing()) -> None:
    head = f"{'trial':<20}{'hash':<14}{'N':>3}{'d_model':>8}{'d_ff':>6}{'h':>4}{'d_k':>5}{'d_v':>5}" \
           f"{'P_drop':>7}{'eps_ls':>7}{'steps':>8}{'params':>10}{'est. FLOPs':>12}"
    print(head + (f"{'est. time':>11}" if timing.wanted else ""))
    total, times, cache = 0.0, [], {}
    workers = int(study.resources.get("workers", 1))
    if timing.measure:       # time updates with the threads a trial (or each of its workers) gets
        torch.set_num_threads(max(1, round(float(study.resources.get("cpu", 1)))))
    for t in study.trials:
        n, flops = parameter_count(t), estimated_flops(t)
        total += flops
        m = t.model
        line = (f"{t.key:<20}{t.config_hash:<14}{m['n_layers']:>3}{m['d_model']:>8}{m['d_ff']:>6}{m['n_heads']:>4}"
                f"{m['d_k']:>5}{m['d_v']:>5}{m['p_drop']:>7}{t.train['label_smoothing']:>7}{t.train['steps']:>8}"
                f"{n / 1e6:>9.2f}M{flops:>12.2e}")
        if timing.wanted:
            times.append(trial_seconds(t, flops, timing, workers, cache))
            line += f"{_duration(times[-1]):>11}"
        print(line, flush=True)
    print(f"estimated training cost: {total:.2e} FLOPs (analytic count, sentences of {ASSUMED_SENTENCE_LEN} "
          f"tokens; data: {study.trials[0].data['name']})")
    if timing.wanted:
        slots = max(1, timing.devices // workers)
        rate = f"{timing.tflops:g} TFLOP/s per device (given)" if timing.tflops else \
            f"updates timed on this machine's {'GPU' if torch.cuda.is_available() else 'CPU'}"
        print(f"estimated time: {_duration(sum(times))} of training in all; on {timing.devices} device(s), "
              f"{workers} a trial ({slots} at a time, longest first): {_duration(packed_wall(times, slots))} "
              f"wall. From {rate}; evaluation, data preparation and start-up not included.")


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def _print_scaling_trials(study: Study, timing: Timing = Timing()) -> None:
    print(f"{'trial':<20}{'hash':<14}{'layer':<16}{'n swept (at d)':<40}{'d swept (at n)':<40}")
    for t in study.trials:
        p = t.probe
        print(f"{t.key:<20}{t.config_hash:<14}{p['layer']:<16}{str(p['ns']) + ' d=' + str(p['d_fixed']):<40}"
              f"{str(p['ds']) + ' n=' + str(p['n_fixed']):<40}")


def _prepare_training_data(trials: list[Trial]) -> None:
    """The generated corpus and the BPE model per vocabulary size, once in the driver: trials then only read
    the caches instead of racing to write them."""
    for data_cfg, vocab_size in {(DataConfig(**t.data), t.model["vocab_size"]) for t in trials}:
        prepare_data(data_cfg, vocab_size)


def _training_columns(metrics: list[dict]) -> list[tuple[str, str]]:
    quality = [("F1", "dev_f1"), ("test F1", "test_f1")] if any("dev_f1" in m for m in metrics) else \
        [("BLEU", "dev_bleu"), ("BLEU tok", "dev_bleu_tok")]
    test = [("test BLEU", "test_bleu")] if any("test_bleu" in m for m in metrics) else []
    return [("dev PPL", "dev_ppl"), *quality, *test]


def _scaling_columns(metrics: list[dict]) -> list[tuple[str, str]]:
    return [("exp n", "exp_n_fwd"), ("exp n f+b", "exp_n_fwd_bwd"), ("exp d", "exp_d_fwd"),
            ("exp d f+b", "exp_d_fwd_bwd"), ("seq ops", "seq_ops_measured"), ("path", "path_measured_max_n")]


@dataclass(frozen=True)
class StudyKind:
    print_trials: Callable[..., None]                            # --dry-run: one line per trial (study, timing)
    prepare: Callable[[list[Trial]], None]                       # in the driver, before any trial starts
    estimated_flops: Callable[[Trial], float]                    # orders the trials, longest first
    summary_columns: Callable[[list[dict]], list[tuple[str, str]]]   # (header, metric) after the study


KINDS = {"train": StudyKind(_print_training_trials, _prepare_training_data, estimated_flops, _training_columns),
         "scaling": StudyKind(_print_scaling_trials, lambda trials: None, lambda trial: 0.0, _scaling_columns)}
