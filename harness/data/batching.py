"""Token-budget batches by length (§5.1: "sentence pairs were batched together by approximate sequence
length; each training batch contained about 25000 source tokens and 25000 target tokens").

Pairs are sorted by length so that a batch holds sentences of similar length and padding stays small; the
order of batches is shuffled per epoch from (seed, epoch), so a run's data position is just
(epoch, index) and a resumed run sees exactly the batches an uninterrupted one would.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .bpe import BOS, EOS, PAD


@dataclass
class Batch:
    src: torch.Tensor        # (B, S) source ids + EOS, right-padded
    tgt_in: torch.Tensor     # (B, T) BOS + target ids
    tgt_out: torch.Tensor    # (B, T) target ids + EOS
    n_tgt_tokens: int        # real target tokens (the loss is averaged over these)
    n_src_tokens: int

    def to(self, device) -> "Batch":
        return Batch(self.src.to(device, non_blocking=True), self.tgt_in.to(device, non_blocking=True),
                     self.tgt_out.to(device, non_blocking=True), self.n_tgt_tokens, self.n_src_tokens)


class ParallelData:
    """An encoded parallel corpus held as flat arrays (cheap for millions of pairs)."""

    def __init__(self, src_ids: list[list[int]], tgt_ids: list[list[int]], max_len: int | None = None,
                 truncate: bool = False):
        """max_len: the longest sequence the model's position table holds, BOS/EOS included. Longer pairs
        are dropped (training) or cut to fit (truncate=True: dev and test, whose every sentence counts;
        BLEU still compares the output with the whole reference text)."""
        self.truncated = 0
        if max_len is not None and truncate:
            self.truncated = sum(len(s) >= max_len or len(t) >= max_len for s, t in zip(src_ids, tgt_ids))
            src_ids = [s[:max_len - 1] for s in src_ids]
            tgt_ids = [t[:max_len - 1] for t in tgt_ids]
        elif max_len is not None:
            keep = [i for i in range(len(src_ids)) if len(src_ids[i]) < max_len and len(tgt_ids[i]) < max_len]
            src_ids, tgt_ids = [src_ids[i] for i in keep], [tgt_ids[i] for i in keep]
        self.src_lens = np.array([len(s) for s in src_ids], dtype=np.int64) + 1     # + EOS
        self.tgt_lens = np.array([len(t) for t in tgt_ids], dtype=np.int64) + 1     # + BOS / EOS
        self.src_ids, self.tgt_ids = src_ids, tgt_ids

    def __len__(self) -> int:
        return len(self.src_ids)

    def collate(self, index: np.ndarray) -> Batch:
        s_len, t_len = int(self.src_lens[index].max()), int(self.tgt_lens[index].max())
        src = torch.full((len(index), s_len), PAD, dtype=torch.long)
        tgt_in = torch.full((len(index), t_len), PAD, dtype=torch.long)
        tgt_out = torch.full((len(index), t_len), PAD, dtype=torch.long)
        for row, i in enumerate(index.tolist()):
            s, t = self.src_ids[i], self.tgt_ids[i]
            src[row, :len(s) + 1] = torch.tensor(s + [EOS])
            tgt_in[row, :len(t) + 1] = torch.tensor([BOS] + t)
            tgt_out[row, :len(t) + 1] = torch.tensor(t + [EOS])
        return Batch(src, tgt_in, tgt_out, int(self.tgt_lens[index].sum()), int(self.src_lens[index].sum()))


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


def padding_fraction(batches: list[np.ndarray], src_lens: np.ndarray, tgt_lens: np.ndarray) -> float:
    """Share of the padded (B x longest) slots, both sides together, that hold padding."""
    real = sum(int(src_lens[b].sum() + tgt_lens[b].sum()) for b in batches)
    slots = sum(len(b) * int(src_lens[b].max() + tgt_lens[b].max()) for b in batches)
    return 1.0 - real / slots if slots else 0.0


def epoch_order(n_batches: int, seed: int, epoch: int) -> np.ndarray:
    """The order of batches in an epoch: a pure function of (seed, epoch), so resuming needs no state."""
    return np.random.default_rng([seed, epoch]).permutation(n_batches)
