"""The study's live view on the driver's terminal: trials finished, running, pending and failed; each
running trial's step, loss and tokens/s; and the time left. The trials log to MLflow from wherever they
run (Ray workers, other nodes), so the driver reads its progress back from there, polling the child runs
of its own parent run every few seconds.

On a terminal it is a set of tqdm bars refreshed in place (one for the study, one per running slot);
otherwise (a log file, CI) one plain line a minute. The estimate of the time left is measured, not
guessed: the trials' training rate in FLOP/s (analytic FLOPs per step x steps done / training seconds),
applied to every remaining step of every trial, plus the evaluation time the finished trials took per
second of training, packed onto the study's slots as the runner schedules them (longest first)."""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from typing import Callable

from harness.trial import Trial


def _steps(t: Trial) -> int:
    """A trial's training steps (a probe row counts as one)."""
    return t.train.steps if t.train is not None else 1


def time_left(trials: list[Trial], flops_per_step: dict[str, float], seen: dict[str, dict], slots: int
              ) -> float | None:
    """Seconds until the study ends, from what the child runs have logged; None before any rate is known. A
    trial's seconds a step: its own where it logged some, else its row's other seeds', else a line through the
    measured rows' seconds a step against their FLOPs a step (per-step overhead, then a cost per FLOP: a small
    row runs fewer FLOPs a second than a large one), each trial's remaining steps on the free slots."""
    per_step, eval_share = {}, []
    for t in trials:
        s = seen.get(t.key)
        if s and s["step"] and s["train_seconds"]:
            per_step[t.key] = s["train_seconds"] / s["step"]
            if s["status"] == "FINISHED" and s["end"]:
                wall = (s["end"] - s["start"]) / 1000
                eval_share.append(max(0.0, wall - s["train_seconds"]) / s["train_seconds"])
    if not per_step:
        return None
    by_row: dict[str, list[float]] = {}
    for t in trials:
        if t.key in per_step:
            by_row.setdefault(t.row, []).append(per_step[t.key])
    rows = {row: statistics.median(v) for row, v in by_row.items()}
    flops = {t.row: flops_per_step[t.key] for t in trials}
    guess = step_seconds_line([(flops[row], sec) for row, sec in rows.items()])
    share = statistics.mean(eval_share) if eval_share else 0.1
    busy, waiting = [], []
    for t in trials:
        s = seen.get(t.key, {"status": "PENDING", "step": 0})
        if s["status"] in ("FINISHED", "FAILED", "KILLED"):
            continue
        sec = per_step.get(t.key) or rows.get(t.row) or guess(flops_per_step[t.key])
        steps = _steps(t)
        left = max(0, steps - s["step"]) * sec + share * steps * sec
        (busy if s["status"] == "RUNNING" else waiting).append(left)
    free = sorted(busy) + [0.0] * max(0, slots - len(busy))
    for left in sorted(waiting, reverse=True):           # the runner starts the longest first
        i = free.index(min(free))
        free[i] += left
    return max(free, default=0.0)


def step_seconds_line(points: list[tuple[float, float]]) -> Callable[[float], float]:
    """seconds a step as a + b x FLOPs a step, least squares over the measured rows' (FLOPs, seconds); with one
    row, or where the line would have a < 0 or b < 0, in proportion to FLOPs (the median seconds per FLOP)."""
    per_flop = statistics.median(sec / f for f, sec in points if f > 0) if any(f > 0 for f, _ in points) else 0.0
    proportional = (lambda f: per_flop * f) if per_flop else (lambda f: statistics.median(s for _, s in points))
    xs = [f for f, _ in points]
    if len(set(xs)) < 2:
        return proportional
    mx, my = statistics.mean(xs), statistics.mean(s for _, s in points)
    b = sum((f - mx) * (s - my) for f, s in points) / sum((f - mx) ** 2 for f in xs)
    a = my - b * mx
    return (lambda f: a + b * f) if a >= 0 and b >= 0 else proportional


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    return f"{seconds / 60:.0f} min" if seconds >= 90 else f"{seconds:.0f} s"


class StudyProgress:
    """A polling thread that draws the view until stop(). poll() -> {trial_key: progress} (tracking's
    trial_progress for this parent run)."""

    def __init__(self, trials: list[Trial], flops_per_step: dict[str, float], slots: int,
                 poll: Callable[[], dict[str, dict]], tty: bool | None = None, every: float | None = None):
        self.trials, self.flops, self.slots, self.poll = trials, flops_per_step, max(1, slots), poll
        self.tty = sys.stderr.isatty() if tty is None else tty
        default = float(os.environ.get("HARNESS_PROGRESS_EVERY_S", "0")) or (5.0 if self.tty else 60.0)
        self.every = every if every is not None else default
        self._stop, self._thread, self._bars = threading.Event(), None, []
        self.t0 = time.time()

    def start(self) -> "StudyProgress":
        if self.tty:
            from tqdm import tqdm
            self._bars = [tqdm(total=len(self.trials), desc="study", unit="trial", position=0, leave=False,
                               file=sys.stderr, bar_format="{desc} {bar:20} {n}/{total} trials {postfix}")]
            self._bars += [tqdm(total=1, desc=f"slot {i + 1}", position=i + 1, leave=False, file=sys.stderr,
                                bar_format="{desc:<18} {bar:20} {n}/{total} {postfix}")
                           for i in range(min(self.slots, 8))]
        self._thread = threading.Thread(target=self._loop, name="study-progress", daemon=True)
        self._thread.start()
        return self

    def say(self, line: str) -> None:
        """A line (a trial finished) that must not be overwritten by the bars."""
        if self._bars:
            from tqdm import tqdm
            tqdm.write(line, file=sys.stderr)
        else:
            print(line, flush=True)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        for bar in self._bars:
            bar.close()
        self._bars = []

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            try:
                self.draw(self.poll())
            except Exception:        # the store busy or briefly away: the next poll tries again
                continue

    def draw(self, seen: dict[str, dict]) -> str:
        """Render one snapshot; returns the plain line (what a non-terminal gets)."""
        count = {k: 0 for k in ("FINISHED", "RUNNING", "FAILED")}
        for t in self.trials:
            status = seen.get(t.key, {}).get("status")
            if status in count:
                count[status] += 1
        pending = len(self.trials) - sum(count.values())
        left = time_left(self.trials, self.flops, seen, self.slots)
        running = [(t, seen[t.key]) for t in self.trials if seen.get(t.key, {}).get("status") == "RUNNING"]
        head = (f"{count['FINISHED']} finished, {count['RUNNING']} running, {pending} pending, "
                f"{count['FAILED']} failed; {_duration(time.time() - self.t0)} in, about {_duration(left)} left")
        cells = [f"{t.key} {s['step']}/{_steps(t)}" + (f" loss {s['loss']:.3f}" if s.get("loss") else "")
                 + (f" {s['tokens_per_s'] / 1000:.1f} k tok/s" if s.get("tokens_per_s") else "") for t, s in running]
        line = f"[{time.strftime('%H:%M:%S')}] {head}" + "".join(f" | {c}" for c in cells)
        if not self._bars:
            print(line, flush=True)
            return line
        study, slots = self._bars[0], self._bars[1:]
        study.n = count["FINISHED"] + count["FAILED"]
        study.set_postfix_str(f"| {count['RUNNING']} running, {pending} pending, {count['FAILED']} failed | "
                              f"about {_duration(left)} left", refresh=False)
        study.refresh()
        for i, bar in enumerate(slots):
            if i < len(running):
                t, s = running[i]
                bar.set_description_str(t.key, refresh=False)
                bar.total, bar.n = _steps(t), int(s["step"])
                bar.set_postfix_str(cells[i].split(" ", 2)[-1] if " loss" in cells[i] else "", refresh=False)
            else:
                bar.set_description_str("(idle)", refresh=False)
                bar.total, bar.n = 1, 0
                bar.set_postfix_str("", refresh=False)
            bar.refresh()
        return line


_CURRENT: list = []      # the view of the study this driver runs now (Tune's callbacks reach it through say)


def install(view):
    """Make `view` the one that say() writes to; returns it."""
    _CURRENT[:] = [view]
    return view


def say(line: str) -> None:
    """A line for the user that must not be overwritten by the live view (a trial finished)."""
    if _CURRENT:
        _CURRENT[0].say(line)
    else:
        print(line, flush=True)
