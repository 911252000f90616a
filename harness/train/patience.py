"""Training until dev stops improving: fairseq's `--patience N` ("stop training if valid performance doesn't
improve for N consecutive validation runs"), on the dev perplexity.

The paper trains a fixed number of steps (§5.2), and at WMT's size nothing over-fits in that budget. On a few
tens of thousands of pairs a fixed budget either stops a row while it still improves or trains it long past its
best, so the verdicts would measure the budget, not the architecture. With `train.patience` P > 0 a run
evaluates dev every `eval_every` steps, stops after P evaluations in a row without a new best, and is scored on
the weights at its best (or the mean of the `average_last` checkpoints ending there); `steps` becomes the
budget it may not pass. `Patience` is the rule's state, saved in every checkpoint so that a resumed run stops
where the uninterrupted one would."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass
class Patience:
    """The rule's state: the best dev PPL so far, the step it was reached at, and how many evaluations since
    have not beaten it. A new best must be strictly lower (fairseq's `is_better`).

    With lr_patience L > 0 it also keeps the `plateau` schedule's state (fairseq's reduce_lr_on_plateau, the
    rivals' own way, e.g. ConvS2S §4.3: shrink the rate "whenever the validation perplexity stops improving"):
    after L evaluations without a new best the rate shrinks once more (`shrinks`, at most max_shrinks), and
    the count towards the next shrink starts again; the stop still counts every evaluation since the best.
    (torch's ReduceLROnPlateau shrinks after patience + 1 bad epochs: L here is its patience + 1.)"""
    patience: int
    lr_patience: int = 0
    max_shrinks: int = 0
    best: float = math.inf
    best_step: int = 0
    bad: int = 0
    shrinks: int = 0
    since_shrink: int = 0

    def update(self, step: int, dev_ppl: float) -> bool:
        """Count one dev evaluation; True when it is a new best."""
        if dev_ppl < self.best:
            self.best, self.best_step, self.bad, self.since_shrink = dev_ppl, step, 0, 0
            return True
        self.bad += 1
        self.since_shrink += 1
        if self.lr_patience and self.since_shrink >= self.lr_patience and self.shrinks < self.max_shrinks:
            self.shrinks, self.since_shrink = self.shrinks + 1, 0
        return False

    @property
    def exhausted(self) -> bool:
        """P evaluations in a row without a new best: the rule stops the run."""
        return self.bad >= self.patience

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict | None) -> None:
        """The state saved with a checkpoint (None: one written without the rule, which then starts afresh)."""
        if state:
            self.best, self.best_step, self.bad = float(state["best"]), int(state["best_step"]), int(state["bad"])
            self.shrinks, self.since_shrink = int(state.get("shrinks", 0)), int(state.get("since_shrink", 0))

    def metrics(self, step: int, budget: int) -> dict:
        """What the run's metrics say of the rule: whether it stopped the run (else the budget did), the best
        step and its dev PPL, and the evaluations since the best. The flags are 1.0 or 0.0: MLflow keeps numbers."""
        return {"stopped_by_rule": float(self.exhausted), "best_step": self.best_step, "best_dev_ppl": self.best,
                "evals_since_best": self.bad, "hit_budget": float(step >= budget and not self.exhausted),
                **({"lr_shrinks": self.shrinks} if self.lr_patience else {})}


def window(steps: list[int], best_step: int, k: int) -> list[int]:
    """The k checkpoint steps that end at best_step (fewer when fewer were taken): the weights to score."""
    return [s for s in steps if s <= best_step][-max(k, 1):]
