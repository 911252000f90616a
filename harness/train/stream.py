"""The training data as a stream of updates: one of the three batching strategies (§5.1 length-sorted token
batches, fixed-shape buckets, packed rows), an epoch order that is a pure function of (seed, epoch), and an
optional prefetch thread. `state_dict()` is the position after the last batch the loop consumed, which is
all that exact resume needs.

Data parallel (ranks.world > 1): every rank walks the same epoch order and takes its share of each update,
so that one update still holds `batch_tokens` across all ranks. When the update's micro-batches divide
among the ranks (accum a multiple of world), rank r takes micro-batches r, r + world, ...: exactly the
pairs a single process would have seen in that update. Otherwise each micro-batch's rows are split into
world contiguous parts. A rank whose part is empty (a batch of fewer rows than ranks) gets the whole
micro-batch with its token counts set to 0: the loop weights it 0, but the rank still takes part in the
gradient all-reduce, as DDP needs (fairseq's dummy batch)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from harness.data.batching import (
    ParallelData,
    Prefetcher,
    bucket_batches,
    epoch_order,
    packed_batches,
    padding_fraction,
    token_batches,
)
from harness.errors import UserError
from harness.train.config import TrainConfig
from harness.train.dist import SINGLE, Ranks


class BatchStream:
    def __init__(self, data: ParallelData, cfg: TrainConfig, device: torch.device, where: str = "the corpus",
                 ranks: Ranks = SINGLE):
        self.data, self.pack, self.seed, self.device, self.ranks = data, cfg.pack, cfg.seed, device, ranks
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
        self.whole = self.accum % ranks.world == 0     # whole micro-batches per rank, else rows of each
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
        self._micro = 0         # which micro-batch of the update comes next (states are update boundaries)
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
        j, self._micro = self._micro, (self._micro + 1) % self.accum
        b = self._collate(i, j)
        if b is not None and self.device.type == "cuda":
            b = b.pin_memory()
        return b, self._epoch, self._position

    def _collate(self, i: int, j: int):
        """Batch i, the j-th micro-batch of its update: this rank's share of it (None: another rank's)."""
        index, shape = self.batches[i], self.shapes[i] if self.shapes else None
        world, rank = self.ranks.world, self.ranks.rank
        empty = False
        if world > 1 and self.whole:
            if j % world != rank:
                return None
        elif world > 1:
            part = np.array_split(index, world)[rank]
            empty = len(part) == 0
            index = index if empty else part
            if shape is not None:
                shape = (math.ceil(shape[0] / world), *shape[1:])
        b = self.data.collate_packed(index) if self.pack else self.data.collate(index, shape)
        return dataclasses.replace(b, n_tgt_tokens=0, n_src_tokens=0) if empty else b

    def start(self) -> "BatchStream":
        """Start the prefetch thread (cfg.prefetch > 0); without one, batches are gathered in `next`."""
        if self.prefetch and self._feed is None:
            self._feed = Prefetcher(self._produce, self.prefetch)
        return self

    def next(self):
        b, self.epoch, self.position = self._feed.get() if self._feed else self._produce()
        return b

    def next_update(self) -> list:
        """This rank's micro-batches of one update (gradient accumulation: `accum` of them in all)."""
        micro = [self.next() for _ in range(self.accum)]
        return [b for b in micro if b is not None]

    def close(self) -> None:
        if self._feed is not None:
            self._feed.close()
            self._feed = None

    def __enter__(self) -> "BatchStream":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()
