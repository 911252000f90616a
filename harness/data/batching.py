"""Token-budget batches by length (§5.1: "sentence pairs were batched together by approximate sequence
length; each training batch contained about 25000 source tokens and 25000 target tokens").

Pairs are sorted by length so that a batch holds sentences of similar length and padding stays small; the
order of batches is shuffled per epoch from (seed, epoch), so a run's data position is just
(epoch, index) and a resumed run sees exactly the batches an uninterrupted one would.

For torch.compile, `bucket_batches` gives every batch one of a few fixed shapes (static graphs, CUDA graphs),
and `Prefetcher` collates the next batches on a thread while the current step runs.
"""

from __future__ import annotations

import queue
import threading
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from harness.data.bpe import BOS, EOS, PAD
from model.attention import Packed


@dataclass
class Batch:
    src: torch.Tensor        # (B, S) source ids + EOS, right-padded
    tgt_in: torch.Tensor     # (B, T) BOS + target ids
    tgt_out: torch.Tensor    # (B, T) target ids + EOS
    n_tgt_tokens: int        # real target tokens (the loss is averaged over these)
    n_src_tokens: int
    packing: tuple[Packed, Packed] | None = None   # packed batches: (1, N) rows, (source, target) layouts

    def pin_memory(self) -> "Batch":
        """Page-locked copies, so that `to(cuda, non_blocking)` overlaps the copy with computation."""
        return Batch(self.src.pin_memory(), self.tgt_in.pin_memory(), self.tgt_out.pin_memory(),
                     self.n_tgt_tokens, self.n_src_tokens, self.packing)

    def to(self, device) -> "Batch":
        packing = tuple(p.to(device) for p in self.packing) if self.packing is not None else None
        return Batch(self.src.to(device, non_blocking=True), self.tgt_in.to(device, non_blocking=True),
                     self.tgt_out.to(device, non_blocking=True), self.n_tgt_tokens, self.n_src_tokens, packing)


class ParallelData:
    """An encoded parallel corpus held as flat arrays (cheap for millions of pairs)."""

    def __init__(self, src_ids: list[list[int]], tgt_ids: list[list[int]], max_len: int | None = None,
                 truncate: bool = False):
        """max_len: the longest sequence the model's position table holds, BOS/EOS included. Longer pairs
        are dropped (training) or cut to fit (truncate=True: dev and test, whose every sentence counts;
        BLEU still compares the output with the whole reference text)."""
        self.truncated = 0
        self.kept: list[int] | None = None          # training: the indices of the pairs kept (None: all)
        if max_len is not None and truncate:
            self.truncated = sum(len(s) >= max_len or len(t) >= max_len for s, t in zip(src_ids, tgt_ids))
            src_ids = [s[:max_len - 1] for s in src_ids]
            tgt_ids = [t[:max_len - 1] for t in tgt_ids]
        elif max_len is not None:
            keep = [i for i in range(len(src_ids)) if len(src_ids[i]) < max_len and len(tgt_ids[i]) < max_len]
            src_ids, tgt_ids = [src_ids[i] for i in keep], [tgt_ids[i] for i in keep]
            self.kept = keep
        self.src_lens = np.array([len(s) for s in src_ids], dtype=np.int64) + 1     # + EOS
        self.tgt_lens = np.array([len(t) for t in tgt_ids], dtype=np.int64) + 1     # + BOS / EOS
        self.src_ids, self.tgt_ids = src_ids, tgt_ids
        # The same sequences as flat arrays (source + EOS, BOS + target, target + EOS), so that a batch is
        # gathered with a few numpy operations instead of a Python loop over its sentences.
        self._src = _flat([s + [EOS] for s in src_ids])
        self._tgt_in = _flat([[BOS] + t for t in tgt_ids])
        self._tgt_out = _flat([t + [EOS] for t in tgt_ids])
        self._src_start = np.concatenate(([0], np.cumsum(self.src_lens)[:-1])).astype(np.int64)
        self._tgt_start = np.concatenate(([0], np.cumsum(self.tgt_lens)[:-1])).astype(np.int64)

    def __len__(self) -> int:
        return len(self.src_ids)

    def collate(self, index: np.ndarray, shape: tuple[int, int, int] | None = None) -> Batch:
        """The pairs `index` as right-padded tensors. shape (rows, src_len, tgt_len), at least the batch's
        own, pads further: the extra rows are filler pairs (source EOS, target BOS, no target tokens) that
        add nothing to the loss and keep every attention row finite."""
        s_len, t_len = int(self.src_lens[index].max()), int(self.tgt_lens[index].max())
        rows = len(index)
        if shape is not None:
            rows, s_len, t_len = shape
        src = self._pad(self._src, self._src_start[index], self.src_lens[index], rows, s_len)
        tgt_in = self._pad(self._tgt_in, self._tgt_start[index], self.tgt_lens[index], rows, t_len)
        tgt_out = self._pad(self._tgt_out, self._tgt_start[index], self.tgt_lens[index], rows, t_len)
        src[len(index):, 0], tgt_in[len(index):, 0] = EOS, BOS                    # filler rows
        return Batch(src, tgt_in, tgt_out, int(self.tgt_lens[index].sum()), int(self.src_lens[index].sum()))

    def collate_packed(self, index: np.ndarray) -> Batch:
        """The pairs `index` end to end in one row each side, (1, N_src) and (1, N_tgt), no padding."""
        s_lens, t_lens = self.src_lens[index], self.tgt_lens[index]
        s_start, t_start = self._src_start[index], self._tgt_start[index]
        rows = [torch.from_numpy(_tokens(flat, start, lens)[0])[None] for flat, start, lens in
                ((self._src, s_start, s_lens), (self._tgt_in, t_start, t_lens), (self._tgt_out, t_start, t_lens))]
        packing = (Packed.of(torch.from_numpy(s_lens)), Packed.of(torch.from_numpy(t_lens)))
        return Batch(*rows, int(t_lens.sum()), int(s_lens.sum()), packing)

    @staticmethod
    def _pad(flat: np.ndarray, starts: np.ndarray, lens: np.ndarray, rows: int, length: int) -> torch.Tensor:
        out = np.full((rows, length), PAD, dtype=np.int64)
        tokens, col = _tokens(flat, starts, lens)
        out[np.repeat(np.arange(len(lens)), lens), col] = tokens          # row of each token, its column
        return torch.from_numpy(out)


def _tokens(flat: np.ndarray, starts: np.ndarray, lens: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The sequences flat[start : start + len] end to end, and each token's position in its sequence."""
    col = np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens)
    return flat[np.repeat(starts, lens) + col].astype(np.int64), col

def _flat(seqs: list[list[int]]) -> np.ndarray:
    return np.fromiter((tok for seq in seqs for tok in seq), dtype=np.int32, count=sum(map(len, seqs)))


def token_batches(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Group pair indices into batches of at most max_tokens padded tokens on each side.

    Sorting by (target, source) length makes neighbours alike, so padding is small; a batch is closed when
    one more pair would make batch_size x longest exceed the budget on either side."""
    order = np.lexsort((src_lens, tgt_lens))
    batches, start, longest_s, longest_t = [], 0, 0, 0
    for pos, i in enumerate(order):
        s, t = max(longest_s, src_lens[i]), max(longest_t, tgt_lens[i])
        size = pos - start + 1
        if size > 1 and max(s, t) * size > max_tokens:
            batches.append(order[start:pos])
            start, s, t = pos, src_lens[i], tgt_lens[i]
        longest_s, longest_t = s, t
    if start < len(order):
        batches.append(order[start:])
    return batches


# Sequence lengths a bucketed batch is padded to: steps of at most 25 % (so a batch is at most a fifth
# padding from the rounding), multiples of 8 for the tensor cores.
LENGTH_BUCKETS = (8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320, 384, 448, 512,
                  640, 768, 896, 1024)


def bucket_length(n: int) -> int:
    for b in LENGTH_BUCKETS:
        if n <= b:
            return b
    return -(-n // 128) * 128


def bucket_batches(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int
                   ) -> tuple[list[np.ndarray], list[tuple[int, int, int]]]:
    """Batches of few distinct shapes, for compiled models: every pair goes to the bucket of its longer
    side (one length L for source and target), and every batch of bucket L has max_tokens // L rows, the
    last one of a bucket filled up with filler rows by `collate`. Returns the batches and their shapes
    (rows, L, L); a model compiled for static shapes then compiles once per bucket in use."""
    longest = np.maximum(src_lens, tgt_lens)
    buckets = np.array([bucket_length(int(n)) for n in longest])
    batches, shapes = [], []
    for length in sorted(set(buckets.tolist())):
        members = np.flatnonzero(buckets == length)
        members = members[np.lexsort((src_lens[members], tgt_lens[members]))]
        rows = max(1, max_tokens // length)
        for start in range(0, len(members), rows):
            batches.append(members[start:start + rows])
            shapes.append((rows, length, length))
    return batches, shapes


def packed_batches(src_lens: np.ndarray, tgt_lens: np.ndarray, max_tokens: int) -> list[np.ndarray]:
    """Batches for packing: neighbours in length as in `token_batches`, but the budget counts real tokens
    (a packed batch has no padding), so a batch holds up to max_tokens tokens on each side."""
    order = np.lexsort((src_lens, tgt_lens))
    batches, start, s_sum, t_sum = [], 0, 0, 0
    for pos, i in enumerate(order):
        if pos > start and max(s_sum + src_lens[i], t_sum + tgt_lens[i]) > max_tokens:
            batches.append(order[start:pos])
            start, s_sum, t_sum = pos, 0, 0
        s_sum, t_sum = s_sum + src_lens[i], t_sum + tgt_lens[i]
    if start < len(order):
        batches.append(order[start:])
    return batches


def padding_fraction(batches: list[np.ndarray], src_lens: np.ndarray, tgt_lens: np.ndarray,
                     shapes: list[tuple[int, int, int]] | None = None) -> float:
    """Share of the padded slots, both sides together, that hold padding: (B x longest) per batch, or the
    bucketed shapes when given."""
    real = sum(int(src_lens[b].sum() + tgt_lens[b].sum()) for b in batches)
    if shapes is None:
        slots = sum(len(b) * int(src_lens[b].max() + tgt_lens[b].max()) for b in batches)
    else:
        slots = sum(rows * (s + t) for rows, s, t in shapes)
    return 1.0 - real / slots if slots else 0.0


def epoch_order(n_batches: int, seed: int, epoch: int) -> np.ndarray:
    """The order of batches in an epoch: a pure function of (seed, epoch), so resuming needs no state."""
    return np.random.default_rng([seed, epoch]).permutation(n_batches)


class Prefetcher:
    """Runs `produce` on a background thread, `depth` results ahead of `get`: batches are gathered (and
    pinned, for a CUDA device) while the current step computes. Whatever `produce` raises is raised by the
    `get` that would have received its result. `close` stops the thread."""

    def __init__(self, produce: Callable[[], object], depth: int = 2):
        self._produce, self._queue = produce, queue.Queue(maxsize=max(1, depth))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                item = self._produce()
            except BaseException as err:          # handed to the consumer, who raises it
                item = _Failed(err)
            while not self._stop.is_set():
                try:
                    self._queue.put(item, timeout=0.1)
                    break
                except queue.Full:
                    continue
            if isinstance(item, _Failed):
                return

    def get(self):
        item = self._queue.get()
        if isinstance(item, _Failed):
            raise item.error
        return item

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


@dataclass
class _Failed:
    error: BaseException
