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
    out = Path(out_dir)
    device, data, resolved, model, opt = setup(model_cfg, cfg, data_cfg, out, dataset, ranks)
    if not quiet and ranks.is_main:
        print(device_note(cfg.device, device, cfg.amp, cfg.cpu_amp), flush=True)
    autocast = autocast_for(device, cfg.amp, cfg.cpu_amp)
    stream = BatchStream(data.train.data, cfg, device, where=str(data.root), ranks=ranks)
    loss_fn = training_loss(model, cfg, n_shapes=stream.n_shapes)
    ddp = data_parallel(model, loss_fn, device, ranks, cfg.seed)
    ckpt = Checkpointer(out / "checkpoints", resolved, device, keep=max(cfg.average_last, 2),
                        every=cfg.checkpoint_every, minutes=cfg.checkpoint_minutes, ranks=ranks)
    step, clock = ckpt.restore(model, opt, stream)    # every rank, from the same files
    rule = restored_rule(cfg, ckpt)                     # train until dev stops improving (patience.py), or None
    lr_at = lambda s: rate_at(s, cfg, model.cfg.d_model, rule.shrinks if rule else 0)  # noqa: E731
    log = MetricsLog(out / "metrics.jsonl", steps=cfg.steps, log_every=cfg.log_every, eval_every=cfg.eval_every,
                     max_minutes=cfg.max_minutes, quiet=quiet, on_log=on_log, is_main=ranks.is_main,
                     eval_last=rule is not None).open(step)
    out_of_time = lambda: bool(cfg.max_minutes) and clock["train_seconds"] >= cfg.max_minutes * 60  # noqa: E731
    stop_now = stopped_already(rule, clock)
    # The loop's wall time (steps, evaluations, checkpoints) summed over every process that trained this run:
    # what a trial cost when it ran across interruptions and sessions (train_seconds counts the steps alone).
    wall_before, t_loop = clock.get("wall_seconds", 0.0), time.perf_counter()
    cpu_before, cores = clock.get("cpu_seconds", 0.0), torch.get_num_threads() * ranks.world
    measures = cfg.active()
    context = lambda: Context(model, data.tokenizer, data.dev, data.tgt_lang, data_cfg, cfg, device,  # noqa: E731
                              autocast, out, clock, step)
    dev_perplexity = lambda: perplexity(model, data.dev.data, cfg.max_tokens, device, autocast)  # noqa: E731
    at_initialisation(measures, context, cfg, clock, step, log, dev_perplexity, ranks.is_main)
    model.train()
    with stream:
        while step < cfg.steps and not out_of_time() and not stop_now:
            t0 = time.perf_counter()
            loss_sum, n_tokens = train_step(model, opt, loss_fn, stream.next_update(), lr_at(step + 1),
                                            cfg.label_smoothing, device, autocast, ranks, ddp)
            for hook in hooks:
                loss_sum = hook(step + 1, loss_sum)
            loss = ranks.sum(loss_sum)[0] / n_tokens
            if not math.isfinite(loss) and nonfinite(loss, step + 1, cfg, clock):
                break                          # diverged: the update is skipped and the run ends here
            if cfg.clip_norm:
                torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.clip_norm)
            opt.step()
            step, dt = step + 1, time.perf_counter() - t0
            clock["train_seconds"] += dt
            clock["tokens_seen"] += n_tokens
            log.train_step(step, loss, n_tokens, dt, lr_at(step), clock["train_seconds"], stream.epoch)
            evaluated = log.should_eval(step)
            if evaluated and ranks.is_main:
                dev_ppl = dev_perplexity()
                log.record(step, {"dev_ppl": dev_ppl, **measured(measures, "at_eval", context)})
                if rule and rule.update(step, dev_ppl):      # a new best: keep the window ending here
                    ckpt.pin(window(sorted(set(ckpt.steps()) | {step}), step, cfg.average_last))
                model.train()
            if evaluated:      # the rule's decision, and (stop_diverged) dev above where it began: rank 0's
                stop_now = (agree_on_rule(rule, ranks) if rule else stop_now) or \
                    diverged_on_dev(cfg, clock, step, ranks, ranks.is_main and dev_ppl)
            if step == cfg.steps and not evaluated and ranks.is_main:   # the curves' last point, before averaging
                last = [(m, s) for m, s in measures if m.eval_at_last]
                if last:
                    log.record(step, measured(last, "at_eval", context))
                    model.train()
            looped = time.perf_counter() - t_loop
            clock["wall_seconds"], clock["cpu_seconds"] = wall_before + looped, cpu_before + looped * cores
            rule_state = rule.state_dict() if rule else None
            ckpt.maybe_save(step, model, opt, stream.state_dict(), clock, rule_state, force=bool(rule) and evaluated)
    ckpt.save_final(step, model, opt, stream.state_dict(), clock, rule.state_dict() if rule else None)
    log.close()
    if not ranks.is_main:
        return {}
    return finish(model, data, cfg, device, autocast, ckpt, out, {
        "params": count_parameters(model), "steps": step, "epochs": stream.epochs, **clock_metrics(clock, step),
        **diverged_metrics(cfg, clock),
        "padding_fraction": stream.padding_fraction, "grad_accumulation": stream.accum,
        "batch_shapes": stream.n_shapes or None, "stopped_by_time": out_of_time() and step < cfg.steps,
        **(rule.metrics(step, cfg.steps) if rule else {})},
        data_cfg=data_cfg, rule=rule)


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
