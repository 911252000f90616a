"""The training loss (§5.4): label-smoothed cross-entropy over the vocabulary projection, summed.

As F.cross_entropy defines label smoothing: loss = (1 - eps) * NLL + eps * mean over the vocabulary of -log p,
per target token. Two implementations of the same arithmetic, chosen by `vocab_loss`'s `impl`:

- "plain": logits, then `smoothed_cross_entropy`; autograd does the rest. The reference, and the form that
  torch.compile fuses and the FLOP counters read.
- "fused": `model.fused_loss.LinearCrossEntropy`, the projection and the loss a block of rows at a time.

"auto" is fused, except under torch.compile, which fuses the plain form itself.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F

from .fused_loss import LinearCrossEntropy, block_rows

LossImpl = Literal["auto", "plain", "fused"]


def smoothed_cross_entropy(z: torch.Tensor, t: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed loss and summed plain NLL (detached) from logits z (N, V) and targets t (N,)."""
    logp = torch.log_softmax(z.to(torch.promote_types(z.dtype, torch.float32)), -1)   # bf16 logits: fp32 softmax
    nll = -logp.gather(1, t[:, None]).sum()
    loss = nll if eps == 0 else (1 - eps) * nll - eps * logp.mean(-1).sum()
    return loss, nll.detach()


def vocab_loss(h: torch.Tensor, weight: torch.Tensor, t: torch.Tensor, eps: float, impl: LossImpl = "auto"
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed loss and summed NLL of the projection h W^T against targets t."""
    fused = impl == "fused" or (impl == "auto" and not torch.compiler.is_compiling())
    if fused:
        loss, nll = LinearCrossEntropy.apply(h, weight, t, float(eps), block_rows(weight.size(0), h.device))
        return loss, nll
    return smoothed_cross_entropy(F.linear(h, weight), t, float(eps))


class TeacherForcedLoss:
    """`hidden` and `loss` for a family whose module has `encode`, `decode`, `out_proj`, `cfg` (pad_id, family)
    and `loss_impl`, and takes no packed batches (the rivals, model/rnn.py and model/conv.py)."""

    def hidden(self, src: torch.Tensor, tgt_in: torch.Tensor, packing=None) -> torch.Tensor:
        if packing is not None:
            raise ValueError(f"the {self.cfg.family} family does not take packed batches; train with pack false.")
        memory, mask = self.encode(src)
        return self.decode(tgt_in, memory, mask)

    def loss(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, label_smoothing: float = 0.0,
             hidden: torch.Tensor | None = None, packing=None) -> tuple[torch.Tensor, torch.Tensor, int]:
        """As `Transformer.loss`: summed smoothed loss, summed NLL, target tokens (logits of real tokens only)."""
        if hidden is None:
            hidden = self.hidden(src, tgt_in, packing)
        keep = tgt_out != self.cfg.pad_id
        target = tgt_out[keep]
        loss, nll = vocab_loss(hidden[keep], self.out_proj.weight, target, label_smoothing, self.loss_impl)
        return loss, nll.detach(), int(target.numel())
