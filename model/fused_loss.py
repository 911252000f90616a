"""The projection and the training loss together, a block of rows at a time (`LinearCrossEntropy`).

The same arithmetic as logits followed by `model.loss.smoothed_cross_entropy`, without the (tokens x vocab)
logits ever held whole. The gradient of the loss with respect to a block's logits is
softmax - (1 - eps) onehot - eps / V whatever comes after the loss (only a scalar scales it), so the forward
computes each block's logits, loss and gradient and folds that gradient into dL/dh and dL/dW while the block
is still in cache; the backward only scales the two. Same matmuls, same FLOPs, no (N, V) tensor in memory.
Each block takes two passes besides its three matmuls (log-softmax, then exp in place): the label-smoothing
terms are rank one (see the forward). On a CPU this is faster than the plain form, whose (N, V) passes run
from RAM.
"""

from __future__ import annotations

import torch


def block_rows(vocab: int, device: torch.device) -> int:
    """Rows per block: 16 MiB of fp32 logits on a CPU (a block stays in the last-level cache: 512 rows
    at vocab 8000 measured fastest of 128..1024), 1 GiB on a GPU (blocks big enough to fill it)."""
    budget = 16 * 2 ** 20 if device.type == "cpu" else 2 ** 30
    return max(1, budget // (4 * vocab))


class LinearCrossEntropy(torch.autograd.Function):
    """(loss, nll) of logits h W^T for hidden states h (N, d), weight W (V, d), targets t (N,)."""

    @staticmethod
    def forward(ctx, h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, eps: float, rows: int):
        device, vocab = h.device.type, w.size(0)
        # Under autocast the matmuls run in its dtype, as nn.Linear's would; the softmax runs in fp32.
        dtype = torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else h.dtype
        acc = torch.promote_types(h.dtype, torch.float32)                 # fp32, or fp64 for gradcheck
        want_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        with torch.autocast(device, enabled=False):
            hc, wc = h.to(dtype), w.to(dtype)
            grad_h = torch.empty_like(h) if want_grad else None
            grad_w = torch.zeros_like(w, dtype=acc) if want_grad else None
            nll = torch.zeros((), device=h.device, dtype=acc)
            smooth = torch.zeros((), device=h.device, dtype=acc)
            # The eps / V part of the smoothed target is the same for every vocabulary row, so its terms are
            # rank one and come from the mean embedding w_bar instead of a pass over each (rows, V) block:
            # mean_v z = h . w_bar in the loss, eps w_bar in dL/dh, (eps / V) sum_n h_n in every row of dL/dW.
            w_bar = wc.to(acc).mean(0)
            grad_h_bias = (-eps * w_bar).to(dtype)
            for a in range(0, h.size(0), rows):
                hb, tb = hc[a:a + rows], t[a:a + rows]
                z = hb @ wc.t()                                            # (rows, V), in the matmul dtype
                at = torch.arange(tb.numel(), device=h.device)
                z_t = z[at, tb].to(acc)
                # log p in fp32 straight from the matmul's output (bf16 logits need no upcast pass), in place
                # on a CPU when the dtypes agree (the block stays in cache); then p = exp(log p), in place too.
                in_place = z.dtype == acc and z.device.type == "cpu"
                logp = torch.log_softmax(z, -1, dtype=acc, out=z if in_place else None)
                logp_t = logp[at, tb]
                nll -= logp_t.sum()
                if eps:                                                    # mean over V of -log p = lse - mean z
                    smooth += (z_t - logp_t - hb.to(acc) @ w_bar).sum()
                if want_grad:                                              # dL/dz = p - (1-eps) onehot - eps/V
                    p = logp.exp_()
                    p[at, tb] -= 1 - eps
                    g = p.to(dtype)
                    grad_h[a:a + rows] = torch.addmm(grad_h_bias, g, wc) if eps else g @ wc
                    grad_w += g.t() @ hb
            if want_grad and eps:
                grad_w -= (eps / vocab) * hc.to(acc).sum(0)
        loss = nll.clone() if eps == 0 else (1 - eps) * nll + eps * smooth
        ctx.save_for_backward(grad_h, grad_w.to(w.dtype) if want_grad else None)
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, g_loss: torch.Tensor, _g_nll: torch.Tensor):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * g_loss, grad_w * g_loss, None, None, None
