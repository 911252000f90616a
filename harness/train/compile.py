"""torch.compile around the encoder-decoder: the loss the training step calls."""

from __future__ import annotations

from typing import Callable

import torch

from harness.train.config import TrainConfig
from model import Seq2SeqModel


def training_loss(model: Seq2SeqModel, cfg: TrainConfig, n_shapes: int = 0) -> Callable:
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
    # The states the loss reads: the target's (`hidden`), or more where a family's loss reads more (the
    # decoder-only family's `loss_states`, the whole sequence).
    states = getattr(model, "loss_states", model.hidden)
    body = torch.compile(states, dynamic=not n_shapes, mode=cfg.compile_mode)   # packed: dynamic

    def loss(src, tgt_in, tgt_out, label_smoothing, packing=None):
        return model.loss(src, tgt_in, tgt_out, label_smoothing, hidden=body(src, tgt_in, packing))
    return loss


def compiled_graphs() -> int:
    """Graphs torch.compile has produced in this process (each recompilation for a new shape adds one)."""
    from torch._dynamo.utils import counters
    return int(counters["stats"]["unique_graphs"])
