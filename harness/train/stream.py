"""The training data as a stream of updates: one of the three batching strategies (§5.1 length-sorted token
batches, fixed-shape buckets, packed rows), an epoch order that is a pure function of (seed, epoch), and an
optional prefetch thread. `state_dict()` is the position after the last batch the loop consumed, which is
all that exact resume needs. A data-parallel rank would take its share of each update here."""

from __future__ import annotations

import math

import torch

from harness.data.batching import (ParallelData, Prefetcher, bucket_batches, epoch_order, packed_batches,
                             padding_fraction, token_batches)
from harness.errors import UserError
from harness.train.config import TrainConfig


class BatchStream:
    def __init__(self, data: ParallelData, cfg: TrainConfig, device: torch.device, where: str = "the corpus"):
        self.data, self.pack, self.seed, self.device = data, cfg.pack, cfg.seed, device
        self.shapes = None
        if cfg.shape_buckets:
            self.batches, self.shapes = bucket_batches(data.src_lens, data.tgt_lens, cfg.max_tokens)
        elif cfg.pack:
            self.batches = packed_batches(data.src_lens, data.tgt_lens, cfg.max_tokens)
        else:
            self.batches = token_batches(data.src_lens, data.tgt_lens, cfg.max_tokens)
        if not self.batches:
            raise UserError(f"training data in {where} holds no usable pairs (all longer than max_len?).")
        self.accum = max(1, math.ceil(cfg.batch_tokens / cfg.max_tokens))   # micro-batches per update
        self.padding_fraction = 0.0 if cfg.pack else \
            padding_fraction(self.batches, data.src_lens, data.tgt_lens, self.shapes)
        self.n_shapes = len(set(self.shapes)) if self.shapes else 0
        self.prefetch, self._feed = cfg.prefetch, None
        self.load_state_dict({"epoch": 0, "position": 0})

    # The producer keeps its own (epoch, position), which runs ahead on the prefetch thread; the consumed
    # (epoch, position) is that of the last batch handed to the loop, which checkpoints record.
    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        if self._feed is not None:
            raise RuntimeError("load_state_dict after start: the prefetch thread has already read ahead.")
        self.epoch, self.position = state["epoch"], state["position"]
        self._epoch, self._position = self.epoch, self.position
        self._order = epoch_order(len(self.batches), self.seed, self._epoch)

    @property
    def epochs(self) -> float:
        """Epochs consumed, fractional."""
        return self.epoch + self.position / len(self.batches)

    def _produce(self):
        if self._position >= len(self._order):
            self._epoch, self._position = self._epoch + 1, 0
            self._order = epoch_order(len(self.batches), self.seed, self._epoch)
        i = self._order[self._position]
        self._position += 1
        if self.pack:
            b = self.data.collate_packed(self.batches[i])
        else:
            b = self.data.collate(self.batches[i], self.shapes[i] if self.shapes else None)
        return (b.pin_memory() if self.device.type == "cuda" else b), self._epoch, self._position

    def start(self) -> "BatchStream":
        """Start the prefetch thread (cfg.prefetch > 0); without one, batches are gathered in `next`."""
        if self.prefetch and self._feed is None:
            self._feed = Prefetcher(self._produce, self.prefetch)
        return self

    def next(self):
        b, self.epoch, self.position = self._feed.get() if self._feed else self._produce()
        return b

    def next_update(self) -> list:
        """The micro-batches of one update (gradient accumulation: `accum` of them)."""
        return [self.next() for _ in range(self.accum)]

    def close(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None

    def __enter__(self) -> "BatchStream":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
