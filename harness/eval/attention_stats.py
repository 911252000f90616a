"""§3.2.1's argument as measurements: "for large values of d_k, the dot products grow large in magnitude, pushing
the softmax function into regions where it has extremely small gradients", which the 1/sqrt(d_k) counteracts.

On one batch of dev sentences, teacher-forced, dropout off, every attention layer of an encoder-decoder gives:
- `attn_qk_var`: the variance of the raw dot products q . k over the allowed (query, key) pairs; for q and k of
  independent unit-variance components it is d_k (§3.2.1's footnote 4);
- `attn_logit_var`: the variance of what the softmax is given (q . k / sqrt(d_k) for the paper's attention,
  q . k unscaled, or the additive score);
- `attn_max_prob`: the largest attention probability of each real query, averaged: near 1, the softmax has
  saturated onto one key;
- `attn_entropy` (nats) and `attn_entropy_ratio`: the attention distribution's entropy, and that entropy over
  the uniform distribution's, ln(allowed keys) (1: uniform, 0: one key);
- `attn_qk_grad_norm`: the norm of the loss's gradient with respect to every query and key projection (W^Q and
  W^K of every attention layer, weights and biases): what reaches the parameters that only the softmax's input
  depends on; "extremely small gradients" are small here.
Each layer's figures are pooled over its heads and real queries; the metrics are the means over layers. The
trainer takes them before the first update and at every evaluation (`train.attention_stats_sentences`).
"""

from __future__ import annotations

import math

import torch

from harness.eval.source_attention import _Recorder, attention_logits
from model.attention import MultiHeadAttention

METRICS = ("attn_qk_var", "attn_logit_var", "attn_max_prob", "attn_entropy", "attn_entropy_ratio",
           "attn_qk_grad_norm")


def _query_rows(model, src: torch.Tensor, tgt_in: torch.Tensor) -> dict[int, torch.Tensor]:
    """id(attention layer) -> which of its queries are real tokens (B, T): the source's for the encoder's
    self-attention, the target's for the decoder's self- and cross-attention."""
    pad = model.cfg.pad_id
    rows = {}
    for layer in model.encoder.layers:
        rows[id(layer.self_attn.sublayer)] = src != pad
    for layer in model.decoder.layers:
        rows[id(layer.self_attn.sublayer)] = rows[id(layer.cross_attn.sublayer)] = tgt_in != pad
    return rows


def _qk_gradients(attn: MultiHeadAttention) -> list[torch.Tensor]:
    """The gradients of a layer's W^Q and W^K (weights and biases; in the fused projection, their rows)."""
    q_dim, k_dim, _ = attn.splits
    if attn.cross:
        grads = [attn.q_proj.weight.grad, attn.q_proj.bias.grad, attn.kv_proj.weight.grad[:k_dim],
                 attn.kv_proj.bias.grad[:k_dim]]
    else:
        grads = [attn.qkv_proj.weight.grad[:q_dim + k_dim], attn.qkv_proj.bias.grad[:q_dim + k_dim]]
    return [g for g in grads if g is not None]


def attention_statistics(model, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor,
                         label_smoothing: float = 0.0) -> dict[str, float]:
    """The METRICS of an encoder-decoder (the Transformer family) on one batch; {} for another family. The
    model's gradients are left zeroed (set to None) and it is left in eval mode."""
    if getattr(model.cfg, "family", "transformer") != "transformer":
        return {}
    model.eval()
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    model.zero_grad(set_to_none=True)
    rec = _Recorder(layers)
    try:
        loss, _, n = model.loss(src, tgt_in, tgt_out, label_smoothing)
        (loss / max(n, 1)).backward()
    finally:
        rec.close()
    grad_sq = sum(float((g.double() ** 2).sum()) for attn in layers for g in _qk_gradients(attn))
    model.zero_grad(set_to_none=True)
    real_queries = _query_rows(model, src, tgt_in)
    sums = dict.fromkeys(METRICS[:-1], 0.0)
    with torch.no_grad():
        for attn, x, kw, _ in rec.calls:
            logits, dots, allowed, _ = attention_logits(attn, x, memory=kw.get("memory"), mask=kw.get("mask"),
                                                        causal=kw.get("causal", False), positions=kw.get("positions"))
            queries = real_queries[id(attn)][:, None, :].expand(logits.shape[:3])        # (B, h, T)
            pairs = allowed.expand(logits.shape) & queries[..., None]
            sums["attn_qk_var"] += float(dots[pairs].double().var())
            sums["attn_logit_var"] += float(logits[pairs].double().var())
            p = logits.softmax(-1)[queries].double()                                    # (real queries, S)
            entropy = -(p * p.clamp_min(1e-300).log()).sum(-1)
            n_keys = allowed.expand(logits.shape)[queries].sum(-1).double()
            sums["attn_max_prob"] += float(p.max(-1).values.mean())
            sums["attn_entropy"] += float(entropy.mean())
            ratio = torch.where(n_keys > 1, entropy / n_keys.clamp_min(2).log(), torch.ones_like(entropy))
            sums["attn_entropy_ratio"] += float(ratio.mean())
    out = {k: v / len(rec.calls) for k, v in sums.items()}
    out["attn_qk_grad_norm"] = math.sqrt(grad_sq)
    return out


def dev_attention_statistics(model, data, n_sentences: int, device: torch.device,
                             label_smoothing: float = 0.0) -> dict[str, float]:
    """`attention_statistics` on the first n_sentences dev pairs (data: ParallelData) as one batch."""
    n = min(n_sentences, len(data))
    if n == 0:
        return {}
    b = data.collate(list(range(n))).to(device)
    return attention_statistics(model, b.src, b.tgt_in, b.tgt_out, label_smoothing)
