"""Training (§5): Adam(0.9, 0.98, 1e-9), the warmup-then-inverse-square-root schedule, label smoothing,
token-budget batches with gradient accumulation, checkpoints that resume exactly, checkpoint averaging,
bf16 autocast on CUDA. One function, `train`, used by `python -m harness train` and by study trials.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from model import Transformer, TransformerConfig, count_parameters

from harness.system import pin_allocator
from harness.data.batching import (Prefetcher, bucket_batches, epoch_order, packed_batches, padding_fraction,
                            token_batches)
from harness.data.corpus import DataConfig, Dataset, load_dataset
from harness.errors import UserError
from harness.eval.evaluate import evaluate, perplexity

CHECKPOINT_VERSION = 1


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 100_000               # §5.2: 100 k steps for base, 300 k for big
    warmup: int = 4000                 # §5.3 warmup_steps
    lr_scale: float = 1.0              # multiplies the paper's schedule (1.0 is the paper's formula)
    label_smoothing: float = 0.1       # §5.4 eps_ls
    max_tokens: int = 25_000           # padded tokens per side in one forward pass (a micro-batch)
    batch_tokens: int = 25_000         # tokens per side in one update; > max_tokens accumulates gradients
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_eps: float = 1e-9
    seed: int = 0
    max_minutes: float = 0.0           # stop training after this wall time (0: no limit)
    checkpoint_every: int = 1000       # steps between checkpoints (0: only by time and at the end)
    checkpoint_minutes: float = 10.0   # §6.1: checkpoints written every 10 minutes
    average_last: int = 0              # average the last n checkpoints (Table 2: 5 base, 20 big; Table 3: none)
    eval_every: int = 0                # steps between dev evaluations (0: at the end only)
    beam_size: int = 4                 # §6.1: beam 4, alpha 0.6, max length input + 50
    alpha: float = 0.6
    max_extra: int = 50
    bleu_sentences: int = 0            # dev sentences decoded for BLEU (0: all)
    eval_test: bool = False            # also score the test set (Table 2)
    # DEVIATION (off by default): constrained decodes parses a second time under a tree constraint
    # (harness/eval/parse.py TreeConstraint), reported beside the paper's unconstrained search + repair.
    constrained: bool = False          # parsing: also decode under the tree constraint (its own column)
    log_every: int = 50
    device: str = "auto"               # auto | cpu | cuda | cuda:N
    amp: bool = True                   # bf16 autocast on CUDA (fp32 master weights); ignored on CPU
    compile: bool = False              # torch.compile the encoder-decoder (the projection + loss stay eager)
    compile_mode: str = "default"      # torch.compile mode; reduce-overhead adds CUDA graphs (static shapes)
    # DEVIATION (off by default): shape_buckets groups pairs by rounded length into batches of fixed rows,
    # so a batch carries up to a fifth more padding and fewer real tokens than §5.1's length-sorted batches.
    shape_buckets: bool = False        # batches of a few fixed shapes (bucket_batches): one compile per shape
    prefetch: int = 2                  # batches gathered ahead on a background thread (0: in the loop)
    # DEVIATION (off by default): pack fills max_tokens with real tokens, so a packed batch holds more pairs
    # than a padded one of the same budget (the padding fraction more); each sentence's arithmetic is unchanged.
    pack: bool = False                 # sentences end to end without padding, variable-length attention (GPU)

    def validate(self) -> None:
        for name in ("steps", "max_tokens", "batch_tokens", "log_every", "beam_size"):
            if getattr(self, name) < 1:
                raise UserError(f"train setting {name} must be at least 1, got {getattr(self, name)}.")
        for name in ("warmup", "checkpoint_every", "average_last", "eval_every", "bleu_sentences", "max_extra"):
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
        if self.pack and self.shape_buckets:
            raise UserError("pack and shape_buckets exclude each other: a packed batch has no padding to bucket; "
                            "set one of them.")


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def training_loss(model: Transformer, cfg: TrainConfig, n_shapes: int = 0) -> Callable:
    """model.loss, or with cfg.compile the same loss around a compiled encoder-decoder (`model.hidden`):
    the projection and the loss stay eager (model/loss.py: no (tokens x vocab) tensor), and the compiled
    part has no data-dependent shapes. With shape buckets (n_shapes > 0) the graphs are static, one per
    shape, which is what CUDA graphs (compile_mode reduce-overhead) need; without, one dynamic graph."""
    if not cfg.compile:
        return model.loss
    if n_shapes:
        # Allow a graph per bucket shape (dynamo's default limit is 8 per code object).
        limit = max(8, n_shapes + 2)
        for name in ("recompile_limit", "cache_size_limit"):
            if hasattr(torch._dynamo.config, name):
                setattr(torch._dynamo.config, name, max(getattr(torch._dynamo.config, name), limit))
    body = torch.compile(model.hidden, dynamic=not n_shapes, mode=cfg.compile_mode)   # packed: dynamic

    def loss(src, tgt_in, tgt_out, label_smoothing, packing=None):
        return model.loss(src, tgt_in, tgt_out, label_smoothing, hidden=body(src, tgt_in, packing))
    return loss


def _compiled_graphs() -> int:
    """Graphs torch.compile has produced in this process (each recompilation for a new shape adds one)."""
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])


def learning_rate(step: int, d_model: int, warmup: int, scale: float = 1.0) -> float:
    """§5.3: lrate = d_model^-0.5 * min(step^-0.5, step * warmup^-1.5), step counted from 1."""
    step = max(step, 1)
    return scale * d_model ** -0.5 * min(step ** -0.5, step * warmup ** -1.5)


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UserError(f"device {name!r} is not a torch device; use auto, cpu, cuda or cuda:N.") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UserError(f"device {name!r} asked for CUDA but this machine has no CUDA device; use cpu or auto.")
    return device


def autocast_for(device: torch.device, amp: bool) -> Callable[[], contextlib.AbstractContextManager]:
    if device.type == "cuda" and amp:
        return lambda: torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext


# --- checkpoints: written atomically, loaded with weights_only=True ---

def save_checkpoint(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:        # written whole and synced, then renamed: a reader sees all or nothing
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a truncated or foreign file: say which, never unpickle arbitrary objects
        raise UserError(f"checkpoint {path} cannot be read ({type(err).__name__}); delete it to restart "
                        "from the previous one.") from None


def check_writable(path: Path, what: str, advice: str, keep: bool = True) -> None:
    """Create `path` if needed and write a file in it, or raise one sentence; keep=False removes a directory
    this check created (the caller only wanted to know)."""
    existed = path.exists()
    try:
        path.mkdir(parents=True, exist_ok=True)
        (path / ".write_test").touch()
        (path / ".write_test").unlink()
        if not keep and not existed:
            path.rmdir()
    except OSError as err:
        raise UserError(f"{what} {path} cannot be written ({err.strerror or type(err).__name__}); "
                        f"{advice}.") from None


def latest_readable_checkpoint(ckpt_dir: Path) -> dict | None:
    """The newest checkpoint that loads. One that does not (truncated, corrupted) is renamed *.corrupt, with
    a warning, and the one before it is used; the trial then repeats the steps in between."""
    for path in reversed(list_checkpoints(ckpt_dir)):
        try:
            return load_checkpoint(path)
        except UserError as err:
            path.rename(path.with_name(path.name + ".corrupt"))
            print(f"warning: {err} Renamed it {path.name}.corrupt; resuming from the one before.",
                  file=sys.stderr, flush=True)
    return None


def _inject(kind: str, step: int, out: Path, loss_sum: torch.Tensor) -> torch.Tensor:
    """Fault injection for the reliability tests; see harness/trial.py injected_fault."""
    if kind == "nan":
        return loss_sum * float("nan")
    if kind == "oom":
        raise torch.OutOfMemoryError(f"CUDA out of memory (injected at step {step})")
    marker = out / f".crashed_at_{step}"
    if kind == "crash" and not marker.exists():
        marker.touch()
        os._exit(17)                 # the worker dies without cleanup, as a killed process does
    return loss_sum


def list_checkpoints(ckpt_dir: Path) -> list[Path]:
    return sorted(ckpt_dir.glob("step_*.pt"))


def average_checkpoints(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the model weights of several checkpoints (§6.1: last 5 for base, 20 for big)."""
    avg: dict[str, torch.Tensor] = {}
    for p in paths:
        for k, v in load_checkpoint(p)["model"].items():
            avg[k] = avg.get(k, 0) + v.double() / len(paths)
    return {k: v.float() for k, v in avg.items()}


class Progress:
    """One terminal line per log interval: step, loss, lr, tokens/s, ETA. Silent when quiet."""

    def __init__(self, total_steps: int, max_minutes: float, quiet: bool):
        self.total, self.max_s, self.quiet = total_steps, max_minutes * 60, quiet
        self.start = time.perf_counter()

    def __call__(self, step: int, loss: float, lr: float, tok_s: float, elapsed: float) -> None:
        if self.quiet:
            return
        per_step = elapsed / max(step, 1)
        left = (self.total - step) * per_step
        if self.max_s:
            left = min(left, max(self.max_s - elapsed, 0))
        print(f"step {step:>7}/{self.total} | loss {loss:7.4f} | lr {lr:.2e} | {tok_s / 1000:7.1f} k tok/s "
              f"| ETA {int(left // 60)}m{int(left % 60):02d}s", file=sys.stderr, flush=True)


def train(model_cfg: TransformerConfig, train_cfg: TrainConfig, data_cfg: DataConfig, out_dir: str | Path, *,
          quiet: bool = False, dataset: Dataset | None = None,
          on_log: Callable[[int, dict], None] | None = None, fault: tuple[str, int] | None = None) -> dict:
    """Train one model; resumes from out_dir/checkpoints when present. Returns the final metrics.

    on_log(step, metrics) receives the periodic training metrics (the study runner forwards them to MLflow).
    fault: (kind, step) injected by the reliability tests (harness/trial.py injected_fault)."""
    train_cfg.validate()
    device = resolve_device(train_cfg.device)
    autocast = autocast_for(device, train_cfg.amp)
    if device.type == "cpu":
        pin_allocator()               # reuse the large blocks of every step instead of page-faulting them again
    out = Path(out_dir)
    check_writable(out, "output directory", "choose a writable path")

    data = dataset or load_dataset(data_cfg, model_cfg.vocab_size, model_cfg.max_len)
    model_cfg = model_cfg.replace(vocab_size=data.tokenizer.vocab_size)
    resolved = {"model": model_cfg.to_dict(), "train": dataclasses.asdict(train_cfg),
                "data": dataclasses.asdict(data_cfg)}
    (out / "config.json").write_text(json.dumps(resolved, indent=2) + "\n")

    torch.manual_seed(train_cfg.seed)
    model = Transformer(model_cfg).to(device)
    n_params = count_parameters(model)
    opt = torch.optim.Adam(model.parameters(), lr=1.0, betas=(train_cfg.adam_beta1, train_cfg.adam_beta2),
                           eps=train_cfg.adam_eps, fused=True)   # one kernel per parameter, CPU and CUDA
    lr_at = lambda s: learning_rate(s, model_cfg.d_model, train_cfg.warmup, train_cfg.lr_scale)  # noqa: E731

    train_data = data.train.data
    shapes = None
    if train_cfg.shape_buckets:
        batches, shapes = bucket_batches(train_data.src_lens, train_data.tgt_lens, train_cfg.max_tokens)
    elif train_cfg.pack:
        batches = packed_batches(train_data.src_lens, train_data.tgt_lens, train_cfg.max_tokens)
    else:
        batches = token_batches(train_data.src_lens, train_data.tgt_lens, train_cfg.max_tokens)
    if not batches:
        raise UserError(f"training data in {data.root} holds no usable pairs (all longer than max_len?).")
    accum = max(1, math.ceil(train_cfg.batch_tokens / train_cfg.max_tokens))
    pad_frac = 0.0 if train_cfg.pack else padding_fraction(batches, train_data.src_lens, train_data.tgt_lens, shapes)
    loss_fn = training_loss(model, train_cfg, n_shapes=len(set(shapes)) if shapes else 0)

    ckpt_dir = out / "checkpoints"
    step, epoch, position, train_seconds, tokens_seen = 0, 0, 0, 0.0, 0
    state = latest_readable_checkpoint(ckpt_dir)
    if state is not None:
        if state.get("version") != CHECKPOINT_VERSION or state.get("config") != resolved:
            raise UserError(f"checkpoint {list_checkpoints(ckpt_dir)[-1]} was written by another config or "
                            "version; use a new --out directory or delete its checkpoints.")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step, epoch, position = state["step"], state["epoch"], state["position"]
        train_seconds, tokens_seen = state["train_seconds"], state["tokens_seen"]
        torch.set_rng_state(state["rng"]["torch"])
        if device.type == "cuda" and state["rng"].get("cuda") is not None:
            torch.cuda.set_rng_state(state["rng"]["cuda"], device)

    def checkpoint() -> None:
        rng = {"torch": torch.get_rng_state(),
               "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}
        save_checkpoint(ckpt_dir / f"step_{step:08d}.pt", {
            "version": CHECKPOINT_VERSION, "config": resolved, "model": model.state_dict(),
            "optimizer": opt.state_dict(), "step": step, "epoch": epoch, "position": position,
            "train_seconds": train_seconds, "tokens_seen": tokens_seen, "rng": rng})
        keep = max(train_cfg.average_last, 2)
        for old in list_checkpoints(ckpt_dir)[:-keep]:
            old.unlink()

    # The data stream: (batch, epoch, position after it). It runs ahead of training on a thread, so the
    # loop keeps its own (epoch, position): that of the last batch it consumed, which checkpoints record.
    stream = {"epoch": epoch, "position": position, "order": epoch_order(len(batches), train_cfg.seed, epoch)}

    def produce():
        if stream["position"] >= len(stream["order"]):
            stream["epoch"], stream["position"] = stream["epoch"] + 1, 0
            stream["order"] = epoch_order(len(batches), train_cfg.seed, stream["epoch"])
        i = stream["order"][stream["position"]]
        stream["position"] += 1
        if train_cfg.pack:
            b = train_data.collate_packed(batches[i])
        else:
            b = train_data.collate(batches[i], shapes[i] if shapes else None)
        return (b.pin_memory() if device.type == "cuda" else b), stream["epoch"], stream["position"]
    feed = Prefetcher(produce, train_cfg.prefetch) if train_cfg.prefetch else None

    progress = Progress(train_cfg.steps, train_cfg.max_minutes, quiet)
    # One JSON row per log interval, kept across resumes; rows past the checkpoint resumed from (written by
    # an attempt that died later) are dropped, since those steps are about to be trained again.
    history_path = out / "metrics.jsonl"
    if history_path.exists():
        rows = [ln for ln in history_path.read_text().splitlines() if ln.strip()]
        kept = [ln for ln in rows if json.loads(ln).get("step", 0) <= step]
        if len(kept) < len(rows):
            history_path.write_text("".join(ln + "\n" for ln in kept))
    history = history_path.open("a")

    def record(step: int, row: dict) -> None:
        history.write(json.dumps({"step": step, **row}) + "\n")
        history.flush()
        if on_log:
            on_log(step, row)
    log_tokens, log_loss, log_count, log_time = 0, 0.0, 0, 0.0
    last_ckpt_time = time.perf_counter()
    stopped_by_time = False
    model.train()
    try:
        while step < train_cfg.steps:
            if train_cfg.max_minutes and train_seconds >= train_cfg.max_minutes * 60:
                stopped_by_time = True
                break
            t0 = time.perf_counter()
            micro = []
            for _ in range(accum):
                b, epoch, position = feed.get() if feed else produce()
                micro.append(b)
            n_tokens = sum(b.n_tgt_tokens for b in micro)
            for g in opt.param_groups:
                g["lr"] = lr_at(step + 1)
            opt.zero_grad(set_to_none=True)
            loss_sum = torch.zeros((), device=device)
            for b in micro:
                b = b.to(device)
                with autocast():
                    loss, _, _ = loss_fn(b.src, b.tgt_in, b.tgt_out, train_cfg.label_smoothing, packing=b.packing)
                (loss / n_tokens).backward()            # the update averages over all target tokens of the batch
                loss_sum += loss.detach()
            if fault and fault[1] == step + 1:
                loss_sum = _inject(fault[0], step + 1, out, loss_sum)
            loss_value = float(loss_sum) / n_tokens
            if not math.isfinite(loss_value):
                raise FloatingPointError(f"loss became {loss_value} at step {step + 1}; the update was skipped.")
            opt.step()
            step += 1
            dt = time.perf_counter() - t0
            train_seconds += dt
            tokens_seen += n_tokens
            log_tokens, log_loss, log_count, log_time = log_tokens + n_tokens, log_loss + loss_value, log_count + 1, log_time + dt
            if step % train_cfg.log_every == 0 or step == train_cfg.steps:
                row = {"train_loss": log_loss / log_count, "lr": lr_at(step), "tokens_per_s": log_tokens / log_time,
                       "step_time_s": log_time / log_count, "train_seconds": train_seconds, "epoch": epoch}
                progress(step, row["train_loss"], row["lr"], row["tokens_per_s"], train_seconds)
                record(step, row)
                log_tokens, log_loss, log_count, log_time = 0, 0.0, 0, 0.0
            if train_cfg.eval_every and step % train_cfg.eval_every == 0 and step < train_cfg.steps:
                record(step, {"dev_ppl": perplexity(model, data.dev.data, train_cfg.max_tokens, device, autocast)})
                model.train()
            now = time.perf_counter()
            if (train_cfg.checkpoint_every and step % train_cfg.checkpoint_every == 0) or \
                    (train_cfg.checkpoint_minutes and now - last_ckpt_time >= train_cfg.checkpoint_minutes * 60):
                checkpoint()
                last_ckpt_time = now
    finally:
        if feed:
            feed.close()
    if not (ckpt_dir / f"step_{step:08d}.pt").exists():     # the final state, unless just written
        checkpoint()

    history.close()

    eval_kwargs = dict(beam_size=train_cfg.beam_size, alpha=train_cfg.alpha, max_extra=train_cfg.max_extra,
                       max_tokens=train_cfg.max_tokens, bleu_sentences=train_cfg.bleu_sentences or None,
                       autocast=autocast, constrained=train_cfg.constrained)
    t_eval = time.perf_counter()
    averaged, last_metrics = 0, {}
    if train_cfg.average_last > 1:
        if train_cfg.eval_test:   # what averaging buys: the last checkpoint alone, scored on the test set first
            scored, _ = evaluate(model, data.tokenizer, data.test, device, prefix="test", **eval_kwargs)
            last_metrics = {f"{k}_last": v for k, v in scored.items() if isinstance(v, (int, float))}
        paths = list_checkpoints(ckpt_dir)[-train_cfg.average_last:]
        model.load_state_dict(average_checkpoints(paths))
        averaged = len(paths)
    metrics, hyps = evaluate(model, data.tokenizer, data.dev, device, prefix="dev", **eval_kwargs)
    if train_cfg.eval_test:
        test_metrics, _ = evaluate(model, data.tokenizer, data.test, device, prefix="test", **eval_kwargs)
        metrics.update(test_metrics)
    metrics.update(last_metrics)
    metrics.update({
        "params": n_params, "steps": step, "epochs": epoch + position / len(batches), "train_seconds": train_seconds,
        "tokens_per_s": tokens_seen / max(train_seconds, 1e-9), "step_time_s": train_seconds / max(step, 1),
        "tokens_seen": tokens_seen, "padding_fraction": pad_frac, "grad_accumulation": accum,
        "batch_shapes": len(set(shapes)) if shapes else None,
        "compiled_graphs": _compiled_graphs() if train_cfg.compile else None,
        "averaged_checkpoints": averaged, "stopped_by_time": stopped_by_time,
        "eval_seconds": time.perf_counter() - t_eval, "device": str(device), "vocab_size": model_cfg.vocab_size,
        "dev_truncated": data.dev.data.truncated, "mean_src_len": float(train_data.src_lens.mean()),
        "mean_tgt_len": float(train_data.tgt_lens.mean())})
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    with (out / "dev_translations.txt").open("w", encoding="utf-8") as f:
        for src, ref, hyp in list(zip(data.dev.src_text, data.dev.tgt_text, hyps))[:50]:
            f.write(f"SRC {src}\nREF {ref}\nHYP {hyp}\n\n")
    return metrics


# Training settings that go with each model preset. tiny: shrunk so that a run fits a CPU in minutes.
TRAIN_PRESETS: dict[str, TrainConfig] = {
    "paper_base": TrainConfig(),
    "paper_big": TrainConfig(steps=300_000),
    "modern_base": TrainConfig(),
    "tiny": TrainConfig(steps=1500, warmup=300, max_tokens=4096, batch_tokens=4096, checkpoint_every=500,
                        checkpoint_minutes=0.0, log_every=50, bleu_sentences=500),
}
