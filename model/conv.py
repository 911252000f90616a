"""The convolutional rival (Table 2's ConvS2S row): Gehring et al. (2017), "Convolutional Sequence to Sequence
Learning", as fairseq's `fconv.py` builds it.

- Embeddings: tokens plus learned positions (§3.1), then a linear map to the convolutions' width.
- Blocks (§3.2): dropout, a 1-D convolution of kernel k to 2x the width, a gated linear unit
  GLU([A B]) = A * sigmoid(B), and a residual connection, the sum scaled by sqrt(0.5) (§3.4). Encoder
  convolutions are centred; decoder ones see only the past (k - 1 positions of left padding).
- Multi-step attention (§3.3) in every decoder layer: the query is (W h + g) * sqrt(0.5), h the layer's GLU
  output and g the target embedding; keys are the encoder's outputs z, values z + e (the encoder's input
  embedding), scaled by sqrt(0.5); the context, scaled by m * sqrt(1/m) for m source tokens, is projected
  back and added to h, again scaled by sqrt(0.5).
- The encoder's output gradients are scaled by 1 / (2 x attention layers) (§3.4), and every linear and
  convolution is weight-normalised (Salimans & Kingma 2016) with fairseq's initialisation.
- Cached decoding keeps each decoder convolution's last k - 1 inputs.

The module has the interface of `model.family.Seq2SeqModel`; `register("conv", ...)` in model/family.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.utils.parametrizations import weight_norm

from .config import ConfigError, check_choice, check_positive, replace_known
from .layers import Dropout
from .loss import LossImpl, TeacherForcedLoss

ConvFamily = Literal["conv"]
SQRT_HALF = math.sqrt(0.5)


@dataclass(frozen=True)
class ConvConfig:
    """ConvS2S's WMT14 EN-DE shape by default: 15 encoder and 15 decoder layers of kernel 3, 768-wide
    embeddings. DEVIATION (documented, one width): every block here is d_hidden wide; the paper's EN-DE model
    widens its upper blocks (9 x 512, 4 x 1024, 2 x 2048 hidden units)."""
    vocab_size: int = 37000          # shared source-target vocabulary, as the Transformer rows
    d_model: int = 768               # embedding width (tokens, positions, the attention's keys and values)
    d_hidden: int = 512              # the convolutions' width
    n_enc_layers: int = 15           # encoder blocks
    n_dec_layers: int = 15           # decoder blocks
    kernel: int = 3                  # the convolutions' kernel width k (odd)
    p_drop: float = 0.2              # §4.3: dropout 0.2 on embeddings, block inputs and the decoder output
    max_len: int = 1024              # learned positions: the table's length
    pad_id: int = 0                  # the padding token's id
    family: ConvFamily = "conv"       # the model family this config builds (model/family.py)

    def __post_init__(self) -> None:
        check_positive(self, ("vocab_size", "d_model", "d_hidden", "n_enc_layers", "n_dec_layers", "kernel", "max_len"))
        if self.kernel % 2 == 0:
            raise ConfigError(f"kernel must be odd, so that an encoder convolution is centred; got {self.kernel}.")
        if not 0.0 <= self.p_drop < 1.0:
            raise ConfigError(f"p_drop must be a probability in [0, 1), got {self.p_drop!r}.")
        check_choice("family", self.family, ConvFamily)

    def replace(self, **changes) -> "ConvConfig":
        return replace_known(self, changes)


def _linear(n_in: int, n_out: int, p_drop: float, bias: bool = True) -> nn.Module:
    """fairseq's weight-normalised Linear: weights ~ N(0, (1 - p) / n_in), bias 0."""
    layer = nn.Linear(n_in, n_out, bias=bias)
    nn.init.normal_(layer.weight, std=math.sqrt((1 - p_drop) / n_in))
    if bias:
        nn.init.zeros_(layer.bias)
    return weight_norm(layer)


def _conv(n_in: int, n_out: int, kernel: int, p_drop: float) -> nn.Module:
    """fairseq's weight-normalised convolution before a GLU: weights ~ N(0, 4 (1 - p) / (k n_in)), bias 0."""
    layer = nn.Conv1d(n_in, n_out, kernel)
    nn.init.normal_(layer.weight, std=math.sqrt(4 * (1 - p_drop) / (kernel * n_in)))
    nn.init.zeros_(layer.bias)
    return weight_norm(layer)


class _ScaleGrad(torch.autograd.Function):
    """Identity forward; the gradient multiplied by `scale` (fairseq's GradMultiply)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        return grad * ctx.scale, None


class ConvS2S(TeacherForcedLoss, nn.Module):
    """Gehring et al. (2017) (module doc)."""

    def __init__(self, cfg: ConvConfig, loss_impl: LossImpl = "auto"):
        super().__init__()
        self.cfg, self.loss_impl = cfg, loss_impl
        e, d, k, p = cfg.d_model, cfg.d_hidden, cfg.kernel, cfg.p_drop
        self.src_embed = nn.Embedding(cfg.vocab_size, e, padding_idx=cfg.pad_id)
        self.tgt_embed = nn.Embedding(cfg.vocab_size, e, padding_idx=cfg.pad_id)
        self.src_pos = nn.Embedding(cfg.max_len, e)
        self.tgt_pos = nn.Embedding(cfg.max_len, e)
        for table in (self.src_embed, self.tgt_embed, self.src_pos, self.tgt_pos):
            nn.init.normal_(table.weight, std=0.1)                                  # fairseq's Embedding
        nn.init.zeros_(self.src_embed.weight[cfg.pad_id].data)
        nn.init.zeros_(self.tgt_embed.weight[cfg.pad_id].data)
        self.drop = Dropout(p)
        self.enc_in, self.enc_out = _linear(e, d, p), _linear(d, e, 0.0)
        self.enc_convs = nn.ModuleList(_conv(d, 2 * d, k, p) for _ in range(cfg.n_enc_layers))
        self.dec_in = _linear(e, d, p)
        self.dec_convs = nn.ModuleList(_conv(d, 2 * d, k, p) for _ in range(cfg.n_dec_layers))
        self.att_in = nn.ModuleList(_linear(d, e, 0.0) for _ in range(cfg.n_dec_layers))
        self.att_out = nn.ModuleList(_linear(e, d, 0.0) for _ in range(cfg.n_dec_layers))
        self.dec_out = _linear(d, e, 0.0)
        # DEVIATION (none of the paper's arithmetic changes): fairseq's output layer has a bias; the harness's
        # fused vocabulary loss takes a weight alone (model/loss.py), so this one has none.
        self.out_proj = _linear(e, cfg.vocab_size, p, bias=False)

    def _embed(self, tokens: torch.Tensor, table: nn.Embedding, pos: nn.Embedding, start: int = 0) -> torch.Tensor:
        end = start + tokens.size(1)
        if end > self.cfg.max_len:
            raise ValueError(f"sequence of {end} positions exceeds max_len={self.cfg.max_len}; raise max_len.")
        return table(tokens) + pos.weight[start:end]

    # --- encoder ---

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """memory (B, S, 2e): the keys z and the values (z + e) sqrt(0.5), concatenated on the last axis (one
        tensor, as beam search repeats it); mask (B, 1, 1, S) True at real tokens, or None."""
        keep = src != self.cfg.pad_id
        embedded = self.drop(self._embed(src, self.src_embed, self.src_pos))
        x = self.enc_in(embedded)
        pad = keep[:, :, None]
        for conv in self.enc_convs:
            residual = x
            x = self.drop(x).masked_fill(~pad, 0.0)                           # padding reaches no real position
            half = (self.cfg.kernel - 1) // 2
            x = F.glu(conv(F.pad(x.transpose(1, 2), (half, half))), dim=1).transpose(1, 2)
            x = (x + residual) * SQRT_HALF
        z = _ScaleGrad.apply(self.enc_out(x), 1.0 / (2.0 * self.cfg.n_dec_layers))
        memory = torch.cat((z, (z + embedded) * SQRT_HALF), -1)
        mask = None if bool(keep.all()) else keep[:, None, None, :]
        return memory, mask

    # --- decoder ---

    def _attend(self, i: int, h: torch.Tensor, g: torch.Tensor, memory: torch.Tensor,
                keep: torch.Tensor | None) -> torch.Tensor:
        """§3.3 for decoder layer i: h (B, T, d) the GLU output, g (B, T, e) the target embedding."""
        keys, values = memory.chunk(2, -1)
        q = (self.att_in[i](h) + g) * SQRT_HALF
        scores = q @ keys.transpose(1, 2)                                      # (B, T, S)
        if keep is not None:
            scores = scores.masked_fill(~keep[:, None], float("-inf"))
        context = scores.softmax(-1) @ values
        m = keep.sum(1).to(context.dtype)[:, None, None] if keep is not None else \
            torch.full((), values.size(1), dtype=context.dtype, device=context.device)
        context = context * (m * m.rsqrt())                                   # m sqrt(1/m), m source tokens
        return (self.att_out[i](context) + h) * SQRT_HALF

    def _layers(self, x: torch.Tensor, g: torch.Tensor, memory: torch.Tensor, keep: torch.Tensor | None,
                history: list[torch.Tensor] | None) -> torch.Tensor:
        """The decoder's blocks over x (B, T, d); history: each block's last k - 1 inputs (cached decoding)."""
        k = self.cfg.kernel
        for i, conv in enumerate(self.dec_convs):
            residual = x
            y = self.drop(x).transpose(1, 2)                                   # (B, d, T)
            if history is None:
                y = F.pad(y, (k - 1, 0))                                       # the past only
            else:
                y = torch.cat((history[i], y), -1)
                history[i] = y[:, :, -(k - 1):] if k > 1 else y[:, :, :0]
            h = F.glu(conv(y), dim=1).transpose(1, 2)
            h = self._attend(i, h, g, memory, keep)
            x = (h + residual) * SQRT_HALF
        return self.drop(self.dec_out(x))

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        g = self.drop(self._embed(tgt_in, self.tgt_embed, self.tgt_pos))
        return self._layers(self.dec_in(g), g, memory, mask[:, 0, 0] if mask is not None else None, None)

    def new_cache(self, batch: int, max_len: int, like: torch.Tensor) -> list[torch.Tensor]:
        """Each decoder block's last k - 1 inputs, zeros (the causal padding) before the first token."""
        return [like.new_zeros(batch, self.cfg.d_hidden, self.cfg.kernel - 1) for _ in self.dec_convs]

    def reorder_cache(self, cache: list[torch.Tensor], rows: torch.Tensor) -> None:
        cache[:] = [h[rows] for h in cache]

    def decode_step(self, tokens: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None,
                    cache: list[torch.Tensor], offset: int, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, vocab) for the next token after tokens (B,) at position `offset`."""
        g = self.drop(self._embed(tokens[:, None], self.tgt_embed, self.tgt_pos, offset))
        x = self._layers(self.dec_in(g), g, memory, mask[:, 0, 0] if mask is not None else None, cache)
        return self.out_proj(x[:, -1])
