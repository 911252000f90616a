"""Multi-head attention (§3.2) on torch's fused scaled_dot_product_attention.

d_k and d_v are free of d_model / h (Table 3 row B changes d_k alone); n_kv_heads < n_heads gives grouped-query
attention. Attention runs on torch's SDPA, which picks a fused kernel and builds no (n x n) score tensor;
decoder self-attention uses `is_causal`, and padding is a boolean key mask broadcast over heads and queries.
The one exception is a CPU with short sequences, where two matmuls and a softmax are faster (`attend`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import TransformerConfig
from .layers import Rotary, dropout


@dataclass
class KVCache:
    """Keys and values of one attention layer kept across decoding steps.

    Self-attention: buffers of the full decoding length, filled one step at a time (no re-allocation).
    Cross-attention: the projected encoder memory, computed on the first step and reused."""

    k: torch.Tensor | None = None       # (B, h_kv, T_max, d_k)
    v: torch.Tensor | None = None       # (B, h_kv, T_max, d_v)
    length: int = 0

    def reorder(self, index: torch.Tensor) -> None:
        """Beam search: keep the rows of the surviving beams (index into the batch dimension)."""
        if self.k is None:
            return
        # Only the filled positions move (a self-attention buffer is written up to `length`; a cross-attention
        # cache has length 0 and is used whole).
        n = self.length or self.k.size(2)
        self.k[:, :, :n] = self.k[:, :, :n].index_select(0, index)
        self.v[:, :, :n] = self.v[:, :, :n].index_select(0, index)

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (self.k, self.v) if t is not None)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k)) V W_i^V."""

    def __init__(self, cfg: TransformerConfig, cross: bool = False):
        super().__init__()
        self.cross = cross
        self.n_heads, self.n_kv_heads, self.d_k, self.d_v = cfg.n_heads, cfg.n_kv_heads, cfg.d_k, cfg.d_v
        self.p_attn_drop = cfg.p_attn_drop
        q_dim, k_dim, v_dim = cfg.n_heads * cfg.d_k, cfg.n_kv_heads * cfg.d_k, cfg.n_kv_heads * cfg.d_v
        self.splits = (q_dim, k_dim, v_dim)
        if cross:   # queries come from the decoder, keys and values from the encoder's output
            self.q_proj = nn.Linear(cfg.d_model, q_dim)
            self.kv_proj = nn.Linear(cfg.d_model, k_dim + v_dim)
        else:       # one fused projection: a single matmul for Q, K and V
            self.qkv_proj = nn.Linear(cfg.d_model, q_dim + k_dim + v_dim)
        self.out_proj = nn.Linear(cfg.n_heads * cfg.d_v, cfg.d_model)
        # RoPE rotates self-attention only: cross-attention compares positions of two different sequences.
        self.rotary = Rotary(cfg) if cfg.positional == "rope" and not cross else None

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n, -1).transpose(1, 2)                           # (B, h, T, d)

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                causal: bool = False, cache: KVCache | None = None, offset: int = 0) -> torch.Tensor:
        """x: (B, T, d_model). mask: boolean (B, 1, 1, S), True where a key may be attended, or None.
        causal: decoder self-attention over a whole sequence. cache/offset: incremental decoding, where x
        holds the positions offset .. offset + T - 1 and earlier keys come from the cache."""
        q_dim, k_dim, v_dim = self.splits
        if self.cross:
            q = self._heads(self.q_proj(x), self.n_heads)
            if cache is not None and cache.k is not None:
                k, v = cache.k, cache.v
            else:
                k, v = self.kv_proj(memory).split((k_dim, v_dim), dim=-1)
                k, v = self._heads(k, self.n_kv_heads), self._heads(v, self.n_kv_heads)
                if cache is not None:
                    cache.k, cache.v = k, v
        else:
            q, k, v = self.qkv_proj(x).split((q_dim, k_dim, v_dim), dim=-1)
            q, k, v = self._heads(q, self.n_heads), self._heads(k, self.n_kv_heads), self._heads(v, self.n_kv_heads)
            if self.rotary is not None:
                q, k = self.rotary(q, offset), self.rotary(k, offset)
            if cache is not None:
                end = offset + x.size(1)
                cache.k[:, :, offset:end] = k
                cache.v[:, :, offset:end] = v
                cache.length = end
                k, v = cache.k[:, :, :end], cache.v[:, :, :end]
                # The new queries are the latest positions: with one query per step no future key exists.
                causal = causal and x.size(1) > 1
        out = attend(q, k, v, mask, causal, self.p_attn_drop if self.training else 0.0,
                     gqa=self.n_kv_heads != self.n_heads)                  # (B, h, T, d_v)
        b, _, t, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, t, self.n_heads * self.d_v))

    def empty_cache(self, batch: int, max_len: int, like: torch.Tensor) -> KVCache:
        if self.cross:
            return KVCache()
        shape = (batch, self.n_kv_heads, max_len)
        return KVCache(k=like.new_zeros(*shape, self.d_k), v=like.new_zeros(*shape, self.d_v))


# On a CPU, sequences with at most this many keys are attended with explicit matmuls (see `attend`).
CPU_EXPLICIT_MAX_KEYS = 64
_path = "auto"


@contextlib.contextmanager
def attention_path(path: str):
    """Force one attention implementation ("sdpa" or "explicit"; "auto" chooses) inside the block: the
    parity tests hold both to the written-out reference, and the bench can time either."""
    global _path
    if path not in ("auto", "sdpa", "explicit"):
        raise ValueError(f"attention path {path!r} is not one of auto, sdpa, explicit.")
    old, _path = _path, path
    try:
        yield
    finally:
        _path = old


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
           dropout_p: float, gqa: bool = False) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k)) V for q (B, h, T, d_k), k (B, h_kv, S, d_k), v (B, h_kv, S, d_v);
    gqa: h_kv < h (grouped-query attention).

    SDPA everywhere, except on a CPU when S <= CPU_EXPLICIT_MAX_KEYS: there SDPA's flash kernel spends
    more on tiling than the arithmetic it saves. Measured on 2 cores, forward + backward of 164 sentences x
    4 heads x 25 tokens, d_k 32: SDPA 5.7 ms, the explicit form 3.4 ms; at 64 tokens they are level."""
    path = _path
    if path == "auto":
        short = q.size(-2) > 1 and k.size(-2) <= CPU_EXPLICIT_MAX_KEYS   # one query (a decoding step): SDPA's
        path = "explicit" if q.device.type == "cpu" and short else "sdpa"  # single call costs least
    if path == "sdpa":
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal,
                                              enable_gqa=gqa)
    if gqa:                                      # grouped-query: each K/V head serves a group
        group = q.size(1) // k.size(1)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = (q @ k.transpose(-2, -1)).mul_(q.size(-1) ** -0.5)      # (B, h, T, S), scaled in place
    if causal:
        t, s = scores.shape[-2:]
        scores.masked_fill_(torch.ones(t, s, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    if dropout_p:
        weights = dropout(weights, dropout_p, training=True)
    return weights @ v


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                        causal: bool = False) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k)) V written out (Eq. 1), building the full score matrix: the slow reference
    that tests hold the fused path to, and the 'plain' attention of the scaling probe."""
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5                    # (B, h, T, S)
    if causal:
        t, s = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(t, s, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v
