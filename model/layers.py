"""Feed-forward blocks, norms and positional encodings: each variant is one small function of the config."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import TransformerConfig


class FeedForward(nn.Module):
    """§3.3: FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position alike.

    ffn=gelu swaps the activation; ffn=swiglu is Shazeer (2020)'s gated unit, W2(silu(x W1) * x W3)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.kind = cfg.ffn
        self.w1 = nn.Linear(cfg.d_model, cfg.d_ff)
        self.w2 = nn.Linear(cfg.d_ff, cfg.d_model)
        self.w3 = nn.Linear(cfg.d_model, cfg.d_ff) if cfg.ffn == "swiglu" else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.w1(x)                                        # (B, T, d_ff)
        if self.kind == "relu":
            h = F.relu(h)
        elif self.kind == "gelu":
            h = F.gelu(h)
        else:
            h = F.silu(h) * self.w3(x)
        return self.w2(h)


def dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """F.dropout, except that on a CPU the mask is drawn as (uniform >= p): the same distribution, and
    torch's CPU bernoulli_ is the slower draw (forward + backward of 4096 x 128 on 2 cores: 1.8 ms against
    3.4 ms; the tiny model makes twelve such calls a step)."""
    if not training or p == 0 or p >= 1 or x.device.type != "cpu":
        return F.dropout(x, p, training)
    return x * torch.rand_like(x).ge_(p).mul_(1 / (1 - p))          # the mask, scaled, built in place


class Dropout(nn.Dropout):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return dropout(x, self.p, self.training)


def make_norm(cfg: TransformerConfig) -> nn.Module:
    if cfg.norm == "layer":
        return nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps)
    return nn.RMSNorm(cfg.d_model, eps=cfg.norm_eps)


def sinusoid_table(n_positions: int, d_model: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """§3.5: PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(...); wavelengths 2π .. 10000·2π.
    Computed in float64, returned in `dtype`.

    Interleaved as the paper writes it (tensor2tensor concatenates the sin and cos halves instead)."""
    pos = torch.arange(n_positions, dtype=torch.float64)[:, None]                 # (P, 1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    table = torch.zeros(n_positions, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(pos * inv_freq)
    table[:, 1::2] = torch.cos(pos * inv_freq)
    return table.to(dtype)                                                        # (P, d_model)


class PositionalEncoding(nn.Module):
    """Adds absolute positions to the scaled embeddings (sinusoid, §3.5, or learned, Table 3 row E).

    With positional=rope or alibi this adds nothing: RoPE rotates queries and keys inside attention instead, and
    ALiBi biases the attention scores (`ALiBi`). positional=none adds nothing at all (§3.5's "must inject" tested:
    without positions self-attention is permutation-equivariant; an ablation row, not the paper's model)."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.kind = cfg.positional
        self.max_len = cfg.max_len
        if cfg.positional == "sinusoid":
            self.register_buffer("table", sinusoid_table(cfg.max_len, cfg.d_model), persistent=False)
        elif cfg.positional == "learned":
            self.table = nn.Parameter(torch.empty(cfg.max_len, cfg.d_model))
            nn.init.normal_(self.table, std=cfg.d_model ** -0.5)

    def forward(self, x: torch.Tensor, offset: int = 0, positions: torch.Tensor | None = None) -> torch.Tensor:
        """x holds positions offset .. offset + T - 1, or `positions` (each token's, broadcast to x's
        leading dimensions: a packed row's, word positions, a captured step's device-side position)."""
        if self.kind in ("rope", "alibi", "none"):
            return x
        if positions is not None:
            return x + self.table[positions].to(x.dtype)
        end = offset + x.size(1)
        if end > self.max_len:
            raise ValueError(f"sequence of {end} positions exceeds max_len={self.max_len}; raise max_len.")
        return x + self.table[offset:end].to(x.dtype)


class Rotary(nn.Module):
    """RoPE (Su et al. 2021): rotate each (even, odd) pair of query/key dimensions by a position angle."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        inv_freq = 1.0 / (cfg.rope_base ** (torch.arange(0, cfg.d_k, 2, dtype=torch.float32) / cfg.d_k))
        self.register_buffer("inv_freq", inv_freq, persistent=False)
        self.max_len = cfg.max_len
        self.set_scale(getattr(cfg, "rope_scale", 1.0))

    def set_scale(self, scale: float) -> None:
        """rope_scale F (position interpolation, Chen et al. 2023): position p turns as p / F from now on."""
        positions = torch.arange(self.max_len, dtype=torch.float32, device=self.inv_freq.device) / scale
        angles = positions[:, None] * self.inv_freq                                    # (P, d_k/2)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)

    def forward(self, x: torch.Tensor, offset: int = 0, positions: torch.Tensor | None = None) -> torch.Tensor:
        # x: (B, h, T, d_k) at positions offset .. offset + T - 1 (as in PositionalEncoding), or `positions` (T,)
        if positions is None:
            end = offset + x.size(-2)
            if end > self.max_len:
                raise ValueError(f"sequence of {end} positions exceeds max_len={self.max_len}; raise max_len.")
        index = positions if positions is not None else slice(offset, end)
        cos, sin = self.cos[index].to(x.dtype), self.sin[index].to(x.dtype)             # (T, d_k/2)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)         # (B, h, T, d_k/2, 2)
        return out.flatten(-2)



def init_transformer_weights(module: nn.Module, tables: list[nn.Embedding], d_model: int, pad_id: int) -> None:
    """The Transformer families' initialisation: Xavier for projections (as torch.nn.Transformer and
    tensor2tensor), zero biases, unit norm gains; then the token tables, in the order given, N(0, d_model^-0.5),
    so that after the x sqrt(d_model) scaling of §3.4 they have unit variance, like the sinusoids, with the pad
    row zero. A fixed order, so that the draws are the same in every process."""
    for name, p in module.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(p)
        elif "norm" in name:
            nn.init.ones_(p)
        elif p.dim() == 2 and "embed" not in name and name != "positions.table":
            nn.init.xavier_uniform_(p)
    for emb in tables:
        nn.init.normal_(emb.weight, std=d_model ** -0.5)
        with torch.no_grad():
            emb.weight[pad_id].zero_()


def alibi_slopes(n_heads: int) -> list[float]:
    """Press et al. (2022)'s head slopes: for h a power of two the geometric sequence 2^(-8/h), 2^(-16/h), ..,
    2^(-8); otherwise those of the largest power of two p < h, then every other slope of 2p's sequence for the
    rest (their reference code's rule)."""
    def powers(n: int) -> list[float]:
        start = 2 ** (-8 / n)
        return [start ** (i + 1) for i in range(n)]
    if n_heads & (n_heads - 1) == 0:
        return powers(n_heads)
    p = 2 ** math.floor(math.log2(n_heads))
    return powers(p) + powers(2 * p)[0::2][:n_heads - p]


class ALiBi(nn.Module):
    """ALiBi (Press et al. 2022): no position is added to the embeddings; each self-attention head h adds
    -m_h |i - j| to the score of query position i against key position j (m_h: `alibi_slopes`). Causal decoder
    self-attention sees only j <= i, where this is their -m_h (i - j); the encoder's bidirectional
    self-attention takes the symmetric form (as bidirectional uses of ALiBi do, e.g. MosaicBERT; Press et al.
    define it for causal language models). Cross-attention gets no bias: source and target positions are not
    on one axis."""

    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(cfg.n_heads)), persistent=False)

    def forward(self, q_pos: torch.Tensor, k_pos: torch.Tensor) -> torch.Tensor:
        """The (h, T, S) bias for queries at positions q_pos (T,) and keys at k_pos (S,)."""
        distance = (q_pos[:, None] - k_pos[None, :]).abs().to(self.slopes.dtype)
        return -self.slopes[:, None, None] * distance
