"""The kernels that compute Eq. 1, softmax(Q K^T / sqrt(d_k)) V, for `MultiHeadAttention`.

`model.attention.reference_attention` is the equation written out; each kernel here gives the same result faster
on some device (tests hold every one to the reference):

- `sdpa`: torch's fused scaled_dot_product_attention, which builds no (T x S) score tensor;
- `explicit`: two matmuls and a written-out softmax, faster on a CPU for short key rows;
- `short_rows`: on a CPU, `explicit` up to CPU_EXPLICIT_MAX_KEYS keys (more than one query), `sdpa` beyond;
- `additive_attention`: §3.2.1's additive (Bahdanau) score in place of the dot product, written out;
- a packed batch (sentences end to end, no padding): the variable-length flash kernel where it runs (CUDA,
  half precision, no attention dropout), else the same sentences put back into a padded layout.

A model decides once which of them it uses: `Kernels.choose` reads the `kernel` it was built with ("auto":
by its device; "sdpa" or "explicit" forced, as the parity tests and the FLOP counter do) and the device its
weights live on, when the model is built and again when it is moved (`Transformer._apply`). Nothing here
looks at the device per call, and no state is global: a varlen kernel that fails is given up by that model.
"""

from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F

from .layers import dropout

Kernel = Literal["auto", "sdpa", "explicit", "short_rows"]

# On a CPU, attention over at most this many keys takes the explicit path (see `explicit`).
CPU_EXPLICIT_MAX_KEYS = 64


@dataclass
class Kernels:
    """The attention kernels of one model, shared by its attention layers: `dense` for padded batches (a name
    of DENSE) and whether packed batches go through the variable-length kernel (`varlen`; `varlen_failure`:
    why it was given up, if it was)."""
    requested: Kernel = "auto"
    dense: str = "sdpa"
    varlen: bool = False
    varlen_failure: str | None = None

    @classmethod
    def choose(cls, kernel: Kernel, device: torch.device | str | None = None) -> "Kernels":
        """The kernels for a model built with `kernel` whose weights live on `device` (None: torch's default)."""
        out = cls(requested=kernel)
        out.place(device)
        return out

    def place(self, device: torch.device | str | None) -> None:
        """Choose again for `device`, in place (every layer holding this object follows)."""
        device = torch.device(device) if device is not None else torch.get_default_device()
        if self.requested not in DENSE and self.requested != "auto":
            raise ValueError(f"attention kernel {self.requested!r} is not one of auto, {', '.join(DENSE)}.")
        if self.requested == "auto":
            self.dense = "short_rows" if device.type == "cpu" else "sdpa"
        else:
            self.dense = self.requested
        self.varlen = (varlen_attn is not None and device.type == "cuda" and self.requested != "explicit"
                       and self.varlen_failure is None)


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


def window_mask(q_pos: torch.Tensor, k_pos: torch.Tensor, window: int, causal: bool,
                mask: torch.Tensor | None = None) -> torch.Tensor:
    """(T, S) boolean (broadcast with `mask`, a key mask, where given), True where the key at k_pos is visible to
    the query at q_pos: within `window` positions (before it only, with itself, where causal), and allowed by
    mask. A query always sees its own position, so that no row is masked whole: a padding query whose window
    holds only padding would otherwise give NaN, which its value would carry into every real query's weighted
    sum (a zero weight times NaN is NaN)."""
    d = q_pos.reshape(-1, 1) - k_pos.reshape(1, -1)
    visible = (d >= 0) & (d <= window) if causal else d.abs() <= window
    return visible if mask is None else (visible & mask) | (d == 0)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None = None,
           causal: bool = False, dropout_p: float = 0.0, packed: tuple[Packed, Packed] | None = None,
           kernel: "Kernels | str" = "sdpa", gqa: bool | None = None, scale: float | None = None,
           additive: torch.Tensor | None = None, bias: torch.Tensor | None = None, window: int = 0) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d_k)) V for q (B, h, T, d_k), k (B, h_kv, S, d_k), v (B, h_kv, S, d_v) -> (B, h, T, d_v).

    mask: boolean, broadcast to (B, h, T, S), True where a key may be attended, or None. causal: query i sees
    keys up to i. h_kv < h is grouped-query attention: each key/value head serves h / h_kv query heads (gqa:
    whether h_kv < h, None to read it from the shapes, which a traced graph cannot branch on).
    packed: the (queries, keys) layouts of a packed batch (B = 1, sentences end to end); mask is then unused.
    kernel: a model's `Kernels`, or the name of one dense kernel (DENSE).
    §3.2.1's other scores (`TransformerConfig.attention_score`): scale, the factor of Q K^T where it is not
    1/sqrt(d_k) (1.0: unscaled dot products); additive, (h, d_k) weights w_h: Bahdanau's w_h . tanh(q_i + k_j),
    always computed written out (`additive_attention`).
    bias: a float bias added to every score, broadcast to (B, h, T, S) (ALiBi's, model/layers.py); the causal and
    key masks are then folded into it as -inf, and the kernels take it as a float mask.
    window: sliding-window attention over a packed batch (each sentence's own positions; a padded batch's window
    comes in `mask`, which MultiHeadAttention builds from the positions)."""
    gqa = k.size(1) != q.size(1) if gqa is None else gqa
    if packed is not None:
        if bias is not None:
            raise ValueError("a score bias (positional=alibi) needs padded batches; set train.pack false.")
        return attend_packed(q, k, v, packed[0], packed[1], causal, dropout_p, gqa, kernel, scale, additive, window)
    if bias is not None:
        mask, causal = _as_bias(bias, mask, causal, q.size(-2), k.size(-2)), False
    if additive is not None:
        return additive_attention(q, k, v, additive, mask, causal, dropout_p, gqa)
    name = kernel.dense if isinstance(kernel, Kernels) else kernel
    if name not in DENSE:
        raise ValueError(f"attention kernel {name!r} is not one of {', '.join(DENSE)} (\"auto\" is chosen when "
                         "a model is built: Kernels.choose).")
    return DENSE[name](q, k, v, mask, causal, dropout_p, gqa, scale)


def _as_bias(bias: torch.Tensor, mask: torch.Tensor | None, causal: bool, t: int, s: int) -> torch.Tensor:
    """bias with the key mask (boolean, True where allowed) and the causal mask folded in as -inf."""
    out = bias.expand(*bias.shape[:-2], t, s)
    if causal:
        out = out.masked_fill(torch.ones(t, s, dtype=torch.bool, device=bias.device).triu(1), float("-inf"))
    if mask is not None:
        out = out.masked_fill(~mask, float("-inf"))
    return out


def sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
         dropout_p: float, gqa: bool, scale: float | None = None) -> torch.Tensor:
    """torch's SDPA, which picks a fused kernel for the device; `is_causal` for decoder self-attention."""
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal,
                                          enable_gqa=gqa, scale=scale)


def explicit(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
             dropout_p: float, gqa: bool, scale: float | None = None) -> torch.Tensor:
    """Eq. 1 as two matmuls and `ShortSoftmax`, scaling and masking in place.

    On a CPU with short key rows SDPA's flash kernel spends more on tiling than the arithmetic it saves;
    this form is faster there."""
    if gqa:                                      # grouped-query: each K/V head serves a group
        group = q.size(1) // k.size(1)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-2, -1)                                  # (B, h, T, S)
    if scale != 1.0:
        scores.mul_(q.size(-1) ** -0.5 if scale is None else scale)  # scaled in place
    return _softmax_values(scores, v, mask, causal, dropout_p)


def _softmax_values(scores: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
                    dropout_p: float) -> torch.Tensor:
    """softmax(scores) V with the causal and key masks, the explicit kernels' second half (scores in place). A
    float mask is a bias, added as it is."""
    # Masks are added as -inf biases: on a CPU a broadcast add is faster than masked_fill_.
    if causal:
        t, s = scores.shape[-2:]
        scores.add_(torch.full((t, s), float("-inf"), dtype=scores.dtype, device=scores.device).triu(1))
    if mask is not None and mask.dtype != torch.bool:
        scores = scores + mask.to(scores.dtype)                      # broadcast: a (h, T, S) bias grows to (B, ..)
    elif mask is not None:
        bias = torch.zeros(mask.shape, dtype=scores.dtype, device=scores.device)
        scores.add_(bias.masked_fill_(~mask, float("-inf")))
    weights = ShortSoftmax.apply(scores)
    if dropout_p:
        weights = dropout(weights, dropout_p, training=True)
    return weights @ v


def additive_scores(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Bahdanau et al.'s additive score per head: w_h . tanh(q_i + k_j), for q (B, h, T, d), k (B, h, S, d) and
    w (h, d) -> (B, h, T, S). It builds a (B, h, T, S, d) tensor: memory T x S x d per head, where the dot
    product needs none; this is why §3.2.1 calls dot-product attention "much faster and more space-efficient"."""
    return torch.einsum("bhtsd,hd->bhts", torch.tanh(q.unsqueeze(3) + k.unsqueeze(2)), w)


def additive_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, w: torch.Tensor,
                       mask: torch.Tensor | None, causal: bool, dropout_p: float, gqa: bool) -> torch.Tensor:
    """softmax(additive scores) V (`additive_scores`), masked as the other kernels do."""
    if gqa:
        group = q.size(1) // k.size(1)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    return _softmax_values(additive_scores(q, k, w), v, mask, causal, dropout_p)


class ShortSoftmax(torch.autograd.Function):
    """softmax over the last dimension, written out, with its backward y * (g - sum(g * y)).

    The same function as `Tensor.softmax(-1)` (to float rounding), for the explicit path's short key rows:
    there ATen's softmax kernel pays per row, and at 10 keys the written-out form is several times faster.
    Half precision is computed in fp32, as ATen's kernel accumulates."""

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


def short_rows(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, causal: bool,
               dropout_p: float, gqa: bool, scale: float | None = None) -> torch.Tensor:
    """A CPU's choice by shape: `explicit` for up to CPU_EXPLICIT_MAX_KEYS keys, `sdpa` for longer rows and for
    one query (a decoding step, where SDPA's single call costs least)."""
    if q.size(-2) > 1 and k.size(-2) <= CPU_EXPLICIT_MAX_KEYS:
        return explicit(q, k, v, mask, causal, dropout_p, gqa, scale)
    return sdpa(q, k, v, mask, causal, dropout_p, gqa, scale)


DENSE = {"sdpa": sdpa, "explicit": explicit, "short_rows": short_rows}


try:                                         # flash-attention's variable-length kernel (CUDA, torch >= 2.10)
    from torch.nn.attention.varlen import varlen_attn
    _VARLEN_ARGS = set(inspect.signature(varlen_attn).parameters)
except ImportError:
    varlen_attn, _VARLEN_ARGS = None, set()


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
                  dropout_p: float, gqa: bool, kernel: "Kernels | str" = "sdpa", scale: float | None = None,
                  additive: torch.Tensor | None = None, window: int = 0) -> torch.Tensor:
    """Attention within each sentence of a packed batch: q (1, h, Nq, d_k), k and v (1, h_kv, Nk, d),
    query sentence i attending to key sentence i only (causally for decoder self-attention).

    With a model's Kernels that chose `varlen` (CUDA), bf16/fp16 inputs and no attention dropout: the
    variable-length flash kernel, which does the arithmetic of each sentence and nothing more. Elsewhere the
    same result the long way: each sentence put back into a padded (sentences x longest) layout, attended with
    the dense kernel, and gathered out. kernel: a model's `Kernels`, or a dense kernel's name (no varlen).
    scale, additive: §3.2.1's other scores, as `attend` takes them (always through the padded layout); window:
    sliding-window attention within each sentence (through the padded layout too)."""
    kernels = kernel if isinstance(kernel, Kernels) else Kernels(requested="sdpa", dense=kernel)
    if (kernels.varlen and dropout_p == 0 and q.dtype in (torch.bfloat16, torch.float16) and scale is None
            and additive is None and not window):
        try:
            out = _varlen(q[0].transpose(0, 1), k[0].transpose(0, 1), v[0].transpose(0, 1), pq, pk, causal, gqa)
            return out.transpose(0, 1)[None]                               # (Nq, h, d_v) -> (1, h, Nq, d_v)
        except (TypeError, RuntimeError, NotImplementedError) as err:    # an older or partial torch
            kernels.varlen, kernels.varlen_failure = False, f"{type(err).__name__}: {err}"
            warnings.warn(f"variable-length attention unavailable ({kernels.varlen_failure}); packed batches are "
                          "attended through a padded layout instead", stacklevel=2)

    def padded(x: torch.Tensor, p: Packed) -> torch.Tensor:           # (1, h, N, d) -> (n, h, L, d)
        out = x.new_zeros(len(p.lengths), x.size(1), p.max_len, x.size(-1))
        out[p.seq, :, p.pos] = x[0].transpose(0, 1)
        return out
    # Causal self-attention needs no key mask (right padding lies in every real query's future).
    mask = None if causal else (torch.arange(pk.max_len, device=q.device) < pk.lengths[:, None])[:, None, None, :]
    if window:       # within each sentence: its positions are the padded layout's 0 .. L - 1
        mask = window_mask(torch.arange(pq.max_len, device=q.device), torch.arange(pk.max_len, device=q.device),
                           window, causal, mask)
        causal = False
    out = attend(padded(q, pq), padded(k, pk), padded(v, pk), mask, causal, dropout_p, kernel=kernels.dense,
                 gqa=gqa, scale=scale, additive=additive)
    return out[pq.seq, :, pq.pos].transpose(0, 1)[None]                 # (1, h, Nq, d_v)
