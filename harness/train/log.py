"""What a run writes as it trains: a progress line and a metrics.jsonl row every `log_every` steps, the
dev perplexity every `eval_every` steps, each row also handed to `on_log` (the study runner forwards it to
MLflow). Only the main rank writes (is_main)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Callable

from harness.io import atomic_write


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


class MetricsLog:
    """metrics.jsonl: one JSON row per log interval, kept across resumes. Rows past the step resumed from
    (written by an attempt that died later) are dropped on open, since those steps are trained again."""

    def __init__(self, path: Path, *, steps: int, log_every: int, eval_every: int, max_minutes: float = 0.0,
                 quiet: bool = False, on_log: Callable[[int, dict], None] | None = None, is_main: bool = True,
                 eval_last: bool = False):
        self.path, self.steps, self.log_every, self.eval_every = Path(path), steps, log_every, eval_every
        self.eval_last = eval_last     # the patience rule evaluates the last step too (it may be the best)
        self.on_log, self.is_main = on_log, is_main
        self.progress = Progress(steps, max_minutes, quiet or not is_main)
        self._file = None
        self._reset()

    def _reset(self) -> None:
        self.tokens, self.loss, self.count, self.time = 0, 0.0, 0, 0.0

    def open(self, resumed_step: int) -> "MetricsLog":
        if not self.is_main:
            return self
        if self.path.exists():
            rows = [ln for ln in self.path.read_text().splitlines() if ln.strip()]
            kept = [ln for ln in rows if json.loads(ln).get("step", 0) <= resumed_step]
            if len(kept) < len(rows):
                atomic_write(self.path, "".join(ln + "\n" for ln in kept))
        self._file = self.path.open("a")
        return self

    def record(self, step: int, row: dict) -> None:
        if not self.is_main:
            return
        self._file.write(json.dumps({"step": step, **row}) + "\n")
        self._file.flush()
        if self.on_log:
            self.on_log(step, row)

    def train_step(self, step: int, loss: float, n_tokens: int, dt: float, lr: float, train_seconds: float,
                   epoch: int) -> None:
        """Count one update; every log_every steps (and at the last) write their means and start again."""
        self.tokens, self.loss, self.count, self.time = \
            self.tokens + n_tokens, self.loss + loss, self.count + 1, self.time + dt
        if step % self.log_every == 0 or step == self.steps:
            row = {"train_loss": self.loss / self.count, "lr": lr, "tokens_per_s": self.tokens / self.time,
                   "step_time_s": self.time / self.count, "train_seconds": train_seconds, "epoch": epoch}
            self.progress(step, row["train_loss"], row["lr"], row["tokens_per_s"], train_seconds)
            self.record(step, row)
            self._reset()

    def should_eval(self, step: int) -> bool:
        """A dev evaluation after this step: every eval_every steps, except the last (the finish scores it),
        which is evaluated too under the patience rule (eval_last)."""
        if self.eval_last and step == self.steps:
            return True
        return bool(self.eval_every) and step % self.eval_every == 0 and step < self.steps

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
