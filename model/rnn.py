"""The recurrent rival (Table 2's GNMT + RL row): an attention RNN in the GNMT style (Wu et al. 2016, §3), as
tensorflow/nmt builds it (`gnmt_v2`).

- Encoder: stacked LSTMs; the bottom layer is bidirectional (each direction `d_model` wide, their outputs
  concatenated), the others unidirectional, with residual connections from the third layer up (GNMT §3.1).
- Decoder: stacked LSTMs. Additive attention (Bahdanau et al. 2015), score(s, h) = v^T tanh(W_q s + W_k h),
  is computed from the bottom decoder layer's output and its context vector is fed to every layer above as
  part of its input (tf/nmt's `gnmt_v2`); residual connections from the third layer up; the top layer's
  output goes to the vocabulary projection (tied to the target embedding when `share_embeddings`).
  Because no layer's input depends on an upper layer's earlier output, teacher-forced training runs each layer
  over the whole sequence at once (one nn.LSTM call a layer); decoding steps each layer once per token with
  its (h, c) state in the cache.
- `attention: luong` (the switch; GNMT's additive attention is the default): Luong et al. (2015)'s "general"
  attention with input feeding, as fairseq's `lstm` decoder builds it. The top decoder layer's output h_t
  attends, score(h_t, h_s) = h_t^T W_a h_s; the attentional output h~_t = tanh(W_c [c_t; h_t]) goes to the
  vocabulary projection and is fed, concatenated with the next token's embedding, to the bottom layer at the
  next step (Luong §3.3). That feed makes every step wait for the one before, so teacher-forced training runs
  the decoder a token at a time too.

The module has the interface of `model.family.Seq2SeqModel`; `register("rnn", ...)` in model/family.py.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from .config import ConfigError, check_choice, check_positive, replace_known
from .layers import Dropout
from .loss import LossImpl, TeacherForcedLoss

RnnFamily = Literal["rnn"]
ATTENTION_KINDS = ("additive", "luong")


@dataclass(frozen=True)
class RNNConfig:
    """GNMT's shape by default (Wu et al. 2016: 8 encoder and 8 decoder LSTM layers of 1024 units)."""
    vocab_size: int = 37000          # shared source-target vocabulary, as the Transformer rows
    d_model: int = 1024              # LSTM units a layer (and the embedding width)
    n_enc_layers: int = 8            # the bottom one bidirectional
    n_dec_layers: int = 8            # decoder LSTM layers
    residual_from: int = 3           # residual connections from this layer (1-based) up, GNMT §3.1
    p_drop: float = 0.2              # dropout on each layer's input and on the embeddings (tf/nmt's gnmt: 0.2)
    share_embeddings: bool = True    # source, target and pre-softmax weights tied, as the Transformer rows
    attention: str = "additive"      # additive (GNMT: Bahdanau, from the bottom layer) | luong (general, input feeding)

    # Added after studies had run without it: left out of a trial's config hash at its default.
    ADDED_LATER: ClassVar[tuple[str, ...]] = ("attention",)
    max_len: int = 1024              # longest output the decoders may ask for (no position table)
    pad_id: int = 0                  # the padding token's id
    family: RnnFamily = "rnn"         # the model family this config builds (model/family.py)

    def __post_init__(self) -> None:
        check_positive(self, ("vocab_size", "d_model", "n_enc_layers", "n_dec_layers", "residual_from", "max_len"))
        if not 0.0 <= self.p_drop < 1.0:
            raise ConfigError(f"p_drop must be a probability in [0, 1), got {self.p_drop!r}.")
        check_choice("family", self.family, RnnFamily)
        if self.attention not in ATTENTION_KINDS:
            raise ConfigError(f"attention must be one of {', '.join(ATTENTION_KINDS)} (the recurrent family's "
                              "attention), "
                              f"got {self.attention!r}.")

    def replace(self, **changes) -> "RNNConfig":
        return replace_known(self, changes)


class AdditiveAttention(nn.Module):
    """Bahdanau et al. (2015), Eq. 6: e_tj = v^T tanh(W_q s_t + W_k h_j); a_t = softmax(e_t) over the source."""

    def __init__(self, d: int):
        super().__init__()
        self.w_q = nn.Linear(d, d, bias=False)
        self.w_k = nn.Linear(d, d, bias=True)
        self.v = nn.Linear(d, 1, bias=False)

    def keys(self, memory: torch.Tensor) -> torch.Tensor:
        return self.w_k(memory)                                            # (B, S, d), once per sentence

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, memory: torch.Tensor,
                keep: torch.Tensor | None) -> torch.Tensor:
        """queries (B, T, d), keys and memory (B, S, d), keep (B, S) True at real source tokens -> contexts
        (B, T, d)."""
        scores = self.v(torch.tanh(self.w_q(queries)[:, :, None] + keys[:, None])).squeeze(-1)   # (B, T, S)
        if keep is not None:
            scores = scores.masked_fill(~keep[:, None], float("-inf"))
        return scores.softmax(-1) @ memory


class GeneralAttention(nn.Module):
    """Luong et al. (2015), Eq. 8 "general" and Eq. 5: score(h_t, h_s) = h_t^T W_a h_s, c_t the weighted sum of
    the h_s, and the attentional output h~_t = tanh(W_c [c_t; h_t]) (fairseq lstm.py's AttentionLayer)."""

    def __init__(self, d: int):
        super().__init__()
        self.w_a = nn.Linear(d, d, bias=False)
        self.w_c = nn.Linear(2 * d, d, bias=False)

    def keys(self, memory: torch.Tensor) -> torch.Tensor:
        return self.w_a(memory)                                            # W_a h_s, once per sentence

    def forward(self, queries: torch.Tensor, keys: torch.Tensor, memory: torch.Tensor,
                keep: torch.Tensor | None) -> torch.Tensor:
        """queries (B, T, d) -> attentional outputs (B, T, d)."""
        scores = queries @ keys.transpose(1, 2)                            # (B, T, S)
        if keep is not None:
            scores = scores.masked_fill(~keep[:, None], float("-inf"))
        context = scores.softmax(-1) @ memory
        return torch.tanh(self.w_c(torch.cat((context, queries), -1)))


class RNNSeq2Seq(TeacherForcedLoss, nn.Module):
    """The GNMT-style attention RNN (module doc)."""

    def __init__(self, cfg: RNNConfig, loss_impl: LossImpl = "auto"):
        super().__init__()
        self.cfg, self.loss_impl = cfg, loss_impl
        d = cfg.d_model
        self.src_embed = nn.Embedding(cfg.vocab_size, d, padding_idx=cfg.pad_id)
        self.tgt_embed = self.src_embed if cfg.share_embeddings else \
            nn.Embedding(cfg.vocab_size, d, padding_idx=cfg.pad_id)
        self.out_proj = nn.Linear(d, cfg.vocab_size, bias=False)
        if cfg.share_embeddings:
            self.out_proj.weight = self.tgt_embed.weight
        self.drop = Dropout(cfg.p_drop)
        self.enc_bi = nn.LSTM(d, d, batch_first=True, bidirectional=True)
        self.enc = nn.ModuleList(nn.LSTM(2 * d if i == 0 else d, d, batch_first=True)
                                 for i in range(cfg.n_enc_layers - 1))
        # Additive: the context joins every layer above the bottom. Luong: the previous attentional output
        # joins the embedding at the bottom (input feeding), and the layers above take the layer below only.
        self.luong = cfg.attention == "luong"
        self.dec_bottom = nn.LSTM(2 * d if self.luong else d, d, batch_first=True)
        self.dec = nn.ModuleList(nn.LSTM(d if self.luong else 2 * d, d, batch_first=True)
                                 for _ in range(cfg.n_dec_layers - 1))
        self.attention = GeneralAttention(d) if self.luong else AdditiveAttention(d)

    def _residual(self, layer: int) -> bool:
        """Whether layer `layer` (1-based, the bottom one is 1) adds its input to its output."""
        return layer >= self.cfg.residual_from

    # --- encoder ---

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(memory (B, S, d), mask (B, 1, 1, S) True at real tokens, or None when nothing is padded)."""
        keep = src != self.cfg.pad_id
        lengths = keep.sum(1)
        x = self.drop(self.src_embed(src))
        packed = pack_padded_sequence(x, lengths.clamp(min=1).cpu(), batch_first=True, enforce_sorted=False)
        y, _ = self.enc_bi(packed)
        x, _ = pad_packed_sequence(y, batch_first=True, total_length=src.size(1))           # (B, S, 2d)
        for i, lstm in enumerate(self.enc, start=2):
            y, _ = lstm(self.drop(x))
            x = y + x if self._residual(i) else y
        mask = None if bool(keep.all()) else keep[:, None, None, :]
        return x, mask

    # --- decoder, teacher-forced ---

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """The decoder's top-layer outputs (B, T, d) for the whole target prefix."""
        keep = mask[:, 0, 0] if mask is not None else None
        if self.luong:
            states = self.new_cache(tgt_in.size(0), 0, memory)
            keys = self.attention.keys(memory)
            return torch.cat([self._luong_step(tgt_in[:, t:t + 1], memory, keys, keep, states)
                              for t in range(tgt_in.size(1))], 1)
        s, _ = self.dec_bottom(self.drop(self.tgt_embed(tgt_in)))
        context = self.attention(s, self.attention.keys(memory), memory, keep)
        x = s
        for i, lstm in enumerate(self.dec, start=2):
            y, _ = lstm(self.drop(torch.cat((x, context), -1)))
            x = y + x if self._residual(i) else y
        return x

    # --- decoder, one token at a time ---

    def _luong_step(self, tokens: torch.Tensor, memory: torch.Tensor, keys: torch.Tensor, keep: torch.Tensor | None,
                    cache: dict) -> torch.Tensor:
        """One Luong step for tokens (B, 1): the attentional output (B, 1, d), the cache's states and feed updated."""
        states = cache["states"]
        x = torch.cat((self.tgt_embed(tokens), cache["feed"]), -1)
        x, states[0] = self.dec_bottom(self.drop(x), states[0])
        for i, lstm in enumerate(self.dec, start=2):
            y, states[i - 1] = lstm(self.drop(x), states[i - 1])
            x = y + x if self._residual(i) else y
        cache["feed"] = self.attention(x, keys, memory, keep)
        return cache["feed"]

    def new_cache(self, batch: int, max_len: int, like: torch.Tensor) -> dict:
        """Each decoder layer's (h, c), zero before the first token; the attention keys, set at the first step;
        with Luong attention, the attentional output fed to the next step (zero before the first)."""
        zeros = lambda *shape: like.new_zeros(*shape, self.cfg.d_model)  # noqa: E731
        return {"states": [(zeros(1, batch), zeros(1, batch)) for _ in range(self.cfg.n_dec_layers)], "keys": None,
                "feed": zeros(batch, 1)}

    def reorder_cache(self, cache: dict, rows: torch.Tensor) -> None:
        cache["states"] = [(h[:, rows], c[:, rows]) for h, c in cache["states"]]
        cache["feed"] = cache["feed"][rows]

    def decode_step(self, tokens: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None, cache: dict,
                    offset, positions: torch.Tensor | None = None) -> torch.Tensor:
        """Logits (B, vocab) for the next token after tokens (B,); the same arithmetic as `decode` a token at a
        time (offset and positions are unused: an RNN counts positions by its recurrence)."""
        keep = mask[:, 0, 0] if mask is not None else None
        if cache["keys"] is None or cache["keys"].size(0) != memory.size(0):
            cache["keys"] = self.attention.keys(memory)
        if self.luong:
            return self.out_proj(self._luong_step(tokens[:, None], memory, cache["keys"], keep, cache)[:, -1])
        states = cache["states"]
        s, states[0] = self.dec_bottom(self.drop(self.tgt_embed(tokens[:, None])), states[0])
        context = self.attention(s, cache["keys"], memory, keep)
        x = s
        for i, lstm in enumerate(self.dec, start=2):
            y, states[i - 1] = lstm(self.drop(torch.cat((x, context), -1)), states[i - 1])
            x = y + x if self._residual(i) else y
        return self.out_proj(x[:, -1])
