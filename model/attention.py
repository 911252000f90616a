"""Multi-head attention (§3.2): Eq. 1 written out, then Eq. 2 built on it.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V                                              (Eq. 1)
    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)   (Eq. 2)

d_k and d_v are free of d_model / h (Table 3 row B changes d_k alone); n_kv_heads < n_heads gives grouped-query
attention. `MultiHeadAttention` computes Eq. 1 with one of the kernels of model/kernels.py, chosen when it is
built; every kernel is held to `reference_attention` by the tests.
"""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from .config import TransformerConfig
from .kernels import Kernels, Packed, attend, window_mask
from .layers import ALiBi, Rotary

__all__ = ["reference_attention", "KVCache", "Int8Rows", "WindowKVCache", "MultiHeadAttention", "Packed",
           "kv_cache_dtype", "window_mask"]


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
                        causal: bool = False) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k)) V written out (Eq. 1), building the full score matrix: the slow reference
    that tests hold the kernels to, and the 'plain' attention of the scaling probe."""
    scores = q @ k.transpose(-2, -1) / q.size(-1) ** 0.5                    # (B, h, T, S)
    if causal:
        t, s = scores.shape[-2:]
        scores = scores.masked_fill(torch.ones(t, s, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return scores.softmax(dim=-1) @ v


class Int8Rows:
    """A cache buffer held as int8, one float16 scale per row (sentence, head, position): a row x is stored as
    round(x / s) with s = max|x| / 127, and read back as q * s in the dtype it was written in. Indexed over the
    first three dimensions as the tensor it stands for (writes quantize, reads dequantize)."""

    def __init__(self, shape: tuple[int, ...], like: torch.Tensor):
        self.q = torch.zeros(shape, dtype=torch.int8, device=like.device)
        self.scale = torch.zeros(*shape[:-1], 1, dtype=torch.float16, device=like.device)
        self.dtype = like.dtype

    @classmethod
    def of(cls, x: torch.Tensor) -> "Int8Rows":
        rows = cls(tuple(x.shape), x)
        rows[:, :, :] = x
        return rows

    def __setitem__(self, index, x: torch.Tensor) -> None:
        # the scale as stored (float16), never 0 (at least float16's smallest subnormal, 2^-24): an all-zero row
        # reads back as zeros, not 0 / 0
        s = (x.detach().abs().amax(-1, keepdim=True).float() / 127).to(torch.float16).clamp_min(2.0 ** -24)
        self.q[index] = (x.float() / s.float()).round().clamp(-127, 127).to(torch.int8)
        self.scale[index] = s

    def __getitem__(self, index) -> torch.Tensor:
        return (self.q[index].float() * self.scale[index].float()).to(self.dtype)

    def size(self, dim: int | None = None):
        return self.q.size() if dim is None else self.q.size(dim)

    @property
    def device(self) -> torch.device:
        return self.q.device

    def nbytes(self) -> int:
        return self.q.numel() + self.scale.numel() * self.scale.element_size()

    def reorder(self, n: int, index: torch.Tensor) -> None:
        """Beam search: rows `index` of the batch, positions :n, moved as stored (exact, no re-quantizing)."""
        self.q[:, :, :n] = self.q[:, :, :n].index_select(0, index)
        self.scale[:, :, :n] = self.scale[:, :, :n].index_select(0, index)


def _reorder(t, n: int, index: torch.Tensor) -> None:
    """A cache buffer's positions :n, rows `index` of the batch kept (an Int8Rows as stored)."""
    if isinstance(t, Int8Rows):
        t.reorder(n, index)
    else:
        t[:, :, :n] = t[:, :, :n].index_select(0, index)


@contextmanager
def kv_cache_dtype(model: nn.Module, dtype: str):
    """Decode `model` with its caches in `dtype` ("model" or "int8") inside the block, whatever it was built with:
    every attention layer's flag and the model's config (which decoding reads) are set, then restored."""
    layers = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
    old_cfg, old = model.cfg, [m.int8_cache for m in layers]
    model.cfg = dataclasses.replace(model.cfg, kv_cache_dtype=dtype)
    for m in layers:
        m.int8_cache = dtype == "int8"
    try:
        yield model
    finally:
        model.cfg = old_cfg
        for m, flag in zip(layers, old):
            m.int8_cache = flag


def _nbytes(t) -> int:
    return 0 if t is None else t.nbytes() if isinstance(t, Int8Rows) else t.numel() * t.element_size()


@dataclass
class KVCache:
    """Keys and values of one attention layer kept across decoding steps.

    Self-attention: buffers of the full decoding length, filled one step at a time (no re-allocation).
    Cross-attention: the projected encoder memory, computed on the first step and reused."""

    k: torch.Tensor | None = None       # (B, h_kv, T_max, d_k), or its Int8Rows
    v: torch.Tensor | None = None       # (B, h_kv, T_max, d_v)
    length: int = 0
    int8: bool = False                  # a cross-attention cache: store the projected memory as Int8Rows

    def store(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention: keep the projected memory (int8 where asked) and return it as every step reads it."""
        self.k, self.v = (Int8Rows.of(k), Int8Rows.of(v)) if self.int8 else (k, v)
        return self.whole()

    def whole(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A cross-attention cache's keys and values, read back whole."""
        if isinstance(self.k, Int8Rows):
            return self.k[:, :, :], self.v[:, :, :]
        return self.k, self.v

    def write(self, k: torch.Tensor, v: torch.Tensor, offset: int, mask: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Self-attention: store the keys and values of positions offset .. offset + T - 1, and return the
        keys, values and mask to attend to: every position so far."""
        end = offset + k.size(2)
        self.k[:, :, offset:end] = k
        self.v[:, :, offset:end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end], mask

    def reorder(self, index: torch.Tensor) -> None:
        """Beam search: keep the rows of the surviving beams (index into the batch dimension)."""
        if self.k is None:
            return
        # Only the filled positions move (a self-attention buffer is written up to `length`; a cross-attention
        # cache has length 0 and is used whole).
        n = self.length or self.k.size(2)
        _reorder(self.k, n, index)
        _reorder(self.v, n, index)

    def nbytes(self) -> int:
        return _nbytes(self.k) + _nbytes(self.v)


class StaticKVCache(KVCache):
    """A self-attention cache written at a slot held in a 0-d device tensor and attended whole, masked past that
    slot: the same shapes at every step, as a captured CUDA graph needs (model/cuda_graph.py). A mask given to
    `write` (the decoder-only family's source padding, over the whole buffer) is kept as well."""

    def write(self, k: torch.Tensor, v: torch.Tensor, offset: torch.Tensor, mask: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        self.k.index_copy_(2, offset.view(1), k.to(self.k.dtype))     # autocast: bf16 k, fp32 cache
        self.v.index_copy_(2, offset.view(1), v.to(self.v.dtype))
        visible = (torch.arange(self.k.size(2), device=self.k.device) <= offset).view(1, 1, 1, -1)
        return self.k, self.v, visible if mask is None else visible & mask


class WindowKVCache(KVCache):
    """A sliding-window self-attention cache (TransformerConfig.attention_window = r): a ring of r + 1 slots, the
    position p written at slot p mod (r + 1), so that a layer keeps at most the r + 1 keys a query can see
    (itself and the r before it) however long the decoding. `positions` holds each slot's position (-1: empty),
    which the window mask and ALiBi read."""

    positions: torch.Tensor | None = None    # (slots,) the position each slot holds

    def write(self, k: torch.Tensor, v: torch.Tensor, offset: int, mask: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        slots = self.k.size(2)
        if k.size(2) > 1:
            raise ValueError("a sliding-window cache takes one position a step (cached decoding); a longer prefix "
                             "would push out keys its own queries still need")
        if self.positions is None:
            self.positions = torch.full((slots,), -1, dtype=torch.long, device=self.k.device)
        slot = offset % slots
        self.k[:, :, slot:slot + 1] = k
        self.v[:, :, slot:slot + 1] = v
        self.positions[slot] = offset
        self.length = offset + 1
        n = min(self.length, slots)                      # slots 0 .. n - 1 are filled
        return self.k[:, :, :n], self.v[:, :, :n], mask

    def key_positions(self) -> torch.Tensor:
        """The positions of the keys `write` last returned, in their slot order."""
        return self.positions[:min(self.length, self.k.size(2))]

    def reorder(self, index: torch.Tensor) -> None:
        if self.k is None:
            return
        n = min(self.length, self.k.size(2))
        _reorder(self.k, n, index)
        _reorder(self.v, n, index)


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = softmax(Q W_i^Q (K W_i^K)^T / sqrt(d_k)) V W_i^V.

    kernels: which kernels compute Eq. 1 (model/kernels.py), chosen by the model that holds this layer and
    shared by all its layers; by default the "auto" choice for torch's default device."""

    def __init__(self, cfg: TransformerConfig, cross: bool = False, kernels: Kernels | None = None):
        super().__init__()
        self.cross = cross
        self.kernels = kernels if kernels is not None else Kernels.choose("auto")
        self.n_heads, self.n_kv_heads, self.d_k, self.d_v = cfg.n_heads, cfg.n_kv_heads, cfg.d_k, cfg.d_v
        self.p_attn_drop = cfg.p_attn_drop
        q_dim, k_dim, v_dim = cfg.n_heads * cfg.d_k, cfg.n_kv_heads * cfg.d_k, cfg.n_kv_heads * cfg.d_v
        self.splits = (q_dim, k_dim, v_dim)
        if cross:   # queries come from the decoder, keys and values from the encoder's output
            self.q_proj = nn.Linear(cfg.d_model, q_dim)
            self.kv_proj = nn.Linear(cfg.d_model, k_dim + v_dim)
        else:       # one fused projection: a single matmul for Q, K and V
            self.qkv_proj = nn.Linear(cfg.d_model, q_dim + k_dim + v_dim)
        self.out_proj = nn.Linear(cfg.n_heads * cfg.d_v, cfg.d_model)      # W^O
        # §3.2.1's alternatives to the scaled dot product (TransformerConfig.attention_score; the decoder-only
        # family has only the paper's): unscaled dot products, or additive scores with a w_h per head.
        score = getattr(cfg, "attention_score", "scaled")
        self.scale = 1.0 if score == "unscaled" else None                 # None: 1/sqrt(d_k)
        self.additive_w = nn.Parameter(torch.empty(cfg.n_heads, cfg.d_k)) if score == "additive" else None
        if self.additive_w is not None:
            nn.init.xavier_uniform_(self.additive_w)
        # RoPE rotates self-attention only: cross-attention compares positions of two different sequences; so
        # does ALiBi bias it.
        self.rotary = Rotary(cfg) if cfg.positional == "rope" and not cross else None
        self.alibi = ALiBi(cfg) if cfg.positional == "alibi" and not cross else None
        # Sliding-window self-attention (cfg.attention_window; 0: full, the paper's); cross-attention stays full.
        self.window = 0 if cross else getattr(cfg, "attention_window", 0)
        self.int8_cache = getattr(cfg, "kv_cache_dtype", "model") == "int8"     # decoding's caches as Int8Rows

    def forward(self, x: torch.Tensor, memory: torch.Tensor | None = None, mask: torch.Tensor | None = None,
                causal: bool = False, cache: KVCache | None = None, offset: int | torch.Tensor = 0,
                packed: tuple[Packed, Packed] | None = None, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x: (B, T, d_model); memory: the encoder output, for cross-attention. mask: boolean (B, 1, 1, S), True
        where a key may be attended, or None. causal: decoder self-attention. cache: incremental decoding, x
        holding positions offset .. offset + T - 1, written at cache slot `offset` (a 0-d device tensor for a
        `StaticKVCache`; see `Transformer.decode_step`). packed: (queries, keys) layouts of a packed batch.
        positions: the queries' positions (T,) where they are not offset .. offset + T - 1 (a captured step's)."""
        q, k, v = self._project(x, memory, cache)                    # Q W^Q, K W^K, V W^V: (B, h, T, d)
        if self.rotary is not None:
            if positions is None and packed is not None:
                positions = packed[0].pos
            q, k = self.rotary(q, offset, positions), self.rotary(k, offset, positions)
        if cache is not None and not self.cross:                     # earlier positions' keys from the cache
            k, v, mask = cache.write(k, v, offset, mask)
            causal = causal and x.size(1) > 1                        # one query a step: no future key exists
        p_drop, gqa = self.p_attn_drop if self.training else 0.0, self.n_kv_heads != self.n_heads
        k_pos = cache.key_positions() if isinstance(cache, WindowKVCache) else None
        bias = self._alibi(q, k, offset, positions, k_pos) if self.alibi is not None else None
        if self.window and packed is None:         # the window as a mask over token positions (causality in it)
            q_pos = offset + torch.arange(q.size(-2), device=q.device)
            k_pos = k_pos if k_pos is not None else torch.arange(k.size(-2), device=q.device)
            # a captured step's static cache is masked past its slot already; the window masks what lies before
            mask, causal = window_mask(q_pos, k_pos, self.window, causal or cache is not None, mask), False
        heads = attend(q, k, v, mask, causal, p_drop, packed, self.kernels, gqa,   # head_1 .. head_h: (B, h, T, d_v)
                       self.scale, self.additive_w, bias, self.window)
        b, _, t, _ = heads.shape
        return self.out_proj(heads.transpose(1, 2).reshape(b, t, self.n_heads * self.d_v))   # Concat(..) W^O

    def _alibi(self, q: torch.Tensor, k: torch.Tensor, offset: int | torch.Tensor,
               positions: torch.Tensor | None, k_pos: torch.Tensor | None = None) -> torch.Tensor:
        """ALiBi's (h, T, S) bias: the queries at positions offset .. offset + T - 1 (or `positions`, a captured
        step's), the keys at 0 .. S - 1 (a self-attention cache's slots are its positions; without a cache the
        keys are the queries, from 0), or at k_pos (a sliding-window cache's ring)."""
        T, S = q.size(-2), k.size(-2)
        q_pos = positions if positions is not None else offset + torch.arange(T, device=q.device)
        return self.alibi(q_pos.reshape(-1), k_pos if k_pos is not None else torch.arange(S, device=q.device))

    def _project(self, x: torch.Tensor, memory: torch.Tensor | None, cache: KVCache | None
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q_dim, k_dim, v_dim = self.splits
        if not self.cross:
            q, k, v = self.qkv_proj(x).split((q_dim, k_dim, v_dim), dim=-1)
            return self._heads(q, self.n_heads), self._heads(k, self.n_kv_heads), self._heads(v, self.n_kv_heads)
        q = self._heads(self.q_proj(x), self.n_heads)
        if cache is not None and cache.k is not None:                # the memory, projected at the first step
            return q, *cache.whole()
        k, v = self.kv_proj(memory).split((k_dim, v_dim), dim=-1)
        k, v = self._heads(k, self.n_kv_heads), self._heads(v, self.n_kv_heads)
        if cache is not None:
            k, v = cache.store(k, v)
        return q, k, v

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        b, t, _ = x.shape
        return x.view(b, t, n, -1).transpose(1, 2)                           # (B, h, T, d)

    def empty_cache(self, batch: int, max_len: int, like: torch.Tensor) -> KVCache:
        if self.cross:
            return KVCache(int8=self.int8_cache)
        # a window's ring holds the r + 1 keys a query sees, however long the decoding
        slots = min(max_len, self.window + 1) if self.window else max_len
        shape = (batch, self.n_kv_heads, slots)
        buffer = (lambda d: Int8Rows((*shape, d), like)) if self.int8_cache else (lambda d: like.new_zeros(*shape, d))
        return (WindowKVCache if self.window else KVCache)(k=buffer(self.d_k), v=buffer(self.d_v))
