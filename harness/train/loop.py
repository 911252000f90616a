"""The training loop (§5): set up the components, then update, log, evaluate, checkpoint and call the
hooks until the last step or the time limit; the finish step scores the result. With several ranks
(harness/train/dist.py) each rank runs this loop on its share of every update and DDP averages the
gradients; rank 0 logs, evaluates, checkpoints and finishes."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Callable

import torch

from harness.data.corpus import DataConfig, Dataset, load_dataset
from harness.errors import UserError
from harness.eval.evaluate import perplexity
from harness.io import atomic_write, check_writable
from harness.measure.registry import Context, measured
from harness.system import pin_allocator
from harness.train.checkpoint import Checkpointer
from harness.train.compile import training_loss
from harness.train.config import TrainConfig, make_optimizer, rate_at
from harness.train.device import autocast_for, device_note, resolve_device
from harness.train.dist import SINGLE, Ranks
from harness.train.finish import finish
from harness.train.log import MetricsLog
from harness.train.patience import Patience, window
from harness.train.stream import BatchStream
from model import ModelConfig, Seq2SeqModel, build_model, count_parameters, with_settings
from model.family import to_dict

# A hook is called after each step's backward pass and before the update: hook(step, loss_sum) returns the
# loss sum to use (the fault hooks of harness/trial.py replace it, raise or end the process).
StepHook = Callable[[int, torch.Tensor], torch.Tensor]


def train_step(model, opt, loss_fn, micro: list, lr: float, label_smoothing: float, device, autocast,
               ranks: Ranks = SINGLE, ddp=None) -> tuple[torch.Tensor, int]:
    """Forward and backward over this rank's micro-batches of one update (the optimizer step is the
    caller's). Returns this rank's summed loss and the target tokens of the whole update, every rank's."""
    n_tokens = sum(b.n_tgt_tokens for b in micro)
    if ranks.world > 1:
        n_tokens = int(ranks.sum(n_tokens)[0])
    # The update averages over all its target tokens; DDP then averages over ranks, hence the world factor
    # (one process: loss / n_tokens, as before).
    per_rank = n_tokens / ranks.world
    for g in opt.param_groups:
        g["lr"] = lr
    opt.zero_grad(set_to_none=True)
    loss_sum = torch.zeros((), device=device)
    for j, b in enumerate(micro):
        b = b.to(device)
        sync = ddp.no_sync() if ddp is not None and j < len(micro) - 1 else contextlib.nullcontext()
        with sync:
            with autocast():
                loss, _, _ = (ddp or loss_fn)(b.src, b.tgt_in, b.tgt_out, label_smoothing, packing=b.packing)
            if not b.n_tgt_tokens:           # an empty share (stream.py): in the all-reduce, weight 0
                loss = loss * 0.0
            (loss / per_rank).backward()
        loss_sum += loss.detach()
    return loss_sum, n_tokens


class _LossModule(torch.nn.Module):
    """The training loss as a module's forward, so that DDP can wrap it (DDP hooks forward, not model.loss)."""

    def __init__(self, model: Seq2SeqModel, loss_fn: Callable):
        super().__init__()
        self.model, self.loss_fn = model, loss_fn

    def forward(self, *args, **kwargs):
        return self.loss_fn(*args, **kwargs)


def data_parallel(model: Seq2SeqModel, loss_fn: Callable, device: torch.device, ranks: Ranks, seed: int):
    """DDP around the loss (None for one process). Every rank starts from rank 0's weights (DDP broadcasts
    them); each rank other than 0 then draws its own dropout masks (rank 0 keeps one process's stream)."""
    if ranks.world == 1:
        return None
    ddp = torch.nn.parallel.DistributedDataParallel(
        _LossModule(model, loss_fn), device_ids=[device.index] if device.type == "cuda" else None)
    if ranks.rank:
        torch.manual_seed(seed + 7919 * ranks.rank)
    return ddp


def setup(model_cfg: ModelConfig, cfg: TrainConfig, data_cfg: DataConfig, out: Path | None,
          dataset: Dataset | None, ranks: Ranks = SINGLE):
    """The device, the data, the resolved config (written to out/config.json; out None: nowhere, as the
    bench's step), the seeded model and its optimizer."""
    cfg.validate()
    word_positions = getattr(model_cfg, "word_positions", False)     # a Transformer setting; other families: off
    if word_positions and cfg.pack:          # refused before anything is read or written
        raise UserError("word_positions needs padded batches (each sentence's words counted in its own row); "
                        "set train.pack false.")
    if getattr(model_cfg, "positional", None) == "alibi" and cfg.pack:
        raise UserError("positional=alibi needs padded batches (its bias counts each sentence's positions from 0 in "
                        "its own row); set train.pack false.")
    for m, settings in cfg.active():        # each measurement refuses data or a model it cannot measure, first
        if m.check is not None:
            m.check(settings, model_cfg, data_cfg)
    device = torch.device(ranks.device) if ranks.device else resolve_device(cfg.device)
    if device.type == "cpu":
        pin_allocator()               # reuse the large blocks of every step instead of page-faulting them again
    if out is not None:
        check_writable(out, "output directory", "choose a writable path")
    data = dataset or load_dataset(data_cfg, model_cfg.vocab_size, model_cfg.max_len)
    model_cfg = with_settings(model_cfg, vocab_size=data.tokenizer.vocab_size)
    resolved = {"model": to_dict(model_cfg), "train": cfg.to_dict(), "data": dataclasses.asdict(data_cfg)}
    if ranks.is_main and out is not None:
        atomic_write(out / "config.json", json.dumps(resolved, indent=2) + "\n")
    torch.manual_seed(cfg.seed)
    model = build_model(model_cfg).to(device)
    if word_positions:
        model.mark_words(*data.tokenizer.word_marks())
    opt = make_optimizer(model.parameters(), cfg)
    return device, data, resolved, model, opt


def train(model_cfg: ModelConfig, cfg: TrainConfig, data_cfg: DataConfig, out_dir: str | Path, *,
          quiet: bool = False, dataset: Dataset | None = None, on_log: Callable[[int, dict], None] | None = None,
          hooks: tuple[StepHook, ...] = (), ranks: Ranks = SINGLE) -> dict:
    """Train one model; resumes from out_dir/checkpoints when present. Returns the final metrics (on ranks
    other than 0: {}). on_log(step, metrics) receives each metrics row (the runner forwards them to MLflow)."""
    return Trainer(model_cfg, cfg, data_cfg, out_dir, quiet=quiet, dataset=dataset, on_log=on_log, hooks=hooks,
                   ranks=ranks).run()


class Trainer:
    """One training run, its components set up once (torchtitan's Trainer): `run` updates (`update`), evaluates on
    dev (`evaluate`) and checkpoints (`checkpoint`) until the last step, the time limit, the patience rule or a
    divergence, then saves the final checkpoint and scores the result (`finish`)."""

    def __init__(self, model_cfg: ModelConfig, cfg: TrainConfig, data_cfg: DataConfig, out_dir: str | Path, *,
                 quiet: bool = False, dataset: Dataset | None = None,
                 on_log: Callable[[int, dict], None] | None = None, hooks: tuple[StepHook, ...] = (),
                 ranks: Ranks = SINGLE):
        self.cfg, self.data_cfg, self.hooks, self.ranks = cfg, data_cfg, hooks, ranks
        self.out = out = Path(out_dir)
        self.device, self.data, resolved, self.model, self.opt = setup(model_cfg, cfg, data_cfg, out, dataset, ranks)
        if not quiet and ranks.is_main:
            print(device_note(cfg.device, self.device, cfg.amp, cfg.cpu_amp), flush=True)
        self.autocast = autocast_for(self.device, cfg.amp, cfg.cpu_amp)
        self.stream = BatchStream(self.data.train.data, cfg, self.device, where=str(self.data.root), ranks=ranks)
        self.loss_fn = training_loss(self.model, cfg, n_shapes=self.stream.n_shapes)
        self.ddp = data_parallel(self.model, self.loss_fn, self.device, ranks, cfg.seed)
        self.ckpt = Checkpointer(out / "checkpoints", resolved, self.device, keep=max(cfg.average_last, 2),
                                 every=cfg.checkpoint_every, minutes=cfg.checkpoint_minutes, ranks=ranks)
        self.step, self.clock = self.ckpt.restore(self.model, self.opt, self.stream)   # every rank, the same files
        self.rule = restored_rule(cfg, self.ckpt)        # train until dev stops improving (patience.py), or None
        self.log = MetricsLog(out / "metrics.jsonl", steps=cfg.steps, log_every=cfg.log_every,
                              eval_every=cfg.eval_every, max_minutes=cfg.max_minutes, quiet=quiet, on_log=on_log,
                              is_main=ranks.is_main, eval_last=self.rule is not None).open(self.step)
        self.stop_now = stopped_already(self.rule, self.clock)
        # The loop's wall time (steps, evaluations, checkpoints) summed over every process that trained this run:
        # what a trial cost when it ran across interruptions and sessions (train_seconds counts the steps alone).
        self.wall_before, self.t_loop = self.clock.get("wall_seconds", 0.0), time.perf_counter()
        self.cpu_before, self.cores = self.clock.get("cpu_seconds", 0.0), torch.get_num_threads() * ranks.world
        self.measures = cfg.active()

    def lr_at(self, step: int) -> float:
        return rate_at(step, self.cfg, self.model.cfg.d_model, self.rule.shrinks if self.rule else 0)

    def out_of_time(self) -> bool:
        return bool(self.cfg.max_minutes) and self.clock["train_seconds"] >= self.cfg.max_minutes * 60

    def context(self) -> Context:
        """What a measurement's hook sees: the model now, the data, the settings and where the run stands."""
        return Context(self.model, self.data.tokenizer, self.data.dev, self.data.tgt_lang, self.data_cfg, self.cfg,
                       self.device, self.autocast, self.out, self.clock, self.step)

    def dev_perplexity(self) -> float:
        return perplexity(self.model, self.data.dev.data, self.cfg.max_tokens, self.device, self.autocast)

    def run(self) -> dict:
        at_initialisation(self.measures, self.context, self.cfg, self.clock, self.step, self.log,
                          self.dev_perplexity, self.ranks.is_main)
        self.model.train()
        with self.stream:
            while self.step < self.cfg.steps and not self.out_of_time() and not self.stop_now:
                if not self.update():
                    break                      # diverged: the update is skipped and the run ends here
                self.checkpoint(self.evaluate())
        self.ckpt.save_final(self.step, self.model, self.opt, self.stream.state_dict(), self.clock,
                             self.rule.state_dict() if self.rule else None)
        self.log.close()
        return self.finish() if self.ranks.is_main else {}

    def update(self) -> bool:
        """One optimizer step on the next update's batches, logged (False: the loss was not finite and the run
        diverged there, the update skipped)."""
        cfg, t0 = self.cfg, time.perf_counter()
        loss_sum, n_tokens = train_step(self.model, self.opt, self.loss_fn, self.stream.next_update(),
                                        self.lr_at(self.step + 1), cfg.label_smoothing, self.device, self.autocast,
                                        self.ranks, self.ddp)
        for hook in self.hooks:
            loss_sum = hook(self.step + 1, loss_sum)
        loss = self.ranks.sum(loss_sum)[0] / n_tokens
        if not math.isfinite(loss) and nonfinite(loss, self.step + 1, cfg, self.clock):
            return False
        if cfg.clip_norm:
            torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.clip_norm)
        self.opt.step()
        self.step, dt = self.step + 1, time.perf_counter() - t0
        self.clock["train_seconds"] += dt
        self.clock["tokens_seen"] += n_tokens
        self.log.train_step(self.step, loss, n_tokens, dt, self.lr_at(self.step), self.clock["train_seconds"],
                            self.stream.epoch)
        return True

    def evaluate(self) -> bool:
        """Dev perplexity and the measurements' curves where this step is an evaluation step (rank 0), the patience
        rule's and the divergence check's decision on every rank, and at the budget's last step the curves' last
        point before averaging; whether this step evaluated."""
        cfg, ranks, step = self.cfg, self.ranks, self.step
        evaluated, dev_ppl = self.log.should_eval(step), None
        if evaluated and ranks.is_main:
            dev_ppl = self.dev_perplexity()
            self.log.record(step, {"dev_ppl": dev_ppl, **measured(self.measures, "at_eval", self.context)})
            if self.rule and self.rule.update(step, dev_ppl):      # a new best: keep the window ending here
                self.ckpt.pin(window(sorted(set(self.ckpt.steps()) | {step}), step, cfg.average_last))
            self.model.train()
        if evaluated:      # the rule's decision, and (stop_diverged) dev above where it began: rank 0's
            self.stop_now = (agree_on_rule(self.rule, ranks) if self.rule else self.stop_now) or \
                diverged_on_dev(cfg, self.clock, step, ranks, ranks.is_main and dev_ppl)
        if step == cfg.steps and not evaluated and ranks.is_main:   # the curves' last point, before averaging
            last = [(m, s) for m, s in self.measures if m.eval_at_last]
            if last:
                self.log.record(step, measured(last, "at_eval", self.context))
                self.model.train()
        return evaluated

    def checkpoint(self, evaluated: bool) -> None:
        """The clock brought up to date and a checkpoint where one is due (after every evaluation under the rule)."""
        looped = time.perf_counter() - self.t_loop
        self.clock["wall_seconds"] = self.wall_before + looped
        self.clock["cpu_seconds"] = self.cpu_before + looped * self.cores
        rule_state = self.rule.state_dict() if self.rule else None
        self.ckpt.maybe_save(self.step, self.model, self.opt, self.stream.state_dict(), self.clock, rule_state,
                             force=bool(self.rule) and evaluated)

    def finish(self) -> dict:
        """Rank 0: average, score dev (and test) and write metrics.json (harness/train/finish.py)."""
        cfg, clock, step, stream, rule = self.cfg, self.clock, self.step, self.stream, self.rule
        return finish(self.model, self.data, cfg, self.device, self.autocast, self.ckpt, self.out, {
            "params": count_parameters(self.model), "steps": step, "epochs": stream.epochs,
            **clock_metrics(clock, step), **diverged_metrics(cfg, clock),
            "padding_fraction": stream.padding_fraction, "grad_accumulation": stream.accum,
            "batch_shapes": stream.n_shapes or None, "stopped_by_time": self.out_of_time() and step < cfg.steps,
            **(rule.metrics(step, cfg.steps) if rule else {})},
            data_cfg=self.data_cfg, rule=rule)


def at_initialisation(measures, context, cfg: TrainConfig, clock: dict, step: int, log, dev_ppl,
                      is_main: bool) -> None:
    """Rank 0, before the first update: the measurements taken on the initialisation, and (stop_diverged) the dev
    PPL that divergence is measured from (dev_ppl(), once: a resumed run keeps it in its clock)."""
    if not is_main:
        return
    if step == 0 and any(m.at_init for m, _ in measures):
        log.record(0, measured(measures, "at_init", context))
    if cfg.stop_diverged and "dev_ppl_start" not in clock:
        clock["dev_ppl_start"] = dev_ppl()
        log.record(0, {"dev_ppl": clock["dev_ppl_start"]})


def stopped_already(rule: Patience | None, clock: dict) -> bool:
    """A run resumed from the checkpoint at which the rule had already stopped it (killed while finishing), or
    at which it diverged, stops again at once instead of training on."""
    return bool(rule) and rule.exhausted or "diverged_step" in clock


def diverged_on_dev(cfg: TrainConfig, clock: dict, step: int, ranks: Ranks, dev_ppl: float | bool) -> bool:
    """stop_diverged, after a dev evaluation: rank 0's dev PPL above the start, on every rank (True: stop)."""
    # not (dev_ppl <= start): a NaN dev PPL (weights gone non-finite while the loss was not) is divergence too
    if not cfg.stop_diverged or not ranks.agree(dev_ppl is not False and not dev_ppl <= clock["dev_ppl_start"]):
        return False
    clock["diverged_step"] = step
    return True


def nonfinite(loss: float, step: int, cfg: TrainConfig, clock: dict) -> bool:
    """A non-finite loss at `step`: with stop_diverged the run diverged there (True: stop); else an error."""
    if cfg.stop_diverged:
        clock["diverged_step"] = step
        return True
    raise FloatingPointError(f"loss became {loss} at step {step}; the update was skipped.")


def diverged_metrics(cfg: TrainConfig, clock: dict) -> dict:
    """stop_diverged: whether the run diverged, where, and the dev PPL it is scored by when it did (its start)."""
    if not cfg.stop_diverged:
        return {}
    step = clock.get("diverged_step")
    return {"diverged": float(step is not None), "diverged_step": step, "dev_ppl_start": clock.get("dev_ppl_start")}


def restored_rule(cfg: TrainConfig, ckpt: Checkpointer) -> Patience | None:
    """The patience rule (None when cfg.patience is 0) in the state the restored checkpoint saved, with the
    checkpoints it may still score pinned against pruning."""
    if not cfg.patience:
        return None
    rule = Patience(cfg.patience, cfg.lr_patience, cfg.decay_times)
    rule.load_state_dict(ckpt.rule_state)
    ckpt.pin(window(ckpt.steps(), rule.best_step, cfg.average_last))
    return rule


def agree_on_rule(rule: Patience, ranks: Ranks) -> bool:
    """After a dev evaluation (rank 0's alone): rank 0's decisions on every rank, the stop (returned) and the
    plateau schedule's shrinks, so that every rank steps at the same rate."""
    if ranks.world > 1 and rule.lr_patience:
        rule.shrinks = int(ranks.sum(rule.shrinks if ranks.is_main else 0)[0])
    return ranks.agree(rule.exhausted)


def clock_metrics(clock: dict, step: int) -> dict:
    t = clock["train_seconds"]
    return {"train_seconds": t, "tokens_per_s": clock["tokens_seen"] / max(t, 1e-9),
            "step_time_s": t / max(step, 1), "tokens_seen": clock["tokens_seen"],
            "loop_seconds": clock.get("wall_seconds", t), "loop_cpu_seconds": clock.get("cpu_seconds", 0.0)}
