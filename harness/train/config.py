"""Training settings (§5): `TrainConfig`, the learning-rate schedule (§5.3) and the preset settings."""

from __future__ import annotations

import dataclasses
import warnings
from dataclasses import dataclass
from typing import ClassVar

import torch

from harness.errors import HarnessWarning, UserError
from harness.eval.bleu import moses_version
from harness.measure.registry import get as get_measurement
from harness.measure.registry import measurements, setting_keys
from harness.measure.registry import validate as validate_measurement
from model import ModelConfig, get_preset


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 100_000               # §5.2: 100 k steps for base, 300 k for big
    warmup: int = 4000                 # §5.3 warmup_steps
    lr_scale: float = 1.0              # multiplies the paper's schedule (1.0 is the paper's formula)
    label_smoothing: float = 0.1       # §5.4 eps_ls
    max_tokens: int = 25_000           # padded tokens per side in one forward pass (a micro-batch)
    batch_tokens: int = 25_000         # tokens per side in one update; > max_tokens accumulates gradients
    adam_beta1: float = 0.9            # §5.3: Adam's beta1
    adam_beta2: float = 0.98           # §5.3: Adam's beta2
    adam_eps: float = 1e-9             # §5.3: Adam's epsilon
    seed: int = 0                      # initialization, dropout and batch order (a study sets it per trial: --seeds)
    max_minutes: float = 0.0           # stop training after this wall time (0: no limit)
    checkpoint_every: int = 1000       # steps between checkpoints (0: only by time and at the end)
    checkpoint_minutes: float = 10.0   # §6.1: checkpoints written every 10 minutes
    average_last: int = 0              # average the last n checkpoints (Table 2: 5 base, 20 big; Table 3: none)
    eval_every: int = 0                # steps between dev evaluations (0: at the end only)
    # DEVIATION (off by default): train until dev stops improving (harness/train/patience.py, fairseq's
    # --patience). With patience P > 0, dev is evaluated every eval_every steps (and at the last), a checkpoint
    # is kept at each evaluation, and the run stops after P evaluations in a row without a new best dev PPL, or
    # at `steps`, which becomes the budget. It is scored on its best weights, or the mean of the average_last
    # checkpoints ending there (average_at "last": ending where it stopped, as fairseq users average the last
    # epochs). The paper trains a fixed number of steps (§5.2); on 29,000 pairs a fixed budget either stops
    # a row while it still improves or trains it past its best, and a verdict would then measure the budget.
    patience: int = 0                  # dev evaluations without a new best before the run stops (0: off)
    average_at: str = "best"           # patience: the averaged checkpoints end at the best (best) or the stop (last)
    beam_size: int = 4                 # §6.1: beam 4, alpha 0.6, max length input + 50
    alpha: float = 0.6                 # §6.1: the beam's length penalty alpha
    max_extra: int = 50                # §6.1: the longest output is the input's length + max_extra
    bleu_sentences: int = 0            # dev sentences decoded for BLEU (0: all)
    eval_test: bool = False            # also score the test set (Table 2)
    # DEVIATION (off by default): constrained decodes parses a second time under a tree constraint
    # (harness/eval/parse.py TreeConstraint), reported beside the paper's unconstrained search + repair.
    constrained: bool = False          # parsing: also decode under the tree constraint (its own column)
    # DEVIATION: the tokenized BLEU uses today's Moses rules by default, "2017" the paper's (harness/eval/bleu.py)
    bleu_moses: str = "2025"           # Moses version of the tokenized BLEU: 2025 (today's scripts) or 2017
    log_every: int = 50                # steps between training-loss points of the curve
    device: str = "auto"               # auto | cpu | cuda | cuda:N
    amp: bool = True                   # bf16 autocast on CUDA (fp32 master weights); ignored on CPU
    # DEVIATION (off by default): cpu_amp runs bf16 autocast on a CPU with bf16 instructions (AVX512-BF16 or
    # AMX), fp32 master weights as on CUDA; the paper's arithmetic, fp32, is the default. It pays from d_model
    # 128 up (Table 2's multi30k base: 1.28x) and costs at d_model 64 (Table 3's tiny base: 0.83x): docs/speed.md.
    cpu_amp: bool = False              # bf16 autocast on a CPU (fp32 master weights)
    compile: bool = False              # torch.compile the encoder-decoder (the projection + loss stay eager)
    compile_mode: str = "default"      # torch.compile mode; reduce-overhead adds CUDA graphs (static shapes)
    # DEVIATION (off by default): shape_buckets groups pairs by rounded length into batches of fixed rows,
    # so a batch carries up to a fifth more padding and fewer real tokens than §5.1's length-sorted batches.
    shape_buckets: bool = False        # batches of a few fixed shapes (bucket_batches): one compile per shape
    prefetch: int = 2                  # batches gathered ahead on a background thread (0: in the loop)
    # DEVIATION (off by default): pack fills max_tokens with real tokens, so a packed batch holds more pairs
    # than a padded one of the same budget (the padding fraction more); each sentence's arithmetic is unchanged.
    pack: bool = False                 # sentences end to end without padding, variable-length attention (GPU)

    # The optimizer and schedule: the paper's by default (§5.3: Adam, warmup then step^-0.5). The rivals train
    # with their own papers' recipes (model/rnn.py, model/conv.py; studies/table2.yaml's rows say which).
    optimizer: str = "adam"            # adam (§5.3) | nesterov: SGD with Nesterov momentum (ConvS2S §4.3)
    momentum: float = 0.99             # nesterov only (ConvS2S: 0.99)
    schedule: str = "noam"             # noam (§5.3, times lr_scale) | constant_decay | plateau (see `rate_at`)
    lr: float = 0.0                    # constant_decay: the rate before decay (GNMT's Adam 1e-3, ConvS2S 0.25)
    decay_start: float = 2 / 3         # constant_decay: the share of the steps after which the rate decays
    decay_times: int = 4               # constant_decay: how many times it is multiplied by decay_factor
    decay_factor: float = 0.5          # constant_decay and plateau: what each decay multiplies the rate by
    # plateau (with the patience rule): cfg.lr after a linear warmup, times decay_factor each time lr_patience
    # dev evaluations pass without a new best, at most decay_times times (harness/train/patience.py).
    lr_patience: int = 0
    clip_norm: float = 0.0             # clip the gradients' global norm to this (0: none, as the paper)
    # DEVIATION (off by default; the paper warms up): no_warmup starts the noam schedule at its peak, d_model^-0.5
    # x warmup^-0.5 x lr_scale, and decays it as step^-0.5 after `warmup` steps as before, so that a run with
    # and a run without warmup differ in the ramp alone (Xiong et al. 2020: post-norm needs it, pre-norm not).
    no_warmup: bool = False
    # DEVIATION (off by default; a non-finite loss stops the run with an error): stop_diverged evaluates dev at
    # initialization and ends a run that diverges, at a non-finite loss or at a dev evaluation above that start,
    # recording the step (`diverged_step`); such a run is scored as its start (dev_ppl: the initial dev PPL; the
    # weights' own is dev_ppl_measured): it ended no better than it began (studies/depth.yaml).
    stop_diverged: bool = False
    # The measurements taken beside or after training (harness/measure: agreement contrasts, the heads probe,
    # source attention, attention statistics, length buckets, the BLEU curve), each with settings of its own:
    # ((name, settings), ...) for those not at their defaults. Spelled `train.NAME_FIELD` in study files, --set
    # and config.json (e.g. train.curve_bleu_sentences); `replace`, `to_dict` and `from_dict` read and write them so.
    measures: tuple = ()

    # Added after studies had run without them: left out of a trial's config hash at their defaults
    # (harness/trial.py), so that those trials keep their hashes.
    ADDED_LATER: ClassVar[tuple[str, ...]] = ("bleu_moses", "optimizer", "momentum", "schedule", "lr", "decay_start",
                                              "decay_times", "decay_factor", "clip_norm", "cpu_amp", "patience",
                                              "average_at", "lr_patience", "no_warmup", "stop_diverged")
    # (every measurement setting is left out of the hash at its default too: `later_defaults`)

    def validate(self) -> None:
        for name in ("steps", "max_tokens", "batch_tokens", "log_every", "beam_size"):
            if getattr(self, name) < 1:
                raise UserError(f"train setting {name} must be at least 1, got {getattr(self, name)}.")
        for name in ("warmup", "checkpoint_every", "average_last", "eval_every", "bleu_sentences", "max_extra",
                     "patience", "lr_patience"):
            if getattr(self, name) < 0:
                raise UserError(f"train setting {name} must not be negative, got {getattr(self, name)}.")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise UserError(f"label_smoothing must lie in [0, 1), got {self.label_smoothing}.")
        if self.warmup == 0:
            raise UserError("warmup must be at least 1 step: the paper's schedule divides by warmup^1.5.")
        if self.compile_mode not in COMPILE_MODES:
            raise UserError(f"compile_mode {self.compile_mode!r} is not known; use one of {', '.join(COMPILE_MODES)}.")
        if self.prefetch < 0:
            raise UserError(f"train setting prefetch must not be negative, got {self.prefetch}.")
        moses_version(self.bleu_moses, "train setting bleu_moses")
        if self.optimizer not in OPTIMIZERS:
            raise UserError(f"optimizer {self.optimizer!r} is not known; use one of {', '.join(OPTIMIZERS)}.")
        if self.schedule not in SCHEDULES:
            raise UserError(f"schedule {self.schedule!r} is not known; use one of {', '.join(SCHEDULES)}.")
        if self.no_warmup and self.schedule != "noam":
            raise UserError(f"no_warmup removes the noam schedule's ramp; schedule {self.schedule} has its own "
                            "linear warmup (set train.warmup 1 instead).")
        if self.schedule in ("constant_decay", "plateau") and not self.lr > 0:
            raise UserError(f"schedule {self.schedule} needs a rate: set train.lr (e.g. 0.001 for Adam, 0.25 for "
                            "nesterov).")
        if self.schedule == "plateau" and not (self.patience and self.lr_patience):
            raise UserError("schedule plateau shrinks the rate when dev stops improving: set train.patience (the "
                            "stop) and train.lr_patience (the evaluations without a new best before each shrink).")
        if not (0.0 <= self.decay_start <= 1.0 and self.decay_times >= 0 and 0.0 < self.decay_factor <= 1.0
                and 0.0 <= self.momentum < 1.0 and self.clip_norm >= 0.0):
            raise UserError("train settings decay_start must lie in [0, 1], decay_times >= 0, decay_factor in "
                            "(0, 1], momentum in [0, 1) and clip_norm >= 0.")
        if self.patience and not self.eval_every:
            raise UserError(f"train.patience {self.patience} counts dev evaluations: set train.eval_every to the "
                            "steps between them (e.g. one epoch's).")
        if self.patience and self.average_last > 1 and self.checkpoint_minutes:
            raise UserError("train.patience averages the average_last checkpoints taken every checkpoint_every steps; "
                            "a checkpoint by time would join that window at a step set by the clock: set "
                            "train.checkpoint_minutes 0.")
        if self.average_at not in AVERAGE_AT:
            raise UserError(f"train.average_at {self.average_at!r} is not known; use one of {', '.join(AVERAGE_AT)}.")
        if self.pack and self.shape_buckets:
            raise UserError("pack and shape_buckets exclude each other: a packed batch has no padding to bucket; "
                            "set one of them.")
        for m, settings in self.active():
            validate_measurement(m, settings)
        for message in self.unread():     # accepted, but a setting this run never reads is said aloud
            warnings.warn(HarnessWarning(message), stacklevel=2)

    def unread(self) -> list[str]:
        """One sentence for each optimizer or schedule setting moved from its default that this run's optimizer
        and schedule do not read (`--set train.lr=1e-3` under noam changes nothing but the trial's hash)."""
        readers = {"lr": ("constant_decay", "plateau"), "decay_start": ("constant_decay",),
                   "decay_times": ("constant_decay", "plateau"), "decay_factor": ("constant_decay", "plateau"),
                   "lr_patience": ("plateau",)}
        # Not said: decay_start under plateau, which the rivals' plateau rows inherit from their constant_decay
        # recipe in a study's base (studies/table2.yaml, multi30k); a warning on every run of a committed study
        # would teach a reader to skip warnings.
        quiet = {("decay_start", "plateau")}
        default = {f.name: f.default for f in dataclasses.fields(self)}
        out = []
        for key, schedules in readers.items():
            if (getattr(self, key) != default[key] and self.schedule not in schedules
                    and (key, self.schedule) not in quiet):
                why = " (noam's rate follows d_model and warmup, §5.3; train.lr_scale scales it)" \
                    if self.schedule == "noam" else ""
                out.append(f"train.{key}={getattr(self, key)} is not read by schedule {self.schedule}, only by "
                           f"{' and '.join(schedules)}{why}.")
        if self.momentum != default["momentum"] and self.optimizer != "nesterov":
            out.append(f"train.momentum={self.momentum} is not read by optimizer {self.optimizer}, only by nesterov.")
        return out

    # --- the measurements' settings (harness/measure), spelled as `train.` keys ---

    def active(self) -> list:
        """The measurements this run takes, [(measurement, settings)], in the registry's order."""
        own = dict(self.measures)
        return [(m, own[m.name]) for m in measurements() if m.name in own and m.takes(own[m.name])]

    def settings_of(self, name: str):
        """The settings of measurement `name` (its defaults, not measured, when this run does not take it)."""
        return dict(self.measures).get(name) or get_measurement(name).default()

    def replace(self, **changes) -> TrainConfig:
        """dataclasses.replace that also takes the measurements' keys (e.g. curve_bleu_sentences=100)."""
        keys = setting_keys()
        own, updates = dict(self.measures), {}
        for key, value in changes.items():
            if key not in keys:
                updates[key] = value
                continue
            m, name = keys[key]
            settings = dataclasses.replace(own.get(m.name) or m.default(), **{name: value})
            own[m.name] = settings
        own = {name: s for name, s in own.items() if s != get_measurement(name).default()}
        return dataclasses.replace(self, **updates, measures=tuple(sorted(own.items())))

    @classmethod
    def from_dict(cls, values: dict) -> TrainConfig:
        """A config from `to_dict`'s plain data (config.json, a trial's params); an unknown key is a TypeError."""
        keys = setting_keys()
        plain = {k: v for k, v in values.items() if k not in keys and k != "measures"}
        return cls(**plain).replace(**{k: v for k, v in values.items() if k in keys})

    def to_dict(self) -> dict:
        """Every setting as plain data, the measurements' under their `train.` keys (at their defaults too)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "measures"}
        for m in measurements():
            settings = self.settings_of(m.name)
            out.update({key: getattr(settings, name) for key, name in m.keys().items()})
        return out

    def later_defaults(self) -> dict:
        """{key: default} of the settings added after studies had run without them: the ADDED_LATER fields and
        every measurement's settings. A trial's config hash leaves each out while it holds its default
        (harness/trial.py `hashed_settings`), so trials run before they existed keep their hashes."""
        later = {f.name: f.default for f in dataclasses.fields(self) if f.name in self.ADDED_LATER}
        for m in measurements():
            default = m.default()
            later.update({key: getattr(default, name) for key, name in m.keys().items()})
        return later

def measurement_keys() -> set[str]:
    """The `train.` keys of every measurement's settings: what a run measures beside or after training, never what
    it trains (the departures from the paper leave them out)."""
    return set(setting_keys())


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
OPTIMIZERS = ("adam", "nesterov")
SCHEDULES = ("noam", "constant_decay", "plateau")
AVERAGE_AT = ("best", "last")


def learning_rate(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """§5.3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step counted from 1."""
    step = max(step, 1)
    return scale * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def rate_at(step: int, cfg: TrainConfig, d_model: int, shrinks: int = 0) -> float:
    """The learning rate of update `step` (from 1) under cfg's schedule:
    - noam: §5.3's `learning_rate`, times lr_scale (no_warmup: at its peak until `warmup`, then the same);
    - plateau: cfg.lr after a linear warmup of cfg.warmup steps, times decay_factor ** shrinks (the times dev
      stopped improving so far, counted by the patience rule);
    - constant_decay: cfg.lr after a linear warmup of cfg.warmup steps, multiplied by decay_factor decay_times
      times at even intervals over the steps after decay_start x steps (tensorflow/nmt's decay schemes, e.g.
      GNMT's "luong234": halve 4 times over the last third)."""
    if cfg.schedule == "noam":     # no_warmup: the peak from the first step, the same decay after warmup
        return learning_rate(max(step, cfg.warmup) if cfg.no_warmup else step, d_model, cfg.warmup, cfg.lr_scale)
    step = max(step, 1)
    rate = cfg.lr * min(1.0, step / cfg.warmup)
    if cfg.schedule == "plateau":
        return rate * cfg.decay_factor ** shrinks
    start = cfg.decay_start * cfg.steps
    if cfg.decay_times and step > start:
        interval = max(1.0, (cfg.steps - start) / cfg.decay_times)
        rate *= cfg.decay_factor ** min(cfg.decay_times, int((step - start - 1) // interval) + 1)
    return rate


def make_optimizer(params, cfg: TrainConfig) -> torch.optim.Optimizer:
    """The optimizer cfg names; the rate is set at every step (`rate_at`)."""
    if cfg.optimizer == "nesterov":
        return torch.optim.SGD(params, lr=1.0, momentum=cfg.momentum, nesterov=True)
    return torch.optim.Adam(params, lr=1.0, betas=(cfg.adam_beta1, cfg.adam_beta2), eps=cfg.adam_eps,
                            fused=True)   # one kernel per parameter, CPU and CUDA


# Training settings that go with each model preset (model/config.py PRESETS): one table of presets, read through
# `preset`; tests/test_config.py checks that both name the same presets. cpu_d128: shrunk to fit a CPU in minutes.
TRAIN_PRESETS: dict[str, TrainConfig] = {
    "paper_base": TrainConfig(),
    "paper_big": TrainConfig(steps=300_000),
    "modern_base": TrainConfig(),
    "cpu_d128": TrainConfig(steps=1500, warmup=300, max_tokens=4096, batch_tokens=4096, checkpoint_every=500,
                        checkpoint_minutes=0.0, log_every=50, bleu_sentences=500),
}


def preset(name: str) -> tuple[ModelConfig, TrainConfig]:
    """A preset's model and the training settings that go with it; an unknown or renamed name is a ConfigError
    naming the presets (model/config.py `get_preset`)."""
    return get_preset(name), TRAIN_PRESETS[name]
