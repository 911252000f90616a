"""One frozen config for the whole architecture: every Table 3 column and every modern variant is a field.

Names follow the paper's columns (Vaswani et al. 2017, Table 3): n_layers (N), d_model, d_ff, n_heads (h),
d_k, d_v, p_drop, positional. Training columns (label smoothing, steps, warmup) live in harness.train.TrainConfig.
d_k, d_v, n_kv_heads and the per-side depths follow other fields unless set otherwise (`DERIVED`), in every
way of making a config: the constructor, `replace` and `dataclasses.replace`.
Presets are frozen data and are never edited: a test pins paper_base to the paper's base row.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar, Literal, get_args

Positional = Literal["sinusoid", "learned", "rope", "alibi", "none"]
NormPosition = Literal["post", "pre"]
Norm = Literal["layer", "rms"]
FFN = Literal["relu", "gelu", "swiglu"]
AttentionScore = Literal["scaled", "unscaled", "additive"]
KVCacheDtype = Literal["model", "int8"]
Family = Literal["transformer"]


class ConfigError(ValueError):
    """An impossible or unknown architecture setting; the message names the field and what is allowed."""


@dataclass(frozen=True)
class TransformerConfig:
    vocab_size: int = 37000          # §5.1: shared source-target BPE vocabulary of about 37000 tokens
    d_model: int = 512               # §3.1: the width of every sub-layer output and embedding
    d_ff: int = 2048                 # §3.3: the inner width of the position-wise feed-forward networks
    n_heads: int = 8                 # h
    d_k: int | None = None           # None -> d_model // n_heads (§3.2.2); otherwise free (Table 3 row B)
    d_v: int | None = None           # None -> d_model // n_heads; independent of d_k
    n_kv_heads: int | None = None    # None -> n_heads (the paper); fewer -> GQA, 1 -> MQA
    n_layers: int = 6                # N; n_enc_layers / n_dec_layers override it per side
    n_enc_layers: int | None = None  # None -> n_layers: the encoder's depth
    n_dec_layers: int | None = None  # None -> n_layers: the decoder's depth
    p_drop: float = 0.1              # §5.4 residual dropout: sub-layer outputs and embedding sums
    p_attn_drop: float = 0.0         # dropout on attention weights; the paper gives none for MT
    positional: Positional = "sinusoid"      # §3.5; Table 3 row E: learned
    norm_position: NormPosition = "post"     # the paper: LayerNorm(x + Sublayer(x))
    norm: Norm = "layer"             # layer (the paper's LayerNorm) | rms (RMSNorm)
    ffn: FFN = "relu"                # §3.3: max(0, xW1 + b1)W2 + b2
    share_embeddings: bool = True    # §3.4: source, target and pre-softmax weights shared
    max_len: int = 1024              # longest sequence for learned positions and the sinusoid table
    norm_eps: float = 1e-5           # the normalization's epsilon
    rope_base: float = 10000.0       # positional rope: the base of its rotation frequencies (Su et al.)
    pad_id: int = 0                  # the padding token's id (the vocabulary's, fixed by data preparation)
    # DEVIATION (not in the paper; default False, the paper's token positions): positions count words, not
    # tokens. A source piece takes the index of its word; a target token the number of word tokens (Vinyals'
    # XX) before it and at it, so that the decoder's position is the index of the next word to place and the
    # cross-attention can find that word by position alone. For parsing as translation on little data
    # (studies/table4.yaml's wsj-sample profile); the harness tells the model which pieces mark a word
    # (`Transformer.mark_words`).
    word_positions: bool = False
    family: Family = "transformer"   # the model family this config builds (model/family.py)
    # §3.2.1's alternatives to the paper's scaled dot product, for studies of that section's argument (default
    # "scaled", the paper's): "unscaled" is dot-product (multiplicative) attention without the 1/sqrt(d_k), which
    # the paper says pushes the softmax into regions of tiny gradients for large d_k; "additive" is Bahdanau et
    # al.'s, score_ij = w_h . tanh(q_i + k_j) per head h over the projected queries and keys (a learned w_h of
    # d_k weights per head), which "outperforms dot product attention without scaling for larger values of d_k".
    attention_score: AttentionScore = "scaled"
    # DEVIATION (not in the paper; default 0, the paper's full attention): sliding-window self-attention, a key
    # visible to a query within `attention_window` = r positions of it (and still causal in the decoder), as
    # §4's "restricted self-attention" (neighbourhood r) and Longformer and Mistral use it; cross-attention stays
    # full. Cached decoding keeps at most r + 1 keys a layer (model/attention.py, WindowKVCache).
    attention_window: int = 0
    # DEVIATION (not in the paper; default "model", the cache in the model's own dtype): decoding's key/value
    # caches held as int8, one float16 scale per sentence, head and position (absmax / 127 of that row), as
    # KIVI's and vLLM's quantized caches do: about half a bf16 cache's bytes. Training and teacher-forced scoring
    # never read a cache, so only decoding (BLEU) can change.
    kv_cache_dtype: KVCacheDtype = "model"
    # DEVIATION (not in the paper; default 1.0, plain RoPE): RoPE position interpolation (Chen et al. 2023): each
    # position p is rotated as p / rope_scale, so that a model trained on n positions, fine-tuned briefly, reads
    # rope_scale x n positions within the angles it has seen instead of extrapolating past them.
    rope_scale: float = 1.0

    # Fields added after studies had run without them: a trial's config hash leaves each out while it holds its
    # default, so that those studies' trials keep their hashes (harness/trial.py, hashed_settings).
    ADDED_LATER: ClassVar[tuple[str, ...]] = ("word_positions", "family", "attention_score", "attention_window",
                                              "kv_cache_dtype", "rope_scale")

    def __post_init__(self) -> None:
        # Derived fields (d_k, d_v, n_kv_heads, per-side depths) follow their rule whenever they are unset or equal
        # to it; they are stored as `Derived`, so a copy with other sources works them out again.
        self._check_integers(("vocab_size", "d_model", "d_ff", "n_heads", "n_layers", "max_len"))
        resolve_derived(self, tuple(DERIVED))
        self._validate()

    def _check_integers(self, names: tuple[str, ...]) -> None:
        check_positive(self, names)

    def _validate(self) -> None:
        self._check_integers(tuple(DERIVED))
        check_shared(self, (("positional", Positional), ("norm_position", NormPosition), ("norm", Norm),
                            ("ffn", FFN), ("family", Family), ("attention_score", AttentionScore),
                            ("kv_cache_dtype", KVCacheDtype)))
        if isinstance(self.attention_window, bool) or not isinstance(self.attention_window, int) or \
                self.attention_window < 0:
            raise ConfigError(f"attention_window must be a whole number of positions >= 0 (0: full attention), got "
                              f"{self.attention_window!r}.")
        check_rope_scale(self)
        if self.word_positions and self.positional in ("rope", "alibi", "none"):
            raise ConfigError("word_positions adds positions to the embeddings, so it needs positional=sinusoid "
                              f"or learned, not {self.positional}.")

    def replace(self, **overrides) -> "TransformerConfig":
        """A new config with some fields changed, as `dataclasses.replace` gives it, but refusing unknown names.
        Derived fields follow their sources unless given, so `paper_base.replace(n_heads=16)` gives d_k = 32 as
        in Table 3 row A, and `replace(paper_base, n_layers=2)` gives 2 layers a side."""
        unknown = sorted(set(overrides) - set(field_names()))
        if unknown:
            raise ConfigError(unknown_field_message(unknown[0]))
        return dataclasses.replace(self, **overrides)

    def to_dict(self) -> dict:
        """Every field with its resolved value, as plain data (derived fields as plain ints)."""
        return {k: int(v) if isinstance(v, Derived) else v for k, v in dataclasses.asdict(self).items()}


class Derived(int):
    """The value of a derived field (d_k = d_model / h, n_kv_heads = h, per-side depth = N): it reads as an int,
    and marks the field as following its rule, so that a copy with new sources works it out again."""

    __slots__ = ()


# Each derived field and its rule (None where the rule gives no integer).
DERIVED = {
    "d_k": lambda c: c.d_model // c.n_heads if c.d_model % c.n_heads == 0 else None,    # §3.2.2
    "d_v": lambda c: c.d_model // c.n_heads if c.d_model % c.n_heads == 0 else None,
    "n_kv_heads": lambda c: c.n_heads,
    "n_enc_layers": lambda c: c.n_layers,
    "n_dec_layers": lambda c: c.n_layers,
}


def check_choice(what: str, value, literal) -> str:
    """value if it is one of the Literal's options, else a ConfigError naming them."""
    allowed = get_args(literal)
    if value not in allowed:
        raise ConfigError(f"{what} must be one of {', '.join(allowed)}, got {value!r}.")
    return value


def field_names() -> list[str]:
    return [f.name for f in dataclasses.fields(TransformerConfig)]


def did_you_mean(word: object, options) -> str:
    """' (did you mean X?)' for the closest of options, or ''. (harness.errors.suggest is the harness's own;
    model/ imports nothing from the harness.)"""
    import difflib
    close = difflib.get_close_matches(str(word), [str(o) for o in options], n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def check_positive(cfg, names) -> None:
    """Each of cfg's fields `names` is a positive integer (a family's check of its sizes)."""
    for name in names:
        value = getattr(cfg, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ConfigError(f"{name} must be a positive integer, got {value!r}.")


def replace_known(cfg, changes: dict):
    """dataclasses.replace, refusing a name the config does not have (a family's `replace`)."""
    known = {f.name for f in dataclasses.fields(cfg)}
    unknown = sorted(set(changes) - known)
    if unknown:
        raise ConfigError(f"unknown {cfg.family} setting {unknown[0]!r}{did_you_mean(unknown[0], sorted(known))}; "
                          f"valid: {', '.join(sorted(known))}.")
    return dataclasses.replace(cfg, **changes)


def unknown_field_message(name: str) -> str:
    return (f"unknown model setting {name!r}{did_you_mean(name, field_names())}; "
            f"valid settings: {', '.join(field_names())}.")


def check_rope_scale(cfg) -> None:
    """rope_scale: a number >= 1 (1: plain RoPE), and other than 1 only where positions are RoPE's."""
    scale = cfg.rope_scale
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not scale >= 1:
        raise ConfigError(f"rope_scale must be a number >= 1 (1: plain RoPE; F: positions read as p / F), got "
                          f"{scale!r}.")
    if scale != 1 and cfg.positional != "rope":
        raise ConfigError(f"rope_scale {scale:g} interpolates RoPE's positions; it needs positional=rope, not "
                          f"{cfg.positional}.")


def resolve_derived(cfg, names: tuple[str, ...]) -> None:
    """The derived fields `names` of a config (d_k, d_v, n_kv_heads, per-side depths) follow their DERIVED rule
    whenever they are unset or equal to it, stored as `Derived`, so that a copy with other sources works them out
    again."""
    for name in names:
        value, rule = getattr(cfg, name), DERIVED[name](cfg)
        if value is None or isinstance(value, Derived) or (type(value) is int and value == rule):
            if rule is None:
                raise ConfigError(
                    f"d_model={cfg.d_model} is not divisible by n_heads={cfg.n_heads}, so {name} cannot "
                    f"default to d_model / n_heads; set {name} explicitly or choose n_heads dividing d_model.")
            object.__setattr__(cfg, name, Derived(rule))


def check_shared(cfg, choices: tuple[tuple[str, object], ...]) -> None:
    """The checks every attention family's config shares: dropout probabilities, the named choices
    ((field, Literal), ...), key/value heads dividing the heads, RoPE's even d_k, sinusoid and learned positions'
    even d_model, the padding id inside the vocabulary."""
    for name in ("p_drop", "p_attn_drop"):
        value = getattr(cfg, name)
        if not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            raise ConfigError(f"{name} must be a probability in [0, 1), got {value!r}.")
    for name, literal in choices:
        check_choice(name, getattr(cfg, name), literal)
    if cfg.n_heads % cfg.n_kv_heads:
        raise ConfigError(f"n_kv_heads={cfg.n_kv_heads} must divide n_heads={cfg.n_heads} "
                          "(each key/value head serves a whole group of query heads).")
    if cfg.positional == "rope" and cfg.d_k % 2:
        raise ConfigError(f"positional=rope rotates pairs of dimensions, so d_k must be even, got {cfg.d_k}.")
    if cfg.positional in ("sinusoid", "learned") and cfg.d_model % 2:
        raise ConfigError(f"sinusoid and learned positions need an even d_model, got {cfg.d_model}.")
    if not 0 <= cfg.pad_id < cfg.vocab_size:
        raise ConfigError(f"pad_id={cfg.pad_id} must be a token id below vocab_size={cfg.vocab_size}.")


# --- Presets: frozen data. Never edit a paper preset (tensor2tensor's transformer_base drifted to pre-norm). ---

# Table 3 "base": N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64, P_drop=0.1 (65 M params in the paper).
paper_base = TransformerConfig()
# Table 3 "big": d_model=1024, d_ff=4096, h=16, P_drop=0.3 (213 M params in the paper).
paper_big = TransformerConfig(d_model=1024, d_ff=4096, n_heads=16, p_drop=0.3)
# A laptop-sized model with the base's proportions (d_k = d_model / h, d_ff = 4 d_model); vocab from the data.
# Not the studies' `tiny` profiles (d_model 64, 3 + 3 layers, 8 heads): those are study settings, this a preset.
cpu_d128 = TransformerConfig(vocab_size=8000, d_model=128, d_ff=512, n_heads=4, n_layers=2, p_drop=0.1, max_len=512)
# Today's replacements on the base's widths: RoPE, pre-norm RMSNorm, SwiGLU (d_ff scaled by 2/3 to keep the
# FFN's parameter count, 1365 rounded to a multiple of 64) and grouped-query attention (2 key/value heads).
modern_base = TransformerConfig(
    positional="rope", norm_position="pre", norm="rms", ffn="swiglu", d_ff=1344, n_kv_heads=2
)

PRESETS: dict[str, TransformerConfig] = {
    "paper_base": paper_base,
    "paper_big": paper_big,
    "cpu_d128": cpu_d128,
    "modern_base": modern_base,
}


# Presets renamed since: the old name is refused with the new one (e.g. in docs/calibration.md's older commands).
RENAMED = {"tiny": "cpu_d128"}


def get_preset(name: str) -> TransformerConfig:
    if name in RENAMED:
        raise ConfigError(
            f"the preset {name!r} is now called {RENAMED[name]!r} (so that it is not taken for the "
            f"studies' `tiny` profiles, a smaller model); use --preset {RENAMED[name]}."
        )
    if name not in PRESETS:
        raise ConfigError(f"unknown preset {name!r}{did_you_mean(name, PRESETS)}; choose one of {', '.join(PRESETS)}.")
    return PRESETS[name]

