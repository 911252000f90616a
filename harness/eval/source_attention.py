"""How much each target position reads the source, by its position: Fu et al. (2023)'s "attention
degeneration" of decoder-only translation models, whose attention to the source fades as the target grows.

Two measures, each averaged over layers, heads (where there are heads) and the real target tokens at a position:

- `mass` (the decoder-only family): the share of a target position's attention probability that lands on source
  tokens, softmax(Q K^T / sqrt(d_k)) summed over the source's keys; beside it `uniform`, the share uniform
  attention over the same keys would give, n / (n + t) at target position t of a sentence with n source tokens:
  the fade that only the growing number of target keys makes.
- `contribution` (both shapes, so that the encoder-decoder stands beside): how much of what a target position's
  attention sub-layers add comes from the source, ||source part|| / (||source part|| + ||target part||). In the
  decoder-only model an attention output is sum_j p_ij v_j W^O, split into its source keys' and its target keys'
  sums; in the encoder-decoder the source part is the cross-attention's output and the target part the
  self-attention's (each without the output bias, a constant).

Each is also kept per layer (`src_mass_L{l}_p{T}`, `src_contrib_L{l}_p{T}`, layers from 1 at the input): Fu et
al. describe the fade as a property of the whole stack, and the layers need not share it.

The probabilities are recomputed from each attention layer's own projections and inputs, caught by forward
hooks during one teacher-forced pass, so the kernel that ran (SDPA, the explicit CPU path) does not matter; a
test holds them to the layer's output.
"""

from __future__ import annotations

import torch

from model.attention import MultiHeadAttention
from model.kernels import additive_scores

FAMILIES = ("transformer", "decoder_only")


def attention_logits(attn: MultiHeadAttention, x: torch.Tensor, memory: torch.Tensor | None = None,
                     mask: torch.Tensor | None = None, causal: bool = False, offset: int = 0,
                     positions: torch.Tensor | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(logits (B, h, T, S), -inf where a key is not allowed; the raw dot products q . k (B, h, T, S); which keys
    are allowed (B or 1, 1, T, S); values (B, h, S, d_v)) of one attention layer for its input x, as its forward
    computes them (Eq. 1 with the layer's score: scaled, unscaled or additive; GQA's key/value heads repeated
    for their query heads)."""
    q, k, v = attn._project(x, memory, None)
    if attn.rotary is not None:
        q, k = attn.rotary(q, offset, positions), attn.rotary(k, offset, positions)
    group = attn.n_heads // attn.n_kv_heads
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    dots = q @ k.transpose(-2, -1)
    if attn.additive_w is not None:
        logits = additive_scores(q, k, attn.additive_w)
    else:
        logits = dots * (attn.d_k ** -0.5 if attn.scale is None else attn.scale)
    t, s = logits.shape[-2:]
    allowed = torch.ones(1, 1, t, s, dtype=torch.bool, device=x.device)
    if causal:
        allowed = allowed & torch.ones(t, s, dtype=torch.bool, device=x.device).tril()
    if mask is not None:
        allowed = allowed & mask
    return logits.masked_fill(~allowed, float("-inf")), dots, allowed, v


def attention_probabilities(attn: MultiHeadAttention, x: torch.Tensor, memory: torch.Tensor | None = None,
                            mask: torch.Tensor | None = None, causal: bool = False, offset: int = 0,
                            positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(probabilities (B, h, T, S), values (B, h, S, d_v)) of one attention layer for its input x, as its
    forward computes them (`attention_logits`, then the softmax)."""
    logits, _, _, v = attention_logits(attn, x, memory, mask, causal, offset, positions)
    return logits.softmax(-1), v


def _output(attn: MultiHeadAttention, probs: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """sum_j p_ij v_j W^O without the bias: (B, h, T, S) x (B, h, S, d_v) -> (B, T, d_model)."""
    heads = probs @ v
    b, h, t, d = heads.shape
    return heads.transpose(1, 2).reshape(b, t, h * d) @ attn.out_proj.weight.T


class _Recorder:
    """Forward hooks on attention layers that keep each call's input and keyword arguments and its output."""

    def __init__(self, layers: list[MultiHeadAttention]):
        self.calls: list[tuple[MultiHeadAttention, torch.Tensor, dict, torch.Tensor]] = []
        self.handles = [m.register_forward_hook(self._hook, with_kwargs=True) for m in layers]

    def _hook(self, module, args, kwargs, output):
        self.calls.append((module, args[0] if args else kwargs["x"], dict(kwargs), output))

    def close(self) -> None:
        for h in self.handles:
            h.remove()


@torch.no_grad()
def source_shares(model, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, pad_id: int = 0
                  ) -> dict[str, torch.Tensor]:
    """Per real target token (B, T): `contribution` for both shapes, and for the decoder-only family `mass` and
    `uniform` (the mass uniform attention would give), each the mean over layers (and heads); and per layer
    (L, B, T), `contribution_layers` and `mass_layers`. NaN at padded target positions."""
    family = getattr(model.cfg, "family", "transformer")
    if family not in FAMILIES:
        raise ValueError(f"source attention is measured for the {' and '.join(FAMILIES)} families, not {family!r}.")
    model.eval()
    S = src.size(1)
    if family == "decoder_only":
        layers = [block.self_attn.sublayer for block in model.layers]
    else:
        layers = [m for layer in model.decoder.layers for m in (layer.self_attn.sublayer, layer.cross_attn.sublayer)]
    rec = _Recorder(layers)
    try:
        model.hidden(src, tgt_in)
    finally:
        rec.close()
    real = tgt_out != pad_id
    out: dict[str, list[torch.Tensor]] = {"contribution": [], "mass": [], "uniform": []}
    if family == "decoder_only":
        for attn, x, kw, _ in rec.calls:
            probs, v = attention_probabilities(attn, x, mask=kw.get("mask"), positions=kw.get("positions"))
            p = probs[:, :, S:]                                                 # target queries (B, h, T, S + T)
            out["mass"].append(p[..., :S].sum(-1).mean(1))                      # (B, T)
            from_src = _output(attn, p[..., :S], v[:, :, :S]).norm(dim=-1)
            from_tgt = _output(attn, p[..., S:], v[:, :, S:]).norm(dim=-1)
            out["contribution"].append(from_src / (from_src + from_tgt))
        # The mass uniform attention would put on the source: target position t (from 0) sees its sentence's n
        # source tokens and t + 1 target tokens, so n / (n + t + 1). Part of any fade is this, the growing
        # number of target keys; what the model adds to it is the measured mass against this baseline.
        n = (src != pad_id).sum(1, keepdim=True).float()
        out["uniform"] = [n / (n + torch.arange(tgt_in.size(1), device=src.device) + 1)]
    else:
        calls = iter(rec.calls)
        for self_call, cross_call in zip(calls, calls):                        # each decoder layer: self, cross
            parts = [(out_ - attn.out_proj.bias).norm(dim=-1) for attn, _, _, out_ in (self_call, cross_call)]
            out["contribution"].append(parts[1] / (parts[0] + parts[1]))
    shares = {k: torch.stack(v).mean(0).masked_fill(~real, float("nan")) for k, v in out.items() if v}
    shares.update({f"{k}_layers": torch.stack(out[k]).masked_fill(~real, float("nan"))
                   for k in ("contribution", "mass") if out[k]})
    return shares


def by_position(shares: torch.Tensor) -> list[tuple[int, float, int]]:
    """(target position from 1, mean share over the real tokens there, how many) for every position."""
    out = []
    for t in range(shares.size(1)):
        col = shares[:, t]
        col = col[~col.isnan()]
        if col.numel():
            out.append((t + 1, float(col.mean()), int(col.numel())))
    return out


# Positions with fewer real target tokens than this are left out of the metrics (too few to average).
MIN_TOKENS = 20


def source_attention_metrics(model, data, n_sentences: int, device: torch.device, max_tokens: int,
                             min_tokens: int = MIN_TOKENS) -> dict:
    """`src_contrib_pT` (and, for the decoder-only family, `src_mass_pT` and `src_uniform_pT`) for every target
    position T from 1 with at least min_tokens real tokens among the first n_sentences dev pairs (data:
    ParallelData), and the same per layer l from 1 (`src_contrib_Ll_pT`, `src_mass_Ll_pT`); {} for a family this
    does not measure."""
    from harness.data.batching import token_batches
    if getattr(model.cfg, "family", "transformer") not in FAMILIES:
        return {}
    n = min(n_sentences, len(data))
    short = {"contribution": "src_contrib", "mass": "src_mass", "uniform": "src_uniform"}
    sums: dict[str, dict[int, list[float]]] = {}
    for index in token_batches(data.src_lens[:n], data.tgt_lens[:n], max_tokens):
        b = data.collate(index).to(device)
        for name, shares in source_shares(model, b.src, b.tgt_in, b.tgt_out, model.cfg.pad_id).items():
            per_layer = name.endswith("_layers")
            for layer, layer_shares in enumerate(shares if per_layer else shares[None], 1):
                key = f"{short[name.removesuffix('_layers')]}_L{layer}" if per_layer else short[name]
                for pos, mean, count in by_position(layer_shares.float()):
                    total = sums.setdefault(key, {}).setdefault(pos, [0.0, 0])
                    total[0] += mean * count
                    total[1] += count
    return {f"{key}_p{pos}": total / count for key, by_pos in sums.items()
            for pos, (total, count) in sorted(by_pos.items()) if count >= min_tokens}
