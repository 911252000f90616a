"""Per-layer gradient norms at initialization (Xiong et al. 2020, "On Layer Normalization in the Transformer
Architecture", Figure 3): one backward pass of the label-smoothed loss over the first dev sentences, the L2 norm of
each encoder and decoder layer's parameter gradients. Under post-norm the last layers' gradients are the largest
(why post-norm needs a warmup); under pre-norm they stay about level with depth."""

from __future__ import annotations

import re

import numpy as np
import torch

LAYER = re.compile(r"^(encoder|decoder)\.layers\.(\d+)\.")


def layer_grad_norms(model, data, sentences: int, device, label_smoothing: float, autocast) -> dict[str, float]:
    """{"gradnorm_enc_{i}": ..., "gradnorm_dec_{j}": ...}: the gradient norm of every layer's parameters, layers
    counted from 0 at the input, after one backward pass over the first `sentences` dev pairs (in training mode:
    dropout as in training). The gradients are cleared again afterwards."""
    n = min(sentences, len(data))
    batch = data.collate(np.arange(n)).to(device)
    # dropout draws from the generators: their states are put back, so that measuring leaves training as it was
    rng = torch.get_rng_state(), (torch.cuda.get_rng_state(device) if device.type == "cuda" else None)
    model.train()
    model.zero_grad(set_to_none=True)
    with autocast():
        loss, _, tokens = model.loss(batch.src, batch.tgt_in, batch.tgt_out, label_smoothing=label_smoothing)
    (loss / max(tokens, 1)).backward()
    squares: dict[str, float] = {}
    for name, p in model.named_parameters():
        m = LAYER.match(name)
        if m and p.grad is not None:
            key = f"gradnorm_{m.group(1)[:3]}_{m.group(2)}"
            squares[key] = squares.get(key, 0.0) + float(p.grad.float().pow(2).sum())
    model.zero_grad(set_to_none=True)
    torch.set_rng_state(rng[0])
    if rng[1] is not None:
        torch.cuda.set_rng_state(rng[1], device)
    return {k: v ** 0.5 for k, v in squares.items()}
