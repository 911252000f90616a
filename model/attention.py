"""Multi-head attention (§3.2) on torch's fused scaled_dot_product_attention.

d_k and d_v are free of d_model / h (Table 3 row B changes d_k alone); n_kv_heads < n_heads gives grouped-query
attention. Attention runs on torch's SDPA, which picks a fused kernel and builds no (n x n) score tensor;
decoder self-attention uses `is_causal`, and padding is a boolean key mask broadcast over heads and queries.
The one exception is a CPU with short sequences, where two matmuls and a softmax are faster (`attend`).
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .config import Switch, TransformerConfig
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


@dataclass
class Packed:
    """Sentences laid end to end in one row of N tokens, without padding: token i is position pos[i] of
    sentence seq[i]. cu holds the cumulative lengths (0, l_0, l_0 + l_1, ..., N) that variable-length
    attention kernels take."""

    lengths: torch.Tensor     # (n,) tokens per sentence
    cu: torch.Tensor          # (n + 1,) int32
    seq: torch.Tensor         # (N,)
    pos: torch.Tensor         # (N,)
    max_len: int

    @classmethod
    def of(cls, lengths: torch.Tensor) -> "Packed":
        lengths = lengths.long()
        cu = torch.zeros(len(lengths) + 1, dtype=torch.long, device=lengths.device)
        cu[1:] = lengths.cumsum(0)
        seq = torch.repeat_interleave(torch.arange(len(lengths), device=lengths.device), lengths)
        pos = torch.arange(int(cu[-1]), device=lengths.device) - cu[:-1].repeat_interleave(lengths)
        return cls(lengths, cu.int(), seq, pos, int(lengths.max()) if len(lengths) else 0)

    def to(self, device) -> "Packed":
        return Packed(*(t.to(device, non_blocking=True) for t in (self.lengths, self.cu, self.seq, self.pos)),
                      self.max_len)


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
                causal: bool = False, cache: KVCache | None = None, offset: int | torch.Tensor = 0,
                packed: tuple[Packed, Packed] | None = None) -> torch.Tensor:
        """x: (B, T, d_model). mask: boolean (B, 1, 1, S), True where a key may be attended, or None.
        causal: decoder self-attention over a whole sequence. cache/offset: incremental decoding, where x
        holds the positions offset .. offset + T - 1 and earlier keys come from the cache. offset may be a
        0-d tensor on the device (one position, T = 1): the step then has the same shapes at every
        position, as a captured CUDA graph needs (`model.decode.StepGraph`).
        packed: (queries, keys) of a packed batch (B = 1, sentences end to end); mask is then unused."""
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
            static = isinstance(offset, torch.Tensor)
            if self.rotary is not None:
                positions = packed[0].pos if packed is not None else offset.view(1) if static else None
                q, k = self.rotary(q, offset, positions), self.rotary(k, offset, positions)
            if static:          # write at the device-side position; attend to the whole buffer, masked past it
                cache.k.index_copy_(2, offset.view(1), k.to(cache.k.dtype))    # autocast: bf16 k, fp32 cache
                cache.v.index_copy_(2, offset.view(1), v.to(cache.v.dtype))
                k, v, causal = cache.k, cache.v, False
                mask = (torch.arange(k.size(2), device=k.device) <= offset).view(1, 1, 1, -1)   # (.., T_max)
            elif cache is not None:
                end = offset + x.size(1)
                cache.k[:, :, offset:end] = k
                cache.v[:, :, offset:end] = v
                cache.length = end
                k, v = cache.k[:, :, :end], cache.v[:, :, :end]
                # The new queries are the latest positions: with one query per step no future key exists.
                causal = causal and x.size(1) > 1
        p_drop, gqa = self.p_attn_drop if self.training else 0.0, self.n_kv_heads != self.n_heads
        if packed is not None:
            out = attend_packed(q, k, v, packed[0], packed[1], causal, p_drop, gqa)
        else:
            out = attend(q, k, v, mask, causal, p_drop, gqa=gqa)           # (B, h, T, d_v)
        b, _, t, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, t, self.n_heads * self.d_v))

    def empty_cache(self, batch: int, max_len: int, like: torch.Tensor) -> KVCache:
        if self.cross:
            return KVCache()
        shape = (batch, self.n_kv_heads, max_len)
        return KVCache(k=like.new_zeros(*shape, self.d_k), v=like.new_zeros(*shape, self.d_v))


# On a CPU, sequences with at most this many keys are attended with explicit matmuls (see `attend`).
CPU_EXPLICIT_MAX_KEYS = 64
ATTENTION = Switch("attention path", ("auto", "sdpa", "explicit"))


def attention_path(path: str):
    """Force one attention implementation ("sdpa" or "explicit"; "auto" chooses) inside a with-block: the
    parity tests hold both to the written-out reference, and the bench can time either."""
    return ATTENTION.use(path)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
           dropout_p: float, gqa: bool = False) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k)) V for q (B, h, T, d_k), k (B, h_kv, S, d_k), v (B, h_kv, S, d_v);
    gqa: h_kv < h (grouped-query attention).

    SDPA everywhere, except on a CPU when S <= CPU_EXPLICIT_MAX_KEYS: there SDPA's flash kernel spends
    more on tiling than the arithmetic it saves. Measured on 2 cores, forward + backward of 164 sentences x
    4 heads x 25 tokens, d_k 32: SDPA 5.7 ms, the explicit form 3.4 ms; at 64 tokens they are level."""
    path = ATTENTION.value
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
    # Masks are added as -inf biases: a broadcast add is several times faster on a CPU than masked_fill_.
    if causal:
        t, s = scores.shape[-2:]
        scores.add_(torch.full((t, s), float("-inf"), dtype=scores.dtype, device=q.device).triu(1))
    if mask is not None:
        scores.add_(torch.zeros(mask.shape, dtype=scores.dtype, device=q.device).masked_fill_(~mask, float("-inf")))
    weights = ShortSoftmax.apply(scores)
    if dropout_p:
        weights = dropout(weights, dropout_p, training=True)
    return weights @ v


class ShortSoftmax(torch.autograd.Function):
    """softmax over the last dimension, written out, with its backward y * (g - sum(g * y)).

    The same function as `Tensor.softmax(-1)` (to float rounding), for the explicit path's short key rows:
    there ATen's softmax kernel pays per row, and at 10 keys the written-out form is several times faster.
    Measured on one thread, (56, 8, 10, 10) fp32 scores, forward + backward: Tensor.softmax 0.89 ms, this
    0.19 ms; a training step of Table 3's tiny base (512 target tokens) drops from 41 ms to 32 ms. Half
    precision is computed in fp32, as ATen's kernel accumulates."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        xf = x if x.dtype in (torch.float32, torch.float64) else x.float()
        y = (xf - xf.amax(-1, keepdim=True)).exp_()
        y /= y.sum(-1, keepdim=True)
        ctx.save_for_backward(y)
        return y.to(x.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        g = grad.to(y.dtype)
        return (y * (g - (g * y).sum(-1, keepdim=True))).to(grad.dtype)


try:                                         # flash-attention's variable-length kernel (CUDA, torch >= 2.10)
    from torch.nn.attention.varlen import varlen_attn
    _VARLEN_ARGS = set(inspect.signature(varlen_attn).parameters)
except ImportError:
    varlen_attn, _VARLEN_ARGS = None, set()
_varlen_failed: str | None = None


def _varlen(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pq: Packed, pk: Packed, causal: bool,
            gqa: bool) -> torch.Tensor:
    """varlen_attn on (N, h, d) layouts, across its versions: torch 2.10 takes is_causal, later ones a
    window_size ((-1, 0) is causal); enable_gqa came later still, and without it K/V heads are repeated."""
    kwargs = {}
    if "window_size" in _VARLEN_ARGS:
        kwargs["window_size"] = (-1, 0) if causal else (-1, -1)
    elif causal:
        kwargs["is_causal"] = True
    if gqa and "enable_gqa" in _VARLEN_ARGS:
        kwargs["enable_gqa"] = True
    elif gqa:
        group = q.size(1) // k.size(1)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return varlen_attn(q, k, v, pq.cu, pk.cu, pq.max_len, pk.max_len, **kwargs)


def attend_packed(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pq: Packed, pk: Packed, causal: bool,
                  dropout_p: float, gqa: bool) -> torch.Tensor:
    """Attention within each sentence of a packed batch: q (1, h, Nq, d_k), k and v (1, h_kv, Nk, d),
    query sentence i attending to key sentence i only (causally for decoder self-attention).

    On CUDA with bf16/fp16 inputs and no attention dropout: the variable-length flash kernel, which does
    the arithmetic of each sentence and nothing more. Elsewhere the same result the long way: each
    sentence put back into a padded (sentences x longest) layout, attended as usual, and gathered out."""
    global _varlen_failed
    if (varlen_attn is not None and _varlen_failed is None and q.is_cuda and dropout_p == 0
            and q.dtype in (torch.bfloat16, torch.float16) and ATTENTION.value != "explicit"):
        try:
            out = _varlen(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1), pq, pk, causal, gqa)
            return out.transpose(0, 1)[None]                               # (Nq, h, d_v) -> (1, h, Nq, d_v)
        except (TypeError, RuntimeError, NotImplementedError) as err:    # an older or partial torch
            _varlen_failed = f"{type(err).__name__}: {err}"
            warnings.warn(f"variable-length attention unavailable ({_varlen_failed}); packed batches are "
                          "attended through a padded layout instead", stacklevel=2)

    def padded(x: torch.Tensor, p: Packed) -> torch.Tensor:           # (1, h, N, d) -> (n, h, L, d)
        out = x.new_zeros(len(p.lengths), x.size(1), p.max_len, x.size(-1))
        out[p.seq, :, p.pos] = x[0].transpose(0, 1)
        return out
    # Causal self-attention needs no key mask (right padding lies in every real query's future).
    mask = None if causal else (torch.arange(pk.max_len, device=q.device) < pk.lengths[:, None])[:, None, None, :]
    out = attend(padded(q, pq), padded(k, pk), padded(v, pk), mask, causal, dropout_p, gqa)
    return out[pq.seq, :, pq.pos].transpose(0, 1)[None]                 # (1, h, Nq, d_v)


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
