"""The encoder-decoder of Figure 1: embeddings x sqrt(d_model) plus positions, N encoder and N decoder layers.

Post-norm by default, as the paper: each sub-layer is LayerNorm(x + Dropout(Sublayer(x))) (§3.1, §5.4).
norm_position=pre gives x + Dropout(Sublayer(Norm(x))) with one final norm per stack.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import KVCache, MultiHeadAttention
from .config import TransformerConfig
from .layers import FeedForward, PositionalEncoding, make_norm


class SmoothedCrossEntropy(torch.autograd.Function):
    """Summed label-smoothed cross-entropy (§5.4, as F.cross_entropy defines it: (1 - eps) * NLL + eps * the
    mean over the vocabulary of -log p) and the summed plain NLL, from logits z (N, V) and targets t (N,).

    The same arithmetic as log_softmax -> gather -> mean under autograd, with a hand-written backward that
    builds one (N, V) tensor, dL/dz = softmax(z) - (1 - eps) onehot(t) - eps / V, in place. Autograd's
    version builds the gradient of the log-probabilities, a zero-filled scatter target for the gather and
    a broadcast mean gradient, each (N, V), and runs log-softmax's backward over them: on a CPU a quarter
    of the tiny model's step went to those passes."""

    @staticmethod
    def forward(ctx, z: torch.Tensor, t: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
        logp = torch.log_softmax(z, -1)            # one fused pass; the logits themselves are not kept
        nll = -logp.gather(1, t[:, None]).sum()
        loss = nll.clone() if eps == 0 else (1 - eps) * nll - eps * logp.mean(-1).sum()
        ctx.save_for_backward(logp, t)
        ctx.eps = eps
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, g_loss: torch.Tensor, _g_nll: torch.Tensor):
        logp, t = ctx.saved_tensors
        eps, vocab = ctx.eps, logp.size(-1)
        grad = torch.exp(logp)                                          # softmax(z)
        if eps:
            grad.sub_(eps / vocab)
        grad[torch.arange(t.numel(), device=t.device), t] -= 1 - eps
        return grad.mul_(g_loss), None, None


class Residual(nn.Module):
    """One sub-layer with its residual connection, dropout and norm in the configured order."""

    def __init__(self, cfg: TransformerConfig, sublayer: nn.Module):
        super().__init__()
        self.sublayer = sublayer
        self.norm = make_norm(cfg)
        self.drop = nn.Dropout(cfg.p_drop)
        self.pre = cfg.norm_position == "pre"

    def forward(self, x: torch.Tensor, **kwargs) -> torch.Tensor:
        if self.pre:
            return x + self.drop(self.sublayer(self.norm(x), **kwargs))
        return self.norm(x + self.drop(self.sublayer(x, **kwargs)))


class EncoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.self_attn = Residual(cfg, MultiHeadAttention(cfg))
        self.ffn = Residual(cfg, FeedForward(cfg))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.ffn(self.self_attn(x, mask=mask))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.self_attn = Residual(cfg, MultiHeadAttention(cfg))
        self.cross_attn = Residual(cfg, MultiHeadAttention(cfg, cross=True))
        self.ffn = Residual(cfg, FeedForward(cfg))

    def forward(self, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None,
                cache: tuple[KVCache, KVCache] | None = None, offset: int = 0) -> torch.Tensor:
        self_cache, cross_cache = cache if cache is not None else (None, None)
        # Right-padded targets need no padding mask here: causality already hides every later (pad) position.
        x = self.self_attn(x, causal=True, cache=self_cache, offset=offset)
        x = self.cross_attn(x, memory=memory, mask=mask, cache=cross_cache)
        return self.ffn(x)


class Stack(nn.Module):
    """N identical layers; pre-norm stacks end with a norm, post-norm ones are already normalized."""

    def __init__(self, cfg: TransformerConfig, layer: type, n: int):
        super().__init__()
        self.layers = nn.ModuleList(layer(cfg) for _ in range(n))
        self.final_norm = make_norm(cfg) if cfg.norm_position == "pre" else nn.Identity()


class Transformer(nn.Module):
    def __init__(self, cfg: TransformerConfig):
        super().__init__()
        self.cfg = cfg
        # §3.4: one weight matrix for both embeddings and the pre-softmax projection when shared.
        self.src_embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.tgt_embed = self.src_embed if cfg.share_embeddings else \
            nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.out_proj = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.positions = PositionalEncoding(cfg)
        self.embed_drop = nn.Dropout(cfg.p_drop)
        self.encoder = Stack(cfg, EncoderLayer, cfg.n_enc_layers)
        self.decoder = Stack(cfg, DecoderLayer, cfg.n_dec_layers)
        self.reset_parameters()
        if cfg.share_embeddings:
            self.out_proj.weight = self.src_embed.weight

    def reset_parameters(self) -> None:
        # Xavier for projections (as torch.nn.Transformer and tensor2tensor); embeddings N(0, d_model^-0.5),
        # so that after the x sqrt(d_model) scaling of §3.4 they have unit variance, like the sinusoids.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif "norm" in name:
                nn.init.ones_(p)
            elif p.dim() == 2 and "embed" not in name and name != "positions.table":
                nn.init.xavier_uniform_(p)
        for emb in {self.src_embed, self.tgt_embed}:
            nn.init.normal_(emb.weight, std=self.cfg.d_model ** -0.5)
            with torch.no_grad():
                emb.weight[self.cfg.pad_id].zero_()

    # --- pieces, exposed for decoding, parity tests and probes ---

    def embed(self, tokens: torch.Tensor, table: nn.Embedding, offset: int = 0) -> torch.Tensor:
        x = table(tokens) * self.cfg.d_model ** 0.5                         # (B, T, d_model)
        return self.embed_drop(self.positions(x, offset))

    def padding_mask(self, src: torch.Tensor) -> torch.Tensor | None:
        """(B, 1, 1, S) True at real source tokens; None when nothing is padded (SDPA's fastest path)."""
        keep = src != self.cfg.pad_id
        return None if bool(keep.all()) else keep[:, None, None, :]

    def run_encoder(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        for layer in self.encoder.layers:
            x = layer(x, mask)
        return self.encoder.final_norm(x)

    def run_decoder(self, y: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None,
                    cache: list | None = None, offset: int = 0) -> torch.Tensor:
        for i, layer in enumerate(self.decoder.layers):
            y = layer(y, memory, mask, cache[i] if cache is not None else None, offset)
        return self.decoder.final_norm(y)

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        mask = self.padding_mask(src)
        return self.run_encoder(self.embed(src, self.src_embed), mask), mask

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        return self.run_decoder(self.embed(tgt_in, self.tgt_embed), memory, mask)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits (B, T, vocab)."""
        memory, mask = self.encode(src)
        return self.out_proj(self.decode(tgt_in, memory, mask))

    def loss(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor,
             label_smoothing: float = 0.0) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Summed training loss (label-smoothed, §5.4), summed plain NLL, and the number of target tokens.

        Logits are built only for real (non-pad) target positions: with token batches about a tenth of the
        rows are padding, and the vocabulary projection is the largest matmul of the step."""
        memory, mask = self.encode(src)
        hidden = self.decode(tgt_in, memory, mask)                          # (B, T, d_model)
        keep = tgt_out != self.cfg.pad_id
        logits = self.out_proj(hidden[keep]).float()                         # (N, vocab)
        target = tgt_out[keep]
        loss, nll = SmoothedCrossEntropy.apply(logits, target, float(label_smoothing))
        return loss, nll.detach(), int(target.numel())

    # --- incremental decoding ---

    def new_cache(self, batch: int, max_len: int, like: torch.Tensor) -> list[tuple[KVCache, KVCache]]:
        return [(layer.self_attn.sublayer.empty_cache(batch, max_len, like), KVCache())
                for layer in self.decoder.layers]

    def decode_step(self, tokens: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None,
                    cache: list[tuple[KVCache, KVCache]], offset: int) -> torch.Tensor:
        """Logits (B, vocab) for the next token, given the previous tokens (B,) at position `offset`."""
        y = self.embed(tokens[:, None], self.tgt_embed, offset)
        return self.out_proj(self.run_decoder(y, memory, mask, cache, offset)[:, -1])


def count_parameters(model: nn.Module) -> int:
    """Distinct trainable parameters (a shared embedding counts once), as the paper's params column."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
