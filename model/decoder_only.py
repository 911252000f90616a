"""Decoder-only translation: the source and the target as one sequence through one stack of the Transformer's
blocks, as language models since GPT keep only the paper's decoder half.

The input is `source <sep> target` with one vocabulary: the source as the encoder-decoder gets it (EOS at its
end), then the target prefix as the decoder gets it, whose BOS is the separator. Two masks, as tensor2tensor's
`prepend_mode` has them (`prepend_inputs_full_attention` and `prepend_inputs_masked_attention`):

- `lm: prefix` (PrefixLM): every position sees the whole source; target positions see the target causally.
  The loss is on the target only.
- `lm: causal` (CausalLM): causal everywhere. `source_loss: true` adds the language-model loss on the source
  (each source position predicts the next source token), as Zhang et al. (ICML 2022) train it.

Layout: a batch is the padded source (B, S) followed by the padded target (B, T); pad slots are masked as keys,
and positions count real tokens only: target token j of a sentence with n source tokens stands at position
n + j whatever S is. So every sentence's positions, and with them its outputs, are what they would be alone,
and a cache slot (S + t for target step t) is the same for every row of a batch.

Each block is the encoder layer of Figure 1 (self-attention, then the feed-forward network, each inside
model/transformer.py's `Residual`), so every knob of model/config.py applies: positions (sinusoid, learned,
RoPE), norm and its placement, FFN (ReLU, GELU, SwiGLU) and key/value heads (MHA, GQA, MQA).

Decoding (the interface of `model.family.Seq2SeqModel`): `encode(src)` is the prefill. It runs the source
through the stack once and returns, as the decoder's "memory", every layer's keys and values of the source
(B, S, layers x kv_heads x (d_k + d_v)), so that beam search repeats them per beam as it repeats an encoder's
output; `new_cache` copies them into self-attention caches of S + steps slots, and each `decode_step` appends
one token's keys and values. Unlike the encoder-decoder's cross-attention cache, fixed by the source, this
cache grows with source plus target.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import nn

from .attention import KVCache, MultiHeadAttention, StaticKVCache
from .config import (
    FFN,
    ConfigError,
    Derived,
    Norm,
    NormPosition,
    Positional,
    check_choice,
    check_positive,
    check_rope_scale,
    check_shared,
    replace_known,
    resolve_derived,
)
from .kernels import Kernel, Kernels
from .layers import Dropout, FeedForward, PositionalEncoding, init_transformer_weights, make_norm
from .loss import LossImpl, vocab_loss
from .transformer import Residual

DecoderOnlyFamily = Literal["decoder_only"]
LM = Literal["prefix", "causal"]


@dataclass(frozen=True)
class DecoderOnlyConfig:
    """The Transformer's block settings (model/config.py, the same names and rules), one stack of n_layers,
    and the mask. The defaults: the base model's widths, its 6 + 6 layers as one stack of 12."""
    vocab_size: int = 37000
    d_model: int = 512
    d_ff: int = 2048
    n_heads: int = 8
    d_k: int | None = None           # None -> d_model // n_heads, as in the encoder-decoder
    d_v: int | None = None
    n_kv_heads: int | None = None    # None -> n_heads; fewer -> GQA, 1 -> MQA
    n_layers: int = 12               # one stack: the encoder's and the decoder's layers together (2N)
    p_drop: float = 0.1
    p_attn_drop: float = 0.0
    positional: Positional = "sinusoid"
    norm_position: NormPosition = "post"
    norm: Norm = "layer"
    ffn: FFN = "relu"
    share_embeddings: bool = True    # the token table is also the pre-softmax weights (§3.4)
    lm: LM = "prefix"                # prefix: full attention over the source; causal: causal everywhere
    source_loss: bool = False        # causal only: a language-model loss on the source too
    max_len: int = 2048              # positions of source and target together
    norm_eps: float = 1e-5
    rope_base: float = 10000.0
    rope_scale: float = 1.0          # RoPE position interpolation (TransformerConfig.rope_scale)
    pad_id: int = 0
    family: DecoderOnlyFamily = "decoder_only"

    DERIVED_FIELDS: ClassVar[tuple[str, ...]] = ("d_k", "d_v", "n_kv_heads")
    # Fields added after studies had run without them: out of a trial's config hash at their defaults.
    ADDED_LATER: ClassVar[tuple[str, ...]] = ("rope_scale",)

    def __post_init__(self) -> None:
        check_positive(self, ("vocab_size", "d_model", "d_ff", "n_heads", "n_layers", "max_len"))
        resolve_derived(self, self.DERIVED_FIELDS)                # model/config.py's rules, stored as `Derived`
        check_positive(self, self.DERIVED_FIELDS)
        if self.positional == "alibi":
            raise ConfigError("positional=alibi is built for the encoder-decoder only; the decoder_only family takes "
                              "sinusoid, learned or rope.")
        check_shared(self, (("positional", Positional), ("norm_position", NormPosition), ("norm", Norm),
                            ("ffn", FFN), ("lm", LM), ("family", DecoderOnlyFamily)))
        check_rope_scale(self)
        if self.source_loss and self.lm != "causal":
            raise ConfigError("source_loss needs lm=causal: under the prefix mask every source position sees the "
                              "token it would predict.")

    def replace(self, **changes) -> "DecoderOnlyConfig":
        return replace_known(self, changes)

    def to_dict(self) -> dict:
        return {k: int(v) if isinstance(v, Derived) else v for k, v in dataclasses.asdict(self).items()}


class Block(nn.Module):
    """Self-attention, then the feed-forward network, each inside a `Residual` (Figure 1's encoder layer)."""

    def __init__(self, cfg: DecoderOnlyConfig, kernels: Kernels):
        super().__init__()
        self.self_attn = Residual(cfg, MultiHeadAttention(cfg, kernels=kernels))
        self.ffn = Residual(cfg, FeedForward(cfg))

    def forward(self, x: torch.Tensor, mask: torch.Tensor, cache: KVCache | None = None, offset: int = 0,
                positions: torch.Tensor | None = None) -> torch.Tensor:
        return self.ffn(self.self_attn(x, mask=mask, cache=cache, offset=offset, positions=positions))


@dataclass
class DecoderCache:
    """The self-attention caches of every block (the source's keys and values in the first S slots) and each
    row's number of real source tokens, which places its target tokens."""
    layers: list[KVCache]
    lengths: torch.Tensor | None = None      # (rows,), from the source mask at the first step
    source: int = 0                          # S: the slots the source fills, target token j's is S + j

    def nbytes(self) -> int:
        return sum(c.nbytes() for c in self.layers)


class DecoderOnly(nn.Module):
    """One stack over `source <sep> target`. kernel and loss_impl: as `model.Transformer`'s."""

    capturable = True      # decode_step takes a 0-d device offset: one CUDA graph serves every step

    def __init__(self, cfg: DecoderOnlyConfig, kernel: Kernel = "auto", loss_impl: LossImpl = "auto"):
        super().__init__()
        self.cfg = cfg
        self.loss_impl = check_choice("loss_impl", loss_impl, LossImpl)
        self.kernels = Kernels.choose(check_choice("attention kernel", kernel, Kernel))
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.out_proj = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.positions = PositionalEncoding(cfg)
        self.embed_drop = Dropout(cfg.p_drop)
        self.layers = nn.ModuleList(Block(cfg, self.kernels) for _ in range(cfg.n_layers))
        self.final_norm = make_norm(cfg) if cfg.norm_position == "pre" else nn.Identity()
        self.reset_parameters()
        if cfg.share_embeddings:
            self.out_proj.weight = self.embed_tokens.weight

    def reset_parameters(self) -> None:
        init_transformer_weights(self, [self.embed_tokens], self.cfg.d_model, self.cfg.pad_id)   # as the Transformer's

    # --- the layout ---

    def _embed(self, tokens: torch.Tensor, positions: torch.Tensor, check: bool = True) -> torch.Tensor:
        """tokens and their positions (B, T) -> (B, T, d_model): embeddings x sqrt(d_model) plus positions.
        check=False: the caller has bounded the positions already (a decoding step, bounded by `new_cache`), so
        no device read of their maximum on the step's hot path."""
        if check and int(positions.max()) >= self.cfg.max_len:
            raise ValueError(f"source and target together need {int(positions.max()) + 1} positions, more than "
                             f"max_len={self.cfg.max_len}; raise max_len.")
        x = self.embed_tokens(tokens) * self.cfg.d_model ** 0.5
        return self.embed_drop(self.positions(x, positions=positions))

    def _run(self, x: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
             caches: list[KVCache] | None = None, slot: int = 0) -> torch.Tensor:
        """Every block over x (B, T, d_model), then the final norm of a pre-norm stack. positions (B, T): RoPE's
        angles (broadcast over heads). caches: append x's keys and values at slot .. slot + T - 1 of each."""
        rotary = positions[:, None]                                    # (B, 1, T)
        for i, layer in enumerate(self.layers):
            x = layer(x, mask, caches[i] if caches is not None else None, slot, rotary)
        return self.final_norm(x)

    def sequence_mask(self, keep_src: torch.Tensor, T: int) -> torch.Tensor:
        """(B, 1, S + T, S + T), True where query i may attend key j: j is a real token and either j <= i, or
        (PrefixLM) j lies in the source."""
        S = keep_src.size(1)
        idx = torch.arange(S + T, device=keep_src.device)
        allowed = idx[None, :] <= idx[:, None]                          # causal
        if self.cfg.lm == "prefix":
            allowed = allowed | (idx[None, :] < S)
        keys = torch.cat([keep_src, keep_src.new_ones(keep_src.size(0), T)], 1)     # (B, S + T)
        return (allowed[None] & keys[:, None, :])[:, None]

    def _positions(self, src: torch.Tensor, T: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(real source tokens per row (B,), positions (B, S + T)): the source at 0 .., target token j at n + j."""
        keep = src != self.cfg.pad_id
        lengths = keep.sum(1)
        S = src.size(1)
        pos_src = torch.arange(S, device=src.device).expand(src.size(0), S)
        pos_tgt = lengths[:, None] + torch.arange(T, device=src.device)
        return lengths, torch.cat([pos_src, pos_tgt], 1)

    # --- training ---

    def loss_states(self, src: torch.Tensor, tgt_in: torch.Tensor, packing=None) -> torch.Tensor:
        """The whole sequence's final states (B, S + T, d_model) in one pass: what `loss` reads (and what the
        trainer compiles)."""
        if packing is not None:
            raise ValueError("the decoder_only family does not take packed batches; train with pack false.")
        T = tgt_in.size(1)
        _, positions = self._positions(src, T)
        x = self._embed(torch.cat([src, tgt_in], 1), positions)
        return self._run(x, self.sequence_mask(src != self.cfg.pad_id, T), positions)

    def hidden(self, src: torch.Tensor, tgt_in: torch.Tensor, packing=None) -> torch.Tensor:
        """The target positions' final states (B, T, d_model), as an encoder-decoder's decoder output."""
        return self.loss_states(src, tgt_in, packing)[:, src.size(1):]

    def forward(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        return self.out_proj(self.hidden(src, tgt_in))

    def loss(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, label_smoothing: float = 0.0,
             hidden: torch.Tensor | None = None, packing=None) -> tuple[torch.Tensor, torch.Tensor, int]:
        """As `Transformer.loss`: summed smoothed loss, summed NLL and the number of target tokens. hidden: the
        states `loss_states` or `hidden` gave. With source_loss the summed loss adds each source position's
        prediction of the next source token (smoothed alike; EOS predicts nothing, the separator is given);
        the NLL and the token count stay the target's, so that perplexities compare across rows."""
        S = src.size(1)
        states = hidden if hidden is not None and hidden.size(1) == S + tgt_in.size(1) else None
        if states is None and (hidden is None or self.cfg.source_loss):
            states = self.loss_states(src, tgt_in, packing)
        h_tgt = states[:, S:] if states is not None else hidden
        keep = tgt_out != self.cfg.pad_id
        target = tgt_out[keep]
        loss, nll = vocab_loss(h_tgt[keep], self.out_proj.weight, target, label_smoothing, self.loss_impl)
        if self.cfg.source_loss and S > 1:
            nxt = src[:, 1:]
            keep_src = nxt != self.cfg.pad_id
            src_loss, _ = vocab_loss(states[:, :S - 1][keep_src], self.out_proj.weight, nxt[keep_src],
                                     label_smoothing, self.loss_impl)
            loss = loss + src_loss
        return loss, nll.detach(), int(target.numel())

    # --- decoding: prefill the source once, then one token a step ---

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The prefill: (every layer's source keys and values (B, S, layers x kv_heads x (d_k + d_v)), the
        source's key mask (B, 1, 1, S), or None where nothing is padded, as the encoder-decoder's)."""
        keep = src != self.cfg.pad_id
        B, S = src.shape
        _, positions = self._positions(src, 0)
        mask = self.sequence_mask(keep, 0)                                       # (B, 1, S, S)
        caches = [layer.self_attn.sublayer.empty_cache(B, S, self.embed_tokens.weight) for layer in self.layers]
        self._run(self._embed(src, positions), mask, positions, caches, 0)
        memory = torch.cat([t.transpose(1, 2).reshape(B, S, -1) for c in caches for t in (c.k, c.v)], -1)
        return memory, None if bool(keep.all()) else keep[:, None, None, :]

    @staticmethod
    def _source_keys(memory: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The source's key mask (B, 1, 1, S), all True where `encode` gave None."""
        if mask is not None:
            return mask
        return torch.ones(memory.size(0), 1, 1, memory.size(1), dtype=torch.bool, device=memory.device)

    def _split_memory(self, memory: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """`encode`'s memory back into each layer's keys (B, kv_heads, S, d_k) and values."""
        h_kv, d_k, d_v = self.cfg.n_kv_heads, self.cfg.d_k, self.cfg.d_v
        B, S, _ = memory.shape
        parts = memory.split([h_kv * d_k, h_kv * d_v] * self.cfg.n_layers, -1)
        return [(parts[2 * i].view(B, S, h_kv, d_k).transpose(1, 2),
                 parts[2 * i + 1].view(B, S, h_kv, d_v).transpose(1, 2))
                for i in range(self.cfg.n_layers)]

    def new_cache(self, batch: int, max_len: int, like: torch.Tensor) -> DecoderCache:
        """Caches of S + max_len slots a layer, the source's keys and values (like: `encode`'s memory, rows
        already repeated per beam) in the first S."""
        S = like.size(1)
        if S + max_len > self.cfg.max_len:       # bounds every step's position (source length + offset)
            raise ValueError(f"source and target together need {S + max_len} positions, more than "
                             f"max_len={self.cfg.max_len}; raise max_len.")
        layers = []
        for layer, (k, v) in zip(self.layers, self._split_memory(like)):
            cache = layer.self_attn.sublayer.empty_cache(batch, S + max_len, like)
            cache.k[:, :, :S], cache.v[:, :, :S] = k, v
            cache.length = S
            layers.append(cache)
        return DecoderCache(layers, source=S)

    @staticmethod
    def static_cache(cache: DecoderCache) -> DecoderCache:
        """The cache of a captured step (model/cuda_graph.py): each buffer a `StaticKVCache`, the source's keys
        and values already in its first S slots."""
        layers = [StaticKVCache(c.k, c.v, c.length) for c in cache.layers]
        return DecoderCache(layers, cache.lengths, cache.source)

    @staticmethod
    def mark_written(cache: DecoderCache, step: int) -> None:
        """A captured step's cache holds the source and target tokens 0 .. step: what beam search's reorder moves."""
        for layer in cache.layers:
            layer.length = cache.source + step + 1

    def reorder_cache(self, cache: DecoderCache, rows: torch.Tensor) -> None:
        """Beam search: keep the surviving beams' caches (rows index within a sentence's beams, whose source
        lengths are equal, so `lengths` stays)."""
        for layer in cache.layers:
            layer.reorder(rows)

    def decode_step(self, tokens: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None,
                    cache: DecoderCache, offset: int, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, vocab) for the token after `tokens` (B,), target position `offset`: its keys and values go
        to slot S + offset, its position is the row's source length + offset. offset: an int, or a 0-d device
        tensor for a captured step (`static_cache`), which then attends to the whole buffer, its slots past
        S + offset masked by the cache. positions: unused (no word positions in this family)."""
        mask = self._source_keys(memory, mask)
        S = mask.size(-1)
        if cache.lengths is None:
            cache.lengths = mask.flatten(1).sum(1)
        pos = (cache.lengths + offset)[:, None]                                  # (B, 1)
        # The target's keys: those so far (offset + 1 of them), or in a captured step the whole buffer's.
        seen = cache.layers[0].k.size(2) - S if torch.is_tensor(offset) else offset + 1
        keys = torch.cat([mask, mask.new_ones(mask.size(0), 1, 1, seen)], -1)    # (B, 1, 1, S + seen)
        h = self._run(self._embed(tokens[:, None], pos, check=False), keys, pos, cache.layers, S + offset)
        return self.out_proj(h[:, -1])

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Uncached decoding: the target prefix (B, T) against the prefilled source, all T at once -> (B, T, d)."""
        mask = self._source_keys(memory, mask)
        B, T = tgt_in.shape
        S = mask.size(-1)
        cache = self.new_cache(B, T, memory)
        lengths = mask.flatten(1).sum(1)
        pos = lengths[:, None] + torch.arange(T, device=tgt_in.device)
        causal = torch.ones(T, T, dtype=torch.bool, device=tgt_in.device).tril()
        keys = torch.cat([mask.expand(B, 1, T, S), causal.expand(B, 1, T, T)], -1)       # (B, 1, T, S + T)
        return self._run(self._embed(tgt_in, pos), keys, pos, cache.layers, S)

    def _apply(self, fn, recurse: bool = True):
        """nn.Module's move, then the attention kernels chosen again for the device the weights now live on."""
        out = super()._apply(fn, recurse)
        self.kernels.place(self.out_proj.weight.device)
        return out
