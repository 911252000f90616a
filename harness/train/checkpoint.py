"""Checkpoints: written atomically, loaded with weights_only=True, refused when another config or format
version wrote them. A checkpoint holds the model, the optimizer, the step, the batch stream's position,
the run's clock and the RNG state, so that a resumed run repeats the uninterrupted one exactly."""

from __future__ import annotations

import time
import warnings
from pathlib import Path

import torch

from harness.errors import HarnessWarning, UserError
from harness.io import atomic_writer
from harness.train.dist import SINGLE, Ranks

CHECKPOINT_VERSION = 1


def save_checkpoint(path: Path, state: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(path, binary=True) as f:     # whole and synced, then renamed: all or nothing
        torch.save(state, f)


def load_checkpoint(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # a truncated or foreign file: say which, never unpickle arbitrary objects
        raise UserError(f"checkpoint {path} cannot be read ({type(err).__name__}); delete it to restart "
                        "from the previous one.") from None


def list_checkpoints(ckpt_dir: Path) -> list[Path]:
    return sorted(ckpt_dir.glob("step_*.pt"))


def checkpoint_path(ckpt_dir: Path, step: int) -> Path:
    """The file of the checkpoint taken after `step` (zero-padded, so that names sort by step)."""
    return ckpt_dir / f"step_{step:08d}.pt"


def checkpoint_step(path: Path) -> int:
    return int(path.stem[len("step_"):])


def latest_readable_checkpoint(ckpt_dir: Path) -> dict | None:
    """The newest checkpoint that loads. One that does not (truncated, corrupted) is renamed *.corrupt, with
    a warning, and the one before it is used; the trial then repeats the steps in between."""
    for path in reversed(list_checkpoints(ckpt_dir)):
        try:
            return load_checkpoint(path)
        except UserError as err:
            path.rename(path.with_name(path.name + ".corrupt"))
            warnings.warn(HarnessWarning(f"{err} Renamed it {path.name}.corrupt; resuming from the one before."),
                          stacklevel=2)
    return None


def average_checkpoints(paths: list[Path]) -> dict[str, torch.Tensor]:
    """Element-wise mean of the model weights of several checkpoints (§6.1: last 5 for base, 20 for big)."""
    avg: dict[str, torch.Tensor] = {}
    for p in paths:
        for k, v in load_checkpoint(p)["model"].items():
            avg[k] = avg.get(k, 0) + v.double() / len(paths)
    return {k: v.float() for k, v in avg.items()}


def rng_state(device: torch.device) -> dict:
    return {"torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None}


def set_rng_state(rng: dict, device: torch.device) -> None:
    torch.set_rng_state(rng["torch"])
    if device.type == "cuda" and rng.get("cuda") is not None:
        torch.cuda.set_rng_state(rng["cuda"], device)


# The clock's keys of train.stop_diverged, kept in every checkpoint so that a resumed run measures divergence from
# its own start and a run that diverged does not train on.
DIVERGENCE_KEYS = ("dev_ppl_start", "diverged_step")


class Checkpointer:
    """Saves and restores one run's checkpoints in `ckpt_dir` (step_XXXXXXXX.pt), keeps the newest `keep`,
    and averages the last n. `config` is the run's resolved config: a checkpoint written under another one
    is refused. `every` steps and `minutes` of wall time set when `maybe_save` writes (0: never by that
    rule). Data parallel: every rank restores from the same files and takes part in every save (each rank's
    RNG state is gathered into the checkpoint); rank 0 alone writes, and rank 0's clock decides a
    time-based save for all."""

    def __init__(self, ckpt_dir: Path, config: dict, device: torch.device, *, keep: int = 2, every: int = 0,
                 minutes: float = 0.0, ranks: Ranks = SINGLE):
        self.dir, self.config, self.device = Path(ckpt_dir), config, device
        self.keep, self.every, self.minutes, self.ranks = keep, every, minutes, ranks
        self.is_main = ranks.is_main
        self.last_time = time.perf_counter()
        # The steps whose checkpoints the patience rule may still score (harness/train/patience.py): kept
        # beside the newest `keep`, so that disk holds at most twice the averaging window.
        self.pinned: set[int] = set()
        self.rule_state: dict | None = None     # the rule's state saved with the checkpoint restored

    def path(self, step: int) -> Path:
        return checkpoint_path(self.dir, step)

    def restore(self, model, opt, stream=None) -> tuple[int, dict]:
        """Load the newest readable checkpoint into model, optimizer, stream and the RNG. Returns the step
        (0 without a checkpoint) and the clock saved with it (train_seconds, tokens_seen, and wall_seconds: the
        loop's wall time with its evaluations and checkpoints, over every process that trained the run)."""
        state = latest_readable_checkpoint(self.dir)
        if state is None:
            return 0, {"train_seconds": 0.0, "tokens_seen": 0, "wall_seconds": 0.0, "cpu_seconds": 0.0}
        self.rule_state = state.get("rule")
        if state.get("version") != CHECKPOINT_VERSION or _named(state.get("config")) != _named(self.config):
            raise UserError(f"checkpoint {list_checkpoints(self.dir)[-1]} was written by another config or "
                            "version; use a new --out directory or delete its checkpoints.")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        if stream is not None:
            stream.load_state_dict({"epoch": state["epoch"], "position": state["position"]})
        rngs = state.get("rank_rng")
        if rngs is not None and len(rngs) == self.ranks.world:
            set_rng_state(rngs[self.ranks.rank], self.device)
        elif self.ranks.is_main:         # written by another number of ranks: rank 0's stream carries on
            set_rng_state(state["rng"], self.device)
        return state["step"], {"train_seconds": state["train_seconds"], "tokens_seen": state["tokens_seen"],
                               "wall_seconds": state.get("wall_seconds", state["train_seconds"]),
                               "cpu_seconds": state.get("cpu_seconds", 0.0), **state.get("divergence", {})}

    def save(self, step: int, model, opt, stream_state: dict, clock: dict, rule: dict | None = None) -> None:
        """Write the state after `step`; stream_state is the stream's state_dict (epoch, position), rule the
        patience rule's (or None). Every rank calls it (the RNG states are gathered); rank 0 writes."""
        rngs = self.ranks.gather(rng_state(self.device))
        if not self.is_main:
            return
        save_checkpoint(self.path(step), {
            "version": CHECKPOINT_VERSION, "config": self.config, "model": model.state_dict(),
            "optimizer": opt.state_dict(), "step": step, "epoch": stream_state["epoch"],
            "position": stream_state["position"], "train_seconds": clock["train_seconds"],
            "wall_seconds": clock.get("wall_seconds", clock["train_seconds"]),
            "cpu_seconds": clock.get("cpu_seconds", 0.0),
            "tokens_seen": clock["tokens_seen"], "rng": rngs[0],
            # train.stop_diverged: the start divergence is measured from, and where the run diverged
            "divergence": {k: clock[k] for k in DIVERGENCE_KEYS if k in clock},
            **({"rank_rng": rngs} if self.ranks.world > 1 else {}), **({"rule": rule} if rule else {})})
        self.prune(self.keep)

    def due(self, step: int) -> bool:
        """Whether `maybe_save` writes after `step`: every `every` steps or `minutes` after the last."""
        self.now = time.perf_counter()
        return bool((self.every and step % self.every == 0) or
                    (self.minutes and self.now - self.last_time >= self.minutes * 60))

    def maybe_save(self, step: int, model, opt, stream_state: dict, clock: dict, rule: dict | None = None,
                   force: bool = False) -> None:
        """Save when due by steps or time, or when `force` (every rank passes the same: the patience rule
        saves at each dev evaluation, so that every evaluated step can be scored)."""
        due = self.due(step)
        if self.minutes and self.ranks.world > 1:
            due = self.ranks.agree(due)
        if due or force:
            self.save(step, model, opt, stream_state, clock, rule)
            self.last_time = self.now

    def save_final(self, step: int, model, opt, stream_state: dict, clock: dict, rule: dict | None = None) -> None:
        """The final state, unless the checkpoint of this step was just written."""
        if self.ranks.agree(not self.path(step).exists()):
            self.save(step, model, opt, stream_state, clock, rule)

    def prune(self, keep: int) -> None:
        for old in list_checkpoints(self.dir)[:-keep]:
            if checkpoint_step(old) not in self.pinned:
                old.unlink()

    def pin(self, steps: list[int]) -> None:
        """Keep these steps' checkpoints past the newest `keep` (the window the rule would score now)."""
        self.pinned = set(steps)

    def steps(self) -> list[int]:
        return [checkpoint_step(p) for p in list_checkpoints(self.dir)]

    def average_steps(self, steps: list[int]) -> dict[str, torch.Tensor]:
        """The mean weights of the checkpoints of these steps."""
        return average_checkpoints([self.path(s) for s in steps])

    def average(self, n: int) -> tuple[dict[str, torch.Tensor], int]:
        """The mean weights of the last n checkpoints, and how many there were."""
        paths = list_checkpoints(self.dir)[-n:]
        return average_checkpoints(paths), len(paths)


def _named(config: dict | None) -> dict | None:
    """config with its model's family named: checkpoints written before model families existed are the
    Transformer's."""
    if not isinstance(config, dict) or not isinstance(config.get("model"), dict):
        return config
    return {**config, "model": {"family": "transformer", **config["model"]}}
