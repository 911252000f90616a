"""The encoder-decoder of Figure 1: embeddings x sqrt(d_model) plus positions, N encoder and N decoder layers.

Post-norm by default, as the paper: each sub-layer is LayerNorm(x + Dropout(Sublayer(x))) (§3.1, §5.4).
norm_position=pre gives x + Dropout(Sublayer(Norm(x))) with one final norm per stack.

`Transformer(cfg, kernel=..., loss_impl=...)` chooses the attention kernels (model/kernels.py: "auto" by the
device its weights live on, when it is built and when it is moved) and the loss implementation
(model/loss.py); every choice computes the same arithmetic.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import KVCache, MultiHeadAttention, Packed, StaticKVCache
from .config import TransformerConfig, check_choice
from .kernels import Kernel, Kernels
from .layers import Dropout, FeedForward, PositionalEncoding, init_transformer_weights, make_norm
from .loss import LossImpl, vocab_loss


class Residual(nn.Module):
    """One sub-layer with its residual connection, dropout and norm in the configured order."""

    def __init__(self, cfg: TransformerConfig, sublayer: nn.Module):
        super().__init__()
        self.sublayer = sublayer
        self.norm = make_norm(cfg)
        self.drop = Dropout(cfg.p_drop)
        self.pre = cfg.norm_position == "pre"

    def forward(self, x: torch.Tensor, **kwargs) -> torch.Tensor:
        if self.pre:
            return x + self.drop(self.sublayer(self.norm(x), **kwargs))
        return self.norm(x + self.drop(self.sublayer(x, **kwargs)))


class EncoderLayer(nn.Module):
    """§3.1: self-attention, then the feed-forward network, each inside a `Residual`."""

    def __init__(self, cfg: TransformerConfig, kernels: Kernels):
        super().__init__()
        self.self_attn = Residual(cfg, MultiHeadAttention(cfg, kernels=kernels))
        self.ffn = Residual(cfg, FeedForward(cfg))

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, packed: Packed | None = None) -> torch.Tensor:
        return self.ffn(self.self_attn(x, mask=mask, packed=(packed, packed) if packed is not None else None))


class DecoderLayer(nn.Module):
    """§3.1: causal self-attention, attention over the encoder's output, then the feed-forward network."""

    def __init__(self, cfg: TransformerConfig, kernels: Kernels):
        super().__init__()
        self.self_attn = Residual(cfg, MultiHeadAttention(cfg, kernels=kernels))
        self.cross_attn = Residual(cfg, MultiHeadAttention(cfg, cross=True, kernels=kernels))
        self.ffn = Residual(cfg, FeedForward(cfg))

    def forward(self, x: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None,
                cache: tuple[KVCache, KVCache] | None = None, offset: int | torch.Tensor = 0,
                packing: tuple[Packed, Packed] | None = None, positions: torch.Tensor | None = None) -> torch.Tensor:
        """packing: (source, target) of a packed batch. positions: see `Transformer.decode_step`."""
        self_cache, cross_cache = cache if cache is not None else (None, None)
        src, tgt = packing if packing is not None else (None, None)
        # Right-padded targets need no padding mask here: causality already hides every later (pad) position.
        x = self.self_attn(x, causal=True, cache=self_cache, offset=offset,
                           packed=(tgt, tgt) if packing is not None else None, positions=positions)
        x = self.cross_attn(x, memory=memory, mask=mask, cache=cross_cache,
                            packed=(tgt, src) if packing is not None else None)
        return self.ffn(x)


class Encoder(nn.Module):
    """N encoder layers (cfg.n_enc_layers); pre-norm stacks end with a norm, post-norm ones are already
    normalized."""

    def __init__(self, cfg: TransformerConfig, kernels: Kernels):
        super().__init__()
        self.layers = nn.ModuleList(EncoderLayer(cfg, kernels) for _ in range(cfg.n_enc_layers))
        self.final_norm = make_norm(cfg) if cfg.norm_position == "pre" else nn.Identity()

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, packed: Packed | None = None) -> torch.Tensor:
        """x: the embedded source (B, S, d_model) -> the memory the decoder attends to (B, S, d_model)."""
        for layer in self.layers:
            x = layer(x, mask, packed)
        return self.final_norm(x)


class Decoder(nn.Module):
    """N decoder layers (cfg.n_dec_layers), with the final norm of a pre-norm stack."""

    def __init__(self, cfg: TransformerConfig, kernels: Kernels):
        super().__init__()
        self.layers = nn.ModuleList(DecoderLayer(cfg, kernels) for _ in range(cfg.n_dec_layers))
        self.final_norm = make_norm(cfg) if cfg.norm_position == "pre" else nn.Identity()

    def forward(self, y: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None,
                cache: list[tuple[KVCache, KVCache]] | None = None, offset: int | torch.Tensor = 0,
                packing: tuple[Packed, Packed] | None = None, positions: torch.Tensor | None = None) -> torch.Tensor:
        """y: the embedded target prefix (B, T, d_model) -> (B, T, d_model). cache: one (self, cross) pair a
        layer, for incremental decoding at position `offset` (positions: see `Transformer.decode_step`)."""
        for i, layer in enumerate(self.layers):
            y = layer(y, memory, mask, cache[i] if cache is not None else None, offset, packing, positions)
        return self.final_norm(y)


class Transformer(nn.Module):
    """Figure 1. kernel: the attention kernel of every layer (model/kernels.py); loss_impl: how `loss` computes
    the vocabulary projection and loss (model/loss.py)."""

    capturable = True     # decode_step takes a 0-d device offset: one CUDA graph serves every step

    def __init__(self, cfg: TransformerConfig, kernel: Kernel = "auto", loss_impl: LossImpl = "auto"):
        super().__init__()
        self.cfg = cfg
        self.loss_impl = check_choice("loss_impl", loss_impl, LossImpl)
        # The attention kernels of every layer, one object they share: chosen here for torch's default device
        # and again whenever the weights move (`_apply`), never per call.
        self.kernels = Kernels.choose(check_choice("attention kernel", kernel, Kernel))
        # §3.4: one weight matrix for both embeddings and the pre-softmax projection when shared.
        self.src_embed = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.tgt_embed = self.src_embed if cfg.share_embeddings else \
            nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.out_proj = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.positions = PositionalEncoding(cfg)
        self.embed_drop = Dropout(cfg.p_drop)
        self.encoder = Encoder(cfg, self.kernels)
        self.decoder = Decoder(cfg, self.kernels)
        # cfg.word_positions: the source pieces that begin a word (EOS too: one past the last word) and the
        # target token that stands for a word; set by `mark_words`.
        self.register_buffer("word_start", torch.zeros(cfg.vocab_size, dtype=torch.bool), persistent=False)
        self.register_buffer("word_piece", torch.zeros(cfg.vocab_size, dtype=torch.bool), persistent=False)
        self.words_marked = False
        self.reset_parameters()
        if cfg.share_embeddings:
            self.out_proj.weight = self.src_embed.weight

    def reset_parameters(self) -> None:
        # Source first, then target (once when shared): a fixed order (a set of the two modules would be ordered
        # by their addresses).
        init_transformer_weights(self, list(dict.fromkeys((self.src_embed, self.tgt_embed))), self.cfg.d_model,
                                 self.cfg.pad_id)

    # --- pieces, exposed for decoding, parity tests and probes ---

    def embed(self, tokens: torch.Tensor, table: nn.Embedding, offset: int = 0,
              packed: Packed | None = None, positions: torch.Tensor | None = None) -> torch.Tensor:
        """offset: the first position. positions: each token's position instead, (B, T) or broadcast to it
        (cfg.word_positions; a captured step's device-side position)."""
        x = table(tokens) * self.cfg.d_model ** 0.5                         # (B, T, d_model)
        if positions is None and packed is not None:
            positions = packed.pos
        return self.embed_drop(self.positions(x, offset, positions))

    # --- word positions (cfg.word_positions, not in the paper) ---

    def mark_words(self, starts: list[int], words: list[int]) -> None:
        """Which source pieces begin a word (give EOS too) and which target tokens are a word (XX)."""
        for buffer, ids in ((self.word_start, starts), (self.word_piece, words)):
            mark = torch.zeros_like(buffer)
            mark[torch.as_tensor(list(ids), dtype=torch.long)] = True
            buffer.copy_(mark)
        self.words_marked = bool(self.word_piece.any())

    def _words_marked(self) -> bool:
        if not self.cfg.word_positions:
            return False
        if not self.words_marked:                       # a flag, not a device read at every decoding step
            raise ValueError("word_positions is set but the model was not told which pieces mark words; "
                             "call mark_words(starts, word_token) after building it.")
        return True

    def source_positions(self, src: torch.Tensor) -> torch.Tensor | None:
        """(B, S): each piece's word index (0-based; EOS one past the last word), or None (token positions)."""
        if not self._words_marked():
            return None
        return (self.word_start[src].long().cumsum(1) - 1).clamp_(min=0)

    def target_positions(self, tgt_in: torch.Tensor) -> torch.Tensor | None:
        """(B, T): the number of word tokens up to and including each, i.e. the index of the next word to place."""
        if not self._words_marked():
            return None
        return self.word_piece[tgt_in].long().cumsum(1)

    def step_positions(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """(rows,): `target_positions` of the last of tokens (rows, t + 1), for one decoding step."""
        if not self._words_marked():
            return None
        return self.word_piece[tokens].long().sum(1)

    def padding_mask(self, src: torch.Tensor) -> torch.Tensor | None:
        """(B, 1, 1, S) True at real source tokens; None when nothing is padded (SDPA's fastest path).
        Under torch.compile always the mask: a branch on the data would split the graph."""
        keep = src != self.cfg.pad_id
        if torch.compiler.is_compiling():
            return keep[:, None, None, :]
        return None if bool(keep.all()) else keep[:, None, None, :]

    def encode(self, src: torch.Tensor, packed: Packed | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """packed: src is one row of sentences end to end (1, N) with this layout; no padding mask then."""
        mask = self.padding_mask(src) if packed is None else None
        if packed is not None and self.cfg.word_positions:
            raise ValueError("word_positions does not support packed batches; train with pack false.")
        x = self.embed(src, self.src_embed, packed=packed, positions=self.source_positions(src))
        return self.encoder(x, mask, packed), mask

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None,
               packing: tuple[Packed, Packed] | None = None) -> torch.Tensor:
        y = self.embed(tgt_in, self.tgt_embed, packed=packing[1] if packing is not None else None,
                       positions=self.target_positions(tgt_in))
        return self.decoder(y, memory, mask, packing=packing)

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits (B, T, vocab)."""
        return self.out_proj(self.hidden(src, tgt_in))

    def hidden(self, src: torch.Tensor, tgt_in: torch.Tensor,
               packing: tuple[Packed, Packed] | None = None) -> torch.Tensor:
        """The teacher-forced decoder output (B, T, d_model): everything before the vocabulary projection,
        and the part of a training step that the trainer compiles. packing: (source, target) layouts of a
        packed batch, src (1, N_src) and tgt_in (1, N_tgt) holding the sentences end to end."""
        memory, mask = self.encode(src, packing[0] if packing is not None else None)
        return self.decode(tgt_in, memory, mask, packing)

    def loss(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, label_smoothing: float = 0.0,
             hidden: torch.Tensor | None = None, packing: tuple[Packed, Packed] | None = None
             ) -> tuple[torch.Tensor, torch.Tensor, int]:
        """Summed training loss (label-smoothed, §5.4), summed plain NLL, and the number of target tokens.
        hidden: `self.hidden(src, tgt_in)` when the caller computed it (with a compiled `hidden`).
        packing: the layouts of a packed batch (see `hidden`); its targets have no padding.

        Logits are built only for real (non-pad) target positions: with token batches about a tenth of the
        rows are padding, and the vocabulary projection is the largest matmul of the step. The projection
        and the loss run together (model/fused_loss.py, unless loss_impl="plain"), so the (N, vocab) logits
        are never held whole."""
        if hidden is None:
            hidden = self.hidden(src, tgt_in, packing)                      # (B, T, d_model)
        keep = tgt_out != self.cfg.pad_id
        target = tgt_out[keep]
        loss, nll = vocab_loss(hidden[keep], self.out_proj.weight, target, label_smoothing,
                               self.loss_impl)                             # out_proj has no bias
        return loss, nll.detach(), int(target.numel())

    # --- incremental decoding ---

    def new_cache(self, batch: int, max_len: int, like: torch.Tensor) -> list[tuple[KVCache, KVCache]]:
        return [(layer.self_attn.sublayer.empty_cache(batch, max_len, like),
                 layer.cross_attn.sublayer.empty_cache(batch, max_len, like)) for layer in self.decoder.layers]

    def reorder_cache(self, cache: list[tuple[KVCache, KVCache]], rows: torch.Tensor) -> None:
        """Keep the self-attention caches of the beams that survive a beam-search step (rows: their indices);
        the cross-attention caches are equal within a sentence and stay."""
        for self_cache, _ in cache:
            self_cache.reorder(rows)

    @staticmethod
    def static_cache(cache: list[tuple[KVCache, KVCache]]) -> list[tuple[KVCache, KVCache]]:
        """The cache of a captured step (model/cuda_graph.py): each self-attention buffer a `StaticKVCache`."""
        return [(StaticKVCache(own.k, own.v), cross) for own, cross in cache]

    @staticmethod
    def mark_written(cache: list[tuple[KVCache, KVCache]], step: int) -> None:
        """A captured step's cache holds positions 0 .. step: what beam search's reorder moves."""
        for own, _ in cache:
            own.length = step + 1

    def decode_step(self, tokens: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None,
                    cache: list[tuple[KVCache, KVCache]], offset: int | torch.Tensor,
                    positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, vocab) for the next token, given the previous tokens (B,) at position `offset`, which is
        also their cache slot. positions: the tokens' positions where they are not `offset`: (B,) word
        positions (cfg.word_positions, `step_positions`), or (1,) a position held on the device, which a
        captured CUDA graph replays at every step (`model.cuda_graph.StepGraph`, whose cache takes `offset` as
        a 0-d device tensor too)."""
        if self.cfg.word_positions and positions is None:
            raise ValueError("word_positions: decode_step needs each row's position (step_positions(tokens)).")
        y = self.embed(tokens[:, None], self.tgt_embed, offset,
                       positions=positions[:, None] if positions is not None else None)
        return self.out_proj(self.decoder(y, memory, mask, cache, offset, positions=positions)[:, -1])

    def _apply(self, fn, recurse: bool = True):
        """nn.Module's move (`to`, `cuda`, `half`, ...), then the attention kernels chosen again for the device
        the weights now live on."""
        out = super()._apply(fn, recurse)
        self.kernels.place(self.out_proj.weight.device)
        return out


def count_parameters(model: nn.Module) -> int:
    """Distinct trainable parameters (a shared embedding counts once), as the paper's params column."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
