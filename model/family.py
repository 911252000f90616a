"""Model families: one registry entry each. The paper's encoder-decoder is the first family; the rivals it beat
(recurrent, convolutional) and today's decoder-only shape are the next ones.

A family is a frozen config dataclass whose `family` field names it, and a module built from that config.
Everything outside model/ builds a model through `build_model(cfg)` and turns stored settings back into a
config through `config_from_dict`, so the trainer, the decoder and the probes name no family.

What the trainer and the decoders need of a family's module (the Transformer is the reference; see
`Seq2SeqModel` below):
- `cfg` (its config: `vocab_size`, `d_model` for the learning rate schedule, `pad_id`, `max_len`);
- `loss(src, tgt_in, tgt_out, label_smoothing, hidden=None, packing=None)` -> (summed smoothed loss, summed
  NLL, target tokens), and `hidden(src, tgt_in, packing=None)` -> the target positions' final states; the
  trainer compiles `loss_states` where a family has it (the states its loss reads, when they are more than
  the target's: the decoder-only family's source loss), `hidden` otherwise;
- `encode(src)` -> (memory (B, S, d), mask); `new_cache(batch, max_len, like)`; `decode_step(tokens, memory,
  mask, cache, offset, positions=None)` -> next-token logits; `reorder_cache(cache, rows)` after a beam step;
  `decode(tgt_in, memory, mask)` -> hidden states and
  `out_proj` for uncached decoding.
A family whose decoding step can be captured as a CUDA graph sets `capturable = True` and has
`static_cache(cache)` and `mark_written(cache, step)` (model/cuda_graph.py), its `decode_step` taking the offset
as a 0-d device tensor. A family that does not support something the Transformer does (packed batches, word
positions, captured decoding steps) leaves the config field out or False, and the caller falls back.

Adding a family touches its own module and one `register` call.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, NamedTuple, Protocol

import torch
from torch import nn

from .config import ConfigError, TransformerConfig, did_you_mean, replace_known
from .conv import ConvConfig, ConvS2S
from .decoder_only import DecoderOnly, DecoderOnlyConfig
from .rnn import RNNConfig, RNNSeq2Seq
from .transformer import Transformer


class ModelConfig(Protocol):
    """What every family's config has (the rest is the family's own)."""

    family: str
    vocab_size: int
    d_model: int       # the learning rate schedule's d_model^-0.5 (§5.3)
    pad_id: int
    max_len: int


class Seq2SeqModel(Protocol):
    """The interface every family's module exposes (documented above)."""

    cfg: ModelConfig
    out_proj: nn.Module

    def loss(self, src: torch.Tensor, tgt_in: torch.Tensor, tgt_out: torch.Tensor, label_smoothing: float = 0.0,
             hidden: torch.Tensor | None = None, packing=None) -> tuple[torch.Tensor, torch.Tensor, int]: ...

    def hidden(self, src: torch.Tensor, tgt_in: torch.Tensor, packing=None) -> torch.Tensor: ...

    def encode(self, src: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    def decode(self, tgt_in: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor: ...

    def new_cache(self, batch: int, max_len: int, like: torch.Tensor): ...

    def reorder_cache(self, cache, rows: torch.Tensor) -> None: ...

    def decode_step(self, tokens: torch.Tensor, memory: torch.Tensor, mask: torch.Tensor | None, cache,
                    offset, positions: torch.Tensor | None = None) -> torch.Tensor: ...


class Family(NamedTuple):
    name: str
    config: type                          # a frozen dataclass with a `family` field defaulting to `name`
    build: Callable[..., nn.Module]       # build(cfg, **options) -> the module
    summary: str


FAMILIES: dict[str, Family] = {}


def register(name: str, config: type, build: Callable[..., nn.Module], summary: str) -> Family:
    """Add a family. Its config must be a dataclass whose `family` field defaults to `name`."""
    fields = {f.name: f for f in dataclasses.fields(config)}
    if "family" not in fields or fields["family"].default != name:
        raise ConfigError(f"family {name!r}: its config {config.__name__} needs a field family = {name!r}.")
    if name in FAMILIES and FAMILIES[name].config is not config:
        raise ConfigError(f"model family {name!r} is already registered (with {FAMILIES[name].config.__name__}).")
    FAMILIES[name] = Family(name, config, build, summary)
    return FAMILIES[name]


register("transformer", TransformerConfig, Transformer,
         "the paper's encoder-decoder (Figure 1) with every Table 3 knob and the modern replacements")
register("rnn", RNNConfig, RNNSeq2Seq,
         "the recurrent rival: a GNMT-style attention LSTM (bidirectional bottom encoder layer, residuals, "
         "additive attention from the bottom decoder layer fed to every layer above)")
register("conv", ConvConfig, ConvS2S,
         "the convolutional rival: ConvS2S (Gehring et al. 2017), gated convolutions with multi-step attention")
register("decoder_only", DecoderOnlyConfig, DecoderOnly,
         "today's shape: one stack of the Transformer's blocks over source <sep> target, PrefixLM or CausalLM")


def get_family(name: str) -> Family:
    if name not in FAMILIES:
        raise ConfigError(f"unknown model family {name!r}{did_you_mean(name, FAMILIES)}; "
                          f"choose one of {', '.join(FAMILIES)}.")
    return FAMILIES[name]


def family_of(cfg) -> Family:
    return get_family(getattr(cfg, "family", "transformer"))


def build_model(cfg, **options) -> nn.Module:
    """The module of cfg's family, built from cfg (options: family-specific build options, e.g. kernel)."""
    return family_of(cfg).build(cfg, **options)


def field_types(name: str | None = None) -> dict[str, Any]:
    """The settings of one family (name) or of every family (the first family's type wins for a shared name)."""
    import typing
    out: dict[str, Any] = {"family": str}          # checked against the registry, by with_settings
    for family in ([get_family(name)] if name else FAMILIES.values()):
        hints = typing.get_type_hints(family.config)
        for f in dataclasses.fields(family.config):
            out.setdefault(f.name, hints[f.name])
    return out


def config_from_dict(settings: dict):
    """A config from stored settings (config.json, a trial): the family its `family` key names (the
    Transformer where there is none, as in runs made before families existed)."""
    family = get_family(settings.get("family", "transformer"))
    known = {f.name for f in dataclasses.fields(family.config)}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ConfigError(f"unknown {family.name} setting {unknown[0]!r}{did_you_mean(unknown[0], sorted(known))}; "
                          f"valid: {', '.join(sorted(known))}.")
    return family.config(**settings)


def with_settings(cfg, **overrides):
    """cfg with some settings changed. `family=...` switches family: the new family's defaults, with every
    setting the two configs share (vocab_size, d_model, ...) carried over, then the overrides."""
    name = overrides.pop("family", None)
    if name is None or name == getattr(cfg, "family", "transformer"):
        return _replace(cfg, overrides)
    target = get_family(name).config
    shared = {f.name for f in dataclasses.fields(target)} & {f.name for f in dataclasses.fields(cfg)}
    carried = {k: v for k, v in to_dict(cfg).items() if k in shared and k != "family"}
    return _replace(target(**carried), overrides)


def to_dict(cfg) -> dict:
    """Every setting with its resolved value, as plain data."""
    return cfg.to_dict() if hasattr(cfg, "to_dict") else dataclasses.asdict(cfg)


def _replace(cfg, overrides: dict):
    return cfg.replace(**overrides) if hasattr(cfg, "replace") else replace_known(cfg, overrides)
